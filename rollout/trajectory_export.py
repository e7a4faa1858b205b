"""Export a collection's episodes as trajectories a BrowserGym / AgentLab user can read (docs/trajectories.md).

One JSONL file: a header line, then per episode one ``episode`` line followed by its ``step`` lines. Fields carry
BrowserGym's names (observation keys, action strings) and AgentLab's (``StepInfo``, ``summary_info.json``) where
they have one; the project's own fields sit under ``tgpo``. Steps follow AgentLab's alignment: step n holds the
observation o_n, the reward received on reaching it, and the action chosen from it; a finished episode ends with a
row for its final state and no action. Rewards are sparse: the episode's score on that last row, 0 elsewhere.

The export streams (one episode in memory at a time), checks each episode's steps against their seal, and writes
through a temporary file renamed at the end, so an interrupted or failed export leaves no partial file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable

from rollout.commands import parse_command
from rollout.core import ActionError, Command
from rollout.recording import EpisodeRecord, RecordingError, iter_episodes, read_tasks
from tgpo_jax.files import atomic_path

FORMAT = "tgpo-trajectories"
SCHEMA_VERSION = 1
# SCROLL moves the page (or its innermost scrollable box) by 0.8 of its height (rollout/harness/page_script.js);
# BrowserGym's scroll takes pixels: 0.8 x the harness's default 768 px viewport height
SCROLL_PX = 614


def py_str(text: str) -> str:
    """``text`` as a single-quoted Python string literal: ``ast.literal_eval`` gives back exactly ``text``."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:  # newline, tab, other controls, unprintable Unicode: the escape that repr writes
            out.append(repr(ch)[1:-1])
    return "'" + "".join(out) + "'"


def command_to_action(command: Command, scroll_px: int = SCROLL_PX) -> str:
    """One parsed command as a BrowserGym action string (the table in docs/trajectories.md)."""
    n, bid = command.name, py_str(command.id or "")
    if n == "CLICK":
        return f"click({bid})"
    if n == "CLEAR":
        return f"clear({bid})"
    if n == "TYPE":  # the harness fills the field (replacing its text), as BrowserGym's fill does
        return f"fill({bid}, {py_str(command.arg or '')})"
    if n == "SELECT":
        return f"select_option({bid}, {py_str(command.arg or '')})"
    if n == "SCROLL":
        return f"scroll(0, {-scroll_px if command.arg == 'UP' else scroll_px})"
    if n == "GOTO":
        return f"goto({py_str(command.arg or '')})"
    if n == "GO_BACK":
        return "go_back()"
    if n == "STOP":  # the answer goes to the user, which is how a BrowserGym agent ends a task
        return f"send_msg_to_user({py_str(command.arg or '')})"
    raise ValueError(f"no BrowserGym action for command {n!r}")


@dataclasses.dataclass(frozen=True)
class BrowserGymAction:
    """A step's BrowserGym action: the action string (the command text as written when not ``ok``), whether it is valid,
    and why not."""

    action: str  # the BrowserGym action string; when not ok, the command text as the model wrote it
    ok: bool  # False: no valid command, so no BrowserGym action (the step's error says why)
    problem: str | None = None  # not ok: the parse error's kind, or "no_command"


_LABEL = re.compile(r"^\s*(command|action)\s*:\s*(.*)$", re.I)


def _command_text(output: str) -> str:
    """The command part of a policy output that did not parse: after its last ``Command:`` label, else its last
    non-empty line."""
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _LABEL.match(ln)
        if m:
            return m.group(2).strip()
    return lines[-1].strip() if lines else ""


def to_browsergym(command: str | None, output: str = "", scroll_px: int = SCROLL_PX) -> BrowserGymAction:
    """A recorded command (our grammar, a step's ``command``) as a BrowserGym action. ``command`` None (the output
    held no valid command) or one that does not parse: its text is kept as the action, marked not ok."""
    if command is None:
        return BrowserGymAction(_command_text(output or ""), False, "no_command")
    try:
        return BrowserGymAction(command_to_action(parse_command(command), scroll_px), True)
    except ActionError as e:
        return BrowserGymAction(command, False, e.kind)


