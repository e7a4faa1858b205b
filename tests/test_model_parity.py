"""Logit parity with transformers' PyTorch models for every supported family (fp32, random weights)."""

import numpy as np
import pytest

from hf_helpers import FAMILIES, hf_logits, random_hf_model
from tgpo_jax.models.loading import load_model

TOL = 2e-4  # max abs logit difference, fp32; logits are O(1-10) with these random weights


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_transformers(family, tmp_path):
    hf = random_hf_model(family)
    # the sharded index path is exercised on one family, the single-file path on the rest
    hf.save_pretrained(tmp_path, max_shard_size="100KB" if family == "qwen2" else "1GB")
    ours = load_model(str(tmp_path))
    assert ours.cfg.tie_word_embeddings == bool(hf.config.tie_word_embeddings)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, hf.config.vocab_size, size=(2, 40))
    ref = hf_logits(hf, tokens)
    got = np.asarray(ours(tokens)[0])
    assert np.abs(ref).max() > 1.0  # the comparison is not between near-zero logits
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


def test_left_padding_matches_unpadded(tmp_path):
    """A left-padded row gives the same logits as the same tokens alone (positions from the mask)."""
    import jax.numpy as jnp

    from tgpo_jax.models.transformer import causal_mask, positions_from_valid

    hf = random_hf_model("qwen3")
    hf.save_pretrained(tmp_path)
    ours = load_model(str(tmp_path))
    rng = np.random.default_rng(1)
    seq = rng.integers(3, 200, size=(1, 12))
    padded = np.concatenate([np.zeros((1, 5), int), seq], axis=1)
    valid = jnp.asarray(padded != 0)
    got = np.asarray(ours(padded, positions_from_valid(valid), causal_mask(valid))[0])[:, 5:]
    ref = hf_logits(hf, seq)
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


def test_bf16_compute_close_to_fp32(tmp_path):
    hf = random_hf_model("llama")
    hf.save_pretrained(tmp_path)
    f32 = load_model(str(tmp_path))
    bf16 = load_model(str(tmp_path), dtype="bfloat16")
    tokens = np.random.default_rng(2).integers(0, 257, size=(2, 16))
    low = bf16(tokens)[0]
    assert str(low.dtype) == "bfloat16"
    a, b = np.asarray(f32(tokens)[0]), np.asarray(low).astype(np.float32)
    # bf16 has ~3 significant digits; the argmax should agree almost everywhere
    assert np.mean(a.argmax(-1) == b.argmax(-1)) > 0.9
    assert np.abs(a - b).max() < 0.1 * np.abs(a).max()
