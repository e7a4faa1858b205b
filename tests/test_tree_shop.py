"""Trees from real oracle episodes on the shop, with mistakes switched on (docs/method.md §2–§6 end to end)."""

import json
import os
import re
import subprocess
import sys

import pytest

import recipes
from rollout.collect import CollectConfig, collect
from rollout.envs.shop.env import ShopEnv
from rollout.harness.runner import HarnessConfig
from rollout.policies.oracle import OracleNoise, OraclePolicy
from trees.build import build_task_graph
from trees.dataset import load_episodes
from trees.graph import StateRef
from tgpo_jax.data.examples import preference_pairs
from tgpo_jax.data.io import DatasetReader, read_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def noisy_episodes(tmp_path_factory):
    """The copy model's thought wording: its settings copy the task's option names, the copy spans checked below."""
    recipes.register_all()
    out = str(tmp_path_factory.mktemp("episodes"))
    with ShopEnv(seed=0) as env:
        tasks = [t for t in env.tasks("train") if t.family in ("webshop", "procedure")][:3]
        noise = OracleNoise(wrong_choice=0.2, loop=0.15, malformed=0.05)
        counts = collect(
            env,
            tasks,
            OraclePolicy(env, noise, seed=5, thoughts="scratch_copy"),
            CollectConfig(
                out_dir=out, runs=6, seed=5, contexts=4, progress=False, harness=HarnessConfig(screenshots=False)
            ),
        )
    assert counts["success"] > 0 and counts["failure"] > 0, counts
    return out


