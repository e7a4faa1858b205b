"""The harness end to end with real Chromium on the embedded shop: oracle success, determinism across
parallel contexts, typed errors in the next observation, the GOTO allowlist, a killed browser, resume."""

import asyncio
import json
import os

import psutil
import pytest

from rollout.policies.prompt import PromptConfig
from rollout.collect import CollectConfig, CollectionAborted, collect, shard_episodes
from rollout.core import ERROR_KINDS
from rollout.envs.shop.env import ShopEnv
from rollout.harness.runner import HarnessConfig
from rollout.policies.oracle import OracleNoise, OraclePolicy
from rollout.policies.scripted import ScriptedPolicy
from rollout.recording import episode_dir, iter_episodes, read_summary

FAST = HarnessConfig(screenshots=False, max_steps=40)


@pytest.fixture(scope="module")
def shop():
    env = ShopEnv(seed=0)
    env.start()
    yield env
    env.stop()


def sample(env, split="train", per_family=2, families=("webshop", "procedure", "multi_cart")):
    out, seen = [], {}
    for t in env.tasks(split):
        if t.family in families and seen.get(t.family, 0) < per_family:
            seen[t.family] = seen.get(t.family, 0) + 1
            out.append(t)
    return out


def run(env, tasks, policy, out, **kw):
    cfg = CollectConfig(out_dir=str(out), progress=False, harness=kw.pop("harness", FAST), **kw)
    return collect(env, tasks, policy, cfg)


def trajectories(out):
    return {
        (e.summary["task_id"], e.summary["run"]): (
            [s["output"] for s in e.steps],
            [s["phash"] for s in e.steps],
            [s["check"]["progress"] for s in e.steps],
            e.summary["status"],
        )
        for e in iter_episodes(str(out))
    }


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_clean_oracle_solves_every_family_and_wrong_choices_fail(shop, tmp_path):
    tasks = sample(shop, "train", 1) + sample(shop, "test", 1)
    assert {t.family for t in tasks} == {"webshop", "procedure", "multi_cart"}
    counts = run(shop, tasks, OraclePolicy(shop), tmp_path / "clean", runs=1, contexts=2)
    assert counts["success"] == len(tasks), counts
    for e in iter_episodes(str(tmp_path / "clean")):
        task = next(t for t in tasks if t.task_id == e.task_id)
        assert e.summary["steps"] == task.optimal_steps, (e.task_id, e.summary["steps"], task.optimal_steps)
        assert e.summary["score"] == 1.0
        for s in e.steps:
            assert s["format_ok"] and s["error"] is None, s
            assert s["effect"] is None or s["effect"]["expected_change"], s
    # Always taking the wrong item / option: every task fails (webshop partially scored below 1).
    wrong = run(shop, tasks, OraclePolicy(shop, OracleNoise(wrong_choice=1.0)), tmp_path / "wrong", runs=1, contexts=2)
    assert wrong["failure"] == len(tasks), wrong
    for e in iter_episodes(str(tmp_path / "wrong")):
        assert e.summary["score"] < 1.0
        assert any(s["policy_info"].get("mistake") == "wrong_choice" for s in e.steps)


SHORT = ("webshop", "procedure")  # the multi-item family is long: the oracle test above covers it


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_same_seed_same_trajectories_with_1_or_4_contexts(shop, tmp_path):
    tasks = sample(shop, "train", 1, SHORT)
    noise = OracleNoise(wrong_choice=0.25, loop=0.2, malformed=0.1, premature_stop=0.02)
    run(shop, tasks, OraclePolicy(shop, noise, seed=3), tmp_path / "c1", runs=3, seed=3, contexts=1)
    run(shop, tasks, OraclePolicy(shop, noise, seed=3), tmp_path / "c4", runs=3, seed=3, contexts=4)
    a, b = trajectories(tmp_path / "c1"), trajectories(tmp_path / "c4")
    assert len(a) == 3 * len(tasks) and a == b
    # the noise does something: runs of one task differ, and mistakes of several kinds occurred
    assert len({tuple(v[0]) for k, v in a.items() if k[0] == tasks[0].task_id}) > 1
    run(shop, tasks, OraclePolicy(shop, noise, seed=4), tmp_path / "s4", runs=3, seed=4, contexts=4)
    assert trajectories(tmp_path / "s4") != a


