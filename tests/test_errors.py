"""Bad input is a clear error naming the problem."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tgpo_jax.models.config import ModelConfig, UnsupportedModelError, tiny_config
from tgpo_jax.models.hf_export import export_hf
from tgpo_jax.models.loading import load_model
from tgpo_jax.models.transformer import init_model
from tgpo_jax.models.weights import CHECKSUMS, CheckpointError


@pytest.fixture
def exported(tmp_path):
    """An exported model as a user edits it by hand: without the export's checksums (which an edit would fail), so
    the loader's own checks speak."""
    out = export_hf(init_model(tiny_config()), str(tmp_path / "ckpt"))
    os.remove(os.path.join(out, CHECKSUMS))
    return out


def _edit_config(path, **changes):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def test_unsupported_architecture(exported):
    _edit_config(exported, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(UnsupportedModelError, match=r"model_type='gpt2'.*GPT2LMHeadModel"):
        load_model(exported)


def test_unsupported_options():
    with pytest.raises(UnsupportedModelError, match="yarn"):
        tiny_config(rope_scaling={"rope_type": "yarn", "factor": 4.0})
    hf = tiny_config().to_hf_dict()
    with pytest.raises(UnsupportedModelError, match="use_sliding_window"):
        ModelConfig.from_hf_dict({**hf, "model_type": "qwen2", "use_sliding_window": True})
    with pytest.raises(UnsupportedModelError, match="gelu"):
        ModelConfig.from_hf_dict({**hf, "hidden_act": "gelu"})


def test_missing_tensor_is_named(exported):
    path = os.path.join(exported, "model.safetensors")
    tensors = load_file(path)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path)
    with pytest.raises(CheckpointError, match=r"missing tensors: model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(exported)


def test_misshaped_tensor_is_named(exported):
    path = os.path.join(exported, "model.safetensors")
    tensors = load_file(path)
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 64), np.float32)
    save_file(tensors, path)
    with pytest.raises(CheckpointError, match=r"k_proj\.weight.*shape \(16, 64\), expected \(32, 64\)"):
        load_model(exported)


def test_config_disagreeing_with_weights(exported):
    _edit_config(exported, intermediate_size=100)
    with pytest.raises(CheckpointError, match=r"gate_proj\.weight.*expected \(100, 64\)"):
        load_model(exported)


def test_missing_shard_and_paths(exported, tmp_path):
    os.remove(os.path.join(exported, "model.safetensors"))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(exported)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_model(str(tmp_path / "absent"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(CheckpointError, match="cannot read GGUF"):
        load_model(str(bad))
