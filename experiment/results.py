"""The learning result from evaluation files: per-method rows pooled over training seeds, per-family rows, paired
comparisons between methods, and a verdict on each claim of the TGPO paper. Pure functions over ``eval.json``
dicts (``experiment.evaluate``); the statistics are ``experiment.stats``.

``groups``: ``{method label: {training seed: eval dict}}`` — e.g. ``{"SFT": {0: ev, 1: ev, 2: ev}, ...}``. A task's
value for one model is the mean over its episodes (evaluation seeds × runs) of the per-episode metric.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Mapping, Sequence

from experiment import stats
from experiment.names import DISPLAY

METRICS = {"success_rate": "success", "avg_steps": "steps", "redundant_steps": "redundant"}  # eval key -> row key
Groups = Mapping[str, Mapping[int, dict]]

CONTROL = DISPLAY["sft_more"]  # the control for the preference methods' SFT term
# The TGPO paper's Table 1 (success %), the numbers its claims rest on.
PAPER_SUCCESS = {"SFT": 70.3, "KTO": 72.9, "KTO-Tree": 77.6, "DPO": 72.1, "TGPO": 78.6}


def episode_rows(ev: dict) -> list[dict]:
    """Every finished episode of an evaluation (all evaluation seeds), as recorded in ``episodes_table``."""
    return [dict(r, eval_seed=s.get("seed")) for s in ev.get("per_seed") or [] for r in s.get("episodes_table") or []]


def task_values(ev: dict, metric: str = "success_rate", task_ids=None, family: str | None = None) -> dict[str, float]:
    """task_id -> mean of the metric over that task's episodes (optionally only ``task_ids`` / one ``family``)."""
    key = METRICS[metric]
    sums: dict[str, list[float]] = {}
    for r in episode_rows(ev):
        if (task_ids is not None and r["task_id"] not in task_ids) or (family and r["family"] != family):
            continue
        sums.setdefault(r["task_id"], []).append(float(r[key]))
    return {t: sum(v) / len(v) for t, v in sums.items()}


def outcomes(runs: Mapping[int, dict], metric: str = "success_rate", **kw) -> dict[int, dict[str, float]]:
    """Training seed -> task_id -> the task's mean metric, for one method's evaluations."""
    return {seed: task_values(ev, metric, **kw) for seed, ev in runs.items()}


@dataclasses.dataclass(frozen=True)
class Row:
    """One method's value of one metric: mean over training seeds, its 95 % half-width (None with one seed and one
    evaluation seed), the number of training seeds and the per-seed values."""

    mean: float | None
    half_width: float | None
    seeds: int
    per_seed: tuple[float, ...]


def method_row(runs: Mapping[int, dict], metric: str, family: str | None = None) -> Row:
    """With several training seeds: t-interval over the seeds' means. With one: the evaluation's own interval over
    its evaluation seeds (sampling), as ``experiment.evaluate`` computed it."""
    per_seed = []
    for ev in runs.values():
        vals = task_values(ev, metric, family=family)
        if vals:
            per_seed.append(sum(vals.values()) / len(vals))
    if len(runs) == 1 and family is None:
        ev = next(iter(runs.values()))
        mean, ci = (ev.get("mean") or {}).get(metric), (ev.get("ci95") or {}).get(metric)
        half = ci.get("half_width") if isinstance(ci, dict) else ci
        return Row(mean if mean is not None else (per_seed[0] if per_seed else None), half, 1, tuple(per_seed))
    mean, half = stats.t_interval(per_seed)
    return Row(mean, half, len(per_seed), tuple(per_seed))


def families(groups: Groups) -> list[str]:
    """Task families present in any evaluation, sorted."""
    return sorted({r["family"] for runs in groups.values() for ev in runs.values() for r in episode_rows(ev)})