def test_each_error_kind_reaches_the_next_observation(shop, tmp_path):
    task = sample(shop, "train", 1)[0]
    script = [
        "Thought: x\nCommand: JUMP [1]",  # unknown_command
        "Command: CLICK []",  # missing_id
        "Command: TYPE [5] hello",  # malformed_command
        "Command: CLICK [9999]",  # no_such_element
        lambda obs: f"Command: SELECT [{obs.find(role='link')[0].id}] [x]",  # invalid_target
        "Command: GOTO [http://example.com/]",  # navigation_blocked
        "Command: GOTO [file:///etc/passwd]",  # navigation_blocked (scheme)
        "Command: GO_BACK",  # invalid_target: no history
        "Command: STOP []",
    ]
    run(shop, [task], ScriptedPolicy(script), tmp_path, runs=1, contexts=1)
    (e,) = list(iter_episodes(str(tmp_path)))
    kinds = [s["error"]["kind"] if s["error"] else None for s in e.steps]
    assert kinds == [
        "unknown_command",
        "missing_id",
        "malformed_command",
        "no_such_element",
        "invalid_target",
        "navigation_blocked",
        "navigation_blocked",
        "invalid_target",
        None,
    ]
    assert set(kinds[:-1]) <= set(ERROR_KINDS)
    for prev, step in zip(e.steps, e.steps[1:]):
        assert step["obs_error"]["kind"] == prev["error"]["kind"]
        assert f"({prev['error']['kind']})" in step["observation"]
    assert [s["format_ok"] for s in e.steps] == [False, False, False] + [True] * 6
    # the site's own URLs are recorded site-relative: the page text does not carry the run's port
    assert (
        e.summary["end_reason"] == "stop"
        and e.steps[-1]["url"] == "/"
        and shop.origin not in e.steps[-1]["observation"]
    )


def test_site_listens_on_loopback_only(shop):
    server = shop.server if hasattr(shop, "server") else None
    assert shop.origin.startswith("http://127.0.0.1:")
    port = int(shop.origin.rsplit(":", 1)[1])
    listeners = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == "LISTEN"]
    assert listeners and all(c.laddr.ip == "127.0.0.1" for c in listeners), (listeners, server)


