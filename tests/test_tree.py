"""Tree merging, process rewards, branch values and labels on hand-worked graphs (docs/method.md §2–§6)."""

import dataclasses
import json
import math
import os

import pytest

from rollout.core import Task
from rollout.recording import EpisodeRecord
from trees.graph import StateRef as S
from trees.build import TreeConfig, build_task_graph, canonical, label_conflict_rate, redundant_steps
from trees.dataset import BuildConfig, build_dataset, node_records, remap_output
from tgpo_jax.data.examples import PairConfig, kto_items, kto_tree_items, label_conflict, preference_pairs, sft_items

ORIGIN = "http://127.0.0.1:9"
TASK = Task("cola", "shop", "procedure", "Search cola, sort by price, add the first item to the cart.", "/", 6, "train")


def state(path, phash, progress="cart=", obs=None, success=False):
    return {
        "url": ORIGIN + path,
        "norm_url": ORIGIN + path.split("#")[0],
        "title": "",
        "truncated": False,
        "observation": obs or f'URL: {ORIGIN}{path}\n[1] link "Home"',
        "screenshot": None,
        "phash": phash,
        "obs_error": None,
        "check": {"success": success, "score": float(success), "progress": progress, "done": False},
    }


def step(t, s, cmd, role=None, name=None, changed=True, url_changed=False, ok=True, error=None):
    target = {"role": role, "name": name} if role else None
    name_ = None if cmd is None else cmd.split()[0]
    return {
        **s,
        "step": t,
        "output": f"Thought: t{t}\nCommand: {cmd}" if cmd else "garbage",
        "thought": f"t{t}",
        "command": cmd,
        "command_name": name_,
        "target": target,
        "format_ok": cmd is not None,
        "error": error,
        "effect": None
        if (cmd is None or name_ == "STOP" or error)
        else {
            "url_changed": url_changed,
            "dom_changed": changed,
            "navigated": url_changed,
            "expected_change": ok,
            "detail": "",
        },
        "logprob": -1.0 - t,
        "num_tokens": 5,
        "policy_info": {},
    }


def episode(run, pairs, success, final=None, path="/tmp/tgpo-test-ep"):
    """pairs: [(state, command, role, name, kwargs)]; the last command is usually STOP."""
    steps = [step(t, s, c, r, n, **kw) for t, (s, c, r, n, kw) in enumerate(pairs)]
    summary = {
        "task_id": TASK.task_id,
        "run": run,
        "status": "success" if success else "failure",
        "success": success,
        "score": float(success),
        "steps": len(steps),
        "end_reason": "stop",
        "error": None,
        "final": final or steps[-1],
        "split": "train",
        "env": "shop",
        "family": "procedure",
    }
    return EpisodeRecord(f"{path}/{run}", summary, steps)


HOME, TYPED = state("/", "a0"), state("/", "a1")
RESULTS, SORTED = state("/search?q=cola", "b0"), state("/search?q=cola&sort=price_asc", "c0")
ITEM7, ADDED7 = state("/item/7", "d0"), state("/cart", "e0", "cart=7", success=True)
ITEM9, ADDED9 = state("/item/9", "f0"), state("/cart", "e0", "cart=9")  # same URL and look as ADDED7!


def cola_episodes(path="/tmp/tgpo-test-ep"):
    good = episode(
        0,
        [
            (HOME, "TYPE [3] [cola]", "textbox", "Search", {}),
            (TYPED, "CLICK [4]", "button", "Search", {"url_changed": True}),
            (RESULTS, "CLICK [20]", "link", "Sort: Price low to high", {"url_changed": True}),
            (SORTED, "CLICK [31]", "link", "Cola 7", {"url_changed": True}),
            (ITEM7, "CLICK [8]", "button", "Add to cart", {"url_changed": True}),
            (ADDED7, "STOP []", None, None, {}),
        ],
        True,
        path=path,
    )
    bad = episode(
        1,
        [
            (HOME, "TYPE [3] [cola]", "textbox", "Search", {}),
            (TYPED, "CLICK [4]", "button", "Search", {"url_changed": True}),
            (RESULTS, "CLICK [33]", "link", "Cola 9", {"url_changed": True}),
            (ITEM9, "CLICK [8]", "button", "Add to cart", {"url_changed": True}),
            (ADDED9, "STOP []", None, None, {}),
        ],
        False,
        path=path,
    )
    return [good, bad]