def table(groups: Groups, family: str | None = None) -> dict[str, dict[str, Row]]:
    """label -> metric -> Row (all tasks, or one family's)."""
    return {label: {m: method_row(runs, m, family) for m in METRICS} for label, runs in groups.items()}


def compare(groups: Groups, a: str, b: str, metric: str = "success_rate", **kw) -> stats.Comparison:
    """Paired bootstrap of method ``a`` minus method ``b`` on a metric, over the tasks (and seeds) both have."""
    return stats.paired_bootstrap(
        outcomes(groups[a], metric, **kw), outcomes(groups[b], metric, **kw), names=(a, b), metric=metric
    )


def success_pairs(groups: Groups) -> list[tuple[str, str]]:
    """The pairs the issue asks for, where both were trained: TGPO vs DPO, KTO-Tree vs KTO, every method vs SFT and
    vs the control SFT (continued) (SFT trained on for a preference stage's pass: what a preference method adds
    beyond more SFT), and the other baselines (Agent Q's trajectory-level and search DPO, the judge recipe's DPO)
    against SFT and the step-level preference methods."""
    pairs = [("TGPO", "DPO"), ("KTO-Tree", "KTO")] + [(m, "SFT") for m in ("KTO", "KTO-Tree", "DPO", "TGPO")]
    pairs += [(CONTROL, "SFT")] + [(m, CONTROL) for m in ("KTO", "KTO-Tree", "DPO", "TGPO")]
    for baseline in ("Trajectory DPO", "DPO (search)", "DPO (judge)"):
        pairs += [(baseline, "SFT"), ("TGPO", baseline), ("DPO", baseline)]
    return [(a, b) for a, b in pairs if a in groups and b in groups]


def comparisons(groups: Groups) -> list[stats.Comparison]:
    """``success_pairs`` in success, then TGPO against each other method in redundant steps (the paper's third
    claim)."""
    out = [compare(groups, a, b, "success_rate") for a, b in success_pairs(groups)]
    for m in ("SFT", CONTROL, "KTO", "KTO-Tree", "DPO"):
        if "TGPO" in groups and m in groups:
            out.append(compare(groups, "TGPO", m, "redundant_steps"))
    return out


def family_comparisons(groups: Groups, pairs=None) -> dict[tuple[str, str], dict[str, stats.Comparison]]:
    """``pairs`` (default ``success_pairs``) within each task family ((A, B) -> family -> A − B): a method can gain
    on one family what it loses on another (on the large preset KTO's episode labels broke multi_cart's first step,
    where the tree's labels kept it). Empty with fewer than two
    families (the pooled table says it all)."""
    fams = families(groups)
    if len(fams) < 2:
        return {}

    def within(a: str, b: str, family: str) -> stats.Comparison | None:
        try:
            return compare(groups, a, b, family=family)
        except ValueError:  # no task of that family evaluated by both (evaluations on other task sets)
            return None

    return {(a, b): {f: within(a, b, f) for f in fams} for a, b in (success_pairs(groups) if pairs is None else pairs)}


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim of the TGPO paper with the paper's numbers, our differences with intervals and the verdict."""

    text: str
    paper: str  # the paper's numbers behind it
    ours: str  # our difference(s) with intervals
    verdict: str


def _pts(c: stats.Comparison) -> str:
    scale, unit = (100.0, " pts") if c.metric == "success_rate" else (1.0, "")
    return f"{c.a} − {c.b}: {scale * c.diff:+.1f}{unit} [{scale * c.low:+.1f}, {scale * c.high:+.1f}]"


def _at_bound(groups: Groups, *labels: str) -> bool:
    """Every task of every seed of these methods at the same bound (all 0 or all 1 success): nothing can differ."""
    values = {v for m in labels for per_task in outcomes(groups[m]).values() for v in per_task.values()}
    return values == {0.0} or values == {1.0}


