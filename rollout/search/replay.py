"""Restoring a search node's browser state (docs/method.md §9.1): a fresh context, the task's start page, then the
node's command prefix, checking after every command that the page is the state the search recorded there.

A state is its key (``state_key``): the normalised URL and the observation as the policy reads it, hashed. The
shop keeps its cart server-side per session, so a URL alone cannot restore a state; the prefix replay can, and a
replay that reaches another page (the site changed, a counter moved, a command now fails) raises
``ReplayDiverged`` naming the step and both states. A diverged node is never used as if restored.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Sequence

from rollout.commands import parse_command
from rollout.core import ActionError, Environment, Observation, Task
from rollout.harness.execute import execute
from rollout.harness.guards import install_guards
from rollout.harness.observe import install, observe, render_observation
from rollout.harness.runner import HarnessConfig
from rollout.urls import normalize_url


class ReplayDiverged(RuntimeError):
    """A replayed prefix reached another state than the recorded one."""

    def __init__(self, step: int, expected: str, got: str, url: str):
        super().__init__(
            f"replay diverged after {step} command(s): expected state {expected[:12]}, reached {got[:12]} at {url}"
        )
        self.step, self.expected, self.got, self.url = step, expected, got, url


def key_of(norm_url: str, observation: str) -> str:
    """A state's key from its normalised URL and rendered observation (a recorded step's ``norm_url`` and
    ``observation`` fields give the same key as the live page)."""
    return hashlib.sha256(f"{norm_url}\n{observation}".encode()).hexdigest()


def state_key(obs: Observation, essential=None) -> str:
    """The state key of a live observation (its normalised URL and rendered text), as ``key_of`` gives for a recorded
    step."""
    return key_of(normalize_url(obs.shown_url, essential), render_observation(obs))


@dataclasses.dataclass
class Restored:
    """A state restored by replay: the page at it, its browser context, the observation and the state key."""

    page: object  # the Playwright page, at the node's state
    context: object  # release it with ``pool.release(context)``
    obs: Observation
    key: str


async def restore(
    pool,
    env: Environment,
    task: Task,
    session_key: str,
    prefix: Sequence[str],
    expected: Sequence[str],
    cfg: HarnessConfig,
) -> Restored:
    """Replay ``prefix`` (canonical commands) from the task's start page in a fresh context of ``pool``;
    ``expected`` holds the recorded state key before each command and after the last (len(prefix) + 1 keys).
    -> the page at the node's state; raises ``ReplayDiverged`` at the first state that differs (the context is
    released then)."""
    if len(expected) != len(prefix) + 1:
        raise ValueError(f"{len(prefix)} commands need {len(prefix) + 1} expected state keys, got {len(expected)}")
    allowed = tuple(env.allowed_origins(task)) + tuple(cfg.extra_origins)
    essential = env.essential_query_params()

    async def init(ctx) -> None:
        await install(ctx)
        await install_guards(ctx, allowed)

    context = await pool.new_context(init=init)
    try:
        page = await context.new_page()
        await env.reset(context, page, task, session_key)
        error = None
        for i in range(len(prefix) + 1):
            obs = await observe(
                page, budget_tokens=cfg.budget_tokens, error=error, origin=env.origin, with_screenshot=False
            )
            key = state_key(obs, essential)
            if key != expected[i]:
                raise ReplayDiverged(i, expected[i], key, obs.shown_url)
            if i == len(prefix):
                return Restored(page, context, obs, key)
            error = None
            try:
                await execute(page, parse_command(prefix[i]), allowed_origins=allowed, timeouts=cfg.timeouts())
            except ActionError as e:  # the recorded step failed the same way, or the key check says otherwise
                error = e.info()
    except BaseException:
        await pool.release(context)
        raise
    raise AssertionError("unreachable")  # pragma: no cover