def test_paper_example_merges_rewards_values_pairs_and_labels():
    eps = cola_episodes()
    g = build_task_graph(eps, TASK, TreeConfig(alpha=3.0))
    # merges: the two runs share home, typed-home and results; the two "added" pages look alike (same pHash)
    # but hold different carts, so the guard keeps them apart
    assert g.state_node[S(0, 0)] == g.state_node[S(1, 0)] == g.root
    assert g.state_node[S(0, 1)] == g.state_node[S(1, 1)] != g.root  # same URL, sequence [TYPE textbox "Search"]
    assert g.state_node[S(0, 2)] == g.state_node[S(1, 2)]
    assert g.state_node[S(0, 5)] != g.state_node[S(1, 4)]
    assert g.stats["nodes"] == 8 and g.stats["guard_refusals"] == 1
    unguarded = build_task_graph(eps, TASK, TreeConfig(guard=False))
    assert unguarded.state_node[S(0, 5)] == unguarded.state_node[S(1, 4)]  # what the guard prevents
    r = g.rewards
    # the good run: every step R = 1 + 1 + 0 + 3 * 6 / ((t + 1) + dist) = 5, since (t + 1) + dist = 6 = L_min
    assert [r[S(0, t)]["r"] for t in range(6)] == [5.0] * 6
    assert [r[S(0, t)]["r_subgoal"] for t in range(6)] == [1.0] * 6
    # the bad run: after the wrong item the goal is unreachable, R_subgoal = 0
    assert [r[S(1, t)]["r"] for t in range(5)] == [5.0, 5.0, 2.0, 2.0, 2.0]
    assert r[S(1, 2)]["r_subgoal"] == 0.0
    b = {k[1]: v for k, v in g.branches.items()}
    assert b['TYPE textbox "Search" [cola]'].q == pytest.approx((5 + 16 / 5) / 2)
    assert b['CLICK button "Search"'].q == pytest.approx((5 + 11 / 4) / 2)
    assert b['CLICK link "Sort: Price low to high"'].q == 5.0 and b['CLICK link "Cola 9"'].q == 2.0
    assert b['CLICK link "Cola 9"'].reaches_success is False and b['CLICK link "Cola 9"'].n_failed == 1
    # label conflict: the TYPE and Search branches (2 occurrences each) are taken by both outcomes: 4 of 11
    assert label_conflict_rate(g) == (4, 11)
    assert redundant_steps(g, eps) == [0, 0]
    recs = {rec.node_id: rec for rec in node_records(g, eps, TASK, BuildConfig())}
    fork = recs[g.state_node[S(0, 2)]]
    assert [br.command for br in fork.branches] == ['CLICK link "Sort: Price low to high"', 'CLICK link "Cola 9"']
    (pair,) = preference_pairs(fork)
    assert (pair.chosen, pair.rejected) == (0, 1) and pair.weight == pytest.approx(3.0 / 1.5)  # sigma{5, 2} = 1.5
    assert kto_tree_items(fork) == [(0, True), (1, False)]
    assert kto_tree_items(recs[g.root]) == [(0, True)]  # single branch: a successful end is reachable
    assert sorted(kto_items(recs[g.root])) == [(0, False), (0, True)]  # plain KTO: each took it once
    assert sft_items(fork) == [0] and label_conflict(recs[g.root]) == (2, 2)
    assert fork.branches[0].behaviour_logprob == -3.0  # recorded under exactly this prompt


def test_plain_kto_labels_every_step_occurrence():
    """A trajectory that takes a branch twice (there and back, then again) labels it twice with its outcome;
    trajectory counts stay one per trajectory, and the record round-trips both."""
    from tgpo_jax.data.schema import NodeRecord

    cart = state("/cart", "g0")
    loop = episode(
        0,
        [
            (HOME, "CLICK [2]", "link", "Cart", {"url_changed": True}),
            (cart, "GO_BACK", None, None, {"url_changed": True}),
            (HOME, "CLICK [2]", "link", "Cart", {"url_changed": True}),
            (cart, "STOP []", None, None, {}),
        ],
        True,
    )
    once = episode(
        1, [(HOME, "CLICK [2]", "link", "Cart", {"url_changed": True}), (cart, "STOP []", None, None, {})], False
    )
    g = build_task_graph([loop, once], TASK, TreeConfig())
    b = g.branches[(g.root, 'CLICK link "Cart"')]
    assert (b.n_success, b.n_failed, b.steps_success, b.steps_failed) == (1, 1, 2, 1)
    assert len(b.returns) == 2  # one per trajectory (its first occurrence on), as Q averages: the loop's repeat is not
    (root,) = [r for r in node_records(g, [loop, once], TASK, BuildConfig()) if r.node_id == g.root]
    root = NodeRecord.from_bytes(root.to_bytes())
    assert sorted(kto_items(root)) == [(0, False), (0, True), (0, True)]
    assert label_conflict(root) == (3, 3) and label_conflict_rate(g)[0] >= 3
    old = dataclasses.replace(
        root, branches=[dataclasses.replace(root.branches[0], steps_success=None, steps_failed=None)]
    )
    assert sorted(kto_items(old)) == [(0, False), (0, True)]  # a record without them: trajectory counts


