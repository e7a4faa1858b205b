"""The LLM-as-judge pairings (docs/method.md §9.2): from one step's reference action and its judge-scored sampled
candidates to preference pairs. Pure functions, and ``ReferenceJudge``: a judge without a model, for runs that
have no judge endpoint.

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
    """A preference pair from judge scores: the step key, chosen and rejected text, their scores and the kind (``dpo1``
    or ``dpo2``)."""

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


def dpo1_pairs(
    step: ScoredStep, canonical: Callable[[str], str] = command_key, threshold: float = DPO1_THRESHOLD
) -> list[JudgePair]:
    """DPO-1 pairs of a scored step: the recorded action over each distinct candidate scored below ``threshold`` whose
    command differs from it."""
    ref = canonical(step.reference)
    return [
        JudgePair(step.key, step.reference, text, None, score, "dpo1")
        for text, score in merged(step, canonical)
        if score < threshold and canonical(text) != ref
    ]


def dpo2_pairs(
    step: ScoredStep, canonical: Callable[[str], str] = command_key, min_gap: float = 1.0
) -> list[JudgePair]:
    """DPO-2 pairs of a scored step: every ordered pair of distinct candidates whose scores differ by at least
    ``min_gap``; ``ValueError`` for ``min_gap <= 0``."""
    if min_gap <= 0:
        raise ValueError(f"min_gap={min_gap}: must be > 0 (equal scores give no preference)")
    cands = merged(step, canonical)
    return [
        JudgePair(step.key, a, b, sa, sb, "dpo2")
        for i, (a, sa) in enumerate(cands)
        for j, (b, sb) in enumerate(cands)
        if i != j and sa - sb >= min_gap
    ]


def judge_pairs(
    steps: Sequence[ScoredStep],
    mode: str,
    canonical: Callable[[str], str] = command_key,
    threshold: float = DPO1_THRESHOLD,
    min_gap: float = 1.0,
) -> list[JudgePair]:
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


def judge_records(
    step: ScoredStep,
    prompt,
    task_id: str,
    mode: str,
    threshold: float = DPO1_THRESHOLD,
    canonical: Callable[[str], str] = command_key,
) -> list:
    """One scored step as node records (``value_source`` = ``judge``) whose derived pairs are the recipe's
    (``tgpo_jax.data.examples.preference_pairs``, margin 0 for DPO-1, ``min_gap`` − ε for DPO-2):
    - DPO-1: the reference (q = 1) and the candidates scored below ``threshold`` (q = 0): every pair is the
      reference against one of them;
    - DPO-2: the distinct candidates with q = score / 100: the pairs are those whose scores differ;
    - DPO-3: both records.
    ``prompt``: the step's chat messages (what the policy saw)."""
    from tgpo_jax.data.schema import Branch, NodeRecord

    if mode not in ("dpo1", "dpo2", "dpo3"):
        raise ValueError(f"mode={mode!r}; expected dpo1, dpo2 or dpo3")

    def branch(text: str, q: float) -> Branch:
        return Branch(
            action=text,
            command=canonical(text),
            q=q,
            rewards={},
            n_total=1,
            n_success=0,
            n_failed=0,
            on_success_path=False,
            reaches_success=False,
        )

    out = []
    if mode in ("dpo1", "dpo3"):
        rejected = [p.rejected for p in dpo1_pairs(step, canonical, threshold)]
        if rejected:
            out.append(
                NodeRecord(
                    task_id=task_id,
                    node_id=f"{step.key}/dpo1",
                    prompt=prompt,
                    value_source="judge",
                    branches=[branch(step.reference, 1.0)] + [branch(t, 0.0) for t in rejected],
                    meta={"judge": "dpo1", "threshold": threshold},
                )
            )
    if mode in ("dpo2", "dpo3"):
        cands = merged(step, canonical)
        if len({s for _, s in cands}) > 1:
            out.append(
                NodeRecord(
                    task_id=task_id,
                    node_id=f"{step.key}/dpo2",
                    prompt=prompt,
                    value_source="judge",
                    branches=[branch(t, s / 100.0) for t, s in cands],
                    meta={"judge": "dpo2"},
                )
            )
    return out


class ReferenceJudge:
    """A judge without a model, for runs with no judge endpoint: a candidate whose command (``canonical``) is the
    recorded action's scores 100, any other 0. It knows only the reference, as DPO-1 already does, so DPO-2 then
    pairs the candidates that repeat the reference against the ones that do not; an LLM judge can also rank two
    different commands that are both right or both wrong. Same surface as ``rollout.judge.StepJudge``."""

    model = "reference"

    def __init__(self, canonical: Callable[[str], str] = command_key):
        self.canonical = canonical
        self.calls = self.malformed = self.hits = 0

    def score(self, page: str, reference: str, candidates: Sequence[str]) -> list[int]:
        """Score 100 for each candidate whose canonical command is the reference's, else 0."""
        self.calls += 1
        ref = self.canonical(reference)
        return [100 if self.canonical(c) == ref else 0 for c in candidates]
