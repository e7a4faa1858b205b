"""Restoring a search node by replaying its command prefix in a fresh browser context, on the embedded
shop with real Chromium: the exact recorded state is reached, and a replay that reaches another page is reported."""

import asyncio
import json
import os

import pytest

from rollout.policies.prompt import PromptConfig
from rollout.collect import CollectConfig, collect
from rollout.envs.shop.env import ShopEnv
from rollout.harness.pool import BrowserPool
from rollout.harness.runner import HarnessConfig
from rollout.policies.oracle import OraclePolicy
from rollout.policies.scripted import GoldOrRandom, gold_map
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
        jobs += [
            (task, prefix, keys, f"replay-{task.task_id}"),
            (task, prefix[:half], keys[: half + 1], f"half-{task.task_id}"),
        ]
        want += [keys[-1], keys[half]]
    assert _restore(env, jobs) == want
    for task in tasks:  # the cart is the session's, server-side: the fresh session holds what the recorded one held
        assert (
            env.check_session(task, env.session_id(f"replay-{task.task_id}")).progress
            == episodes[task.task_id].summary["final"]["check"]["progress"]
        )


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


def test_search_finds_the_gold_path_and_its_values_match_the_episodes(recorded, tmp_path):
    from rollout.search.driver import LogprobCritic, SearchConfig, search_collect, tree_path
    from rollout.search.mcts import node_pairs

    env, tasks, episodes = recorded
    task = tasks[1]  # webshop: 5 steps on the gold path
    gold_ep = episodes[task.task_id]
    gold = gold_map([gold_ep])
    policy = GoldOrRandom(gold, env.essential_query_params())
    harness = HarnessConfig(screenshots=False, max_steps=len(gold_ep.steps) + 1)
    cfg = SearchConfig(simulations=8, k=3, c=1.0, alpha=0.5)
    out = str(tmp_path / "search")

    from rollout.recording import episode_dir

    os.makedirs(episode_dir(out, task.task_id, 3))  # left by an interrupted search: set aside, searched anew
    counts = asyncio.run(search_collect(env, [task], policy, LogprobCritic(), cfg, harness, out, progress=False))
    assert counts["diverged"] == 0 and counts["errored"] == 0 and counts["searched"] == 1, counts
    assert counts["episodes"] + counts["terminal_reuse"] == 8
    eps = list(iter_episodes(out))
    assert len(eps) == counts["episodes"] and sum(e.summary["success"] for e in eps) == counts["success"] >= 1
    assert (
        asyncio.run(search_collect(env, [task], policy, LogprobCritic(), cfg, harness, out, progress=False))["skipped"]
        == 1
    )  # resumed: the finished task is not re-run
    with pytest.raises(ValueError, match="other settings.*simulations"):
        asyncio.run(
            search_collect(
                env, [task], policy, LogprobCritic(), SearchConfig(simulations=9), harness, out, progress=False
            )
        )
    s = _Loaded(json.load(open(tree_path(out, task.task_id))))
    root = s.root
    assert root.key == key_of(gold_ep.steps[0]["norm_url"], gold_ep.steps[0]["observation"])
    assert root.visits == 8  # every simulation backs up through one of the root's edges
    # each root edge's Q̃ is the success rate of the episodes that began with its command (terminal reuses aside)
    for e in root.edges:
        if e.visits and e.child is not None and not e.child.terminal:
            firsts = [ep.summary["success"] for ep in eps if ep.steps[0]["command"] == e.command]
            assert len(firsts) == e.visits and e.q_search == pytest.approx(sum(firsts) / len(firsts))
    gold_first = gold_ep.steps[0]["command"]
    by_cmd = {e.command: e for e in root.edges}
    assert gold_first in by_cmd and by_cmd[gold_first].q_search > 0
    # by search value, every root pair with the gold command prefers it
    for p in node_pairs(root, alpha=1.0, theta=0.0):
        if gold_first in (root.edges[p.chosen].command, root.edges[p.rejected].command):
            assert root.edges[p.chosen].command == gold_first
    assert s.stats["simulations"] == 8 and os.path.isdir(os.path.join(out, "damaged"))


class _Loaded:
    """A written search tree read back into nodes and edges (what the test checks is what was saved)."""

    def __init__(self, tree):
        from rollout.search.mcts import Edge, SearchNode

        nodes = {
            n["id"]: SearchNode(key=n["key"], prefix=tuple(n["prefix"]), terminal=n["terminal"], reward=n["reward"])
            for n in tree["nodes"]
        }
        for n in tree["nodes"]:
            nodes[n["id"]].edges = [
                Edge(
                    action=e["action"],
                    command=e["command"],
                    critic=e["critic"],
                    q_search=e["q_search"],
                    visits=e["visits"],
                    logprob=e["logprob"],
                    child=None if e["child"] is None else nodes[e["child"]],
                )
                for e in n["edges"]
            ]
        self.root, self.stats = nodes[0], tree["stats"]


