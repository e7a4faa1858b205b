"""Evaluation in the browser (docs/method.md §8) with real Chromium on the embedded shop: the clean oracle's exact
numbers, a noisy oracle's seed-to-seed spread, per-episode redundancy against a hand count, a tiny random model end
to end, and the CLI (eval.json, resume, a bad --model)."""

import asyncio
import dataclasses
import json
import os

import pytest

from rollout.policies.prompt import PromptConfig
from rollout.envs.shop.env import ShopEnv
from experiment.evaluate import (
    EvalConfig,
    episode_redundancy,
    evaluate,
    load_policy,
    mean_ci95,
    redundant_flags,
    select_tasks,
)
from rollout.policies.oracle import OracleNoise, OraclePolicy
from rollout.policies.scripted import ScriptedPolicy
from rollout.recording import iter_episodes
from trees.build import TreeConfig, build_task_graph


@pytest.fixture(scope="module")
def shop():
    env = ShopEnv(seed=0)
    env.start()
    yield env
    env.stop()


SHORT = ("shop-webshop-test-0000", "shop-procedure-test-0000")  # 5 and 6 optimal steps (an option SELECT, a sort)


def pick(env, ids=SHORT):
    by_id = {t.task_id: t for t in env.tasks("test")}
    return [by_id[i] for i in ids]


def cfg(out, **kw):
    return EvalConfig(out_dir=str(out), progress=False, contexts=kw.pop("contexts", 4), **kw)


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_noisy_oracle_spreads_over_seeds(shop, tmp_path):
    tasks = pick(shop)
    res = evaluate(
        shop, tasks, OraclePolicy(shop, OracleNoise(0.5, 0.3, 0, 0)), cfg(tmp_path, seeds=(0, 1), max_steps=8)
    )
    per = res["per_seed"]
    assert res["episodes"] == 4 and res["errored"] == 0 and res["policy"] == "oracle"
    assert res["mean"]["success_rate"] < 1 and res["mean"]["redundant_steps"] > 0
    assert len({(s["success_rate"], s["avg_steps"], s["redundant_steps"]) for s in per}) == 2
    assert any(res["ci95"][m]["half_width"] > 0 for m in ("success_rate", "avg_steps", "redundant_steps"))
    for m in ("success_rate", "avg_steps", "redundant_steps"):  # the interval is around the mean of the seeds
        mean = sum(s[m] for s in per) / 2
        assert res["mean"][m] == pytest.approx(mean)
        assert res["ci95"][m]["low"] <= mean <= res["ci95"][m]["high"]
    for s in per:  # every redundant step has a cause the oracle recorded: a detour (link, then GO_BACK)
        assert s["redundant_steps"] > 0
    loops = [
        st
        for e in iter_episodes(str(tmp_path / "seed0"))
        for st in e.steps
        if st["policy_info"].get("mistake") == "loop"
    ]
    assert loops
    with open(tmp_path / "eval.json") as f:
        assert json.load(f) == res
    assert sorted(os.listdir(tmp_path)) == ["eval.json", "seed0", "seed1"]


def test_select_tasks(shop):
    assert [t.family for t in select_tasks(shop, "test", 3)] == ["webshop", "procedure", "multi_cart"]
    assert [t.task_id for t in select_tasks(shop, "test", task_ids=SHORT[::-1])] == list(SHORT[::-1])
    assert {t.family for t in select_tasks(shop, "test", families=["procedure"])} == {"procedure"}
    with pytest.raises(ValueError, match="unknown task families"):
        select_tasks(shop, "test", families=["nope"])
    with pytest.raises(ValueError, match="num_tasks=-1"):  # not "all but the last"
        select_tasks(shop, "test", -1)


def test_mean_ci95():
    assert mean_ci95([0.5]) == (0.5, None)
    m, ci = mean_ci95([1.0, 2.0, 3.0])  # sd = 1, t(0.975, 2) = 4.3027
    assert m == 2.0 and ci["half_width"] == pytest.approx(4.302653 / 3**0.5, rel=1e-5)