def _screenshot(ep_path: str, rel: str | None, base_dir: str) -> str | None:
    """A recorded screenshot as a path relative to the export's directory (None when not recorded or missing)."""
    if not rel:
        return None
    path = os.path.join(ep_path, rel)
    return os.path.relpath(path, base_dir) if os.path.exists(path) else None


def _step_stats(rec: dict, prev: dict | None) -> dict:
    """AgentLab's per-step stats: step_elapsed = the environment's time to give this observation (the previous
    command's execution, observing, checking), agent_elapsed = the policy's time choosing this step's action."""
    t = rec.get("timings") or {}
    env = [t.get("observe_s"), t.get("check_s")] + ([(prev.get("timings") or {}).get("execute_s")] if prev else [])
    return {
        "step_elapsed": sum(env) if all(v is not None for v in env) else None,
        "agent_elapsed": t.get("policy_s"),
        "num_tokens": rec.get("num_tokens"),
    }


def _aggregate(rows: list[dict]) -> dict:
    """AgentLab's episode stats (``summary_info.json``): cum_steps = rows, cum_/max_ of each step stat."""
    out: dict[str, Any] = {"stats.cum_steps": len(rows)}
    keys = sorted({k for r in rows if r["stats"] for k in r["stats"]})
    for k in keys:
        vals = [r["stats"][k] for r in rows if r["stats"] and r["stats"].get(k) is not None]
        out[f"stats.cum_{k}"] = sum(vals) if vals else None
        out[f"stats.max_{k}"] = max(vals) if vals else None
    return out


def episode_rows(
    ep: EpisodeRecord, goal: str, base_dir: str, *, include_observation: bool = True, scroll_px: int = SCROLL_PX
) -> tuple[dict, list[dict]]:
    """(episode line, step lines) of one recorded episode; screenshot paths relative to ``base_dir``."""
    s, steps = ep.summary, ep.steps
    if s.get("steps", len(steps)) != len(steps):
        raise RecordingError(f"{ep.path}: the summary counts {s.get('steps')} steps, steps.jsonl has {len(steps)}")
    errored = s.get("status") == "errored"
    final = None if errored else s.get("final")
    if not errored and final is None:
        raise RecordingError(f"{ep.path}: a finished episode without its final state")
    end = s.get("end_reason")
    terminated, truncated = (not errored and end in ("stop", "done")), (not errored and end == "max_steps")
    episode_id = s.get("episode_key") or f"{s['task_id']}/{s.get('run', 0)}"
    score = float(s.get("score") or 0.0)
    rows: list[dict] = []
    last_action, last_error, last_kind = "", "", None  # BrowserGym's values before any action
    for n, state in enumerate(list(steps) + ([final] if final is not None else [])):
        rec = steps[n] if n < len(steps) else None  # None: the final state, no action
        act = to_browsergym(rec.get("command"), rec.get("output") or "", scroll_px) if rec is not None else None
        reward = score if rec is None else 0.0
        tgpo: dict[str, Any] = {
            "final": rec is None,
            "norm_url": state.get("norm_url"),
            "phash": state.get("phash"),
            "obs_truncated": bool(state.get("truncated")),
            "last_action_error_kind": last_kind,
        }
        if rec is not None:
            tgpo.update(
                command=rec.get("command"),
                command_name=rec.get("command_name"),
                format_ok=rec.get("format_ok", rec.get("command") is not None),
                action_ok=act.ok,
                action_problem=act.problem,
                output=rec.get("output"),
                target=rec.get("target"),
                error=rec.get("error"),
                effect=rec.get("effect"),
                logprob=rec.get("logprob"),
                num_tokens=rec.get("num_tokens"),
                policy_info=rec.get("policy_info"),
                timings=rec.get("timings"),
            )
        url, title = state.get("url"), state.get("title")
        rows.append(
            {
                "type": "step",
                "episode_id": episode_id,
                "step": n,
                "obs": {
                    "goal": goal,
                    "url": url,
                    "open_pages_urls": [url],
                    "open_pages_titles": [title],
                    "axtree_txt": state.get("observation") if include_observation else None,
                    "last_action": last_action,
                    "last_action_error": last_error,
                    "screenshot": _screenshot(ep.path, state.get("screenshot"), base_dir),
                },
                "reward": reward,
                "raw_reward": reward,
                "terminated": terminated and rec is None,
                "truncated": truncated and rec is None,
                "action": None if act is None else act.action,
                "agent_info": {} if rec is None else {"think": rec.get("thought") or ""},
                "stats": None if rec is None else _step_stats(rec, steps[n - 1] if n else None),
                "task_info": state.get("check"),
                "tgpo": tgpo,
            }
        )
        if rec is not None:
            err = rec.get("error") or {}
            last_action, last_error, last_kind = act.action, err.get("message") or "", err.get("kind")
    error = s.get("error") or {}
    episode = {
        "type": "episode",
        "episode_id": episode_id,
        "task_name": s["task_id"],
        "agent_name": s.get("policy") or "",
        "goal": goal,
        "n_steps": len(steps),
        "cum_reward": sum(r["reward"] for r in rows),
        "cum_raw_reward": sum(r["raw_reward"] for r in rows),
        "terminated": terminated,
        "truncated": truncated,
        "err_msg": f"{error.get('type', 'error')}: {error.get('message', '')}" if errored else None,
        "stack_trace": error.get("traceback") if errored else None,
        **_aggregate(rows),
        "tgpo": {
            "task_id": s["task_id"],
            "run": s.get("run"),
            "env": s.get("env"),
            "family": s.get("family"),
            "split": s.get("split"),
            "seed": s.get("seed"),
            "status": s.get("status"),
            "success": bool(s.get("success")),
            "score": score,
            "end_reason": end,
            "optimal_steps": s.get("optimal_steps"),
            "duration_s": s.get("duration_s"),
            "started_at": s.get("started_at"),
            "error_type": error.get("type") if errored else None,
            "step_lines": len(rows),
        },
    }
    return episode, rows


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n"


