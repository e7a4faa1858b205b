"""Training examples derived from one ``NodeRecord`` (docs/method.md §5–§6): preference pairs, SFT, KTO and
KTO-Tree labels.

Pure functions, no I/O and no JAX: the collator calls them per node, so every objective and every ablation
(margin, weight clip, repeats) reads the same stored dataset. Items refer to branches by index into
``node.branches``; the collator turns (prompt, branch.action) into tokens.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Sequence

from tgpo_jax.data.schema import NodeRecord
from tgpo_jax.sections import from_section

MEAN_TOL = 1e-9  # relative tolerance for "above the node's mean" (KTO-Tree)
WEIGHT_SIGMAS = ("branch", "occurrence")  # readings of sigma in the TGPO weight (node_sigma)


@dataclasses.dataclass(frozen=True)
class PairConfig:
    """Which branch pairs, KTO items and SFT items a node yields, and how pairs are weighted; ``ValueError`` on
    inconsistent settings."""

    margin: float = 0.0  # a pair needs Q_w - Q_l > margin (strict: ties never make a pair)
    weight_eps: float = 1e-6  # sigma guard: w = |dQ| / max(sigma, eps)
    weight_clip: float | None = None  # upper clip of w, applied per pair before any normalisation
    weight_sigma: str = "branch"  # sigma of w: std of the node's branch Qs, or of all its occurrences' returns
    kto_repeat_cap: int | None = None  # plain KTO: at most this many copies per (branch, label)
    sft_repeat: bool = False  # SFT: repeat a branch once per successful trajectory taking it
    sft_shortest: bool = False  # SFT: of a node's successful branches, only those nearest a goal (no detours)
    distance_agree: bool = False  # pairs: the chosen branch must be no farther from a goal than the rejected one
    distance_strict: bool = False  # with distance_agree: two branches equally far from a goal make no pair
    kto_reachable: bool = False  # plain KTO: items only at nodes with a branch from which a successful end is reachable

    def __post_init__(self) -> None:
        # A negative margin would turn ties (and reversed pairs) into preferences; refuse it.
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin must be finite and >= 0, got {self.margin}")
        if not self.weight_eps > 0:
            raise ValueError(f"weight_eps must be > 0, got {self.weight_eps}")
        if self.weight_clip is not None and not self.weight_clip > 0:
            raise ValueError(f"weight_clip must be > 0 or None, got {self.weight_clip}")
        if self.weight_sigma not in WEIGHT_SIGMAS:
            raise ValueError(f"weight_sigma must be one of {WEIGHT_SIGMAS}, got {self.weight_sigma!r}")
        if self.distance_strict and not self.distance_agree:
            raise ValueError("distance_strict refines distance_agree: turn distance_agree on too")
        if self.kto_repeat_cap is not None and self.kto_repeat_cap < 1:
            raise ValueError(f"kto_repeat_cap must be >= 1 or None, got {self.kto_repeat_cap}")


def pair_config(d) -> PairConfig:
    """A training config's ``data`` section (``configs/base.py``) as the pair rules, checked by ``PairConfig``: the
    pipeline's validate builds it too, so a bad rule is refused before any stage runs (0 clip or cap: none)."""
    return from_section(PairConfig, d, weight_clip=d.weight_clip or None, kto_repeat_cap=d.kto_repeat_cap or None)


@dataclasses.dataclass(frozen=True)
class Pair:
    """A preference pair of a node: the chosen and rejected branch indices, TGPO's weight and the Q difference."""

    chosen: int  # branch index
    rejected: int  # branch index
    weight: float  # TGPO weight |dQ| / sigma (clipped if configured); DPO ignores it
    delta_q: float  # Q_chosen - Q_rejected (> margin)


def _population_std(qs: Sequence[float]) -> float:
    mean = math.fsum(qs) / len(qs)
    return math.sqrt(math.fsum((q - mean) ** 2 for q in qs) / len(qs))


def node_sigma(node: NodeRecord, how: str = "branch") -> float:
    """sigma of the node's TGPO weights w = |dQ| / sigma (docs/method.md §4), before the eps guard.

    ``branch``: the population std of the branches' Qs. At a two-branch node that is |dQ| / 2, so every pair there
    weighs 2 whatever the gap. ``occurrence``: the population std of every branch's ``returns`` pooled (each
    trajectory taking a branch gives one: the paper's sigma(R_s) over all action returns at the state), so a
    two-branch node's weight depends on how often and how consistently each branch paid off. A node with a branch
    without returns (records written before they were stored, values not from the tree) falls back to ``branch``."""
    if how == "occurrence" and all(b.returns for b in node.branches):
        return _population_std([float(r) for b in node.branches for r in b.returns])
    return _population_std([float(b.q) for b in node.branches])


def _distance(b) -> float:
    return math.inf if b.goal_distance is None else b.goal_distance


