"""Restoring a search node by replaying its command prefix in a fresh browser context (issue 11), on the embedded
shop with real Chromium: the exact recorded state is reached, and a replay that reaches another page is reported."""
import asyncio

import pytest

from rollout.collect import CollectConfig, collect
from rollout.envs.shop.env import ShopEnv
from rollout.harness.pool import BrowserPool
from rollout.harness.runner import HarnessConfig
from rollout.policies.oracle import OraclePolicy
from rollout.recording import iter_episodes
from rollout.search.replay import ReplayDiverged, key_of, restore

pytestmark = pytest.mark.slow  # browser end to end
HARNESS = HarnessConfig(screenshots=False, max_steps=40)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    env = ShopEnv(seed=0)
    env.start()
    tasks = [next(t for t in env.tasks("train") if t.family == f) for f in ("multi_cart", "webshop")]
    out = str(tmp_path_factory.mktemp("replay") / "episodes")
    counts = collect(env, tasks, OraclePolicy(env), CollectConfig(out_dir=out, progress=False, harness=HARNESS, runs=1))
    assert counts["success"] == 2, counts
    yield env, tasks, {e.task_id: e for e in iter_episodes(out)}
    env.stop()


def _prefix_and_keys(episode):
    """The episode's commands before its STOP and the state key before each and after the last."""
    steps = [s for s in episode.steps if s["command_name"] != "STOP"]
    states = [*steps, episode.steps[len(steps)] if len(steps) < len(episode.steps) else episode.summary["final"]]
    return [s["command"] for s in steps], [key_of(s["norm_url"], s["observation"]) for s in states]


def _restore(env, jobs):
    """Each job (task, prefix, keys, session) restored in its own fresh context of one browser; -> the keys reached,
    or the exception a job raised."""
    async def one(pool, task, prefix, keys, session):
        try:
            r = await restore(pool, env, task, session, prefix, keys, HARNESS)
        except (ReplayDiverged, ValueError) as e:
            return e
        await pool.release(r.context)
        return r.key

    async def go():
        async with BrowserPool() as pool:
            return [await one(pool, *job) for job in jobs]

    return asyncio.run(go())


def test_replay_reaches_the_recorded_state_cart_included(recorded):
    env, tasks, episodes = recorded
    jobs, want = [], []
    for task in tasks:
        prefix, keys = _prefix_and_keys(episodes[task.task_id])
        assert len(prefix) >= 4
        half = len(prefix) // 2  # an inner node too: its own prefix and keys
        jobs += [(task, prefix, keys, f"replay-{task.task_id}"),
                 (task, prefix[:half], keys[:half + 1], f"half-{task.task_id}")]
        want += [keys[-1], keys[half]]
    assert _restore(env, jobs) == want
    for task in tasks:  # the cart is the session's, server-side: the fresh session holds what the recorded one held
        assert env.check_session(task, env.session_id(f"replay-{task.task_id}")).progress == \
            episodes[task.task_id].summary["final"]["check"]["progress"]


def test_replay_that_reaches_another_page_is_reported(recorded):
    env, tasks, episodes = recorded
    task = tasks[1]  # webshop: its first command types the query
    prefix, keys = _prefix_and_keys(episodes[task.task_id])
    assert prefix[0].startswith("TYPE [")
    changed = [prefix[0].rsplit("[", 1)[0] + "[something else]", *prefix[1:]]
    diverged, short = _restore(env, [(task, changed, keys, "diverged"), (task, prefix, keys[:-1], "short")])
    assert isinstance(diverged, ReplayDiverged) and "after 1 command" in str(diverged)
    assert diverged.step == 1 and diverged.expected == keys[1] and diverged.got != keys[1]
    assert isinstance(short, ValueError) and "expected state keys" in str(short)