@pytest.mark.parametrize("aggregate", ["mean", "sum", "discounted"])
def test_branches_keep_the_returns_q_averages(aggregate):
    """Each branch keeps one return per trajectory taking it (the aggregate of R from its first occurrence on) and
    Q is their mean under every aggregate; the records carry them through JSON. With the good run taken twice, the
    fork's returns are Sort {5, 5} and Cola 9 {2} (mean aggregate): pooled mean 4, sigma^2 = (1 + 1 + 4) / 3 = 2,
    so per-occurrence w = 3 / sqrt(2) where per-branch sigma {5, 2} = 1.5 gives w = 2."""
    from tgpo_jax.data.schema import NodeRecord

    good, bad = cola_episodes()
    again = EpisodeRecord(good.path[:-1] + "2", {**good.summary, "run": 2}, good.steps)
    eps = [good, bad, again]
    g = build_task_graph(eps, TASK, TreeConfig(q_aggregate=aggregate))
    for b in g.branches.values():
        assert len(b.returns) == b.n_total and math.fsum(b.returns) / len(b.returns) == pytest.approx(b.q, abs=1e-12)
    recs = {r.node_id: NodeRecord.from_bytes(r.to_bytes()) for r in node_records(g, eps, TASK, BuildConfig())}
    for r in recs.values():
        for br in r.branches:
            assert br.returns == g.branches[(r.node_id, br.command)].returns
            assert math.fsum(br.returns) / len(br.returns) == pytest.approx(br.q, abs=1e-12)
    if aggregate != "mean":
        return
    b = {k[1]: v for k, v in g.branches.items()}
    assert b['TYPE textbox "Search" [cola]'].returns == pytest.approx((5.0, 16 / 5, 5.0))
    fork = recs[g.state_node[S(0, 2)]]
    assert [br.returns for br in fork.branches] == [(5.0, 5.0), (2.0,)]
    (pair,) = preference_pairs(fork, PairConfig(weight_sigma="occurrence"))
    assert (pair.chosen, pair.rejected) == (0, 1) and pair.weight == pytest.approx(3.0 / math.sqrt(2.0))
    assert [p.weight for p in preference_pairs(fork)] == pytest.approx([2.0])


def test_loop_is_a_cycle_with_redundancy_and_no_change_is_redundant():
    cart = state("/cart", "g0")
    loop = episode(
        0,
        [
            (HOME, "CLICK [2]", "link", "Cart", {"url_changed": True}),
            (cart, "GO_BACK", None, None, {"url_changed": True}),
            (HOME, "CLICK [9]", "link", "Nothing", {"changed": False, "ok": False}),
            (HOME, "STOP []", None, None, {}),
        ],
        False,
    )
    g = build_task_graph([loop], TASK, TreeConfig())
    home = g.root
    assert g.state_node[S(0, 2)] == home and g.state_node[S(0, 3)] == home  # revisit merges back: a cycle
    assert any(e.src != home and e.dst == home for e in g.edges)
    red = [g.rewards[S(0, t)]["r_red"] for t in range(4)]
    assert red == [0.0, -1.0, -1.0, 0.0]  # back to a visited node; a click that changed nothing; STOP is not
    assert g.rewards[S(0, 2)]["r_acc"] == 0.0 and g.rewards[S(0, 0)]["r_acc"] == 1.0
    assert all(v["r_subgoal"] == 0.0 for v in g.rewards.values())  # no success anywhere: goal unreachable
    assert redundant_steps(g, [loop]) == [2]


