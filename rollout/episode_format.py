"""The on-disk format of a recorded episode (``rollout/recording.py``): its ``summary.json`` and ``steps.jsonl``
records, typed, and checked where they are read.

``FORMAT`` is the layout the harness writes, recorded in each summary as ``format``. A summary without the field was
written before it, in the same layout, and reads as format 1 (its steps unchecked when it has no ``steps_sha256``
seal either). A summary of another format is refused with a message saying so; when a layout changes, the older one
is read through ``upgrade_summary`` and ``upgrade_step``, the one place that knows it.
"""

from __future__ import annotations

from typing import Any, TypedDict

from rollout.fieldcheck import NUM, check_fields

FORMAT = 1
READABLE = (1,)
FINISHED = ("success", "failure")
STATUSES = FINISHED + ("errored",)


class RecordingError(ValueError):
    """A collection directory or episode recording that cannot be read or does not match its format."""


class State(TypedDict, total=False):
    """A page state as recorded: the step's state s_t, or the summary's final state."""

    url: str
    norm_url: str  # the URL without the parameters that do not define the page (the tree's state key)
    title: str
    observation: str  # the rendered accessibility text the policy saw
    truncated: bool
    screenshot: str | None  # relative to the episode directory
    phash: str | None  # perceptual hash of the screenshot
    obs_error: dict | None  # the previous action's error, as the page reported it
    check: dict  # the task's check on this page (rollout.core.CheckResult): success, score, progress, done[, elements]
    screenshot_marked: bool  # the screenshot carries set-of-marks labels


class StepRecord(State, total=False):
    """One line of ``steps.jsonl``: the state s_t and the policy's output there."""

    step: int
    output: str  # the policy's raw text
    thought: str
    command: str | None  # the parsed command, rendered; None when the output did not parse
    command_name: str | None
    target: dict | None  # the acted-on element: role, name
    format_ok: bool
    error: dict | None  # ActionError info: kind, message
    effect: dict | None  # what the action changed
    logprob: float | None
    num_tokens: int | None
    policy_info: dict
    timings: dict  # seconds: observe_s, check_s, policy_s, execute_s


class EpisodeSummary(TypedDict, total=False):
    """An episode's ``summary.json``, written last: the episode is finished iff it exists."""

    format: int
    task_id: str
    run: int
    episode_key: str
    env: str
    family: str
    split: str
    policy: str
    seed: int
    optimal_steps: int | None
    status: str  # one of STATUSES
    success: bool
    score: float
    steps: int
    end_reason: str  # stop | done | max_steps | error
    final: State | None  # None for an errored episode
    error: dict | None  # an errored episode's type, message, traceback
    duration_s: float
    started_at: float
    steps_sha256: str  # the seal: sha256 of steps.jsonl as written


_STATE = {"url": str, "norm_url": str, "title": str, "observation": str, "check": dict}
_CHECK = {"success": bool, "score": NUM, "progress": str, "done": bool}  # rollout.core.CheckResult
_CHECK_OPTIONAL = {"elements": (dict, None)}
_STATE_OPTIONAL = {
    "truncated": bool,
    "screenshot": (str, None),
    "phash": (str, None),
    "obs_error": (dict, None),
    "screenshot_marked": bool,
}
_STEP = {
    **_STATE,
    "step": int,
    "output": str,
    "thought": str,
    "command": (str, None),
    "command_name": (str, None),
    "target": (dict, None),
    "format_ok": bool,
    "error": (dict, None),
    "effect": (dict, None),
}
_STEP_OPTIONAL = {
    **_STATE_OPTIONAL,
    "logprob": (NUM, None),
    "num_tokens": (int, None),
    "policy_info": dict,
    "timings": dict,
}
_SUMMARY = {
    "task_id": str,
    "run": int,
    "env": str,
    "family": str,
    "split": str,
    "status": str,
    "success": bool,
    "score": NUM,
    "steps": int,
    "end_reason": str,
    "final": (dict, None),
    "error": (dict, None),
}
_SUMMARY_OPTIONAL = {
    "format": int,
    "episode_key": str,
    "policy": str,
    "seed": int,
    "optimal_steps": (int, None),
    "duration_s": NUM,
    "started_at": NUM,
    "steps_sha256": str,
}


def upgrade_summary(d: Any, where: str) -> EpisodeSummary:
    """The summary ``d`` (read from ``where``) in this reader's format: checked field by field; ``RecordingError``
    naming ``where`` and the field when it does not follow its format, or is of a format this reader does not know."""

    def fail(msg: str):
        raise RecordingError(f"{where}: {msg}")

    if not isinstance(d, dict):
        fail(f"a JSON {type(d).__name__}, not an object")
    version = d.get("format", 1)  # absent: written before the field, in format 1's layout
    if version not in READABLE:
        fail(f"episode format {version!r}; this reader knows {', '.join(map(str, READABLE))}")
    check_fields(d, _SUMMARY, "the summary", fail, optional=_SUMMARY_OPTIONAL)
    if d["status"] not in STATUSES:
        fail(f"status {d['status']!r}, expected one of {', '.join(STATUSES)}")
    if d["final"] is not None:
        check_fields(d["final"], _STATE, "the summary's final state", fail, optional=_STATE_OPTIONAL)
        check_fields(d["final"]["check"], _CHECK, "the final state's check", fail, optional=_CHECK_OPTIONAL)
    return d  # type: ignore[return-value]


def upgrade_step(d: Any, where: str) -> StepRecord:
    """One step record (line ``where`` of a ``steps.jsonl``) in this reader's format, checked field by field;
    ``RecordingError`` naming ``where`` and the field when it does not follow the format."""

    def fail(msg: str):
        raise RecordingError(f"{where}: {msg}")

    if not isinstance(d, dict):
        fail(f"a JSON {type(d).__name__}, not an object")
    check_fields(d, _STEP, "the step", fail, optional=_STEP_OPTIONAL)
    check_fields(d["check"], _CHECK, "the step's check", fail, optional=_CHECK_OPTIONAL)
    return d  # type: ignore[return-value]


def check_summary_to_write(summary: dict) -> None:
    """``RecordingError`` when a summary about to be written would not read back (the writer's side of the
    format)."""
    upgrade_summary({**summary, "format": FORMAT}, "writing the episode")