def preference_pairs(node: NodeRecord, cfg: PairConfig = PairConfig()) -> list[Pair]:
    """All ordered branch pairs (i, j) with Q_i - Q_j > margin, ordered by (chosen, rejected).

    ``distance_agree``: also goal_distance_i <= goal_distance_j (no goal reachable = infinitely far). Why: a
    branch that one run takes first and undoes (a detour, an undone wrong click) has a suffix that holds the other
    branch's suffix too, and the mean of the longer suffix is the higher one whenever that shared tail is worse than
    the undone steps; the pair then prefers the detour, which the graph's distances say is the longer way
    (docs/method.md §5: 30 of 36 such pairs, 3
    of 217 of the other way).

    ``distance_strict``: and a pair of branches equally far from a goal is dropped (two ways of one length: the
    graph calls neither the better step, and their Q differ by the undone steps' per-step rewards only). Branches
    from which no goal is reachable are not equally far: Q still orders two failures.

    ``weight_sigma``: which sigma divides |dQ| (``node_sigma``); the pairs themselves do not depend on it."""
    qs = [float(b.q) for b in node.branches]
    if len(qs) < 2:
        return []
    # sigma over ALL branches of the node (not just the pair), so weights are comparable within a node.
    # |Q_i - Q_j| <= 2*sqrt(n)*sigma (n branches, or n pooled returns whose subsets' means are the Qs), so w stays
    # bounded even when sigma falls under eps.
    sigma = max(node_sigma(node, cfg.weight_sigma), cfg.weight_eps)
    pairs = []
    for i, qi in enumerate(qs):
        for j, qj in enumerate(qs):
            d = qi - qj
            if i == j or not d > cfg.margin:
                continue
            if cfg.distance_agree:
                di, dj = _distance(node.branches[i]), _distance(node.branches[j])
                if di > dj or (cfg.distance_strict and di == dj != math.inf):
                    continue
            w = d / sigma
            if cfg.weight_clip is not None:
                w = min(w, cfg.weight_clip)
            pairs.append(Pair(chosen=i, rejected=j, weight=w, delta_q=d))
    return pairs


def weight_scale(weights: Sequence[float]) -> float:
    """1 / the mean weight, so the dataset's average weight becomes 1 (keeps the loss scale of plain DPO); 1 when
    there is nothing to rescale (no weights, or all zero)."""
    ws = [float(w) for w in weights]
    mean = math.fsum(ws) / len(ws) if ws else 0.0
    return 1.0 / mean if mean > 0 else 1.0


def normalise_weights(weights: Sequence[float]) -> list[float]:
    """``weights`` times ``weight_scale(weights)``: their mean becomes 1."""
    scale = weight_scale(weights)
    return [float(w) * scale for w in weights]


INVALID_PREFIX = "INVALID "  # the canonical command the tree builder gives an output that did not parse


def sft_items(node: NodeRecord, cfg: PairConfig = PairConfig()) -> list[int]:
    """SFT/RFT: branches taken by at least one successful trajectory (optionally once per success). An output that
    did not parse is never imitated, even inside a successful trajectory: it stays a rejected action for pairs.

    ``cfg.sft_shortest``: only the successful branches whose destination is fewest steps from a goal in the merged
    graph, so a detour that a successful run took and undid (click away, go back) is not imitated; the step back
    from the detour page is (it is that page's shortest way on). Records without ``goal_distance`` keep every
    successful branch (docs/method.md §6)."""
    ok = [i for i, b in enumerate(node.branches) if b.n_success > 0 and not b.command.startswith(INVALID_PREFIX)]
    if cfg.sft_shortest:
        known = [node.branches[i].goal_distance for i in ok if node.branches[i].goal_distance is not None]
        if known:
            best = min(known)
            ok = [i for i in ok if node.branches[i].goal_distance in (best, None)]
    items: list[int] = []
    for i in ok:
        items.extend([i] * (node.branches[i].n_success if cfg.sft_repeat else 1))
    return items


def step_counts(b) -> tuple[int, int]:
    """(step occurrences in successful, in failed trajectories) of a branch. Records written before these were
    stored hold only trajectory counts, which is then what is returned (a loop's repeat counts once)."""
    if b.steps_success is None:
        return b.n_success, b.n_failed
    return b.steps_success, b.steps_failed


def kto_items(node: NodeRecord, cfg: PairConfig = PairConfig()) -> list[tuple[int, bool]]:
    """Plain KTO: each step occurrence labelled with its own trajectory's outcome (conflicts kept): a trajectory
    that takes a branch twice gives it two labels (docs/method.md §6). With ``kto_reachable`` a node none of whose
    branches reaches a successful end gives no items: its steps, the right ones included, were seen only in lost
    runs."""
    if cfg.kto_reachable and not any(b.reaches_success for b in node.branches):
        return []
    cap = cfg.kto_repeat_cap

    def capped(n: int) -> int:
        return n if cap is None else min(n, cap)

    items: list[tuple[int, bool]] = []
    for i, b in enumerate(node.branches):
        good, bad = step_counts(b)
        items.extend([(i, True)] * capped(good))
        items.extend([(i, False)] * capped(bad))
    return items


def kto_tree_items(node: NodeRecord, cfg: PairConfig = PairConfig()) -> list[tuple[int, bool]]:
    """KTO-Tree: one item per branch; desirable iff Q is strictly above the node's mean branch Q.

    Single-branch nodes have no comparison, so the label is whether a successful end is reachable.
    """
    bs = node.branches
    if len(bs) == 1:
        return [(0, bool(bs[0].reaches_success))]
    # A branch within float rounding of the mean counts as on it (Q = .1, .2, .3: .2 is not "above").
    qs = [float(b.q) for b in bs]
    mean = sum(qs) / len(qs)
    tol = MEAN_TOL * max(1.0, abs(mean))
    return [(i, q - mean > tol) for i, q in enumerate(qs)]


def label_conflict(node: NodeRecord) -> tuple[int, int]:
    """(step occurrences on branches taken by >= 1 successful and >= 1 failed trajectory, all occurrences)."""
    conflicted = total = 0
    for b in node.branches:
        occ = sum(step_counts(b))
        total += occ
        if b.n_success > 0 and b.n_failed > 0:
            conflicted += occ
    return conflicted, total


def class_counts(items: Iterable[tuple[int, bool]]) -> tuple[int, int]:
    """(n_desirable, n_undesirable) of KTO items, for setting w_D / w_U from the class ratio."""
    n_d = n_u = 0
    for _, desirable in items:
        if desirable:
            n_d += 1
        else:
            n_u += 1
    return n_d, n_u