def claims(groups: Groups) -> list[Claim]:
    """The paper's three claims, each with our paired difference, its 95 % interval and a verdict
    (``stats.verdict``; success gaps in fractions, the paper's gap halved as the smallest effect that counts).
    Two methods that fail (or succeed at) every task give the interval [0, 0], which would rule out the paper's
    gap; a floor or ceiling says nothing about the claim, so that reads *inconclusive*."""
    out = []
    for a, b in (("TGPO", "DPO"), ("KTO-Tree", "KTO")):
        if a in groups and b in groups:
            c = compare(groups, a, b)
            gap = (PAPER_SUCCESS[a] - PAPER_SUCCESS[b]) / 100.0
            bound = _at_bound(groups, a, b)
            out.append(
                Claim(
                    f"{a} > {b} in success",
                    f"{PAPER_SUCCESS[a]} vs {PAPER_SUCCESS[b]} %",
                    _pts(c) + (" (both at the floor/ceiling on every task)" if bound else ""),
                    stats.INCONCLUSIVE if bound else stats.verdict(c.low, c.high, gap),
                )
            )
    if "TGPO" in groups and len(groups) > 1:
        # fewest redundant steps: TGPO − M < 0 for every other method M; the paper gives no gap for the others
        # (the control is ours, not one of the paper's methods: its comparison is in ``comparisons``)
        cs = [compare(groups, "TGPO", m, "redundant_steps") for m in groups if m not in ("TGPO", "base", CONTROL)]
        vs = [stats.verdict(c.low, c.high, 0.0, higher_is_better=False) for c in cs]
        v = (
            stats.REPRODUCED
            if cs and all(x == stats.REPRODUCED for x in vs)
            else stats.NOT_REPRODUCED
            if stats.NOT_REPRODUCED in vs
            else stats.INCONCLUSIVE
        )
        out.append(
            Claim(
                "TGPO has the fewest redundant steps",
                "TGPO 0.97 redundant steps (8.66 steps)",
                "; ".join(_pts(c) for c in cs),
                v,
            )
        )
    return out


def continued_curve(start: tuple[int, float], points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """A curve of a model trained from another's end (a preference method from SFT), on the steps of both: the
    start model's final point, then this model's points shifted by its steps. Why: each on its own axis from 0,
    TGPO's 156 steps sat beside SFT's first snapshot, as if it had trained less than SFT."""
    s0, v0 = start
    return [(s0, v0)] + [(s0 + s, v) for s, v in points]


def curve_points(curve: dict, final_ev: dict) -> list[tuple[int, float]]:
    """(step, success) of a success-vs-steps curve: the snapshots' evaluations plus the final model's full
    evaluation restricted to the same tasks."""
    pts = [(int(s), float(v)) for s, v in (curve.get("success") or {}).items() if v is not None]
    vals = task_values(final_ev, "success_rate", task_ids=set(curve.get("tasks") or []))
    if vals and curve.get("final_step") is not None:
        pts.append((int(curve["final_step"]), sum(vals.values()) / len(vals)))
    return sorted(pts)


@dataclasses.dataclass(frozen=True)
class GradRow:
    """A method's gradient norm before clipping, over every logged step of every seed's run: the median, the share
    of updates the clip scaled down (norm > clip), the steps read."""

    median: float
    clipped: float
    steps: int
    clip: float


def grad_norms(runs: Sequence[Sequence[dict]], clip: float) -> GradRow | None:
    """``runs``: each seed's metrics rows (``read_metrics``); None when no row logs ``train/grad_norm``. Why in the
    report: a method's terms are summed before the clip and AdamW, so a term whose gradient is ten times the SFT
    term's sets the update's direction (docs/method.md §7)."""
    norms = [float(r["train/grad_norm"]) for rows in runs for r in rows if r.get("train/grad_norm") is not None]
    if not norms:
        return None
    over = sum(n > clip for n in norms) if clip > 0 else 0
    return GradRow(statistics.median(norms), over / len(norms), len(norms), float(clip))
