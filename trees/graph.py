"""The merged graph of one task's episodes (docs/method.md §2): nodes are merged page states, edges the commands taken.

A state is addressed by ``StateRef(episode, step)``: ``step`` t in ``0..T`` is s_t of that episode (t == T is the
final state, from the episode summary). ``STOP`` leads to an END node of its own (one per node it was given at):
the step is not a revisit, and the distance to a goal counts the STOP, as the environments' optimal lengths do.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True, order=True)
class StateRef:
    """A recorded state: episode index within the task, and step index ``t`` (state s_t)."""

    episode: int  # index into the task's episode list
    step: int  # t: state s_t


@dataclasses.dataclass
class Node:
    """A node of the merged tree: the states merged into it, its representative's URL, pHash, screenshot and task check,
    and the episodes that ended there."""

    id: str  # "n0" is the root; END nodes are "<node id>/end"
    norm_url: str
    url: str  # the representative state's URL
    states: list[StateRef]  # merged states, in (episode, step) order; the first is the representative
    phash: str | None = None
    screenshot: str | None = None  # absolute path of the representative's screenshot, when recorded
    check: dict | None = None  # the representative's task check {success, score, progress, done}
    is_end: bool = False  # an END node (reached by STOP)
    success_ends: int = 0  # successful episodes that ended here
    failure_ends: int = 0  # failed episodes that ended here

    @property
    def is_goal(self) -> bool:
        """Whether a successful episode ended here."""
        return self.success_ends > 0


@dataclasses.dataclass
class Edge:
    """One (src, command, dst) edge; edges with the same (src, command) form one branch."""

    src: str
    command: str  # canonical command (element ids replaced by role + name)
    dst: str
    steps: list[StateRef]  # the step occurrences (state s_t of the step that took it)


@dataclasses.dataclass
class BranchValue:
    """A branch (node, canonical command) with its value and statistics (docs/method.md §4)."""

    node: str
    command: str
    q: float
    rewards: dict[str, float]  # mean reward components over the branch's step occurrences
    n_total: int  # trajectories taking the branch
    n_success: int
    n_failed: int
    on_success_path: bool
    reaches_success: bool
    occurrences: list[StateRef]
    steps_success: int = 0  # step occurrences in successful trajectories (plain KTO's labels, docs/method.md §6)
    steps_failed: int = 0
    goal_distance: float = math.inf  # fewest steps from the branch's destination to a goal
    returns: tuple[float, ...] = ()  # the values q averages: one per trajectory taking the branch (first occurrence on)


@dataclasses.dataclass
class TaskGraph:
    """A task's merged tree: nodes, edges, the node of every state, the branch values, merge statistics and per-step
    rewards."""

    task_id: str
    root: str
    nodes: dict[str, Node]
    edges: list[Edge]
    state_node: dict[StateRef, str]  # every state -> its node
    branches: dict[tuple[str, str], BranchValue] = dataclasses.field(default_factory=dict)
    stats: dict = dataclasses.field(default_factory=dict)  # merge statistics
    rewards: dict = dataclasses.field(default_factory=dict)  # StateRef of a step -> its reward components

    def out_edges(self, node: str) -> list[Edge]:
        """Edges leaving ``node``."""
        return [e for e in self.edges if e.src == node]
