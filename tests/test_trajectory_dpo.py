"""Agent Q's trajectory-level DPO baseline (docs/method.md §9.3): pairs from episodes, their examples, the loss as
DPO on summed step log-probs (checked against separate forwards), and a training run on a built dataset."""

import dataclasses
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from test_logprobs import independent_branch_logprob
from test_tree import HOME, TASK, TYPED, _write, cola_episodes, episode
from tgpo_jax.data.collate import CollateConfig, action_ids, stack
from tgpo_jax.data.schema import Branch, NodeRecord
from tgpo_jax.data.trajectory import TrajectoryExamples, build_trajectory_example, group_pairs
from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.tokenizer import chat_ids
from tgpo_jax.models.transformer import init_model
from tgpo_jax.training.logprobs import slot_logprobs
from tgpo_jax.training.objective import LossConfig, objective
from trees.dataset import BuildConfig, build_dataset, step_prompt
from trees.trajectory_records import TrajectoryConfig, trajectory_records


def _cut_short(run):
    """A failure that is the successful episode's first three steps (the step cap ended it): no step of its own."""
    good = cola_episodes()[0]
    ep = dataclasses.replace(
        good,
        path=f"/tmp/tgpo-test-ep/{run}",
        steps=[dict(s) for s in good.steps[:3]],
        summary={**good.summary, "run": run, "success": False, "status": "failure", "steps": 3},
    )
    return ep


def _off_at_once(run):
    """A failure that leaves the successful path at its first step."""
    return episode(
        run,
        [
            (HOME, "CLICK [5]", "link", "Home", {}),
            (TYPED, "CLICK [6]", "link", "Deals", {}),
            (TYPED, "STOP []", None, None, {}),
        ],
        False,
    )


def test_a_pair_keeps_only_the_steps_the_two_episodes_do_not_share():
    good, bad = cola_episodes()
    cfg = BuildConfig()
    recs, counts = trajectory_records("cola", [bad, good], TASK, cfg)
    assert counts == {"pairs": 1}
    # steps 0 and 1 (type the query, click Search) have the same prompt and output in both: left out
    assert [(r.meta["side"], r.meta["t"]) for r in recs] == [
        ("chosen", 2),
        ("chosen", 3),
        ("chosen", 4),
        ("chosen", 5),
        ("rejected", 2),
        ("rejected", 3),
        ("rejected", 4),
    ]
    assert {r.meta["pair"] for r in recs} == {"cola/0"} and {r.value_source for r in recs} == {"trajectory"}
    for r in recs:
        ep = good if r.meta["side"] == "chosen" else bad
        t = r.meta["t"]
        assert r.prompt == step_prompt(TASK, ep, t, cfg)
        (b,) = r.branches
        assert b.action == ep.steps[t]["output"] and b.behaviour_logprob == -1.0 - t
        assert b.q == (1.0 if r.meta["side"] == "chosen" else 0.0) and b.n_success == (r.meta["side"] == "chosen")
    assert recs[0].branches[0].command == 'CLICK link "Sort: Price low to high"'
    # the records survive serialisation (schema v2 knows the value source)
    assert [NodeRecord.from_bytes(r.to_bytes()) for r in recs] == recs


def test_pairing_order_caps_and_the_pairs_left_out():
    good, bad = cola_episodes()
    off, short = _off_at_once(2), _cut_short(3)
    eps = [good, bad, off, short]
    _, counts = trajectory_records("cola", eps, TASK, BuildConfig(), TrajectoryConfig(max_pairs=1))
    assert counts == {"pairs": 1}  # the first failure by run only
    recs, counts = trajectory_records("cola", eps, TASK, BuildConfig(), TrajectoryConfig(max_pairs=4))
    # run 2 shares nothing with the success: 6 + 3 steps; run 3 is a prefix of it: no step of its own
    assert counts == {"pairs": 2, "no_failed_step": 1}
    assert sorted({r.meta["pair"] for r in recs}) == ["cola/0", "cola/1"]
    assert sum(r.meta["pair"] == "cola/1" for r in recs) == 9
    _, counts = trajectory_records("cola", eps, TASK, BuildConfig(), TrajectoryConfig(max_pairs=4, max_steps=8))
    assert counts == {"pairs": 1, "too_long": 1, "no_failed_step": 1}
    # no success, no pair
    assert trajectory_records("cola", [bad, off], TASK, BuildConfig()) == ([], {})
    with pytest.raises(ValueError, match="max_steps"):
        TrajectoryConfig(max_steps=1)


