"""Statistics of a learning result: intervals over training seeds, paired comparisons over held-out tasks, and the
verdict on each claim of the TGPO paper. Pure functions over plain numbers (no I/O).

Data shape: a method's outcomes are ``{seed: {task_id: value}}`` — one value per (training seed, held-out task),
the mean over that task's episodes (e.g. success 0/1 with one greedy episode per task).

- ``seed_interval``: the mean over seeds of each seed's task-mean, with a Student-t 95 % interval over seeds (the
  spread a user sees when re-training with another seed).
- ``paired_bootstrap``: the difference A − B, paired by task (both methods ran the same held-out tasks) and, where
  both have them, by seed (preference methods of seed k start from SFT seed k). Each bootstrap replicate resamples
  tasks with replacement and, independently, training seeds with replacement, so the interval carries both the
  task sample and the seed-to-seed variation (a two-level bootstrap). 95 % percentile interval.
- ``verdict``: for a claim "A is better than B by the paper's gap g": *reproduced* when the interval of the
  difference lies entirely on the claimed side of 0; *not reproduced* when it lies entirely on the other side, or
  when it excludes every gap of at least g/2 on the claimed side (the paper's effect is ruled out even if a small one
  remains possible); *inconclusive* otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

Outcomes = Mapping[int, Mapping[str, float]]  # seed -> task_id -> value


def t_interval(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, 95 % Student-t half-width); the half-width is None for fewer than two values."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None, None
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, None
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return mean, float(stats.t.ppf(0.975, len(vals) - 1)) * sd / math.sqrt(len(vals))


def seed_interval(outcomes: Outcomes) -> tuple[float | None, float | None]:
    """Mean over training seeds of the per-seed mean over tasks, and its t half-width over seeds."""
    return t_interval([float(np.mean(list(by_task.values()))) for by_task in outcomes.values() if by_task])


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A paired comparison of two methods on a metric: the mean difference A - B, its 95% bootstrap interval, and the
    numbers of tasks and seeds."""

    a: str
    b: str
    metric: str
    diff: float  # mean of A − B over the common tasks and seeds
    low: float  # 95 % bootstrap interval of the difference
    high: float
    tasks: int
    seeds_a: int
    seeds_b: int
    paired_seeds: bool  # both methods have the same seeds: resampled together


def _matrix(outcomes: Outcomes, seeds: Sequence[int], tasks: Sequence[str]) -> np.ndarray:
    return np.array([[float(outcomes[s][t]) for t in tasks] for s in seeds])  # [seeds, tasks]


def paired_bootstrap(
    a: Outcomes, b: Outcomes, *, names=("A", "B"), metric: str = "success_rate", n_boot: int = 10000, seed: int = 0
) -> Comparison:
    """The difference A − B over the held-out tasks both methods ran (see the module docstring)."""
    tasks = sorted(set.intersection(*[set(v) for v in a.values()], *[set(v) for v in b.values()]))
    if not tasks or not a or not b:
        raise ValueError(f"{names[0]} vs {names[1]}: no held-out task evaluated by both")
    sa, sb = sorted(a), sorted(b)
    paired = sa == sb
    ma, mb = _matrix(a, sa, tasks), _matrix(b, sb, tasks)  # [Sa, T], [Sb, T]
    diff = float(ma.mean() - mb.mean())
    rng = np.random.default_rng(seed)
    t_idx = rng.integers(0, len(tasks), size=(n_boot, len(tasks)))
    ia = rng.integers(0, len(sa), size=(n_boot, len(sa)))
    ib = ia if paired else rng.integers(0, len(sb), size=(n_boot, len(sb)))
    # replicate r: mean over resampled seeds of the mean over resampled tasks
    task_means_a = ma[:, t_idx].mean(axis=2)  # [Sa, n_boot]
    task_means_b = mb[:, t_idx].mean(axis=2)
    rep_a = np.take_along_axis(task_means_a.T, ia, axis=1).mean(axis=1)  # [n_boot]
    rep_b = np.take_along_axis(task_means_b.T, ib, axis=1).mean(axis=1)
    low, high = np.percentile(rep_a - rep_b, [2.5, 97.5])
    return Comparison(names[0], names[1], metric, diff, float(low), float(high), len(tasks), len(sa), len(sb), paired)


REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


def verdict(low: float, high: float, paper_gap: float, higher_is_better: bool = True) -> str:
    """A claim "A beats B by ``paper_gap``" (a positive number in the metric's units) against the interval
    [low, high] of A − B; see the module docstring."""
    if not higher_is_better:  # fewer is better: "A beats B" means A − B < 0
        low, high = -high, -low
    if low > 0:
        return REPRODUCED
    if high < 0 or high < paper_gap / 2:
        return NOT_REPRODUCED
    return INCONCLUSIVE
