"""MiniWoB++ environment: the package's own task pages and rewards, solved by our oracle through our harness."""

from __future__ import annotations

import asyncio
import os
import random
import re
import urllib.request

import pytest

pytest.importorskip("playwright")
pytest.importorskip("miniwob")

from rollout import browser_path  # noqa: E402
from rollout.collect import CollectConfig, collect  # noqa: E402
from rollout.core import Command, Observation  # noqa: E402
from rollout.envs.miniwob import (
    LIMITS,
    SUPPORTED,
    MiniWoBEnv,
    NoOracleError,
    package_dir,  # noqa: E402
    query_text,
    registered_tasks,
    require_oracle,
)
from rollout.harness.runner import HarnessConfig  # noqa: E402
from rollout.policies.scripted import ScriptedPolicy  # noqa: E402
from rollout.recording import iter_episodes  # noqa: E402
from rollout.harness.execute import execute  # noqa: E402
from rollout.harness.guards import install_guards  # noqa: E402
from rollout.harness.observe import install, observe  # noqa: E402

TASKS = (
    "click-button",
    "click-link",
    "enter-text",
    "focus-text",
    "click-checkboxes",
    "click-dialog",
    "click-test-2",
    "click-button-sequence",
    "click-option",
    "enter-password",
    "login-user",
    "click-test",
)


class Harness:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.env = MiniWoBEnv(train_seeds=3, test_seeds=2)
        self.env.start()
        self.run(self._start())

    async def _start(self):
        from playwright.async_api import async_playwright

        self.pw = await async_playwright().start()
        self.browser = await self.pw.chromium.launch(
            executable_path=browser_path.chromium_executable(), args=list(browser_path.CHROMIUM_ARGS)
        )
        # One context for the module (the runner makes one per episode; reset() loads a fresh document anyway).
        self.ctx = await self.browser.new_context()
        await install(self.ctx)
        await install_guards(self.ctx, self.env.allowed_origins())
        self.page = await self.ctx.new_page()

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    async def episode(self, task, policy, max_steps=8):
        """reset → (observe → policy → execute → check)*; returns (check, commands, observations)."""
        page = self.page
        await self.env.reset(self.ctx, page, task, f"{task.task_id}/0")
        memory, cmds, seen = {}, [], []
        check = await self.env.check(page, task, "")
        assert not check.done and not check.success
        for _ in range(max_steps):
            obs = await observe(page, with_screenshot=False)
            seen.append(obs)
            cmd = policy(task, obs, memory)
            cmds.append(cmd)
            if cmd.name == "STOP":
                break
            await execute(page, cmd, allowed_origins=self.env.allowed_origins())
            check = await self.env.check(page, task, "")
            if check.done:
                break
        return check, cmds, seen

    def close(self):
        async def stop():
            await self.browser.close()
            await self.pw.stop()

        self.run(stop())
        self.loop.close()
        self.env.stop()


@pytest.fixture(scope="module")
def h():
    harness = Harness()
    yield harness
    harness.close()


def test_tasks_and_splits():
    env = MiniWoBEnv(task_names=["click-button", "enter-text"], train_seeds=5, test_seeds=3)
    train, test = env.tasks("train"), env.tasks("test")
    assert len(train) == 10 and len(test) == 6
    assert not {t.goal["seed"] for t in train} & {t.goal["seed"] for t in test}
    assert len({t.task_id for t in train + test}) == 16
    t = train[0]
    assert t.task_id == "miniwob/click-button/0" and t.env == "miniwob" and t.family == "click-button"
    assert t.start_path == "/miniwob/click-button.html" and t.optimal_steps == 1 and t.split == "train"
    with pytest.raises(ValueError):
        MiniWoBEnv(task_names=["no-such-task"])


def test_server_binds_loopback(h):
    origin = h.env.origin
    assert origin.startswith("http://127.0.0.1:")
    assert h.env._httpd.server_address[0] == "127.0.0.1"
    assert h.env.start() == origin  # idempotent
    with urllib.request.urlopen(origin + "/miniwob/click-button.html", timeout=5) as r:
        assert r.status == 200 and b"core.js" in r.read()