def _step(task, pair, side, t, prompt, action, lp=None):
    ok = side == "chosen"
    return NodeRecord(
        task,
        f"{pair}{side[0]}{t}",
        [{"role": "user", "content": prompt}],
        [Branch(action, action, float(ok), {}, 1, int(ok), int(not ok), ok, ok, lp)],
        meta={"pair": pair, "side": side, "t": t},
        value_source="trajectory",
    )


PAIRS = [  # (chosen steps, rejected steps): (prompt, action)
    (
        [("Task: add the cola. Page: search box", "TYPE [3] [cola]"), ("Page: results cola", "CLICK [7]")],
        [
            ("Task: add the cola. Page: search box", "TYPE [3] [tea]"),
            ("Page: results tea", "CLICK [9]"),
            ("Page: item tea", "STOP [done]"),
        ],
    ),
    ([("Task: sort by price. Page: results", "CLICK [20]")], [("Task: sort by price. Page: results", "GO_BACK")]),
]


def test_trajectory_loss_is_dpo_on_the_summed_step_logprobs(spm_tokenizer):
    cc = CollateConfig(
        method="traj_dpo", layout="plain", max_len=96, max_prompt_len=64, max_completion_len=24, max_branches=6
    )
    mcfg = tiny_config("llama", vocab_size=len(spm_tokenizer))
    sharpen = lambda m: nnx.merge(*(lambda g, s: (g, jax.tree.map(lambda x: x * 3.0, s)))(*nnx.split(m)))  # noqa
    policy, ref = sharpen(init_model(mcfg, seed=1)), sharpen(init_model(mcfg, seed=2))
    records = [
        [_step("t", f"p{k}", side, t, p, a) for t, (p, a) in enumerate(steps)]
        for k, (c, r) in enumerate(PAIRS)
        for side, steps in (("chosen", c), ("rejected", r))
    ]
    exs = [
        build_trajectory_example(records[2 * k], records[2 * k + 1], spm_tokenizer, cc, index=k)
        for k in range(len(PAIRS))
    ]
    batch = jax.tree.map(jnp.asarray, stack(exs))
    assert exs[0]["slot_side"].tolist() == [1, 1, -1, -1, -1, 0] and exs[1]["slot_side"].tolist()[:3] == [1, -1, 0]
    f = jax.jit(lambda m, b: slot_logprobs(m, b, chunk=32)[0])
    pol, rf = f(policy, batch), f(ref, batch)
    beta = 0.5
    loss, metrics = objective(pol, rf, None, None, batch, LossConfig(method="traj_dpo", beta=beta))

    def logp(model, prompt, action):
        ids = chat_ids(spm_tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True)
        return independent_branch_logprob(model, ids[-cc.max_prompt_len :], action_ids(action, spm_tokenizer))

    deltas = []
    for c, r in PAIRS:
        side = lambda m, steps: sum(logp(m, p, a) for p, a in steps)  # noqa: E731
        deltas.append((side(policy, c) - side(ref, c)) - (side(policy, r) - side(ref, r)))
    want = np.mean([np.logaddexp(0.0, -beta * d) for d in deltas])  # -log sigmoid(beta * delta)
    assert abs(float(loss) - want) < 1e-3 * max(1.0, want), (float(loss), want)
    assert float(metrics["rewards/accuracies"]) == np.mean([d > 0 for d in deltas])
    # RPO's anchor: + alpha x the token-mean NLL of the chosen trajectories' steps
    lp = [logp(policy, p, a) for c, _ in PAIRS for p, a in c]
    n = [len(action_ids(a, spm_tokenizer)) for c, _ in PAIRS for _, a in c]
    rpo, _ = objective(pol, rf, None, None, batch, LossConfig(method="traj_dpo", beta=beta, rpo_alpha=2.0))
    assert abs(float(rpo) - (want + 2.0 * -sum(lp) / sum(n))) < 1e-3 * max(1.0, float(rpo))
    # a pair with one side only carries no loss
    one_sided = dict(batch, slot_side=batch["slot_side"].at[1].set(jnp.maximum(batch["slot_side"][1], 0)))
    loss1, _ = objective(pol, rf, None, None, one_sided, LossConfig(method="traj_dpo", beta=beta))
    assert abs(float(loss1) - np.logaddexp(0.0, -beta * deltas[0])) < 1e-3 * max(1.0, float(loss1))
    with pytest.raises(ValueError, match="plain"):
        CollateConfig(method="traj_dpo", layout="packed")
    with pytest.raises(ValueError, match="needs 7 slots; data.max_branches is 6"):
        build_trajectory_example(records[0] * 2, records[1], spm_tokenizer, cc)


