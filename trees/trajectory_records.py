"""Trajectory pairs for Agent Q's trajectory-level DPO baseline (docs/method.md §9.3): a successful and a failed
episode of the same task, written as one record per step (``value_source = "trajectory"``) that
``tgpo_jax.data.trajectory`` groups back into pairs.

Which pairs: per task, failed episode i against successful episode i mod n_success, in run order, at most
``max_pairs`` per task (every failure is used once before the cap; a success may serve several failures).

Which steps: a step is its prompt (rebuilt as the policy built it, ``trees.dataset.step_prompt``) and its output.
Steps that occur on both sides with the same prompt and output — the shared start before the trajectories part,
mostly — add the same log-prob to both sums, so they are matched one to one and left out: the pair's DPO margin
is unchanged and the example is smaller. A pair whose sides are then longer than ``max_steps`` steps in all is left
out and counted (cutting it would change the margin); so is a pair with a step whose output is empty (nothing to
score) or one whose failed side has no step of its own (e.g. a prefix of the successful episode cut by the step cap:
the failure is not an action).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from typing import Sequence

from rollout.core import Task
from rollout.recording import EpisodeRecord
from tgpo_jax.data.schema import Branch, NodeRecord
from trees.build import canonical
from trees.dataset import BuildConfig, step_prompt


@dataclasses.dataclass(frozen=True)
class TrajectoryConfig:
    """Limits of the trajectory-pair dataset: pairs per task, steps per pair; ``ValueError`` for out-of-range values."""

    max_pairs: int = 4  # per task
    max_steps: int = 16  # steps of a pair after the shared ones are left out, both sides together

    def __post_init__(self):
        if self.max_pairs < 1 or self.max_steps < 2:
            raise ValueError(f"max_pairs={self.max_pairs} must be >= 1 and max_steps={self.max_steps} >= 2")


def pair_episodes(episodes: Sequence[EpisodeRecord], max_pairs: int) -> list[tuple[EpisodeRecord, EpisodeRecord]]:
    """(successful, failed) episodes of one task: failure i with success i mod n_success, in run order."""
    runs = sorted(episodes, key=lambda e: e.summary["run"])
    won = [e for e in runs if e.summary["success"]]
    lost = [e for e in runs if not e.summary["success"]]
    if not won:
        return []
    return [(won[i % len(won)], f) for i, f in enumerate(lost[:max_pairs])]


def _key(prompt: list[dict], step: dict) -> str:
    return json.dumps([prompt, step["output"]], sort_keys=True)


def distinct_steps(chosen, rejected):
    """Each side's steps without the ones the other side also has (same prompt and output, matched one to one)."""
    shared = Counter(_key(*s) for s in chosen) & Counter(_key(*s) for s in rejected)
    out = []
    for side in (chosen, rejected):
        left, kept = dict(shared), []
        for t, s in enumerate(side):
            k = _key(*s)
            if left.get(k, 0) > 0:
                left[k] -= 1
                continue
            kept.append((t, *s))
        out.append(kept)
    return out


def trajectory_records(
    task_id: str,
    episodes: Sequence[EpisodeRecord],
    task: Task | None,
    cfg: BuildConfig,
    tcfg: TrajectoryConfig = TrajectoryConfig(),
) -> tuple[list[NodeRecord], Counter]:
    """The records of one task's trajectory pairs, and the counts of pairs kept and left out (by reason)."""
    records, counts = [], Counter()
    prompted: dict[str, list] = {}  # episode path -> [(prompt, step)]: a success may serve several pairs

    def steps(ep: EpisodeRecord) -> list[tuple[list[dict], dict]]:
        if ep.path not in prompted:
            prompted[ep.path] = [(step_prompt(task, ep, t, cfg), s) for t, s in enumerate(ep.steps)]
        return prompted[ep.path]

    for k, (won, lost) in enumerate(pair_episodes(episodes, tcfg.max_pairs)):
        chosen, rejected = distinct_steps(steps(won), steps(lost))
        if not rejected:
            counts["no_failed_step"] += 1
            continue
        if len(chosen) + len(rejected) > tcfg.max_steps:
            counts["too_long"] += 1
            continue
        if any(not s["output"].strip() for side in (chosen, rejected) for _, _, s in side):
            counts["empty_output"] += 1
            continue
        counts["pairs"] += 1
        pid = f"{task_id}/{k}"
        for name, ep, side in (("chosen", won, chosen), ("rejected", lost, rejected)):
            ok = name == "chosen"
            for t, prompt, s in side:
                lp = s.get("logprob")
                lp = float(lp) if isinstance(lp, (int, float)) and math.isfinite(lp) and lp <= 0 else None
                branch = Branch(
                    action=s["output"],
                    command=canonical(s),
                    q=float(ok),
                    rewards={},
                    n_total=1,
                    n_success=int(ok),
                    n_failed=int(not ok),
                    on_success_path=ok,
                    reaches_success=ok,
                    behaviour_logprob=lp,
                )
                records.append(
                    NodeRecord(
                        task_id=task_id,
                        node_id=f"p{k}.{name[0]}{t}",
                        prompt=prompt,
                        branches=[branch],
                        value_source="trajectory",
                        meta={
                            "pair": pid,
                            "side": name,
                            "t": t,
                            "run": ep.summary["run"],
                            "url": s.get("norm_url"),
                            "split": ep.summary["split"],
                            "family": ep.summary["family"],
                            "steps": len(ep.steps),
                        },
                    )
                )
    return records, counts
