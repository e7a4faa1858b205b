"""The LLM-as-judge pairings (docs/method.md §9.2): from one step's reference action and its judge-scored sampled
candidates to preference pairs. Pure functions.

- DPO-1: the reference (chosen) against every candidate scored below ``threshold`` (80 in the recipe);
- DPO-2: candidate against candidate, the higher score chosen, where the scores differ by at least ``min_gap``;
- DPO-3: both sets.

Candidates are compared by their command (``canonical``): sampled outputs that differ only in the thought are one
action. Such duplicates are merged first, their scores averaged (the judge may score the same action twice
differently), and a candidate that is the reference's action is never rejected against it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from rollout.commands import parse_output
from rollout.core import ActionError

DPO1_THRESHOLD = 80


def command_key(output: str) -> str:
    """A policy output's command in its canonical form; an output without a valid command is its own text."""
    try:
        return parse_output(output)[1].render()
    except ActionError:
        return output.strip()


@dataclasses.dataclass(frozen=True)
class ScoredStep:
    """One step: its prompt key (the node), the reference action and the sampled candidates with their scores."""

    key: str
    reference: str
    candidates: tuple[str, ...]
    scores: tuple[float, ...]

    def __post_init__(self):
        if len(self.candidates) != len(self.scores):
            raise ValueError(f"step {self.key}: {len(self.candidates)} candidates, {len(self.scores)} scores")


@dataclasses.dataclass(frozen=True)
class JudgePair:
    key: str
    chosen: str
    rejected: str
    chosen_score: float | None  # None: the reference (DPO-1), which the judge does not score
    rejected_score: float
    kind: str  # "dpo1" or "dpo2"


def merged(step: ScoredStep, canonical: Callable[[str], str]) -> list[tuple[str, float]]:
    """Distinct candidates by ``canonical`` form, first text kept, scores averaged; first-seen order."""
    groups: dict[str, list] = {}
    for text, score in zip(step.candidates, step.scores):
        g = groups.setdefault(canonical(text), [text, []])
        g[1].append(float(score))
    return [(text, sum(s) / len(s)) for text, s in groups.values()]


def dpo1_pairs(step: ScoredStep, canonical: Callable[[str], str] = command_key,
               threshold: float = DPO1_THRESHOLD) -> list[JudgePair]:
    ref = canonical(step.reference)
    return [JudgePair(step.key, step.reference, text, None, score, "dpo1")
            for text, score in merged(step, canonical) if score < threshold and canonical(text) != ref]


def dpo2_pairs(step: ScoredStep, canonical: Callable[[str], str] = command_key,
               min_gap: float = 1.0) -> list[JudgePair]:
    if min_gap <= 0:
        raise ValueError(f"min_gap={min_gap}: must be > 0 (equal scores give no preference)")
    cands = merged(step, canonical)
    return [JudgePair(step.key, a, b, sa, sb, "dpo2")
            for i, (a, sa) in enumerate(cands) for j, (b, sb) in enumerate(cands)
            if i != j and sa - sb >= min_gap]


def judge_pairs(steps: Sequence[ScoredStep], mode: str, canonical: Callable[[str], str] = command_key,
                threshold: float = DPO1_THRESHOLD, min_gap: float = 1.0) -> list[JudgePair]:
    """``mode`` in dpo1 / dpo2 / dpo3 -> the pairs of every step, in step order."""
    if mode not in ("dpo1", "dpo2", "dpo3"):
        raise ValueError(f"mode={mode!r}; expected dpo1, dpo2 or dpo3")
    out: list[JudgePair] = []
    for step in steps:
        if mode in ("dpo1", "dpo3"):
            out += dpo1_pairs(step, canonical, threshold)
        if mode in ("dpo2", "dpo3"):
            out += dpo2_pairs(step, canonical, min_gap)
    return out