def export_collection(
    episodes_dir: str,
    out: str,
    *,
    include_observation: bool = True,
    include_errored: bool = False,
    scroll_px: int = SCROLL_PX,
    validate: bool = True,
    progress: Callable[[EpisodeRecord], None] | None = None,
) -> dict:
    """Write the collection ``episodes_dir`` as one trajectories file ``out``; -> {out, episodes, steps}. With
    ``validate``, the written file is read back by the format's reader before it takes its name."""
    from rollout.trajectory_format import TrajectoryFormatError, validate_file

    tasks_path = os.path.join(episodes_dir, "tasks.jsonl")
    if not os.path.isdir(os.path.join(episodes_dir, "episodes")) or not os.path.exists(tasks_path):
        raise RecordingError(
            f"{episodes_dir} is not a collection directory (it needs episodes/ and tasks.jsonl, "
            "as launch.collect --out writes them)"
        )
    goals = {t.task_id: t.instruction for t in read_tasks(episodes_dir)}
    meta_path = os.path.join(episodes_dir, "collection.json")
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    base_dir = os.path.dirname(os.path.abspath(out))
    n_eps = n_rows = 0
    with atomic_path(out) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(
                _line(
                    {
                        "type": "header",
                        "format": FORMAT,
                        "schema_version": SCHEMA_VERSION,
                        "collection": meta,
                        "include_observation": include_observation,
                        "include_errored": include_errored,
                        "scroll_px": scroll_px,
                    }
                )
            )
            for ep in iter_episodes(episodes_dir, include_errored=include_errored, verify=True):
                if ep.task_id not in goals:
                    raise RecordingError(f"{ep.path}: task {ep.task_id!r} is not in {tasks_path}")
                episode, rows = episode_rows(
                    ep, goals[ep.task_id], base_dir, include_observation=include_observation, scroll_px=scroll_px
                )
                f.write(_line(episode))
                f.writelines(_line(r) for r in rows)
                n_eps, n_rows = n_eps + 1, n_rows + len(rows)
                if progress is not None:
                    progress(ep)
        if validate:
            try:
                validate_file(tmp)
            except TrajectoryFormatError as e:  # a bug here, not in the input: name the file it was meant for
                raise TrajectoryFormatError(f"the export to {out} did not pass its own check: {e}") from e
    return {"out": out, "episodes": n_eps, "steps": n_rows}