def test_search_with_a_sampling_model_policy(recorded, tmp_path, spm_tokenizer):
    """Our model as the proposer: K samples per node from distinct request seeds, ranked by their log-probs; its
    malformed outputs replay to the same error observation, so no replay diverges."""
    from rollout.policies.model import ModelPolicy
    from rollout.search.driver import LogprobCritic, SearchConfig, search_collect, tree_path
    from tgpo_jax.models.config import tiny_config
    from tgpo_jax.models.sampler import Sampler, SamplingParams
    from tgpo_jax.models.transformer import init_model

    env, tasks, _ = recorded
    mcfg = tiny_config(
        "llama", vocab_size=len(spm_tokenizer), eos_token_id=spm_tokenizer.eos_token_id, max_position_embeddings=2048
    )
    policy = ModelPolicy(
        Sampler(init_model(mcfg, seed=0), spm_tokenizer, bucket=512),
        spm_tokenizer,
        prompt=PromptConfig(budget_tokens=400),
        params=SamplingParams(temperature=1.0, max_tokens=8),
    )
    out = str(tmp_path / "model-search")
    cfg = SearchConfig(simulations=3, k=3)
    counts = asyncio.run(
        search_collect(
            env,
            tasks[1:],
            policy,
            LogprobCritic(),
            cfg,
            HarnessConfig(screenshots=False, max_steps=2),
            out,
            progress=False,
        )
    )
    assert counts["diverged"] == 0 and counts["errored"] == 0, counts
    root = _Loaded(json.load(open(tree_path(out, tasks[1].task_id)))).root
    assert root.visits == 3 and len(root.edges) >= 2  # three samples at a temperature of 1: distinct outputs
    by_rank = sorted(root.edges, key=lambda e: -e.critic)
    assert all(e.logprob is not None and e.logprob < 0 for e in root.edges)
    assert [e.logprob for e in by_rank] == sorted((e.logprob for e in root.edges), reverse=True)


def test_search_tree_becomes_records_with_the_blended_values(recorded, tmp_path):
    """The gold search's tree as node records: one per node with two or more edges run, each branch valued
    α·Q̃ + (1 − α)·Q̂, the prompt the policy saw there, and pairs derived by the training side."""
    from rollout.search.driver import LogprobCritic, SearchConfig, search_collect
    from tgpo_jax.data.examples import preference_pairs
    from tgpo_jax.data.io import DatasetReader
    from trees.dataset import BuildConfig, build_dataset, load_episodes, step_prompt
    from trees.search_records import task_search_records

    env, tasks, episodes = recorded
    task, gold_ep = tasks[1], episodes[tasks[1].task_id]
    gold = gold_map([gold_ep])
    out = str(tmp_path / "search")
    cfg = SearchConfig(simulations=6, k=3, alpha=0.5)
    asyncio.run(
        search_collect(
            env,
            [task],
            GoldOrRandom(gold, env.essential_query_params()),
            LogprobCritic(),
            cfg,
            HarnessConfig(screenshots=False, max_steps=len(gold_ep.steps) + 1),
            out,
            progress=False,
        )
    )
    by_task, _ = load_episodes(out)
    bcfg = BuildConfig()
    recs = task_search_records([out], task.task_id, by_task[task.task_id], task, bcfg)
    tree = _Loaded(json.load(open(os.path.join(out, "search", task.task_id + ".json"))))
    root_rec = next(r for r in recs if r.meta["depth"] == 0)
    assert all(r.value_source == "mcts" for r in recs)
    run = [e for e in tree.root.edges if e.visits]
    assert [b.q for b in root_rec.branches] == pytest.approx([0.5 * e.q_search + 0.5 * e.critic for e in run])
    assert root_rec.prompt == step_prompt(task, by_task[task.task_id][0], 0, bcfg)
    assert sum(b.n_total for b in root_rec.branches) == tree.root.visits == 6
    pairs = preference_pairs(root_rec)
    assert pairs and all(root_rec.branches[p.chosen].q > root_rec.branches[p.rejected].q for p in pairs)
    summary = build_dataset(out, str(tmp_path / "ds"), BuildConfig(values="mcts", num_shards=1), progress=False)
    written = list(DatasetReader(str(tmp_path / "ds")))
    assert summary["records"] == len(recs) == len(written) and written == recs  # the builder writes these records


def test_search_at_inference_reports_solved_tasks_and_browser_steps(recorded, tmp_path):
    from experiment.evaluate import EvalConfig, search_evaluate_async
    from rollout.search.driver import LogprobCritic, SearchConfig

    env, tasks, episodes = recorded
    task, gold_ep = tasks[1], episodes[tasks[1].task_id]
    gold = gold_map([gold_ep])
    cfg = EvalConfig(
        out_dir=str(tmp_path / "eval"), seeds=(0,), contexts=1, max_steps=len(gold_ep.steps) + 1, progress=False
    )
    res = asyncio.run(
        search_evaluate_async(
            env,
            [task],
            GoldOrRandom(gold, env.essential_query_params()),
            LogprobCritic(),
            SearchConfig(simulations=4, k=2),
            cfg,
        )
    )
    (row,) = res["tasks_table"]
    eps = sorted(iter_episodes(str(tmp_path / "eval" / "search-seed0")), key=lambda e: e.summary["run"])
    assert row["success"] == any(e.summary["success"] for e in eps)
    assert row["first_success"] == eps[0].summary["success"] and row["browser_steps"] == sum(len(e.steps) for e in eps)
    assert res["mean"]["success_rate"] == float(row["success"]) and res["by_family"]["webshop"]["tasks"] == 1
    assert json.load(open(tmp_path / "eval" / "eval.json"))["tasks_table"] == res["tasks_table"]