def test_successful_detour_gets_goal_distances_and_shortest_sft_drops_it():
    """A successful run that opens the cart, comes back and then does the task. Goal distances by hand: the root is
    5 steps from the goal (type, search, item, add, STOP), so the detour's destination (the cart) is 6 and the typed
    page 4; from the cart, going back is that page's shortest way on, so shortest-path SFT keeps it and drops only
    the detour."""
    cart = state("/cart", "g0")
    run = episode(
        0,
        [
            (HOME, "CLICK [2]", "link", "Cart", {"url_changed": True}),
            (cart, "GO_BACK", None, None, {"url_changed": True}),
            (HOME, "TYPE [3] [cola]", "textbox", "Search", {}),
            (TYPED, "CLICK [4]", "button", "Search", {"url_changed": True}),
            (RESULTS, "CLICK [31]", "link", "Cola 7", {"url_changed": True}),
            (ITEM7, "CLICK [8]", "button", "Add to cart", {"url_changed": True}),
            (ADDED7, "STOP []", None, None, {}),
        ],
        True,
    )
    g = build_task_graph([run], TASK, TreeConfig())
    dist = {b.command: b.goal_distance for (n, _), b in g.branches.items() if n == g.root}
    assert dist == {'CLICK link "Cart"': 6, 'TYPE textbox "Search" [cola]': 4}
    records = {r.node_id: r for r in node_records(g, [run], TASK, BuildConfig())}
    root = records[g.root]
    assert [b.goal_distance for b in root.branches] == [6, 4]
    assert sft_items(root) == [0, 1]  # the paper's SFT: every branch of the successful run
    assert sft_items(root, PairConfig(sft_shortest=True)) == [1]
    cart_node = records[g.state_node[S(0, 1)]]
    assert [b.command for b in cart_node.branches] == ["GO_BACK"] and cart_node.branches[0].goal_distance == 5
    assert sft_items(cart_node, PairConfig(sft_shortest=True)) == [0]
    stop = [b for r in records.values() for b in r.branches if b.command.startswith("STOP")]
    assert [b.goal_distance for b in stop] == [0]


def test_phash_merges_when_sequences_differ_and_strict_does_not():
    a = episode(
        0, [(HOME, "TYPE [3] [x]", "textbox", "Search", {}), (state("/", "77"), "STOP []", None, None, {})], False
    )
    b = episode(1, [(HOME, "CLICK [5]", "button", "Toggle", {}), (state("/", "77"), "STOP []", None, None, {})], False)
    g = build_task_graph([a, b], TASK, TreeConfig())
    assert g.state_node[S(0, 1)] == g.state_node[S(1, 1)] and g.stats["merged_by_phash"] >= 1
    strict = build_task_graph([a, b], TASK, TreeConfig(merge="strict"))
    assert strict.state_node[S(0, 1)] != strict.state_node[S(1, 1)]
    near = episode(
        1, [(HOME, "CLICK [5]", "button", "Toggle", {}), (state("/", "76"), "STOP []", None, None, {})], False
    )  # 0x77 ^ 0x76: one bit
    assert build_task_graph([a, near], TASK, TreeConfig()).stats["nodes"] == 3
    assert build_task_graph([a, near], TASK, TreeConfig(phash_threshold=1)).stats["nodes"] == 2


def test_q_aggregates_and_l_min_from_the_graph():
    eps = cola_episodes()
    s = build_task_graph(eps, TASK, TreeConfig(q_aggregate="sum"))
    assert {k[1]: v.q for k, v in s.branches.items()}['CLICK link "Cola 9"'] == 6.0
    d = build_task_graph(eps, TASK, TreeConfig(q_aggregate="discounted", gamma=0.5))
    assert {k[1]: v.q for k, v in d.branches.items()}['CLICK link "Cola 9"'] == pytest.approx(2 + 1 + 0.5)
    g = build_task_graph(eps, dataclasses.replace(TASK, optimal_steps=0), TreeConfig())
    assert g.stats["l_min"] == 6.0  # shortest root -> goal path, STOP included
    with pytest.raises(ValueError, match="q_aggregate"):
        TreeConfig(q_aggregate="max")


def test_canonical_commands_and_id_remapping():
    s = step(0, HOME, "CLICK [12]", "link", "Cola 7")
    assert canonical(s) == 'CLICK link "Cola 7"'
    assert (
        canonical({**s, "format_ok": False, "command": None, "output": "I will click\nclick it"}) == "INVALID click it"
    )
    page = 'URL: x\n[4] link "Home"\n[19] link "Cola 7"'
    assert remap_output(s, page) == "Thought: t0\nCommand: CLICK [19]"
    assert remap_output(s, 'URL: x\n[4] link "Home"') is None