def _kill_chromium() -> int:
    """SIGKILL the browser process(es) this test process started (not other Chromiums on the machine)."""
    killed = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name().lower() and not any(a.startswith("--type=") for a in p.cmdline()):
                p.kill()
                killed += 1
        except psutil.Error:  # exited meanwhile
            pass
    return killed


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_killed_browser_marks_hit_episodes_and_resume_completes(shop, tmp_path):
    tasks = sample(shop, "train", 1, SHORT)
    policy = OraclePolicy(shop, OracleNoise(loop=0.2), seed=1)
    steps_seen = []

    class Killer:
        name = "oracle"

        async def act(self, request):
            steps_seen.append(request.episode_key)
            if len(steps_seen) == 10:  # mid-collection, with several episodes in flight
                assert _kill_chromium() >= 1
            return await policy.act(request)

        async def close(self):
            pass

    out = tmp_path / "crash"
    counts = run(shop, tasks, Killer(), out, runs=3, contexts=4, seed=1)
    assert counts["errored"] >= 1 and counts["crashes"] >= 1 and counts["launches"] >= 2, counts
    assert counts.get("success", 0) + counts.get("failure", 0) + counts["errored"] == 3 * len(tasks)
    errored = [e for e in iter_episodes(str(out), include_errored=True) if e.summary["status"] == "errored"]
    complete = [e for e in iter_episodes(str(out))]
    assert len(errored) == counts["errored"] and len(complete) == 3 * len(tasks) - counts["errored"]
    for e in errored:
        assert e.summary["error"]["type"] and e.summary["end_reason"] == "error"
    for e in complete:  # untouched episodes are whole: every step recorded, final state present
        assert len(e.steps) == e.summary["steps"] and e.summary["final"]["url"]
    # Resume: finished episodes are skipped, the errored ones re-run, and they match an uninterrupted run.
    again = run(shop, tasks, OraclePolicy(shop, OracleNoise(loop=0.2), seed=1), out, runs=3, contexts=4, seed=1)
    assert again["skipped"] == len(complete) and again.get("errored", 0) == 0
    ref = tmp_path / "ref"
    run(shop, tasks, OraclePolicy(shop, OracleNoise(loop=0.2), seed=1), ref, runs=3, contexts=4, seed=1)
    assert trajectories(out) == trajectories(ref)


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_damaged_summaries_are_moved_aside_and_run_again_on_resume(shop, tmp_path):
    tasks = sample(shop, "train", 1, SHORT)
    out, ref = tmp_path / "out", tmp_path / "ref"
    run(shop, tasks, OraclePolicy(shop, OracleNoise(loop=0.2), seed=1), ref, runs=2, contexts=2, seed=1)
    run(shop, tasks, OraclePolicy(shop, OracleNoise(loop=0.2), seed=1), out, runs=2, contexts=2, seed=1)
    cut = out / "episodes" / os.listdir(out / "episodes")[0] / "000" / "summary.json"
    cut.write_text(cut.read_text()[:40])  # a kill mid-write
    no_status = out / "episodes" / os.listdir(out / "episodes")[1] / "001" / "summary.json"
    no_status.write_text(json.dumps({k: v for k, v in json.loads(no_status.read_text()).items() if k != "status"}))
    again = run(shop, tasks, OraclePolicy(shop, OracleNoise(loop=0.2), seed=1), out, runs=2, contexts=2, seed=1)
    assert again["skipped"] == 2 * len(tasks) - 2 and again.get("success", 0) + again.get("failure", 0) == 2
    assert len(list((out / "damaged").rglob("summary.json"))) == 2  # kept, out of the way
    assert trajectories(out) == trajectories(ref)


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_policy_errors_are_contained_then_abort_the_run(shop, tmp_path):
    tasks = sample(shop, "train", 1, SHORT)

    class Flaky:
        name = "flaky"

        async def act(self, request):
            if request.task.task_id == tasks[0].task_id:
                raise RuntimeError("policy server went away")
            return await oracle.act(request)

        async def close(self):
            pass

    oracle = OraclePolicy(shop)
    counts = run(shop, tasks, Flaky(), tmp_path / "flaky", runs=1, contexts=2)
    assert counts["errored"] == 1 and counts["success"] == len(tasks) - 1
    s = read_summary(episode_dir(str(tmp_path / "flaky"), tasks[0].task_id, 0))
    assert s["status"] == "errored" and "policy server went away" in s["error"]["message"]

    class Broken(Flaky):
        async def act(self, request):
            raise RuntimeError("down")

    with pytest.raises(CollectionAborted, match="in a row errored"):
        run(shop, tasks, Broken(), tmp_path / "broken", runs=2, contexts=1, max_consecutive_errors=3)

    class Hangs(Flaky):
        async def act(self, request):
            await asyncio.sleep(600)  # a policy server that never answers

    counts = run(
        shop,
        tasks[:1],
        Hangs(),
        tmp_path / "hang",
        runs=1,
        contexts=1,
        harness=HarnessConfig(screenshots=False, step_timeout_s=4.0),
    )
    s = read_summary(episode_dir(str(tmp_path / "hang"), tasks[0].task_id, 0))
    assert counts["errored"] == 1 and s["error"]["type"] == "watchdog" and s["steps"] == 0


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_shards_partition_the_episodes(shop, tmp_path):
    tasks = sample(shop, "train", 1, SHORT)
    parts = [shard_episodes(tasks, 3, i, 2) for i in range(2)]
    keys = [(t.task_id, r) for p in parts for t, r in p]
    assert sorted(keys) == sorted((t.task_id, r) for t in tasks for r in range(3)) and len(set(keys)) == len(keys)
    for i in range(2):
        counts = run(
            shop,
            tasks,
            OraclePolicy(shop),
            tmp_path,
            runs=3,
            contexts=2,
            shard_index=i,
            num_shards=2,
            harness=HarnessConfig(screenshots=False, recycle_after=1),
        )
        assert counts["launches"] == 3 and counts["success"] == 3  # a fresh browser after every episode
    assert len(list(iter_episodes(str(tmp_path)))) == 3 * len(tasks)
    with open(tmp_path / "collection.json") as f:
        assert json.load(f)["runs"] == 3
    with pytest.raises(ValueError, match="other settings"):
        run(shop, tasks, OraclePolicy(shop), tmp_path, runs=4, contexts=2)


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_chinese_catalogue_oracle(tmp_path):
    with ShopEnv(seed=0, locale="zh") as zh:
        tasks = sample(zh, "train", 1, SHORT)
        counts = run(zh, tasks, OraclePolicy(zh), tmp_path, runs=1, contexts=2)
        assert counts["success"] == len(tasks), counts
        e = next(iter_episodes(str(tmp_path)))
        assert any("\u4e00" <= ch <= "\u9fff" for ch in e.steps[0]["observation"])  # the page is Chinese


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_model_policy_records_behaviour_logprobs(shop, tmp_path, spm_tokenizer):
    import math

    from rollout.policies.model import ModelPolicy
    from tgpo_jax.models.config import tiny_config
    from tgpo_jax.models.sampler import Sampler, SamplingParams
    from tgpo_jax.models.transformer import init_model

    # the full system text and the task are never cut; with this tiny vocabulary a prompt runs past 1,024 tokens
    cfg = tiny_config(
        "llama", vocab_size=len(spm_tokenizer), eos_token_id=spm_tokenizer.eos_token_id, max_position_embeddings=2048
    )
    policy = ModelPolicy(
        Sampler(init_model(cfg, seed=0), spm_tokenizer, bucket=512),
        spm_tokenizer,
        prompt=PromptConfig(budget_tokens=400),
        params=SamplingParams(temperature=1.0, max_tokens=8, seed=0),
    )
    tasks = sample(shop, "train", 1, SHORT)
    counts = run(
        shop, tasks, policy, tmp_path, runs=1, contexts=2, harness=HarnessConfig(screenshots=False, max_steps=2)
    )
    asyncio.run(policy.close())
    assert counts.get("errored", 0) == 0, counts
    steps = [s for e in iter_episodes(str(tmp_path)) for s in e.steps]
    assert len(steps) == 2 * len(tasks)
    for s in steps:  # a random model writes nonsense: recorded with its typed error and its log-prob
        assert s["num_tokens"] >= 1 and math.isfinite(s["logprob"]) and s["logprob"] < 0
        assert s["format_ok"] or s["error"] is not None


def _cli(*args):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-m", "launch.collect", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_collect_cli_on_miniwob_resumes(tmp_path):
    out = str(tmp_path / "mw")
    args = [
        "--env=miniwob",
        "--split=test",
        "--families=click-button,enter-text,click-checkboxes",
        "--num_tasks=3",
        "--runs=2",
        "--contexts=2",
        "--wrong_choice=0",
        "--loop=0",
        "--malformed=0",
        "--premature_stop=0",
        f"--out={out}",
        "--noscreenshots",
    ]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = json.loads(r.stdout[r.stdout.index("{") :])
    assert counts["success"] == 6 and counts["total"] == 6, counts
    eps = list(iter_episodes(out))
    assert {e.summary["family"] for e in eps} == {"click-button", "enter-text", "click-checkboxes"}
    assert all(e.summary["split"] == "test" and e.summary["score"] == 1.0 for e in eps)
    again = _cli(*args)
    assert again.returncode == 0 and json.loads(again.stdout[again.stdout.index("{") :])["skipped"] == 6
    bad = _cli("--env=miniwob", "--families=no-such-task", f"--out={out}")
    assert bad.returncode != 0 and "unknown task families" in bad.stderr