def test_redundancy_matches_a_hand_count(shop, tmp_path):
    task = pick(shop)[0]

    def cart(obs):
        return f"Command: CLICK [{obs.find(role='link', name='Cart')[0].id}]"

    def home(obs):  # already home: the click reloads the same page
        return f"Command: CLICK [{obs.find(role='link', name='Home')[0].id}]"

    script = [cart, "Command: GO_BACK", home, "Command: STOP []"]
    res = evaluate(shop, [task], ScriptedPolicy(script), cfg(tmp_path, seeds=(0,), contexts=1))
    (ep,) = list(iter_episodes(str(tmp_path / "seed0")))
    # by hand: s0 home -> cart (new), GO_BACK -> home again (a revisit), CLICK Home -> home again (a revisit), STOP
    urls = [s["norm_url"] for s in ep.steps]
    assert urls[0] != urls[1] and urls[2] == urls[0] and urls[3] == urls[0]
    graph = build_task_graph([ep], task, TreeConfig())  # the training tree's rule, on this episode alone
    assert [graph.rewards[ref]["r_red"] for ref in sorted(graph.rewards)] == [0.0, -1.0, -1.0, 0.0]
    assert redundant_flags(ep, task) == [False, True, True, False]
    assert episode_redundancy(ep, task, "page") == episode_redundancy(ep, task, "either") == 2
    # "strict" keeps the reloaded page apart (the reload extended the action sequence): only the GO_BACK counts
    assert redundant_flags(ep, task, "strict") == [False, True, False, False]
    s = res["per_seed"][0]
    assert s["redundant_steps"] == 2 and s["avg_steps"] == 4 and s["success_rate"] == 0.0
    assert res["ci95"]["redundant_steps"] is None and res["mean"]["redundant_steps"] == 2


def test_tiny_random_model_end_to_end(shop, tmp_path, spm_tokenizer):
    from rollout.policies.model import ModelPolicy
    from tgpo_jax.models.config import tiny_config
    from tgpo_jax.models.sampler import Sampler, SamplingParams
    from tgpo_jax.models.transformer import init_model

    mcfg = tiny_config(
        "llama", vocab_size=len(spm_tokenizer), eos_token_id=spm_tokenizer.eos_token_id, max_position_embeddings=2048
    )  # the system text + task alone pass 1,000 of its tokens
    policy = ModelPolicy(
        Sampler(init_model(mcfg, seed=0), spm_tokenizer, bucket=512),
        spm_tokenizer,
        prompt=PromptConfig(budget_tokens=400),
        params=SamplingParams(temperature=0.0, max_tokens=8),
    )
    tasks = pick(shop)

    async def go():
        try:
            from experiment.evaluate import evaluate_async

            return await evaluate_async(shop, tasks, policy, cfg(tmp_path, seeds=(0,), max_steps=2, contexts=2))
        finally:
            await policy.close()

    res = asyncio.run(go())
    assert res["errored"] == 0 and res["episodes"] == 2 and res["policy"] == "model"
    (s,) = res["per_seed"]
    assert s["success_rate"] == 0.0 and s["avg_steps"] == 2.0 and 0 <= s["redundant_steps"] <= 2
    assert res["ci95"]["avg_steps"] is None  # one seed: no interval
    steps = [st for e in iter_episodes(str(tmp_path / "seed0")) for st in e.steps]
    assert len(steps) == 4 and all(st["num_tokens"] >= 1 for st in steps)


def test_load_policy_dispatch_and_errors(shop, tmp_path):
    from tgpo_jax.models.sampler import SamplingParams

    p = SamplingParams(temperature=0.0)
    o = load_policy("oracle:0.1,0.2,0,0.05", params=p, env=shop)
    assert isinstance(o, OraclePolicy) and o.noise == OracleNoise(0.1, 0.2, 0.0, 0.05)
    assert load_policy("oracle", params=p, env=shop).noise == OracleNoise()
    assert load_policy("oracle:0.1,0.2,0,0.05,0.5", params=p, env=shop).noise.recover == 0.5
    with pytest.raises(ValueError, match="needs the environment"):
        load_policy("oracle", params=p)
    assert load_policy("oracle:0.1,0.2,0,0.05,0.5,0.3", params=p, env=shop).noise.repeat == 0.3
    assert load_policy("oracle:0.1,0.2,0,0.05,0.5,0.3,0.4", params=p, env=shop).noise.wrong_button == 0.4
    assert load_policy("oracle:0.1,0.2,0,0.05,0.5,0.3,0.4,0.6", params=p, env=shop).noise.wrong_sort == 0.6
    for bad in ("oracle:0.1,0.2", "oracle:0.1,0.2,0,0.05,0.5,0.3,0.1,0.2,0.3"):
        with pytest.raises(ValueError, match="four to eight rates"):
            load_policy(bad, params=p, env=shop)
    named = load_policy("oracle:loop=0.2, wrong_sort=0.6,wrong_choice=0.1", params=p, env=shop).noise
    assert named == OracleNoise(wrong_choice=0.1, loop=0.2, wrong_sort=0.6)
    for bad, why in (
        ("oracle:loop=0.2,0.1", "all named"),
        ("oracle:lop=0.2", r"unknown oracle rate\(s\) \['lop'\]; known: wrong_choice, loop"),
        ("oracle:loop=0.2,loop=0.3", "named twice"),
        ("oracle:loop=x", "must be numbers"),
        ("oracle:loop=1.5", r"loop=1.5 must be in \[0, 1\]"),
    ):
        with pytest.raises(ValueError, match=why):
            load_policy(bad, params=p, env=shop)
    missing = str(tmp_path / "no-such-run")
    with pytest.raises(FileNotFoundError, match="no-such-run.*nothing exists there.*training run directory"):
        load_policy(missing, params=p)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="without config.json"):
        load_policy(str(tmp_path / "empty"), params=p)