def _write(root, eps, split="train"):
    for ep in eps:
        d = os.path.join(root, "episodes", ep.summary["task_id"], f"{ep.summary['run']:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "steps.jsonl"), "w") as f:
            for s in ep.steps:
                f.write(json.dumps(s) + "\n")
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({**ep.summary, "split": split}, f)


def test_build_dataset_skips_broken_episodes_and_test_tasks(tmp_path):
    from tgpo_jax.data.io import DatasetReader, read_manifest

    root = str(tmp_path / "eps")
    _write(root, cola_episodes())
    extra = episode(2, cola_episodes()[0].steps and [(HOME, "STOP []", None, None, {})], False)
    _write(root, [extra])
    with open(os.path.join(root, "episodes", "cola", "002", "steps.jsonl"), "a") as f:
        f.write('{"truncated')  # a torn write
    test_ep = episode(0, [(HOME, "STOP []", None, None, {})], False)
    test_ep.summary["task_id"] = "held-out"
    _write(root, [test_ep], split="test")
    summary = build_dataset(root, str(tmp_path / "ds"), BuildConfig(num_shards=2), progress=False)
    assert [b["path"].endswith("cola/002") for b in summary["broken_episodes"]] == [True]
    assert "corrupt step 1" in summary["broken_episodes"][0]["error"]
    assert summary["episodes"] == 2 and summary["episodes_refused_split"] == 1 and summary["tasks"] == 1
    assert summary["label_conflict_rate"] == pytest.approx(4 / 11)
    assert summary["pairs"] == 1 and summary["sft_items"] == 6 and summary["kto_tree_undesirable"] >= 1
    m = read_manifest(str(tmp_path / "ds"))
    assert m.extra["label_conflict_rate"] == pytest.approx(4 / 11) and m.config["tree"]["alpha"] == 3.0
    recs = list(DatasetReader(str(tmp_path / "ds")))
    assert {r.task_id for r in recs} == {"cola"} and len(recs) == summary["records"] == 8  # every non-END node acted at
    assert math.isclose(max(b.q for r in recs for b in r.branches), 5.0)


def test_judge_verifier_over_screenshots_replaces_builtin_checks(tmp_path):
    """The judge is an OpenAI-compatible endpoint; a stub server stands in for the vision model here."""
    import http.server
    import threading

    from PIL import Image

    from trees.verify import JudgeVerifier

    seen = []

    class Judge(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = body["messages"][0]["content"]
            images = [c for c in content if c["type"] == "image_url"]
            assert len(images) == 2 and images[0]["image_url"]["url"].startswith("data:image/png;base64,")
            seen.append(content[0]["text"])
            answer = "yes" if "Sort" not in content[0]["text"] else "no"  # the judge disagrees on one step
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        eps = cola_episodes(str(tmp_path))
        for ep in eps:
            os.makedirs(os.path.join(ep.path, "screens"), exist_ok=True)
            for t, s in enumerate(ep.steps):
                s["screenshot"] = f"screens/{t:03d}.png"
                Image.new("RGB", (8, 8), (t * 30, 0, 0)).save(os.path.join(ep.path, s["screenshot"]))
        judge = JudgeVerifier(f"http://127.0.0.1:{server.server_address[1]}", "judge")
        g = build_task_graph(eps, TASK, TreeConfig(), judge)
        r = g.rewards
        assert r[S(0, 2)]["r_acc"] == 0.0 and r[S(0, 3)]["r_acc"] == 1.0  # the judge's verdicts, not the harness's
        assert (
            any('CLICK [20] on link "Sort: Price low to high"' in text for text in seen)
            and judge.calls == len(seen) > 0
        )
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "answer,verdict",
    [
        ("yes", True),
        ("No.", False),
        (" YES \n", True),
        ("no", False),
        ("yes, the page says the task is done", None),
        ("Yes! I", None),
        ("yesno", None),
        ("", None),
        ("maybe", None),
        ("nope", None),
    ],
)
def test_judge_verdicts_are_parsed_strictly(answer, verdict):
    from trees.verify import parse_verdict

    assert parse_verdict(answer) is verdict


def test_label_conflicts_per_task_family(tmp_path):
    """The dataset's label-conflict rate per task family beside the pooled one: the cola pair (procedure) has 4 of
    its 11 step occurrences on branches that a success and a failure both take; a second task (webshop) with one
    successful run has none of its 6, so the pooled rate is 4 / 17."""
    root = str(tmp_path / "eps")
    _write(root, cola_episodes())
    other = cola_episodes()[0]
    other.summary.update(task_id="cola-b", family="webshop")
    _write(root, [other])
    summary = build_dataset(root, str(tmp_path / "ds"), BuildConfig(num_shards=1), progress=False)
    assert summary["tasks"] == 2
    assert summary["label_conflict_rate"] == pytest.approx(4 / 17)
    assert summary["label_conflict_by_family"] == {"procedure": pytest.approx(4 / 11), "webshop": 0.0}
