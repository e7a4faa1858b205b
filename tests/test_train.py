"""The training loop: mesh equivalence, exact resume after a kill, learning, references, LoRA, NaN stop."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from tgpo_jax import sharding as shd
from tgpo_jax.data.pipeline import NodeExamples
from tgpo_jax.models.loading import shard_model
from tgpo_jax.models.tokenizer import load_tokenizer
from tgpo_jax.training import loop
from tgpo_jax.training.checkpoint import Checkpointer
from tgpo_jax.training.metrics import read_metrics
from tgpo_jax.training.objective import LossConfig
from tgpo_jax.training.step import OptimConfig, Trainer, to_global_batch
from train_helpers import make_workspace, run_train_cli, tiny_config


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("work"))


def _losses(out):
    return [r["train/loss"] for r in read_metrics(out) if "train/loss" in r]


@pytest.mark.parametrize(
    "method,meshes,lora",
    [
        ("tgpo", [(8, 1, 1), (2, 2, 2), (1, 4, 2)], 0),
        ("kto", [(2, 2, 2)], 0),
        ("sft", [(2, 2, 2)], 0),
        ("dpo", [(2, 2, 2)], 4),
    ],
)
def test_same_loss_and_gradients_on_every_mesh(work, method, meshes, lora):
    """Loss and gradients at the initial point and after one step, and the parameters after two steps.

    The update is plain gradient descent: its error is lr x the gradients' summation-order error, which the
    gradient check bounds. (Adam divides by sqrt(v), so on near-zero gradients it turns that noise into
    full-size updates of either sign: an Adam step tests the optimiser, not the mesh.)"""
    lr, g_atol, g_rtol = 1e-2, 1e-5, 1e-4
    c = tiny_config(work, method, "/tmp/unused")
    c.model.lora_rank = lora  # LoRA: only the adapters train, the live reference is the base with them off
    tok = load_tokenizer(work["tok"])
    src = NodeExamples(work["train"], tok, loop.collate_config(c))
    local = {k: np.stack([src[i][k] for i in range(8)]) for k in src[0]}
    base = loop.build_model(c, None, tok)
    results = []
    for shape in [(1, 1, 1), *meshes]:
        mesh = shd.make_mesh(shape)
        loss_cfg = LossConfig(method=method, reference="none" if method == "sft" else "live")
        trainer = Trainer(
            shard_model(base, mesh), loss_cfg, OptimConfig(optimizer="sgd", learning_rate=lr, schedule="constant"), mesh
        )
        batch = to_global_batch(local, mesh, 1)
        grad_fn = jax.jit(
            jax.value_and_grad(lambda p: trainer._loss(p, trainer.ref_params, jax.tree.map(lambda x: x[0], batch))[0])
        )
        state = trainer.init_state()
        points = [grad_fn(state["params"])]
        state, _ = trainer.train_step(state, batch)  # policy != reference from here on
        points.append(grad_fn(state["params"]))
        state, m = trainer.train_step(state, batch)
        results.append(
            ([(float(v), jax.device_get(g)) for v, g in points], float(m["loss"]), jax.device_get(state["params"]))
        )
    (ref_points, ref_loss2, ref_params) = results[0]
    for points, loss2, params in results[1:]:
        for (v, g), (rv, rg) in zip(points, ref_points):
            assert v == pytest.approx(rv, rel=1e-5)
            for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(rg)):
                np.testing.assert_allclose(a, b, atol=g_atol, rtol=g_rtol)
        assert loss2 == pytest.approx(ref_loss2, rel=1e-5)
        # two updates, each lr x a clipped gradient (|g| <= 1): |dp| <= 2 lr (atol + rtol), plus an ulp of p
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
            np.testing.assert_allclose(a, b, atol=2 * lr * (g_atol + g_rtol), rtol=2.5e-7)


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_resume_after_kill_is_exact(work, tmp_path):
    common = ["--config.train.max_steps=20", "--config.train.save_every=5"]
    straight = run_train_cli(work, "tgpo", tmp_path / "straight", common)
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = run_train_cli(work, "tgpo", tmp_path / "resumed", common, die_after=12)
    assert killed.returncode == 137, killed.stderr[-3000:]
    ck = Checkpointer(str(tmp_path / "resumed" / "checkpoints"))
    assert ck.latest_step() in (5, 10)  # killed after step 12: the step-15 save never happened
    ck.close()
    resumed = run_train_cli(work, "tgpo", tmp_path / "resumed", common)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = _losses(tmp_path / "straight"), _losses(tmp_path / "resumed")
    assert len(a) == len(b) == 20 and a == b  # identical, not merely close
    sa = Checkpointer(str(tmp_path / "straight" / "checkpoints"))
    sb = Checkpointer(str(tmp_path / "resumed" / "checkpoints"))
    pa = sa.manager.restore(20)["state"]["params"]
    pb = sb.manager.restore(20)["state"]["params"]
    for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def big_work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("big"), n_train=800, n_test=40)


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
@pytest.mark.parametrize("method", ["dpo", "tgpo"])
def test_preference_training_raises_heldout_reward_accuracy(big_work, tmp_path, method):
    c = tiny_config(big_work, method, tmp_path / method, **{"train.max_steps": 200})
    s = loop.train(c)
    acc = s["eval"]["eval/rewards/accuracies"]
    # chance is 0.5 (a random policy orders a pair either way); ~0.8 is typical after 200 steps
    assert acc >= 0.7, s["eval"]
    assert s["eval"]["eval/rewards/margins"] > 0


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_precomputed_reference_equals_live_and_is_cached(work, tmp_path):
    live = loop.train(tiny_config(work, "tgpo", tmp_path / "live", **{"train.max_steps": 2}))
    pre_cfg = tiny_config(work, "tgpo", tmp_path / "pre", **{"train.max_steps": 2, "loss.reference": "precomputed"})
    pre = loop.train(pre_cfg)
    assert _losses(tmp_path / "pre") == pytest.approx(_losses(tmp_path / "live"), rel=1e-5)
    assert pre["eval"]["eval/loss"] == pytest.approx(live["eval"]["eval/loss"], rel=1e-5)
    files = sorted(os.listdir(tmp_path / "pre" / "reference"))
    assert len(files) == 2  # one table for the training set, one for the eval set
    mtimes = [os.path.getmtime(tmp_path / "pre" / "reference" / f) for f in files]
    pre_cfg.train.output_dir = str(tmp_path / "pre2")
    pre_cfg.loss.reference_cache = str(tmp_path / "pre" / "reference")
    loop.train(pre_cfg)  # same fingerprint: the sidecar is reused, not recomputed
    assert [os.path.getmtime(tmp_path / "pre" / "reference" / f) for f in files] == mtimes
    pre_cfg.data.max_completion_len = 12  # another collation: another fingerprint
    pre_cfg.train.output_dir = str(tmp_path / "pre3")
    loop.train(pre_cfg)
    assert len(os.listdir(tmp_path / "pre" / "reference")) == 4


def test_behaviour_reference(work, tmp_path):
    s = loop.train(tiny_config(work, "dpo", tmp_path / "b", **{"train.max_steps": 3, "loss.reference": "behaviour"}))
    # the stored behaviour log-probs (-1.0 ... -2.0) are far from the random model's, so rewards are not 0
    assert abs(s["final"]["train/rewards/chosen"]) > 0.1
    with pytest.raises(ValueError, match="behaviour"):
        loop.train(tiny_config(work, "kto", tmp_path / "k", **{"loss.reference": "behaviour"}))


def test_lora_trains_only_adapters(work, tmp_path):
    c = tiny_config(work, "dpo", tmp_path / "lora", **{"train.max_steps": 5})
    c.model.lora_rank = 4
    s = loop.fit(c)
    trainer, state = s.trainer, s.state
    names = {"/".join(map(str, k)) for k, _ in jax.tree_util.tree_flatten_with_path(state["params"])[0]}
    assert names and all("lora" in n for n in names)
    b = [
        np.abs(np.asarray(v)).max()
        for k, v in jax.tree_util.tree_flatten_with_path(state["params"])[0]
        if "lora_b" in str(k)
    ]
    assert max(b) > 0  # adapters moved from their zero init
    # step 1: B = 0, so policy == base == reference and DPO's loss is exactly log 2
    assert _losses(tmp_path / "lora")[0] == pytest.approx(np.log(2), abs=1e-6)
    base = loop.build_model(tiny_config(work, "dpo", tmp_path / "unused"), None, load_tokenizer(work["tok"]))
    frozen = {"/".join(map(str, k)): v for k, v in jax.tree_util.tree_flatten_with_path(trainer.frozen)[0]}
    fresh = {"/".join(map(str, k)): v for k, v in jax.tree_util.tree_flatten_with_path(nnx.state(base, nnx.Param))[0]}
    assert set(frozen) == set(fresh)
    for k in frozen:
        np.testing.assert_array_equal(np.asarray(frozen[k]), np.asarray(fresh[k]), err_msg=k)  # base untouched


def test_other_methods_train(work, tmp_path):
    for method in ("sft", "kto", "kto_tree"):
        s = loop.train(tiny_config(work, method, tmp_path / method, **{"train.max_steps": 12}))
        losses = _losses(tmp_path / method)
        assert all(np.isfinite(losses)) and s["final_step"] == 12
        if method == "sft":
            assert losses[-1] < losses[0] - 0.5  # SFT visibly fits the successful actions
        events = os.listdir(tmp_path / method / "tensorboard")
        assert any(f.startswith("events.out.tfevents") for f in events)


@pytest.mark.slow  # a run stopped mid-training and its checkpoints read back: the slow tier
def test_non_finite_step_stops_with_last_checkpoint_intact(work, tmp_path, monkeypatch):
    from tgpo_jax.training import step as step_lib

    real = step_lib.objective

    def poisoned(*args, **kw):
        loss, m = real(*args, **kw)
        return loss * np.nan, m

    class Stop(Exception):
        pass

    def stop_after_2(step):
        if step == 2:
            raise Stop

    c = tiny_config(
        work, "dpo", tmp_path / "nan", **{"train.max_steps": 6, "train.save_every": 1, "train.async_checkpoint": False}
    )
    with pytest.raises(Stop):  # two good steps, saved; then the same run goes on with a poisoned loss
        loop.train(c, on_step=stop_after_2)
    monkeypatch.setattr(step_lib, "objective", poisoned)
    with pytest.raises(loop.TrainingDiverged, match=r"step 3: non-finite loss.*Last good checkpoint: step 2"):
        loop.train(c)
    ck = Checkpointer(str(tmp_path / "nan" / "checkpoints"))
    assert ck.latest_step() == 2
    restored = ck.manager.restore(2)["state"]
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(restored["params"]))
    ck.close()


def test_an_update_that_overflows_the_parameters_is_neither_applied_nor_saved(work, tmp_path):
    """Finite loss and gradient, but lr 1e39 takes the parameters past float32: the step is refused like a NaN
    loss and nothing is saved (before, the guard passed it and step 1's checkpoint was all inf)."""
    c = tiny_config(
        work,
        "dpo",
        tmp_path / "big",
        **{
            "train.max_steps": 3,
            "train.save_every": 1,
            "optim.learning_rate": 1e39,
            "optim.schedule": "constant",
            "optim.warmup_fraction": 0.0,
        },
    )
    with pytest.raises(loop.TrainingDiverged, match=r"step 1: .*updated parameters.*Last good checkpoint: none"):
        loop.train(c)
    ck = Checkpointer(str(tmp_path / "big" / "checkpoints"))
    assert ck.latest_step() is None
    ck.close()


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_resume_refuses_another_configuration_and_restart_moves_the_old_run_aside(work, tmp_path):
    out = tmp_path / "run"
    loop.train(tiny_config(work, "dpo", out, **{"train.max_steps": 2, "train.save_every": 1}))
    other = tiny_config(work, "kto", out, **{"train.max_steps": 4, "optim.learning_rate": 1e-2})
    with pytest.raises(
        loop.ConfigChanged,
        match=r"key\(s\) changed: .*method: 'dpo' -> 'kto'.*"
        r"optim.learning_rate: 0.003 -> 0.01.*train.restart=True",
    ):
        loop.train(other)
    assert json.loads((out / "config.json").read_text())["method"] == "dpo"  # the old run's config kept
    # logging and saving knobs may change on resume: steps 3-4 continue the run
    more = tiny_config(work, "dpo", out, **{"train.max_steps": 2, "train.save_every": 1, "train.log_every": 2})
    assert loop.train(more)["final_step"] == 2  # already done: resumed at 2, nothing left
    other.train.restart = True
    assert loop.train(other)["final_step"] == 4
    (aside,) = [p for p in out.iterdir() if p.name.startswith("replaced-")]
    assert json.loads((aside / "config.json").read_text())["method"] == "dpo"
    old = Checkpointer(str(aside / "checkpoints"))
    assert old.latest_step() == 2
    old.close()
    assert json.loads((out / "config.json").read_text())["method"] == "kto"


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_resume_skips_a_damaged_step_and_a_cut_metrics_line_and_ends_as_an_undisturbed_run(work, tmp_path):
    over = {"train.max_steps": 4, "train.save_every": 1, "train.async_checkpoint": False}
    ref = loop.fit(tiny_config(work, "dpo", tmp_path / "ref", **over))

    class Killed(Exception):
        pass

    def die_at_3(step):
        if step == 3:
            raise Killed

    out = tmp_path / "run"
    with pytest.raises(Killed):
        loop.train(tiny_config(work, "dpo", out, **over), on_step=die_at_3)
    state_dir = out / "checkpoints" / "3"
    biggest = max((p for p in state_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])  # step 3 truncated
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "train/lo')  # a write cut short
    res = loop.fit(tiny_config(work, "dpo", out, **over))
    assert res.summary["final_step"] == 4
    assert [p.name.split("-")[0] for p in (tmp_path / "run" / "checkpoints-damaged").iterdir()] == ["3"]
    for a, b in zip(jax.tree.leaves(ref.state["params"]), jax.tree.leaves(res.state["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # steps 3-4 redone from step 2, exactly
    assert [r["step"] for r in read_metrics(str(out))] == [r["step"] for r in read_metrics(str(tmp_path / "ref"))]


def test_config_changes_names_nested_keys_and_ignores_resume_free_ones():
    saved = {
        "method": "sft",
        "optim": {"learning_rate": 1.0},
        "train": {"progress": True, "seed": 0},
        "mesh": {"shape": [1, -1, 1]},
    }
    now = {
        "method": "sft",
        "optim": {"learning_rate": 2.0},
        "train": {"progress": False, "seed": 0, "new": 1},
        "mesh": {"shape": [8, 1, 1]},
    }
    assert loop.config_changes(saved, now) == {"optim.learning_rate": (1.0, 2.0), "train.new": ("<absent>", 1)}
    assert loop.config_changes(saved, saved) == {}


@pytest.mark.parametrize("key,value", [("train.batch_size", 0), ("optim.grad_accum", 0), ("train.batch_size", -8)])
def test_a_batch_size_below_one_is_an_error(work, tmp_path, key, value):
    with pytest.raises(ValueError, match=rf"{key}={value}: must be a positive integer"):
        loop.train(tiny_config(work, "dpo", tmp_path / "x", **{key: value}))


def test_batch_that_does_not_divide_the_mesh_is_an_error(work, tmp_path):
    c = tiny_config(work, "dpo", tmp_path / "x", **{"mesh.shape": (8, 1, 1), "train.batch_size": 4})
    with pytest.raises(ValueError, match="must divide over the mesh"):
        loop.train(c)


def _decayed_adam_steps(model, src, mesh, steps: int, update_mask=None):
    """SFT Adam steps with weight decay (lr 1e-2) on batches of 8 of ``src``: the parameters before and after, flat
    ({"layers/q_proj": array, ...})."""
    from tgpo_jax.models.loading import _flatten

    trainer = Trainer(
        model,
        LossConfig(method="sft", reference="none"),
        OptimConfig(learning_rate=1e-2, schedule="constant", weight_decay=0.1),
        mesh,
        update_mask=update_mask,
    )

    def flat(params):
        return {"/".join(map(str, k)): np.asarray(v) for k, v in _flatten(nnx.to_pure_dict(params))}

    state = trainer.init_state()
    before = flat(jax.device_get(state["params"]))
    for i in range(steps):
        state, _ = trainer.train_step(
            state, to_global_batch({k: np.stack([src[8 * i + j][k] for j in range(8)]) for k in src[0]}, mesh, 1)
        )
    return before, flat(jax.device_get(state["params"]))


@pytest.mark.parametrize("recency,trigram", [(0.0, 0.0), (20.0, 0.0), (20.0, 0.5)])
def test_freeze_leaves_the_planted_circuit_alone(work, recency, trigram):
    """model.freeze=copy_circuit: Adam steps (with weight decay) move every trainable entry but no frozen one; with
    model.circuit_recency the trigger pieces' flags are planted and frozen too, with model.circuit_trigram the
    third-previous-token head."""
    import recipes
    from recipes.scratch_copy import circuit_config, frozen_mask, recency_token_ids

    recipes.register_all()
    c = tiny_config(
        work,
        "sft",
        "/tmp/unused",
        **{
            "model.scratch": "copy",
            "model.init": "copy_circuit",
            "model.freeze": "copy_circuit",
            "optim.weight_decay": 0.1,
            "model.circuit_recency": recency,
            "model.circuit_trigram": trigram,
            "model.circuit_recency_after": r"[a-z]",
        },
    )
    tok = load_tokenizer(work["tok"])
    src = NodeExamples(work["train"], tok, loop.collate_config(c))
    mesh = shd.make_mesh((1, 1, 1))
    model = loop.build_model(c, mesh, tok)
    before, after = _decayed_adam_steps(model, src, mesh, 3, update_mask=loop.update_mask(c, model))
    frozen = frozen_mask(model.cfg, circuit_config(c.model))
    assert set(frozen) == set(before)
    triggers = recency_token_ids(tok, r"[a-z]")
    assert len(triggers) > 5
    flags = before["embed"][triggers, 33]  # de + 1 with the default CircuitConfig.de = 32
    assert np.all(flags == 0.5) if recency else np.all(flags == 0.0)
    assert frozen["embed"][:, 33].all() == bool(recency)
    assert frozen["layers/q_proj"][0, :, 3].all() == bool(trigram)  # the copy preset: heads 2, 3 read kv head 1
    for path, mask in frozen.items():
        moved = after[path] != before[path]
        assert not moved[mask].any(), f"{path}: {int(moved[mask].sum())} frozen entries changed"
        share = 0.05 if path == "embed" else 0.5  # rows of tokens the batches lack get no gradient
        assert moved[~mask].mean() > share, f"{path}: only {moved[~mask].mean():.2f} of trainable entries moved"


def test_freeze_refuses_what_it_cannot_do(work):
    import recipes

    recipes.register_all()
    c = tiny_config(work, "sft", "/tmp/unused", **{"model.freeze": "everything"})
    tok = load_tokenizer(work["tok"])
    model = loop.build_model(c, shd.make_mesh((1, 1, 1)), tok)
    with pytest.raises(ValueError, match="model.freeze='everything'"):
        loop.update_mask(c, model)
    c.model.freeze = "copy_circuit"  # the tiny preset's heads are too narrow for the circuit
    with pytest.raises(ValueError, match="cannot plant the copy circuit"):
        loop.update_mask(c, model)


@pytest.mark.parametrize("tied", [True, False])
def test_training_the_top_layers_leaves_the_rest_as_it_was(work, tied):
    """model.train_layers=1: Adam steps with weight decay move the top layer, the final norm and the output projection
    (the tied embedding through it), and nothing of the layers below or of an untied input embedding."""
    c = tiny_config(work, "sft", "/tmp/unused", **{"model.train_layers": 1, "optim.weight_decay": 0.1})
    tok = load_tokenizer(work["tok"])
    src = NodeExamples(work["train"], tok, loop.collate_config(c))
    mesh = shd.make_mesh((1, 1, 1))
    model = loop.build_model(c, mesh, tok)
    if model.cfg.tie_word_embeddings != tied:
        from tgpo_jax.models.transformer import init_model

        model = shard_model(init_model(model.cfg.replace(tie_word_embeddings=tied), seed=0), mesh)
    assert model.cfg.train_layers == 1 and model.cfg.tie_word_embeddings == tied and model.cfg.num_layers >= 2
    cut = model.cfg.num_layers - 1
    before, after = _decayed_adam_steps(model, src, mesh, 2)
    for path in before:
        moved = after[path] != before[path]
        if path.startswith("layers/"):
            assert not moved[:cut].any(), path
            assert moved[cut:].mean() > 0.5, path
        elif path == "embed" and not tied:
            assert not moved.any()
        else:
            assert moved.mean() > (0.05 if path == "embed" else 0.5), path
