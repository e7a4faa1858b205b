"""One episode: reset → (observe → policy → parse → execute → check)* → summary, with watchdogs.

Every step is recorded as it ends. A parse or execution error is not an episode failure: it is the
action's typed error, shown in the next observation (docs/method.md §1). Anything else that goes wrong — the
browser or page crashed, a watchdog fired, the policy raised — ends the episode as ``errored`` with
the steps so far kept and the error named in the summary; the collection goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback

from rollout.commands import parse_output
from rollout.core import ActionError, CheckResult, Environment, HistoryItem, Observation, Policy, PolicyRequest, Task
from rollout.harness.execute import Timeouts, execute
from rollout.harness.guards import install_guards
from rollout.harness.observe import install, observe, render_observation
from rollout.harness.pool import BrowserPool
from rollout.recording import EpisodeWriter
from rollout.urls import normalize_url


class BrowserCrashed(RuntimeError):
    """The page, its context or the whole browser died under the episode."""


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    """How one episode runs: step limits, watchdog timeouts, the observation budget, screenshots, the viewport, action
    timeouts and browser recycling."""

    max_steps: int = 30
    step_slack: int = 0  # > 0: a task with a known optimal length stops at min(max_steps, optimal + step_slack)
    step_timeout_s: float = 180.0  # watchdog over one step: policy + execute + observe + check
    episode_timeout_s: float = 1800.0  # watchdog over the whole episode
    budget_tokens: int = 1024  # observation text budget
    screenshots: bool = True  # save PNGs (the pHash is always computed)
    # saved PNGs are set-of-marks ones: each element's id drawn on it (observe.py), for policies that read only the
    # screenshot (OpenAIPolicy(observation="image")); the pHash stays the unmarked page's
    marks: bool = False
    # screenshots through Chromium's CDP capture at its fast PNG setting (observe.py's capture_png: the same pixels
    # in about half the time); False = Playwright's page.screenshot, the earlier default (bench/harness_overhead.py)
    fast_capture: bool = True
    viewport: tuple[int, int] = (1024, 768)
    action_ms: int = 5000
    navigation_ms: int = 10000
    settle_ms: int = 2000
    still_ms: int = 100  # before an element command, the page's DOM unchanged this long (execute.py; 0 = no wait)
    recycle_after: int = 100  # episodes per browser before a fresh one
    extra_origins: tuple[str, ...] = ()  # GOTO allowlist beyond the environment's own origins

    def __post_init__(self):
        if (
            self.max_steps < 1
            or self.step_slack < 0
            or self.step_timeout_s <= 0
            or self.episode_timeout_s <= 0
            or self.budget_tokens < 16
        ):
            raise ValueError(f"invalid harness config: {self}")
        if self.marks and not self.screenshots:
            raise ValueError(
                "HarnessConfig(marks=True) draws element ids on the saved screenshots: it needs screenshots=True"
            )

    def step_cap(self, task) -> int:
        """The step budget of one episode of ``task``."""
        if self.step_slack and task.optimal_steps > 0:
            return min(self.max_steps, task.optimal_steps + self.step_slack)
        return self.max_steps

    def timeouts(self) -> Timeouts:
        """The ``Timeouts`` of the config's action, navigation, settle and quiet-window settings."""
        return Timeouts(
            action_ms=self.action_ms, navigation_ms=self.navigation_ms, settle_ms=self.settle_ms, still_ms=self.still_ms
        )


def _check_json(c: CheckResult) -> dict:
    out = {"success": bool(c.success), "score": float(c.score), "progress": c.progress, "done": bool(c.done)}
    if c.elements is not None:
        out["elements"] = c.elements
    return out


def _state_json(obs: Observation, check: CheckResult, essential) -> dict:
    out = {
        "url": obs.shown_url,
        "norm_url": normalize_url(obs.shown_url, essential),
        "title": obs.title,
        "observation": render_observation(obs),
        "truncated": obs.truncated,
        "screenshot": obs.screenshot,
        "phash": obs.phash,
        "obs_error": None if obs.error is None else dataclasses.asdict(obs.error),
        "check": _check_json(check),
    }
    if obs.marked:  # only then, so records without marks stay as they were
        out["screenshot_marked"] = True
    return out


