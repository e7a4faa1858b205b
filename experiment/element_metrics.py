"""Element-level metrics next to success, with the page's HTML elements as ground truth (docs/tasks.md, "Element-level
metrics"): computed from a recorded episode and its task's check, for tasks whose check names elements.

- ``localisation``: of the check's target leaves (elements whose state the task changes: a form value, a checkbox, an
  attribute) whose element the agent saw as something it could act on (it had an id in an observed state), the
  share it acted on (CLICK / TYPE / SELECT / CLEAR with that id, from the state where the id was shown);
- ``value_match``: the share of those target leaves that hold on the final page (the value typed or chosen is the
  one the check asks for), whether or not the element was ever shown;
- ``answer_exact``: for tasks that ask for a STOP answer, the share of answer leaves that hold at STOP (the answer
  matches the pattern, or equals an element's text up to whitespace and case); 0 without a STOP answer;
- ``answer_f1``: the mean token F1 of the answer against each answer leaf's reference (the named element's text,
  best match; an ``answer`` leaf's ``expected``); 0 without a STOP answer.

Each is None where it does not apply (no target leaf, no answer leaf). Pure functions over recorded data.
"""

from __future__ import annotations

from typing import Sequence

from rollout.commands import parse_command
from rollout.core import ActionError
from rollout.envs import checks
from rollout.envs.taskfile import TARGETED as ACTS  # the commands that act on an element

ELEMENT_METRICS = ("localisation", "value_match", "answer_exact", "answer_f1")


def _acted_id(step: dict) -> str | None:
    if step.get("command_name") not in ACTS or not step.get("command"):
        return None
    try:
        return parse_command(step["command"]).id
    except ActionError:  # recorded renderings always parse; a hand-edited file is not this metric's business
        return None


def episode_metrics(steps: Sequence[dict], final_check: dict | None, check: checks.Check) -> dict:
    """The four metrics of one episode: ``steps`` as recorded (each with its state's ``check``), ``final_check``
    the summary's final check (after the STOP answer was checked), ``check`` the task's parsed check."""
    leaves = checks.leaves(check)
    targets = [i for i, leaf in enumerate(leaves) if checks.is_target(leaf)]
    answers = [i for i, leaf in enumerate(leaves) if isinstance(leaf, checks.AnswerLeaf)]
    final_check = final_check or {}
    bits = final_check.get("progress") or ""
    held = [i < len(bits) and bits[i] == "1" for i in range(len(leaves))]
    out = dict.fromkeys(ELEMENT_METRICS)
    if targets:
        seen, acted = set(), set()
        for step in steps:
            shown = ((step.get("check") or {}).get("elements") or {}).get("targets") or {}
            did = _acted_id(step)
            for key, ids in shown.items():
                seen.add(int(key))
                if did is not None and did in ids:
                    acted.add(int(key))
        seen &= set(targets)
        out["localisation"] = len(acted & seen) / len(seen) if seen else None
        out["value_match"] = sum(held[i] for i in targets) / len(targets)
    if answers:
        stopped = bool(steps) and steps[-1].get("command_name") == "STOP"
        out["answer_exact"] = sum(held[i] for i in answers) / len(answers) if stopped else 0.0
        f1 = (final_check.get("elements") or {}).get("f1") or {}
        scored = [i for i in answers if leaves[i].selector is not None or leaves[i].expected is not None]
        if scored:
            out["answer_f1"] = sum(float(f1.get(str(i), 0.0)) for i in scored) / len(scored) if stopped else 0.0
    return out


def summarize(rows: Sequence[dict]) -> dict:
    """The mean of each metric over the rows (episodes) where it applies, and how many those are (``<m>_n``)."""
    out = {}
    for m in ELEMENT_METRICS:
        vals = [r[m] for r in rows if r.get(m) is not None]
        out[m] = sum(vals) / len(vals) if vals else None
        out[f"{m}_n"] = len(vals)
    return out
