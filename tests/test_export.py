"""Export round trip: ours -> HF directory -> transformers loads cleanly with equal logits; re-import is exact."""

import json
import os

import numpy as np
import pytest

from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.hf_export import export_hf
from tgpo_jax.models.loading import flat_params, load_model
from tgpo_jax.models.transformer import init_model

VARIANTS = {
    "llama": dict(model_type="llama"),
    "llama_tied_bias": dict(model_type="llama", tie_word_embeddings=True, qkv_bias=True, o_bias=True),
    "qwen2": dict(model_type="qwen2", qkv_bias=True),
    "qwen3_tied": dict(model_type="qwen3", qk_norm=True, tie_word_embeddings=True, head_dim=24),
}


def _randomise(model, seed):
    """Give norms and biases non-trivial values so the round trip checks them too."""
    import jax

    from tgpo_jax.models.loading import model_from_flat

    rng = np.random.default_rng(seed)
    flat = {
        p: jax.numpy.asarray(np.asarray(v) + 0.1 * rng.standard_normal(v.shape).astype(np.float32))
        for p, v in flat_params(model).items()
    }
    return model_from_flat(model.cfg, flat)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_export_loads_in_transformers(name, tmp_path, spm_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = tiny_config(
        vocab_size=len(spm_tokenizer), num_layers=3, eos_token_id=spm_tokenizer.eos_token_id, **VARIANTS[name]
    )
    model = _randomise(init_model(cfg, seed=3), seed=4)
    out = export_hf(model, str(tmp_path / "export"), spm_tokenizer, max_shard_bytes=60_000)

    files = set(os.listdir(out))
    assert {"config.json", "generation_config.json", "model.safetensors.index.json"} <= files
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        assert len(set(json.load(f)["weight_map"].values())) > 1  # really sharded

    hf, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    tokens = np.random.default_rng(5).integers(0, cfg.vocab_size, size=(2, 20))
    with torch.no_grad():
        ref = hf.eval()(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(np.asarray(model(tokens)[0]), ref, atol=1e-4, rtol=0)

    # transformers forces Qwen2Tokenizer for model_type qwen2 whatever tokenizer_config says; a SentencePiece tokenizer
    # therefore round-trips with the other families only.
    tok = AutoTokenizer.from_pretrained(out)
    text = "search for red shoes\nCLICK [12]"
    assert cfg.model_type == "qwen2" or (
        tok(text, add_special_tokens=False)["input_ids"] == spm_tokenizer(text, add_special_tokens=False)["input_ids"]
    )

    again = load_model(out)  # re-import: bit-exact
    assert again.cfg.replace(eos_token_id=cfg.eos_token_id) == cfg
    a, b = flat_params(model), flat_params(again)
    assert set(a) == set(b)
    for p in a:
        np.testing.assert_array_equal(np.asarray(a[p]), np.asarray(b[p]), err_msg=p)


def test_bf16_export_and_single_file(tmp_path):
    cfg = tiny_config()
    model = init_model(cfg)
    out = export_hf(model, str(tmp_path / "bf16"), dtype="bfloat16")
    assert "model.safetensors" in os.listdir(out)
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["dtype"] == "bfloat16"
    again = load_model(out)
    import ml_dtypes

    for p, v in flat_params(model).items():
        want = np.asarray(v).astype(ml_dtypes.bfloat16).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(flat_params(again)[p]), want, err_msg=p)


def test_interrupted_export_leaves_previous_directory(tmp_path, monkeypatch):
    cfg = tiny_config()
    model = init_model(cfg)
    out = export_hf(model, str(tmp_path / "e"))
    before = sorted(os.listdir(out))

    import tgpo_jax.models.hf_export as hx

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(hx, "_write_json", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        export_hf(model, out)
    assert sorted(os.listdir(out)) == before
    assert [d for d in os.listdir(tmp_path) if d.startswith(".export-")] == []


def test_a_damaged_export_is_refused_naming_the_file(tmp_path):
    """The export records each safetensors file's sha256: a byte flipped inside a tensor (which safetensors itself
    reads as a weight) and a cut file are refused naming the file."""
    from tgpo_jax.models.weights import CHECKSUMS, CheckpointError

    out = export_hf(init_model(tiny_config()), str(tmp_path / "m"))
    st = os.path.join(out, "model.safetensors")
    with open(os.path.join(out, CHECKSUMS)) as f:
        assert set(json.load(f)["sha256"]) == {"model.safetensors"}
    intact = open(st, "rb").read()
    flipped = bytearray(intact)
    flipped[-5] ^= 0x01  # inside the last tensor's data: the header still parses
    open(st, "wb").write(bytes(flipped))
    with pytest.raises(CheckpointError, match="model.safetensors: its sha256 does not match"):
        load_model(out)
    os.remove(os.path.join(out, CHECKSUMS))  # a directory we did not write: read without the check
    load_model(out)
    open(st, "wb").write(intact[:100])
    with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors file"):
        load_model(out)