def test_the_oracle_and_a_saved_model_carry_their_thought_wording(shop, tmp_path):
    """The oracle words its thoughts as told (plain by default, its ids where page_ids puts them), keeps that under
    another seed; a pipeline model's policy.json records the wording it trained on, and one from before the setting
    reads as scratch_copy (every such run's wording)."""
    import recipes
    from configs.pipeline import get_config
    from experiment.evaluate import policy_for_seed, trained_thoughts
    from experiment.outputs import save_policy_file
    from rollout.policies.prompt import saved_prompt
    from tgpo_jax.models.sampler import SamplingParams

    recipes.register_all()
    p = SamplingParams(temperature=0.0)
    o = load_policy("oracle", params=p, env=shop)
    assert (o.thoughts, o.page_ids) == ("plain", "before")
    c = load_policy("oracle:0.1,0.2,0,0.05", params=p, env=shop, thoughts="scratch_copy", page_ids="after")
    s = policy_for_seed(c, 3)
    assert (s.seed, s.noise, s.thoughts, s.page_ids) == (3, c.noise, "scratch_copy", "after")
    with pytest.raises(ValueError, match=r"thoughts='nope': expected one of \[.*'plain'"):
        load_policy("oracle", params=p, env=shop, thoughts="nope")
    with pytest.raises(ValueError, match="page_ids='middle'"):
        load_policy("oracle", params=p, env=shop, page_ids="middle")
    for preset, wording in (("default", "scratch_copy"), ("smollm2", "plain")):
        save_policy_file(get_config(preset), str(tmp_path))
        assert saved_prompt(str(tmp_path))["thoughts"] == trained_thoughts(saved_prompt(str(tmp_path))) == wording
        assert saved_prompt(str(tmp_path))["format"] == 1
    assert trained_thoughts({}) == "plain"  # no file
    older = tmp_path / "older"  # a policy.json from before its format field: one upgrade reads it
    older.mkdir()
    (older / "policy.json").write_text(json.dumps({"prompt_style": "compact", "item_names": "number"}))
    assert saved_prompt(str(older)) == {
        "format": 1,
        "prompt_style": "compact",
        "item_names": "number",
        "thoughts": "scratch_copy",  # every such run's wording
        "shop": {"item_names": "number"},
    }
    (older / "policy.json").write_text(json.dumps({"format": 2, "prompt_style": "compact"}))
    with pytest.raises(ValueError, match=r"older/policy.json: policy file format 2; this reader knows 1"):
        saved_prompt(str(older))
    (older / "policy.json").write_text("{")
    with pytest.raises(ValueError, match=r"older/policy.json: not JSON"):
        saved_prompt(str(older))