@pytest.mark.parametrize("name", TASKS)
def test_oracle_solves(h, name):
    tasks = [t for t in h.env.tasks("train") if t.family == name][:1] + [
        t for t in h.env.tasks("test") if t.family == name
    ][:1]
    for task in tasks:
        check, cmds, seen = h.run(h.episode(task, h.env.oracle))
        assert check.done and check.success and check.score == 1.0, (task.task_id, cmds, seen[-1].text)
        assert check.progress == "done=1,raw=1"
        assert all(c.name != "STOP" for c in cmds)
        if SUPPORTED[name]:
            assert len(cmds) == SUPPORTED[name], (task.task_id, cmds)
        assert query_text(seen[0])  # the utterance is the first text line


def test_seed_determines_problem(h):
    async def first_obs(task):
        await h.env.reset(h.ctx, h.page, task, "k")
        obs = await observe(h.page, with_screenshot=False)
        return obs, await h.env.utterance(h.page)

    tasks = [t for t in h.env.tasks("train") if t.family == "click-checkboxes"]
    o1, u1 = h.run(first_obs(tasks[0]))
    o2, u2 = h.run(first_obs(tasks[0]))
    assert o1.text == o2.text and u1 == u2 == query_text(o1)
    others = [h.run(first_obs(t))[0].text for t in tasks[1:]]
    assert any(o != o1.text for o in others)


def test_wrong_action_fails(h):
    def wrong_button(task, obs, memory):
        want = query_text(obs).split('"')[1]
        wrong = [e for e in obs.find(role="button") if e.name != want]
        return Command("CLICK", wrong[0].id) if wrong else Command("STOP", arg="")

    def wrong_text(task, obs, memory):
        if not memory:
            memory["typed"] = True
            return Command("TYPE", obs.find(role="textbox")[0].id, "not the name")
        return Command("CLICK", obs.find(role="button", name="Submit")[0].id)

    tried = 0
    for task in [t for t in h.env.tasks("train") + h.env.tasks("test") if t.family == "click-button"]:
        check, cmds, _ = h.run(h.episode(task, wrong_button, max_steps=1))
        if cmds[-1].name == "STOP":  # this seed's page has only right buttons
            continue
        tried += 1
        assert check.done and not check.success and check.score == 0.0 and check.progress == "done=1,raw=-1"
    assert tried >= 1
    task = [t for t in h.env.tasks("train") if t.family == "enter-text"][0]
    check, cmds, _ = h.run(h.episode(task, wrong_text))
    assert check.done and not check.success and check.score == 0.0


def test_mistake_then_oracle_recovers_or_fails(h):
    """mistake() gives a wrong command of the same kind; the episode's reward says so."""
    rng = random.Random(0)
    task = [t for t in h.env.tasks("train") if t.family == "click-test-2"][0]

    def policy(task, obs, memory):
        return h.env.mistake(task, obs, memory, rng) or h.env.oracle(task, obs, memory)

    check, cmds, _ = h.run(h.episode(task, policy))
    assert check.done and not check.success
    task = [t for t in h.env.tasks("train") if t.family == "enter-text"][0]
    check, cmds, _ = h.run(h.episode(task, policy))  # wrong text, then the oracle retypes it and submits
    assert check.done and check.success and [c.name for c in cmds] == ["TYPE", "TYPE", "CLICK"]


# ---------------------------------------------------------------- every registered task (docs/miniwob.md)
def test_every_registered_task_is_offered(h):
    with open(os.path.join(package_dir(), "registration.py"), encoding="utf-8") as f:
        registered = re.findall(r'id="miniwob/([^"]+)-v1"', f.read())
    names = registered_tasks()
    assert list(names) == registered and len(names) >= 100
    assert {"click-tab", "enter-text-2", "drag-box", "flight.AA"} <= set(names) and set(SUPPORTED) < set(names)
    assert MiniWoBEnv().task_names == list(SUPPORTED)  # the default: the oracle tasks, as the pipelines use them
    env = MiniWoBEnv("all", train_seeds=1, test_seeds=1)
    assert env.task_names == list(names)
    tasks = {t.family: t for t in env.tasks("test")}
    assert len(tasks) == len(names)
    assert tasks["click-tab"].optimal_steps == 0 and tasks["click-button"].optimal_steps == 1  # 0: unknown
    assert tasks["flight.AA"].start_path == "/flight/AA/wrapper.html"
    for t in (tasks["click-tab"], tasks["flight.AA"]):  # every start page is served
        with urllib.request.urlopen(h.env.origin + t.start_path, timeout=5) as r:
            assert r.status == 200 and b"core.js" in r.read()
    assert MiniWoBEnv(["enter-text-2", "click-button"]).task_names == ["enter-text-2", "click-button"]
    # the documented limits name registered tasks without an oracle, each with a kind and a reason
    assert set(LIMITS) <= set(names) - set(SUPPORTED)
    assert all(kind in ("cannot", "partly", "text-blind") and why for kind, why in LIMITS.values())