@pytest.mark.slow  # browser end-to-end, > 20 s on 2 cores: the slow tier
def test_shop_trees_have_conflicts_and_pairs_that_point_at_success(noisy_episodes, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.build_dataset",
            f"--episodes={noisy_episodes}",
            f"--out={tmp_path / 'ds'}",
            "--num_shards=2",
            f"--pairs_jsonl={tmp_path / 'pairs.jsonl'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["label_conflict_rate"] > 0 and summary["merged_by_sequence"] > 0
    assert summary["nodes"] < summary["states"]  # runs share states
    pairs, rate_w, rate_l, sets = 0, 0.0, 0.0, 0
    for node in DatasetReader(str(tmp_path / "ds")):
        task_line = node.prompt[-1]["content"].split("\n", 1)[0]
        for b in node.branches:  # the name of a combobox a successful branch sets is a copy (copy-swap may swap it)
            m = re.match(r'Thought: Set combobox "([^"]+)"', b.action)
            if m and b.n_success > 0 and f" {m.group(1)} [" in task_line:
                assert {"text": m.group(1), "kind": "option"} in node.meta["copy"], (node.node_id, node.meta)
                sets += 1
        for p in preference_pairs(node):
            w, loser = node.branches[p.chosen], node.branches[p.rejected]
            assert w.q > loser.q and p.weight > 0
            sw, sl = w.n_success / w.n_total, loser.n_success / loser.n_total
            # the chosen branch leads to success at least as often. Where either branch has one or two
            # trajectories this is sampling noise: a redundant detour (link, then GO_BACK) succeeds as often as
            # the direct path in expectation, and TGPO ranks it below the direct path by design; one failed run
            # that earned the task's subgoal rewards before failing can outscore a 2-of-3 branch by a hair.
            assert sw >= sl or min(w.n_total, loser.n_total) < 3, (node.node_id, w, loser)
            rate_w += sw
            rate_l += sl
            pairs += 1
    assert pairs > 0 and summary["pairs_jsonl"]["pairs"] == pairs and sets > 0
    assert summary["copy_pools"]["option"] and summary["copy_nodes"] >= sets
    assert rate_w > rate_l  # over all pairs, chosen branches succeed more often
    with open(tmp_path / "pairs.jsonl") as f:
        row = json.loads(f.readline())
    assert set(row) >= {"prompt", "chosen", "rejected", "weight"} and row["chosen"][0]["role"] == "assistant"
    assert read_manifest(str(tmp_path / "ds")).config["tree"]["q_aggregate"] == "mean"


def _one_run_each(tmp_path, family: str, noise: OracleNoise):
    """One noisy-oracle run (seed 3) on each of the first four training tasks of ``family``, all successful ->
    [(task_id, merged graph, episode)]."""
    with ShopEnv(seed=0) as env:
        tasks = [t for t in env.tasks("train") if t.family == family][:4]
        counts = collect(
            env,
            tasks,
            OraclePolicy(env, noise, seed=3),
            CollectConfig(
                out_dir=str(tmp_path),
                runs=1,
                seed=3,
                contexts=2,
                progress=False,
                harness=HarnessConfig(screenshots=False),
            ),
        )
    assert counts["success"] == len(tasks), counts  # the mistake, undone or repeated, does not fail the task
    by_task, _ = load_episodes(str(tmp_path))
    return [(task_id, build_task_graph(eps), eps[0]) for task_id, eps in by_task.items() if len(eps) == 1]


def _mistakes(runs, kind: str):
    """(task_id, graph, episode, step) of every step the oracle took as mistake ``kind`` in ``runs``."""
    return [
        (task_id, g, ep, t)
        for task_id, g, ep in runs
        for t, s in enumerate(ep.steps)
        if s["policy_info"].get("mistake") == kind
    ]


def _branch_at(g, node, t):
    """(the branch run 0 took at step t, the node's other branches)."""
    taken = next(b for (n, c), b in g.branches.items() if n == node and StateRef(0, t) in b.occurrences)
    return taken, [b for (n, c), b in g.branches.items() if n == node and b is not taken]


@pytest.mark.slow  # browser end-to-end: the slow tier
def test_an_undone_wrong_choice_gives_one_run_a_pair_at_the_decision(tmp_path):
    """``recover``: a wrong click (result or sort) is followed by GO_BACK to the same node, where the plan then makes
    the right choice; so one successful run holds both branches of the decision, and the right one is worth more."""
    runs = _one_run_each(tmp_path, "procedure", OracleNoise(wrong_choice=0.5, recover=1.0))
    assert len(runs) == 4
    undone = _mistakes(runs, "wrong_choice_undone")
    for task_id, g, ep, t in undone:
        assert ep.steps[t + 1]["output"].rstrip().endswith("GO_BACK"), ep.steps[t + 1]["output"]
        node = g.state_node[StateRef(0, t)]
        assert g.state_node[StateRef(0, t + 2)] == node  # back where the mistake was made
        wrong, others = _branch_at(g, node, t)
        right = [b for b in others if b.goal_distance < wrong.goal_distance]
        assert right and all(b.q > wrong.q for b in right), (task_id, t, wrong, others)
    assert undone


@pytest.mark.slow  # browser end-to-end: the slow tier
def test_a_repeated_command_gives_one_run_a_pair_against_the_stutter(tmp_path):
    """``repeat``: the last SELECT / TYPE issued again on the same page changes nothing, so the run stays on its node,
    then goes on with the plan: one successful run holds the stutter and the next step at that node, the stutter is a
    self-loop worth less, and farther from the goal (so SFT on the shortest branches does not imitate it)."""
    runs = _one_run_each(tmp_path, "webshop", OracleNoise(repeat=1.0))
    assert len(runs) == 4
    repeats = _mistakes(runs, "repeat")
    for task_id, g, ep, t in repeats:
        assert ep.steps[t]["command"] == ep.steps[t - 1]["command"]  # the same command again ...
        node = g.state_node[StateRef(0, t)]
        assert g.state_node[StateRef(0, t + 1)] == node  # ... leaves the run where it was
        stutter, onward = _branch_at(g, node, t)
        assert onward and all(b.q > stutter.q and b.goal_distance < stutter.goal_distance for b in onward)
    assert len(repeats) >= len(runs)  # repeat = 1: after every SELECT / TYPE that kept the page


@pytest.mark.slow  # browser end-to-end: the slow tier
@pytest.mark.parametrize(
    "family,wrong,right", [("webshop", "Add to cart", "Buy Now"), ("procedure", "Buy Now", "Add to cart")]
)
def test_an_undone_wrong_button_gives_one_run_a_pair_at_the_product_page(tmp_path, family, wrong, right):
    """``wrong_button`` with ``recover``: the product page's other button, GO_BACK (the page loads again, unset), the
    options set again: the run is back at the node where it pressed the wrong button (the press is not in the
    family's progress key), so one successful run holds both buttons there, and the right one is worth more."""
    runs = _one_run_each(tmp_path, family, OracleNoise(wrong_button=0.5, recover=1.0))
    assert len(runs) == 4
    undone = _mistakes(runs, "wrong_button_undone")
    for task_id, g, ep, t in undone:
        assert f'button "{wrong}"' in ep.steps[t]["output"] and ep.steps[t + 1]["output"].rstrip().endswith("GO_BACK")
        node = g.state_node[StateRef(0, t)]
        pressed, others = _branch_at(g, node, t)
        good = [b for b in others if right in b.command]
        assert good and good[0].q > pressed.q and good[0].goal_distance < pressed.goal_distance, (task_id, t)
    assert undone


@pytest.mark.slow  # browser end-to-end: the slow tier
@pytest.mark.parametrize("family", ["webshop", "multi_cart"])
def test_an_undone_wrong_sort_gives_one_run_a_pair_at_the_results_page(tmp_path, family):
    """``wrong_sort``: where the plan clicks a product on a results page of a task without a sort, a sort link, then
    GO_BACK: the run is back at the results page's node, which holds the sort and the product as branches, the
    product worth more and nearer the goal."""
    runs = _one_run_each(tmp_path, family, OracleNoise(wrong_sort=1.0))
    assert len(runs) == 4
    undone = _mistakes(runs, "wrong_sort_undone")
    for task_id, g, ep, t in undone:
        assert "/search" in ep.steps[t]["url"] and "sort=" in ep.steps[t + 1]["url"], ep.steps[t]["url"]
        assert ep.steps[t + 1]["output"].rstrip().endswith("GO_BACK")
        node = g.state_node[StateRef(0, t)]
        assert g.state_node[StateRef(0, t + 2)] == node  # back where the sort was clicked
        sort, others = _branch_at(g, node, t)
        assert "/item/" in ep.steps[t + 3]["url"]  # back on the results page, the plan's product
        product = [b for b in others if b.goal_distance < sort.goal_distance]
        assert product and all(b.q > sort.q for b in product), (task_id, t, sort, others)
    # rate 1: the plan's every product choice met the sort once (not again on the page it went back to): one per
    # webshop task, one per item of a multi_cart task
    per_page = {(task_id, ep.steps[t]["url"]) for task_id, _, ep, t in undone}
    assert len(per_page) == len(undone) and len(undone) >= len(runs)


@pytest.mark.slow  # browser end-to-end: the slow tier
def test_a_committed_wrong_button_stops_on_its_page_and_fails(tmp_path):
    """``wrong_button`` without ``recover``: the run presses the other button and stops where it leads (webshop's
    "Added" page, procedure's order page; multi_cart's order ends the episode), and the task's check calls it a
    failure."""
    with ShopEnv(seed=0) as env:
        tasks = [next(t for t in env.tasks("train") if t.family == f) for f in ("webshop", "procedure", "multi_cart")]
        counts = collect(
            env,
            tasks,
            OraclePolicy(env, OracleNoise(wrong_button=1.0), seed=3),
            CollectConfig(
                out_dir=str(tmp_path),
                runs=1,
                seed=3,
                contexts=3,
                progress=False,
                harness=HarnessConfig(screenshots=False),
            ),
        )
    assert counts["failure"] == 3, counts
    by_task, _ = load_episodes(str(tmp_path))
    for task_id, (ep,) in by_task.items():
        pressed = [t for *_, t in _mistakes([(task_id, None, ep)], "wrong_button")]
        assert len(pressed) == 1, task_id
        if "multi_cart" in task_id:  # an order ends a multi_cart episode (its check is done)
            assert pressed[0] == len(ep.steps) - 1, task_id
            continue
        assert pressed[0] == len(ep.steps) - 2 and ep.steps[-1]["command"].startswith("STOP"), task_id
        assert ("/added" if "webshop" in task_id else "/order/") in ep.steps[-1]["url"], task_id
