"""Read and check a trajectories file (rollout/trajectory_export.py; the schema is docs/trajectories.md).

``iter_trajectories`` streams the file episode by episode, checking as it reads: every line is a JSON object of a
known type with its required fields and types, step lines follow their episode line in order, and each episode's
counts and rewards add up. Any problem is a ``TrajectoryFormatError`` naming the file and the line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Iterator

from rollout.fieldcheck import NUM, check_fields as _check
from rollout.trajectory_export import FORMAT, SCHEMA_VERSION


class TrajectoryFormatError(ValueError):
    """A trajectories file that does not follow the format; the message names the line."""


_HEADER = {"type": str, "format": str, "schema_version": int, "collection": dict, "include_observation": bool}
_EPISODE = {
    "type": str,
    "episode_id": str,
    "task_name": str,
    "agent_name": str,
    "goal": str,
    "n_steps": int,
    "cum_reward": NUM,
    "cum_raw_reward": NUM,
    "terminated": bool,
    "truncated": bool,
    "err_msg": (str, None),
    "stack_trace": (str, None),
    "stats.cum_steps": int,
    "tgpo": dict,
}
_EPISODE_TGPO = {
    "task_id": str,
    "run": (int, None),
    "status": str,
    "success": bool,
    "score": NUM,
    "end_reason": (str, None),
    "step_lines": int,
}
_STEP = {
    "type": str,
    "episode_id": str,
    "step": int,
    "obs": dict,
    "reward": NUM,
    "raw_reward": NUM,
    "terminated": bool,
    "truncated": bool,
    "action": (str, None),
    "agent_info": dict,
    "stats": (dict, None),
    "task_info": (dict, None),
    "tgpo": dict,
}
_OBS = {
    "goal": str,
    "url": (str, None),
    "open_pages_urls": list,
    "open_pages_titles": list,
    "axtree_txt": (str, None),
    "last_action": str,
    "last_action_error": str,
    "screenshot": (str, None),
}
_STEP_TGPO = {"final": bool}


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One exported trajectory: its episode line and its step lines, in order."""

    episode: dict  # the episode line
    steps: tuple[dict, ...]  # its step lines, in order


def _lines(path: str) -> Iterator[tuple[int, dict]]:
    """(line number from 1, object) of each line; split on "\\n" only (other line separators are text)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise TrajectoryFormatError(f"{path}, line {n}: not a JSON line ({e})") from None
            if not isinstance(obj, dict):
                raise TrajectoryFormatError(f"{path}, line {n}: a JSON {type(obj).__name__}, not an object")
            yield n, obj


def read_header(path: str) -> dict:
    """The file's header line (checked: its format and a schema version this reader knows)."""
    for n, obj in _lines(path):
        return _header(path, n, obj)
    raise TrajectoryFormatError(f"{path}: empty file, no header line")


def _header(path: str, n: int, obj: dict) -> dict:
    def fail(msg: str):
        raise TrajectoryFormatError(f"{path}, line {n}: {msg}")

    if obj.get("type") != "header":
        fail(f"the first line should be the header, not a {obj.get('type')!r} line")
    _check(obj, _HEADER, "the header", fail)
    if obj["format"] != FORMAT:
        fail(f"format {obj['format']!r}, not {FORMAT!r}")
    if obj["schema_version"] != SCHEMA_VERSION:
        fail(f"schema_version {obj['schema_version']} (this reader knows {SCHEMA_VERSION})")
    return obj


def iter_trajectories(path: str) -> Iterator[Trajectory]:
    """The episodes of a trajectories file, each with its steps, checked as they are read."""
    episode, ep_line, steps = None, 0, []
    seen_header = False
    for n, obj in _lines(path):

        def fail(msg: str, line: int = n):
            raise TrajectoryFormatError(f"{path}, line {line}: {msg}")

        if not seen_header:
            _header(path, n, obj)
            seen_header = True
            continue
        kind = obj.get("type")
        if kind == "episode":
            if episode is not None:
                yield _close(path, ep_line, episode, steps)
            _check(obj, _EPISODE, "episode line", fail)
            _check(obj["tgpo"], _EPISODE_TGPO, "episode line's tgpo", fail)
            episode, ep_line, steps = obj, n, []
        elif kind == "step":
            if episode is None:
                fail("a step line before any episode line")
            _check(obj, _STEP, "step line", fail)
            _check(obj["obs"], _OBS, "step line's obs", fail)
            _check(obj["tgpo"], _STEP_TGPO, "step line's tgpo", fail)
            if obj["episode_id"] != episode["episode_id"]:
                fail(f"step of episode {obj['episode_id']!r} inside episode {episode['episode_id']!r} (line {ep_line})")
            if obj["step"] != len(steps):
                fail(f"step {obj['step']} where step {len(steps)} of {episode['episode_id']!r} was due")
            if steps and (steps[-1]["terminated"] or steps[-1]["truncated"]):
                fail(f"a step after the episode {episode['episode_id']!r} ended")
            shot = obj["obs"]["screenshot"]
            if shot is not None and os.path.isabs(shot):
                fail(f"screenshot path {shot!r} is absolute; paths are relative to the file's directory")
            steps.append(obj)
        else:
            fail(f"unknown line type {kind!r} (header, episode or step)")
    if not seen_header:
        raise TrajectoryFormatError(f"{path}: empty file, no header line")
    if episode is not None:
        yield _close(path, ep_line, episode, steps)


def _close(path: str, line: int, episode: dict, steps: list[dict]) -> Trajectory:
    """An episode's totals against its steps (errors name the episode's line)."""

    def fail(msg: str):
        raise TrajectoryFormatError(f"{path}, line {line}: episode {episode['episode_id']!r}: {msg}")

    want = episode["tgpo"]["step_lines"]
    if len(steps) != want:
        fail(f"{len(steps)} step lines follow it, it announces {want}")
    acted = sum(1 for s in steps if s["action"] is not None)
    if acted != episode["n_steps"]:
        fail(f"n_steps is {episode['n_steps']} but {acted} steps have an action")
    for key, field in (("cum_reward", "reward"), ("cum_raw_reward", "raw_reward")):
        total = sum(s[field] for s in steps)
        if not math.isclose(total, episode[key], rel_tol=1e-9, abs_tol=1e-9):
            fail(f"{key} is {episode[key]} but its steps' {field}s add up to {total}")
    ended = (steps[-1]["terminated"], steps[-1]["truncated"]) if steps else (False, False)
    if ended != (episode["terminated"], episode["truncated"]):
        fail(f"terminated/truncated {episode['terminated'], episode['truncated']} but its last step says {ended}")
    return Trajectory(episode, tuple(steps))


def validate_file(path: str) -> dict:
    """Read the whole file through the checks (a header alone is a valid, empty export); -> {episodes, steps}."""
    n_eps = n_steps = 0
    for traj in iter_trajectories(path):
        n_eps, n_steps = n_eps + 1, n_steps + len(traj.steps)
    return {"episodes": n_eps, "steps": n_steps}