def test_unknown_task_names_are_refused_with_close_matches():
    with pytest.raises(ValueError, match=r"'click-tabz' \(did you mean click-tab\b"):
        MiniWoBEnv(task_names=["click-tabz", "click-button"])
    with pytest.raises(ValueError, match=r"'zzz-nothing'\. The miniwob package registers \d+ tasks"):
        MiniWoBEnv(task_names=["zzz-nothing"])
    with pytest.raises(ValueError, match="data_mode"):
        MiniWoBEnv(data_mode="dev")


def test_oracle_refuses_a_task_without_one():
    env = MiniWoBEnv(["click-tab", "click-button"], train_seeds=1)
    tab, button = env.tasks("train")
    obs = Observation(url="", title="", text='text "Click on Tab #2."', elements=())
    for call in (lambda: env.oracle(tab, obs, {}), lambda: env.mistake(tab, obs, {}, random.Random(0))):
        with pytest.raises(NoOracleError, match=r"click-tab have no scripted oracle .*model, http or scripted policy"):
            call()
    with pytest.raises(NoOracleError, match="click-tab"):
        require_oracle([tab, button])
    require_oracle([button])  # an oracle task passes


def _tab(obs, right: bool) -> str:
    want = re.search(r"Tab #\d", query_text(obs)).group(0)
    link = next(e for e in obs.find(role="link") if (e.name == want) == right)
    return f"CLICK [{link.id}]"


def _case(obs, right: bool) -> str:
    q = query_text(obs)
    name = re.search(r'"(.*)"', q).group(1)
    text = (name.upper() if "upper case" in q else name.lower()) if right else name
    return f"TYPE [{obs.find(role='textbox')[0].id}] [{text}]"


def _submit(obs) -> str:
    return f"CLICK [{obs.find(role='button', name='Submit')[0].id}]"


def _section(obs) -> str:
    header = next(e for e in obs.elements if e.name.startswith("Section #"))
    return f"CLICK [{header.id}]"


# task -> (a correct script, a wrong one): each command computed from the observation it is given
SCRIPTS = {
    "click-tab": ([lambda o: _tab(o, True)], [lambda o: _tab(o, False)]),
    "enter-text-2": ([lambda o: _case(o, True), _submit], [lambda o: _case(o, False), _submit]),
    "click-collapsible": ([_section, _submit], [_submit]),
}


@pytest.mark.slow  # one collection through the runner, 6 episodes in real Chromium: ~10 s on 2 cores
def test_tasks_without_an_oracle_run_with_a_scripted_policy(tmp_path):
    """The check says success for a correct script and failure for a wrong one, on tasks the oracle cannot play."""
    env = MiniWoBEnv(list(SCRIPTS), train_seeds=2)
    tasks = env.tasks("train")
    scripts = {t.task_id: SCRIPTS[t.family][t.goal["seed"]] for t in tasks}  # seed 0: correct, seed 1: wrong
    cfg = CollectConfig(
        out_dir=str(tmp_path), runs=1, contexts=2, progress=False, harness=HarnessConfig(max_steps=4, screenshots=False)
    )
    try:
        counts = collect(env, tasks, ScriptedPolicy(scripts), cfg)
    finally:
        env.stop()
    assert counts["success"] == 3 and counts["failure"] == 3 and counts.get("errored", 0) == 0, counts
    for ep in iter_episodes(str(tmp_path)):
        s, right = ep.summary, ep.summary["task_id"].endswith("/0")
        assert s["end_reason"] == "done" and s["optimal_steps"] == 0, s
        assert s["steps"] == len(scripts[s["task_id"]]) and all(st["error"] is None for st in ep.steps), ep.steps
        assert (s["success"], s["score"], s["final"]["check"]["progress"]) == (
            (True, 1.0, "done=1,raw=1") if right else (False, 0.0, "done=1,raw=-1")
        ), s
