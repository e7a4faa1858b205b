"""Agent Q's tree search over page states, the pure part (docs/method.md §9.1): nodes, UCB1 selection, backup of
the episode's reward, the value blend and the θ-filtered node pairs. No browser, no model: the search driver
proposes the K commands at a node, asks the critic for their ranking (``rollout/search/critic.py``), runs the
selected edge in the browser and calls ``backup`` with the rollout's reward.

Values, per edge (h, a) of a node h (Agent Q eqs. 7, 8, 10):
- ``q_search`` Q̃(h, a): the mean of the rewards backed up through the edge (0 before its first visit),
- ``critic`` Q̂(h, a): the critic's ranking of the node's K candidates as a value in [0, 1] (``rank_values``),
- ``visits`` N(h, a); a node's N(h) is the sum over its edges,
- Q(h, a) = α·Q̃ + (1 − α)·Q̂ (``blended``), which both the selection and the pairs use.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence


@dataclasses.dataclass
class Edge:
    """One of a node's K proposed commands: the policy's whole output ``action`` (thought + command, the trained
    completion) and its canonical ``command`` (two samples that differ only in the thought are one edge)."""

    action: str
    command: str
    critic: float  # Q̂ in [0, 1]
    q_search: float = 0.0  # Q̃: mean backed-up reward
    visits: int = 0  # N(h, a)
    child: "SearchNode | None" = None  # the state the command led to, once executed
    logprob: float | None = None  # the proposing policy's summed log-prob of ``action`` (off-policy reference)

    def blended(self, alpha: float) -> float:
        """Q(h, a) = α·Q̃(h, a) + (1 − α)·Q̂(h, a)."""
        return alpha * self.q_search + (1.0 - alpha) * self.critic


@dataclasses.dataclass
class SearchNode:
    """A page state: ``key`` identifies it (normalised URL + observation hash: what a replay must reach again),
    ``prefix`` the commands that lead there from the task's start page."""

    key: str
    prefix: tuple[str, ...] = ()
    edges: list[Edge] = dataclasses.field(default_factory=list)
    terminal: bool = False  # STOP, the episode's end or the step cap: nothing to expand
    reward: float | None = None  # a terminal node's reward, reused when selection ends here again

    @property
    def visits(self) -> int:
        """N(h) = Σ_a N(h, a) (Agent Q, after eq. 8)."""
        return sum(e.visits for e in self.edges)

    @property
    def expanded(self) -> bool:
        """Whether the node has edges (its proposals were made)."""
        return bool(self.edges)


def ucb1(node: SearchNode, c: float, alpha: float) -> list[float]:
    """Each edge's UCB1 score Q(h, a) + c·sqrt(log N(h) / (1 + N(h, a))) (Agent Q eq. 7). Before the node's first
    visit log N(h) is taken as 0, so the first choice is the blended value alone: the critic's best."""
    log_n = math.log(node.visits) if node.visits > 0 else 0.0
    return [e.blended(alpha) + c * math.sqrt(log_n / (1 + e.visits)) for e in node.edges]


def best_edge(node: SearchNode, c: float, alpha: float) -> int:
    """The argmax of ``ucb1``; ties go to the critic's better-ranked edge, then to the lower index (deterministic)."""
    if not node.edges:
        raise ValueError(f"node {node.key!r} has no edges: expand it before selecting")
    scores = ucb1(node, c, alpha)
    return max(range(len(scores)), key=lambda i: (scores[i], node.edges[i].critic, -i))


def select(root: SearchNode, c: float, alpha: float) -> list[tuple[SearchNode, int]]:
    """From the root, follow the best edge until an edge not yet executed (its child unknown) or a terminal
    child. -> the path as (node, edge index) pairs; the last pair's edge is the one to execute (or, when its child
    is terminal, whose stored reward to back up again)."""
    path: list[tuple[SearchNode, int]] = []
    node = root
    while True:
        i = best_edge(node, c, alpha)
        path.append((node, i))
        child = node.edges[i].child
        if child is None or child.terminal or not child.expanded:
            return path
        node = child


def backup(path: Sequence[tuple[SearchNode, int]], reward: float) -> None:
    """Back a rollout's reward R up the path (Agent Q eq. 8): Q̃ ← (Q̃·N + R) / (N + 1), N ← N + 1 per edge."""
    for node, i in path:
        e = node.edges[i]
        e.q_search = (e.q_search * e.visits + reward) / (e.visits + 1)
        e.visits += 1


def rank_values(ranking: Sequence[int]) -> list[float]:
    """The critic's ranking (candidate indices, best first) -> Q̂ per candidate, by index: evenly spaced from 1
    (best) to 0 (worst), (K − 1 − rank) / (K − 1). The paper ranks but does not say how a rank becomes a value;
    this keeps Q̂ on the scale of the success reward. A single candidate gets 1."""
    k = len(ranking)
    if sorted(ranking) != list(range(k)):
        raise ValueError(f"ranking {list(ranking)} is not a permutation of 0..{k - 1}")
    values = [0.0] * k
    for rank, i in enumerate(ranking):
        values[i] = 1.0 if k == 1 else (k - 1 - rank) / (k - 1)
    return values


@dataclasses.dataclass(frozen=True)
class NodePair:
    """A preference at one node: ``chosen`` and ``rejected`` index its edges; ``gap`` = Q_w − Q_l ≥ θ."""

    chosen: int
    rejected: int
    q_chosen: float
    q_rejected: float

    @property
    def gap(self) -> float:
        """Q of the chosen edge minus Q of the rejected one."""
        return self.q_chosen - self.q_rejected


def node_pairs(node: SearchNode, alpha: float, theta: float, min_visits: int = 1) -> list[NodePair]:
    """Agent Q's pairs at a node: every two edges whose blended values differ by at least θ (eq. 10 and
    Algorithm 1), the higher one chosen. Only edges the search executed ``min_visits`` times take part: an edge
    never run has Q̃ = 0 from its initialisation, not from evidence. Order: by chosen, then rejected index."""
    if theta < 0:
        raise ValueError(f"theta={theta}: must be >= 0")
    live = [i for i, e in enumerate(node.edges) if e.visits >= min_visits]
    q = {i: node.edges[i].blended(alpha) for i in live}
    pairs = []
    for a in live:
        for b in live:
            if a != b and q[a] > q[b] and q[a] - q[b] >= theta:
                pairs.append(NodePair(a, b, q[a], q[b]))
    return sorted(pairs, key=lambda p: (p.chosen, p.rejected))


def walk(root: SearchNode):
    """Every node of the tree, depth first, each once (a child reached by two edges is one node)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(e.child for e in reversed(node.edges) if e.child is not None)
