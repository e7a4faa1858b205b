"""The record schema: one tree node per record — the contract between ``rollout/`` and training.

A node is a merged page state (docs/method.md §2) with the chat prompt for it (§1) and its action
branches (§4), each carrying its value Q, reward components and trajectory counts. Pairs and
labels are *not* stored: ``tgpo_jax.data.examples`` derives them from the node at collation time, so one
dataset serves SFT, DPO, KTO, KTO-Tree and TGPO and every ablation of margin or weighting.

Records serialise to UTF-8 JSON (readable with any tool, versioned by ``schema_version``). Version 2 added
``value_source``: where the branch values Q came from — ``tree`` (the merged tree's process rewards, §4), ``mcts``
(Agent Q's search: α·Q̃ + (1 − α)·Q̂, §9.1), ``judge`` (judge scores, §9.2) or ``trajectory`` (one step of a
successful or failed episode of a trajectory pair, §9.3: q is the episode's outcome, ``meta`` names the pair, side and
step). Version 1 records read as ``tree``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, Sequence

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # v1: before value_source, whose values were all the tree's
VALUE_SOURCES = ("tree", "mcts", "judge", "trajectory")
ROLES = ("system", "user", "assistant")
REWARD_KEYS = ("r_acc", "r_format", "r_red", "r_subgoal", "r")  # docs/method.md §3, per-step means over the branch


class SchemaError(ValueError):
    """A record does not follow the schema (wrong version, missing field, bad value)."""


@dataclasses.dataclass(frozen=True)
class Branch:
    """One action taken at a node: the trained completion, its canonical command, its value Q and rewards, and the
    counts of trajectories and step occurrences that take it."""

    action: str  # the policy's whole output for the step (thought + command): the trained completion
    command: str  # canonical command (docs/method.md §2), element ids replaced by stable descriptors
    q: float  # branch value Q(s, a) (docs/method.md §4)
    rewards: Mapping[str, float]  # mean reward components of the steps merged into this branch
    n_total: int  # trajectories taking this branch
    n_success: int
    n_failed: int
    on_success_path: bool  # lies on at least one successful trajectory
    reaches_success: bool  # a successful end is reachable from this branch in the merged graph
    behaviour_logprob: float | None = None  # summed log-prob of ``action`` under the collecting policy
    # step occurrences by their trajectory's outcome (a trajectory may take a branch more than once): plain KTO's
    # labels (docs/method.md §6); None in records written before they were stored
    steps_success: int | None = None
    steps_failed: int | None = None
    # fewest steps from the branch's destination to a goal in the merged graph (docs/method.md §4); None when no goal
    # is reachable or in records written before it was stored
    goal_distance: int | None = None
    # the values Q averages (docs/method.md §4): per trajectory taking the branch, the aggregate of R over the rest
    # of that trajectory from its first occurrence; the per-occurrence sigma of the pair weight reads them. None in
    # records written before they were stored and for values not from the tree
    returns: tuple[float, ...] | None = None

    def validate(self, where: str) -> None:
        """Raise ``SchemaError`` (naming ``where``) if a field is out of range or the counts disagree."""
        if not isinstance(self.action, str) or not self.action:
            raise SchemaError(f"{where}: action must be a non-empty string")
        if not isinstance(self.command, str):
            raise SchemaError(f"{where}: command must be a string")
        if not _finite(self.q):
            raise SchemaError(f"{where}: q={self.q!r} is not a finite number")
        for k, v in self.rewards.items():
            if not _finite(v):
                raise SchemaError(f"{where}: reward {k}={v!r} is not a finite number")
        if min(self.n_total, self.n_success, self.n_failed) < 0 or self.n_success + self.n_failed > self.n_total:
            raise SchemaError(
                f"{where}: counts total={self.n_total} success={self.n_success} failed={self.n_failed} are inconsistent"
            )
        if (self.steps_success is None) != (self.steps_failed is None) or (
            self.steps_success is not None
            and (self.steps_success < self.n_success or self.steps_failed < self.n_failed)
        ):
            raise SchemaError(
                f"{where}: step occurrences success={self.steps_success} failed={self.steps_failed} "
                f"must both be given and at least the trajectory counts ({self.n_success}, "
                f"{self.n_failed})"
            )
        if self.goal_distance is not None and not (isinstance(self.goal_distance, int) and self.goal_distance >= 0):
            raise SchemaError(f"{where}: goal_distance={self.goal_distance!r} must be an integer >= 0 or None")
        if self.returns is not None and not (
            isinstance(self.returns, tuple)
            and len(self.returns) == self.n_total > 0
            and all(_finite(r) for r in self.returns)
        ):
            raise SchemaError(
                f"{where}: returns={self.returns!r} must be None or a tuple of n_total={self.n_total} "
                f"finite numbers (one per trajectory taking the branch)"
            )
        if self.behaviour_logprob is not None and not (_finite(self.behaviour_logprob) and self.behaviour_logprob <= 0):
            raise SchemaError(f"{where}: behaviour_logprob={self.behaviour_logprob!r} must be a finite value <= 0")


@dataclasses.dataclass(frozen=True)
class NodeRecord:
    """A training record: one merged-tree node of a task, its prompt and its branches with their values."""

    task_id: str
    node_id: str
    prompt: Sequence[Mapping[str, str]]  # chat messages [{"role", "content"}], ending before the action
    branches: Sequence[Branch]
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # url, depth, split, ... (free form)
    value_source: str = "tree"  # where the branches' q came from (VALUE_SOURCES)
    schema_version: int = SCHEMA_VERSION

    def validate(self) -> "NodeRecord":
        """Check the record and its branches; itself, or ``SchemaError``."""
        where = f"node {self.task_id}/{self.node_id}"
        if self.schema_version not in READABLE_VERSIONS:
            raise SchemaError(
                f"{where}: schema_version {self.schema_version}, this reader knows "
                f"{', '.join(map(str, READABLE_VERSIONS))}"
            )
        if self.value_source not in VALUE_SOURCES:
            raise SchemaError(f"{where}: value_source {self.value_source!r}, expected one of {VALUE_SOURCES}")
        if not self.prompt:
            raise SchemaError(f"{where}: empty prompt")
        for i, m in enumerate(self.prompt):
            if m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise SchemaError(f"{where}: prompt message {i} needs role in {ROLES} and string content")
        if not self.branches:
            raise SchemaError(f"{where}: no branches")
        for i, b in enumerate(self.branches):
            b.validate(f"{where} branch {i}")
        return self

    # ------------------------------------------------------------------ serialisation
    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-safe dict."""
        return dataclasses.asdict(self)

    def to_bytes(self) -> bytes:
        """The record as UTF-8 JSON with sorted keys (NaN and infinities refused), as stored in a shard."""
        return json.dumps(self.to_json(), ensure_ascii=False, sort_keys=True, allow_nan=False).encode("utf-8")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NodeRecord":
        """A validated record from its JSON dict (schema version 1 or 2, read as version 2); ``SchemaError`` if it does
        not match."""
        version = d.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise SchemaError(
                f"record schema_version {version!r}; this reader knows {', '.join(map(str, READABLE_VERSIONS))}"
            )
        if version == 1 and "value_source" in d:
            raise SchemaError("record schema_version 1 has a value_source field (added in version 2)")
        try:
            branches = [_branch(b) for b in d["branches"]]
            rec = cls(
                task_id=d["task_id"],
                node_id=d["node_id"],
                prompt=[dict(m) for m in d["prompt"]],
                branches=branches,
                meta=dict(d.get("meta", {})),
                value_source=d.get("value_source", "tree") if version >= 2 else "tree",
                schema_version=2,
            )
        except (KeyError, TypeError) as e:
            raise SchemaError(f"record does not match schema v{version}: {e}") from e
        return rec.validate()

    @classmethod
    def from_bytes(cls, data: bytes) -> "NodeRecord":
        """A validated record from its stored bytes; ``SchemaError`` for bytes that are not a JSON object or a valid
        record."""
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SchemaError(f"record is not valid UTF-8 JSON: {e}") from e
        if not isinstance(d, dict):
            raise SchemaError("record is not a JSON object")
        return cls.from_json(d)


def _branch(d: Mapping[str, Any]) -> Branch:
    """A branch from its JSON object; ``returns`` comes back from a JSON list to the tuple it was written as."""
    b = Branch(**d)
    return dataclasses.replace(b, returns=tuple(b.returns)) if isinstance(b.returns, list) else b


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