async def run_episode(
    pool: BrowserPool,
    env: Environment,
    task: Task,
    run: int,
    policy: Policy,
    out_dir: str,
    cfg: HarnessConfig,
    seed: int = 0,
) -> dict:
    """Run and record one episode; returns its summary (also written to ``summary.json``)."""
    key = f"{task.task_id}/{run}"
    writer = EpisodeWriter(out_dir, task.task_id, run, screenshots=cfg.screenshots)
    allowed = tuple(env.allowed_origins(task)) + tuple(cfg.extra_origins)
    site = env.origin  # shown and recorded site-relative (Observation.origin)
    essential = env.essential_query_params()
    timeouts = cfg.timeouts()
    summary = {
        "task_id": task.task_id,
        "run": run,
        "episode_key": key,
        "env": task.env,
        "family": task.family,
        "split": task.split,
        "policy": getattr(policy, "name", type(policy).__name__),
        "seed": seed,
        "optimal_steps": task.optimal_steps,
    }
    started = time.time()
    context = None
    steps = 0

    def shot(name: str) -> tuple[str | None, str | None]:
        return writer.screenshot_path(name) if cfg.screenshots else (None, None)

    crashed: list[str] = []

    def alive() -> None:
        """The harness's page operations tolerate a vanished frame; a vanished browser must end the episode."""
        if crashed or page.is_closed() or not context.browser.is_connected():
            what = (
                crashed[0]
                if crashed
                else ("browser disconnected" if not context.browser.is_connected() else "page closed")
            )
            raise BrowserCrashed(f"{what} during {task.task_id} run {run}")

    screen: str | None = None  # the current state's screenshot, absolute: what a policy may read

    async def look(name: str, error) -> tuple[Observation, CheckResult, float, float]:
        nonlocal screen
        path, rel = shot(name)
        t0 = time.perf_counter()
        obs = await observe(
            page,
            budget_tokens=cfg.budget_tokens,
            screenshot_path=path,
            error=error,
            origin=site,
            marks=cfg.marks,
            fast_capture=cfg.fast_capture,
        )
        alive()
        screen = path
        if rel is not None:
            obs = dataclasses.replace(obs, screenshot=rel)  # recorded relative to the episode directory
        t1 = time.perf_counter()
        check = await env.check(page, task, key)
        return obs, check, t1 - t0, time.perf_counter() - t1

    async def init(ctx) -> None:
        await install(ctx)
        await install_guards(ctx, allowed)

    try:
        async with asyncio.timeout(cfg.episode_timeout_s):
            context = await pool.new_context(init=init)
            page = await context.new_page()
            page.on("crash", lambda _: crashed.append("page crashed"))
            async with asyncio.timeout(cfg.step_timeout_s):
                await env.reset(context, page, task, key)
                obs, check, t_obs, t_check = await look("000", None)
            history: list[HistoryItem] = []
            end_reason = "max_steps"
            for t in range(cfg.step_cap(task)):
                async with asyncio.timeout(cfg.step_timeout_s):
                    t0 = time.perf_counter()
                    seen = obs if screen is None else dataclasses.replace(obs, screenshot=screen)
                    out = await policy.act(PolicyRequest(task, seen, tuple(history), t, key, seed))
                    t_policy = time.perf_counter() - t0
                    thought, cmd, err, effect = "", None, None, None
                    try:
                        thought, cmd = parse_output(out.text)
                    except ActionError as e:
                        err = e.info()
                    t0 = time.perf_counter()
                    if cmd is not None and cmd.name != "STOP":
                        try:
                            effect = await execute(page, cmd, allowed_origins=allowed, timeouts=timeouts)
                        except ActionError as e:
                            err = e.info()
                        alive()  # an "error" from a dead browser is a crash, not the action's fault
                    t_exec = time.perf_counter() - t0
                    target = obs.by_id(cmd.id) if (cmd is not None and cmd.id) else None
                    record = {
                        "step": t,
                        **_state_json(obs, check, essential),
                        "output": out.text,
                        "thought": thought,
                        "command": None if cmd is None else cmd.render(),
                        "command_name": None if cmd is None else cmd.name,
                        "target": None if target is None else {"role": target.role, "name": target.name},
                        "format_ok": cmd is not None,
                        "error": None if err is None else dataclasses.asdict(err),
                        "effect": None if effect is None else dataclasses.asdict(effect),
                        "logprob": out.logprob,
                        "num_tokens": out.num_tokens,
                        "policy_info": dict(out.info),
                    }
                    history.append(
                        HistoryItem(
                            cmd.render() if cmd is not None else _last_line(out.text),
                            thought,
                            None if err is None else err.kind,
                        )
                    )
                    record["timings"] = {
                        "observe_s": t_obs,
                        "check_s": t_check,
                        "policy_s": t_policy,
                        "execute_s": t_exec,
                    }
                    writer.step(record)
                    steps += 1
                    if cmd is not None and cmd.name == "STOP":
                        end_reason = "stop"
                        if env.check_answer is not None:  # the answer decides (the page is as it was)
                            check = await env.check_answer(page, task, key, cmd.arg or "")
                        break
                    obs, check, t_obs, t_check = await look(f"{t + 1:03d}", err)
                    if check.done:
                        end_reason = "done"
                        break
        summary.update(
            status="success" if check.success else "failure",
            success=bool(check.success),
            score=float(check.score),
            steps=steps,
            end_reason=end_reason,
            final=_state_json(obs, check, essential),
            error=None,
        )
    except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001 — any failure here is this episode's only
        if isinstance(e, asyncio.CancelledError):
            # Cancelled from outside (run interrupted): leave the episode unsealed, so resume re-runs it.
            writer.close()
            await _release(pool, context)
            raise
        kind = "watchdog" if isinstance(e, TimeoutError) else type(e).__name__
        if context is not None and not isinstance(e, BrowserCrashed) and not context.browser.is_connected():
            kind = "BrowserCrashed"  # the browser died and the first sign of it was some other error
        summary.update(
            status="errored",
            success=False,
            score=0.0,
            steps=steps,
            end_reason="error",
            final=None,
            error={"type": kind, "message": str(e)[:2000] or kind, "traceback": traceback.format_exc(limit=6)[-4000:]},
        )
    await _release(pool, context)
    summary["duration_s"] = time.time() - started
    summary["started_at"] = started
    writer.finish(summary)
    return summary


async def _release(pool: BrowserPool, context) -> None:
    if context is not None:
        await pool.release(context)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "(empty output)")[:120]