def test_grouping_names_records_that_are_not_trajectory_steps():
    recs = [_step("t", "p0", "chosen", 0, "a", "CLICK [1]"), _step("t", "p0", "rejected", 0, "a", "GO_BACK")]
    assert group_pairs(recs) == {"p0": ([0], [1])}
    with pytest.raises(ValueError, match="value_source 'tree'"):
        group_pairs([dataclasses.replace(recs[0], value_source="tree")])
    with pytest.raises(ValueError, match="side='both'"):
        group_pairs([dataclasses.replace(recs[0], meta={"pair": "p0", "side": "both", "t": 0})])


@pytest.fixture(scope="module")
def traj_data(tmp_path_factory):
    """Four tasks, each the cola success and failure: a trajectory-pair dataset and a tree dataset of them."""
    from train_helpers import make_workspace

    root = tmp_path_factory.mktemp("traj")
    work = make_workspace(root / "work", n_train=8, n_test=8)
    eps = str(root / "eps")
    for k in range(4):
        runs = cola_episodes()
        for ep in runs:
            ep.summary["task_id"] = f"cola{k}"
        _write(eps, runs)
    summary = build_dataset(eps, str(root / "traj"), BuildConfig(values="trajectory", num_shards=2), progress=False)
    return work, str(root / "traj"), summary


def test_a_collection_with_one_run_per_task_has_no_pair_and_says_why(tmp_path):
    from rollout.recording import RecordingError

    _write(str(tmp_path / "eps"), cola_episodes()[:1])
    with pytest.raises(RecordingError, match=r"no trajectory pair.*collect.runs > 1.*1 tasks, 1 episodes \(1 succ"):
        build_dataset(str(tmp_path / "eps"), str(tmp_path / "ds"), BuildConfig(values="trajectory"), progress=False)


def test_fewer_pairs_than_a_batch_stop_at_the_dataset_stage(traj_data):
    """The pipeline's dataset-traj-r1 stage refuses a dataset that traj_dpo could not fill one batch from (the run
    otherwise failed at traj_dpo, after the whole SFT stage), and says how to get past it."""
    from experiment.agent_q import check_enough_pairs

    _, _, summary = traj_data
    n = summary["records"]
    check_enough_pairs(n, n)
    with pytest.raises(
        RuntimeError,
        match=rf"gave {n} trajectory pairs, fewer than one traj_dpo batch of {n + 1}.*"
        rf"batch_size to at most {n}",
    ):
        check_enough_pairs(n, n + 1)


def test_the_built_dataset_trains_with_traj_dpo(traj_data, tmp_path):
    from tgpo_jax.data.io import read_manifest
    from tgpo_jax.models.tokenizer import load_tokenizer
    from tgpo_jax.training import loop
    from tgpo_jax.training.metrics import read_metrics
    from train_helpers import tiny_config as train_config

    work, data, summary = traj_data
    assert summary["trajectory_pairs"] == {"pairs": 4} and summary["records"] == 4 * 7
    assert read_manifest(data).config["values"] == "trajectory"
    cc = CollateConfig(
        method="traj_dpo", layout="plain", max_len=128, max_prompt_len=100, max_completion_len=16, max_branches=8
    )
    src = TrajectoryExamples(data, load_tokenizer(work["tok"]), cc)
    assert len(src) == 4 and [int(v) for v in src[0]["slot_side"]] == [1] * 4 + [-1] * 3 + [0]
    with pytest.raises(ValueError, match="no trajectory pair fits data.max_branches=6"):
        TrajectoryExamples(data, src.tokenizer, dataclasses.replace(cc, max_branches=6))

    over = {
        "data.train_dir": data,
        "data.eval_dir": "",
        "data.max_branches": 8,
        "train.batch_size": 4,
        "train.max_steps": 4,
    }
    s = loop.train(train_config(work, "traj_dpo", tmp_path / "run", **over))
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    assert s["final_step"] == 4 and s["dataset"]["num_examples"] == 4
    assert rows[0]["train/loss"] == pytest.approx(np.log(2), abs=1e-5)  # policy = reference at the start
    assert rows[-1]["train/loss"] < rows[0]["train/loss"] and rows[-1]["train/rewards/accuracies"] == 1.0
    # the two kinds of dataset do not mix, and the error says what to use
    wrong = train_config(work, "traj_dpo", tmp_path / "wrong", **{"train.max_steps": 1, "data.max_branches": 8})
    with pytest.raises(ValueError, match="values=trajectory"):
        loop.train(wrong)
    with pytest.raises(ValueError, match="no node usable"):
        loop.train(train_config(work, "dpo", tmp_path / "dpo", **{**over, "data.max_branches": 4}))