def _cli(*args):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-m", "launch.evaluate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_cli_clean_oracle_exact_numbers_and_resume(tmp_path):
    out = str(tmp_path / "ev")
    args = [
        "--model=oracle",
        "--env=shop",
        f"--task_ids={','.join(SHORT)}",
        "--seeds=0,1",
        "--contexts=2",
        "--max_steps=10",
        f"--out={out}",
    ]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout[r.stdout.index("{") :])
    with open(os.path.join(out, "eval.json")) as f:
        assert json.load(f) == res
    lengths = {t.task_id: t.optimal_steps for t in ShopEnv().tasks("test")}
    optimal = sum(lengths[t] for t in SHORT) / len(SHORT)  # the clean oracle takes each task's optimal path
    assert res["policy"] == "oracle" and res["tasks"] == 2 and res["episodes"] == 4 and res["errored"] == 0
    assert res["config"]["split"] == "test" and res["task_ids"] == list(SHORT)
    for s in res["per_seed"]:
        assert s["success_rate"] == 1.0 and s["redundant_steps"] == 0 and s["avg_steps"] == optimal, s
        assert s["avg_optimal_steps"] == optimal and set(s["by_family"]) == {"webshop", "procedure"}
        assert s["collect"]["success"] == 2
    assert res["mean"] == {"success_rate": 1.0, "avg_steps": optimal, "redundant_steps": 0.0, "avg_score": 1.0}
    for m in ("success_rate", "avg_steps", "redundant_steps"):
        assert res["ci95"][m]["half_width"] == 0.0
    again = _cli(*args)  # resumes: every episode is skipped, nothing runs again
    assert again.returncode == 0, again.stderr[-3000:]
    res2 = json.loads(again.stdout[again.stdout.index("{") :])
    assert all(s["collect"].get("skipped") == 2 and "success" not in s["collect"] for s in res2["per_seed"])
    assert res2["mean"] == res["mean"] and res2["per_seed"][0]["episodes"] == 2
    tasks = {t.task_id: t for t in pick(ShopEnv(seed=0))}
    marked = titled = 0
    for e in iter_episodes(os.path.join(out, "seed0")):  # the option SELECTs and the sort are not revisits
        assert redundant_flags(e, tasks[e.task_id]) == [False] * len(e.steps)
        for a, b in zip(e.steps, e.steps[1:]):  # the page marks a set combobox, also one set to its shown value
            if a["command_name"] == "SELECT":
                lines = b["observation"].splitlines()
                box = a["command"].split("]")[0] + "] combobox"  # "SELECT [6] [green]" -> "[6] combobox"
                i = next(k for k, ln in enumerate(lines) if ln.startswith(box.split(" ", 1)[1]))
                assert lines[i + 1] == 'text "chosen"', lines
                assert b["observation"].count('text "chosen"') == a["observation"].count('text "chosen"') + 1
                # the title says so once every combobox is set this visit (after the third SELECT), not before
                done = b["observation"].count('text "chosen"') == b["observation"].count("] combobox ")
                assert lines[1].endswith("(all options chosen)") == done and lines[1].startswith("Title: "), lines
                marked += 1
                titled += done
    assert marked == 3 and titled == 1  # color, model and count ("1 pack", the shown value) in the webshop task
    bad = _cli(f"--model={tmp_path / 'nowhere'}", f"--out={out}-bad")
    assert bad.returncode != 0 and "cannot load a policy from" in bad.stderr and "nowhere" in bad.stderr
    assert not os.path.exists(f"{out}-bad")


@pytest.mark.slow
def test_trained_run_directory_as_policy(shop, tmp_path):
    """A tiny LoRA run (2 SFT steps, a checkpoint after each): load_policy restores a chosen step, folds the
    adapters and evaluates it in the browser."""
    from configs import sft
    from conftest import CORPUS
    from rollout.policies.model import ModelPolicy
    from tgpo_jax.data.io import write_dataset
    from tgpo_jax.data.synthetic import ITEMS, synthetic_nodes
    from tgpo_jax.models.sampler import SamplingParams
    from tgpo_jax.models.tokenizer import train_sentencepiece
    from tgpo_jax.training.loop import train

    tok = train_sentencepiece(CORPUS * 20 + [" ".join(ITEMS)] * 20, str(tmp_path / "tok"), vocab_size=400)
    write_dataset(synthetic_nodes(16, seed=1), str(tmp_path / "train"))
    c = sft.get_config("tiny")
    c.model.tokenizer, c.model.lora_rank = tok, 4
    c.data.train_dir, c.train.output_dir = str(tmp_path / "train"), str(tmp_path / "run")
    c.train.max_steps, c.train.batch_size, c.train.save_every = 2, 4, 1
    c.train.progress, c.train.async_checkpoint = False, False
    c.optim.learning_rate, c.optim.warmup_steps = 1e-3, 0
    c.mesh.shape = (1, 1, 1)
    train(c)
    run = str(tmp_path / "run")
    params = SamplingParams(temperature=0.0, max_tokens=8)
    with pytest.raises(ValueError, match="available steps"):
        load_policy(run, params=params, step=7)
    policy = load_policy(run, params=params, step=1, budget_tokens=400)
    assert isinstance(policy, ModelPolicy) and policy.name == f"model:{run}@1"
    assert policy.sampler.cfg.lora_rank == 0  # adapters folded in
    latest = load_policy(run, params=params, budget_tokens=100)
    assert latest.name.endswith("@2")
    # the tiny preset's 512 positions hold no full prompt
    latest.prompt = dataclasses.replace(latest.prompt, system_prompt="Answer with one command.")

    async def go():
        try:
            from experiment.evaluate import evaluate_async

            return await evaluate_async(shop, pick(shop)[:1], latest, cfg(tmp_path / "ev", seeds=(0,), max_steps=1))
        finally:
            await latest.close()

    res = asyncio.run(go())
    assert res["errored"] == 0, res
    assert res["episodes"] == 1 and res["per_seed"][0]["avg_steps"] == 1.0 and res["policy"] == latest.name
