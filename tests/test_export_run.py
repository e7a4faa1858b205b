"""A training run (Orbax checkpoints) -> Hugging Face directory: transformers loads exactly the trained weights."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import CORPUS

# two training runs, exported and loaded in transformers, > 60 s on 2 cores: the slow tier (.ci/run runs it)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny trained runs (full fine-tuning and LoRA), 2 steps each, a checkpoint after every step.

    SFT: the export does not depend on the objective, and its train step compiles in about half the time.
    """
    from configs import sft
    from tgpo_jax.data.io import write_dataset
    from tgpo_jax.data.synthetic import ITEMS, synthetic_nodes
    from tgpo_jax.models.tokenizer import train_sentencepiece
    from tgpo_jax.training.loop import train

    root = tmp_path_factory.mktemp("export_run")
    tok = train_sentencepiece(CORPUS * 20 + [" ".join(ITEMS)] * 20, str(root / "tok"), vocab_size=400)
    write_dataset(synthetic_nodes(16, seed=1), str(root / "train"))
    out = {}
    for name, lora in (("full", 0), ("lora", 4)):
        c = sft.get_config("tiny")
        c.model.tokenizer = tok
        c.model.lora_rank = lora
        c.data.train_dir = str(root / "train")
        c.train.output_dir = str(root / name)
        c.train.max_steps, c.train.batch_size, c.train.save_every = 2, 4, 1
        c.train.progress, c.train.async_checkpoint = False, False
        c.optim.learning_rate, c.optim.warmup_steps = 1e-3, 0
        c.mesh.shape = (1, 1, 1)
        train(c)
        out[name] = str(root / name)
    return out


def _tokens(vocab_size):
    return np.random.default_rng(7).integers(4, vocab_size, size=(2, 24))


def _hf_logits(out_dir, tokens):
    import torch
    from transformers import AutoModelForCausalLM

    hf, info = AutoModelForCausalLM.from_pretrained(out_dir, output_loading_info=True, dtype=torch.float32)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    with torch.no_grad():
        return hf.eval()(torch.tensor(tokens)).logits.numpy()


def _initial_logits(cfg, tokenizer, tokens):
    """The run's model before training: build_model from the same config (same init seed / base weights)."""
    from tgpo_jax import sharding as shd
    from tgpo_jax.training.loop import build_model

    return np.asarray(build_model(cfg, shd.make_mesh((1, 1, 1)), tokenizer)(tokens)[0])


@pytest.mark.parametrize("name", ["full", "lora"])
def test_exported_run_has_the_trained_weights(name, runs, tmp_path):
    from tgpo_jax.training.restore import export_run, restore_checkpoint

    # a tiny shard limit: the export is split over several safetensors files with an index
    out, line = export_run(runs[name], str(tmp_path / "hf"), max_shard_gb=2e-4)
    assert out == str(tmp_path / "hf") and "step 2" in line and ("LoRA rank 4 merged" in line) == (name == "lora")
    assert os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    assert os.path.exists(os.path.join(out, "tokenizer_config.json"))
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["dtype"] == "float32"

    model, tokenizer, cfg, step = restore_checkpoint(runs[name])
    assert step == 2
    assert bool(model.cfg.lora_rank) == (name == "lora")  # the restored model keeps its adapters
    tokens = _tokens(model.cfg.vocab_size)
    ours = np.asarray(model(tokens)[0])
    ref = _hf_logits(out, tokens)
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)
    # ... and those are the trained weights, not the initial ones
    assert np.abs(_initial_logits(cfg, tokenizer, tokens) - ref).max() > 1e-3

    # an earlier checkpoint is a different model
    earlier, _, _, _ = restore_checkpoint(runs[name], step=1)
    assert np.abs(np.asarray(earlier(tokens)[0]) - ours).max() > 1e-4


def test_restore_errors(runs, tmp_path):
    from tgpo_jax.training.restore import checkpoint_steps, restore_checkpoint

    assert checkpoint_steps(runs["full"]) == [1, 2]
    with pytest.raises(ValueError, match=r"step 5.*available steps: \[1, 2\]"):
        restore_checkpoint(runs["full"], step=5)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        restore_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        restore_checkpoint(str(tmp_path / "missing"))
    no_ckpt = tmp_path / "no_ckpt"
    no_ckpt.mkdir()
    shutil.copy(os.path.join(runs["full"], "config.json"), no_ckpt / "config.json")
    with pytest.raises(FileNotFoundError, match="no checkpoints in .*no_ckpt"):
        restore_checkpoint(str(no_ckpt))
    (no_ckpt / "checkpoints").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoints in .*no_ckpt"):
        restore_checkpoint(str(no_ckpt))


def test_cli_flags():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(
        [sys.executable, "-m", "launch.export", "--help"], cwd=root, capture_output=True, text=True, timeout=60
    )
    for flag in ("--run_dir", "--step", "--out", "--dtype", "--max_shard_gb"):
        assert flag in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "launch.export", "--out=/nonexistent"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "--run_dir" in r.stderr
