"""How an evaluation's episodes end, per task family: which failures a model makes, counted from its recordings.

Each episode gets one ending (``ending``):

- ``success``: the task's check passed;
- ``wrong_result``: the site reached its end (an order placed, the check ``done``) with the wrong thing;
- ``loop``: stopped by the step limit while its last ``LOOP_RUN`` commands are one command on one page;
- ``step_limit``: stopped by the step limit otherwise (wandering);
- ``early_stop``: the model said STOP before the task was done;
- ``error``: the episode ended in an error (a crash, a malformed page);
- ``other``: any other end reason.

A loop also says what it repeats (the command's kind and target, the page's path without its query), so the
commonest loops of a run are read in one line each: where a model stalls is then a table, not a browse through episodes.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Mapping, Sequence

LOOP_RUN = 3  # the last this many commands the same, on the same page: a loop
ENDINGS = ("success", "wrong_result", "loop", "step_limit", "early_stop", "error", "other")


@dataclasses.dataclass(frozen=True)
class Ending:
    """One episode's ending: its task, family, kind (one of ``ENDINGS``) and, for a loop, what it repeats."""

    task_id: str
    family: str
    kind: str
    repeats: str = ""  # a loop's command and page's path: 'CLICK link "Sort: Price high to low" on /search'


def _target(step: Mapping) -> str:
    """The command's kind and its element as the page named it (``CLICK link "Sort: Rating"``)."""
    name = step["command_name"] or "?"
    target = step["target"] or {}
    if target.get("role"):
        return f'{name} {target["role"]} "{target.get("name", "")}"'
    return step["command"] or name


def ending(summary: Mapping, steps: Sequence[Mapping]) -> Ending:
    """The ending of one recorded episode (``summary.json`` and its ``steps.jsonl`` records)."""
    task_id, family = summary["task_id"], summary["family"]
    if summary["success"]:
        return Ending(task_id, family, "success")
    reason = summary["end_reason"]
    if summary["status"] == "errored" or summary["error"] or reason == "error":
        return Ending(task_id, family, "error")
    if reason == "done":
        return Ending(task_id, family, "wrong_result")
    if reason == "stop":
        return Ending(task_id, family, "early_stop")
    if reason != "max_steps":
        return Ending(task_id, family, "other")
    last = [s for s in steps if s["command"]][-LOOP_RUN:]
    same = len(last) == LOOP_RUN and all(
        (s["command"], s["norm_url"]) == (last[0]["command"], last[0]["norm_url"]) for s in last
    )
    if same:
        path = str(last[0].get("norm_url") or last[0].get("url") or "").split("?")[0]
        return Ending(task_id, family, "loop", f"{_target(last[0])} on {path or '?'}")
    return Ending(task_id, family, "step_limit")


@dataclasses.dataclass(frozen=True)
class FailureTable:
    """Endings counted per family (``counts[family][kind]``, families sorted, ``"all"`` last) and the commonest
    loops (``loops``: (what repeats with the task's family, episodes), most first)."""

    counts: dict[str, dict[str, int]]
    loops: list[tuple[str, int]]


def tabulate(endings: Iterable[Ending], top: int = 10) -> FailureTable:
    """Count ``endings`` per family and kind, and the ``top`` commonest loops (two tasks loop alike when they
    repeat the same command on the same path)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    loops: collections.Counter = collections.Counter()
    for e in endings:
        counts[e.family][e.kind] += 1
        counts["all"][e.kind] += 1
        if e.kind == "loop":
            loops[f"{e.family}: {e.repeats}"] += 1
    order = sorted(f for f in counts if f != "all") + (["all"] if counts else [])
    return FailureTable(
        {f: {k: counts[f][k] for k in ENDINGS} for f in order},
        loops.most_common(top),
    )


def render(table: FailureTable) -> str:
    """The table as Markdown: a row per family (episodes, then each ending's count), then the commonest loops."""
    head = "| family | episodes | " + " | ".join(k.replace("_", " ") for k in ENDINGS) + " |"
    rows = [head, "|" + "---|" * (len(ENDINGS) + 2)]
    for family, c in table.counts.items():
        rows.append(f"| {family} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in ENDINGS) + " |")
    if table.loops:
        rows += ["", "Commonest loops (episodes):"]
        rows += [f"- {n} × {what}" for what, n in table.loops]
    return "\n".join(rows) + "\n"
