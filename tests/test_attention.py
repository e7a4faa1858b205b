"""model.attention: the fused implementations against our dense einsum, on the packed tree layout's mask.

On the CPU the ``xla`` path of ``jax.nn.dot_product_attention`` must equal the dense one in float32 (same math, other
code); on a GPU the ``cudnn`` kernel must match dense in bf16 to bf16's rounding. ``auto`` must pick dense here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tgpo_jax.models import transformer
from tgpo_jax.models.config import ModelConfig, tiny_config
from tgpo_jax.models.transformer import attention, attention_impl, cached_attention, init_model
from tgpo_jax.training.logprobs import segment_mask

ON_GPU = jax.default_backend() == "gpu"


def tree_segments(rows: int = 2, length: int = 24) -> np.ndarray:
    """[N, L] segments: a prompt (0) then branches 1, 2, 3 packed after it, then padding (-1), per row."""
    seg = np.full((rows, length), -1, np.int32)
    seg[0, :8], seg[0, 8:13], seg[0, 13:17], seg[0, 17:20] = 0, 1, 2, 3
    seg[1, :11], seg[1, 11:19] = 0, 1
    return seg


def qkv(dtype, b=2, t=24, h=4, k=2, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(b, t, n, d)), dtype) for n in (h, k, k)]


def assert_same_gradients(q, k, v, mask, impl):
    """float32: ``impl``'s gradients of sum(sin(attention)) w.r.t. q, k and v equal dense's to 1e-5."""

    def loss(impl):
        return lambda q, k, v: jnp.sum(jnp.sin(attention(q, k, v, mask, impl)))

    g_dense = jax.grad(loss("dense"), argnums=(0, 1, 2))(q, k, v)
    g_impl = jax.grad(loss(impl), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_impl, g_dense):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_xla_attention_equals_dense_on_a_tree_mask():
    q, k, v = qkv(jnp.float32)
    mask = segment_mask(jnp.asarray(tree_segments()))
    dense = attention(q, k, v, mask, "dense")
    fused = attention(q, k, v, mask, "xla")
    np.testing.assert_allclose(np.asarray(fused), np.asarray(dense), rtol=1e-5, atol=1e-6)
    # a branch never sees another branch: changing branch 2's keys leaves branch 1's outputs alone
    k2 = k.at[0, 13:17].add(5.0)
    moved = attention(q, k2, v, mask, "xla")
    np.testing.assert_array_equal(np.asarray(moved[0, :13]), np.asarray(fused[0, :13]))
    assert not np.allclose(np.asarray(moved[0, 13:17]), np.asarray(fused[0, 13:17]))

    assert_same_gradients(q, k, v, mask, "xla")


def test_model_hidden_states_do_not_depend_on_the_attention_implementation():
    cfg = tiny_config("qwen2", num_layers=2)
    tokens = jnp.asarray(np.random.default_rng(1).integers(3, 256, (2, 24)), jnp.int32)
    seg = jnp.asarray(tree_segments())
    mask = segment_mask(seg)
    positions = jnp.broadcast_to(jnp.arange(24), (2, 24))
    out = {}
    for impl in ("dense", "blocked", "xla"):
        model = init_model(cfg.replace(attention=impl), seed=0)
        out[impl] = np.asarray(model.hidden_states(tokens, positions, mask)[0])
    np.testing.assert_allclose(out["xla"], out["dense"], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out["blocked"], out["dense"], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("t", [24, 21])  # 3 whole blocks of 8; and a short last block
def test_blocked_attention_equals_dense_on_a_tree_mask(monkeypatch, t):
    """The blocked path skips the keys after each query block; on causal tree masks that must change nothing, in the
    outputs or the gradients (float32: same sums in another grouping)."""
    monkeypatch.setattr(transformer, "ATTENTION_BLOCK", 8)
    q, k, v = qkv(jnp.float32, t=t)
    mask = segment_mask(jnp.asarray(tree_segments(length=t)))
    dense = attention(q, k, v, mask, "dense")
    blocked = attention(q, k, v, mask, "blocked")
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(dense), rtol=1e-5, atol=1e-6)

    assert_same_gradients(q, k, v, mask, "blocked")
    # it really skips the later keys: under a mask that lets queries see them (outside its precondition) the first
    # block differs from dense, and the last block, which reads every key, does not
    full = jnp.ones((q.shape[0], t, t), bool)
    skipped, seen = attention(q, k, v, full, "blocked"), attention(q, k, v, full, "dense")
    assert not np.allclose(np.asarray(skipped[:, :8]), np.asarray(seen[:, :8]), atol=1e-3)
    np.testing.assert_allclose(np.asarray(skipped[:, 16:]), np.asarray(seen[:, 16:]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="as many keys as queries"):
        attention(q[:, :8], k, v, mask[:, :8], "blocked")


def test_attention_setting_is_checked_and_auto_resolves():
    with pytest.raises(ValueError, match="attention='flash'"):
        tiny_config(attention="flash")
    with pytest.raises(ValueError, match="needs dtype='bfloat16'"):
        tiny_config(attention="cudnn", dtype="float32")
    assert attention_impl("auto", jnp.float32, 64) == "blocked"
    assert attention_impl("auto", jnp.bfloat16, 64) == ("cudnn" if ON_GPU else "blocked")
    assert attention_impl("auto", jnp.bfloat16, 12) == "blocked"  # not a multiple of 8: cuDNN refuses it
    assert attention_impl("xla", jnp.float32, 64) == "xla"
    assert isinstance(tiny_config(attention="auto"), ModelConfig)


@pytest.mark.skipif(not ON_GPU, reason="cuDNN's fused attention needs a GPU")
def test_cudnn_attention_matches_dense_in_bf16():
    q, k, v = qkv(jnp.bfloat16, t=128, h=8, k=2, d=64)
    seg = np.full((2, 128), -1, np.int32)
    seg[0, :64], seg[0, 64:96], seg[0, 96:120] = 0, 1, 2
    seg[1, :100], seg[1, 100:128] = 0, 1
    mask = segment_mask(jnp.asarray(seg))
    dense = np.asarray(attention(q, k, v, mask, "dense").astype(jnp.float32))
    fused = np.asarray(attention(q, k, v, mask, "cudnn").astype(jnp.float32))
    # both round the probabilities and the output to bf16 (8 bits of mantissa): a few ulps of an O(1) output
    np.testing.assert_allclose(fused, dense, atol=3e-2, rtol=3e-2)

    def loss(impl):
        return lambda q, k, v: jnp.sum(attention(q, k, v, mask, impl).astype(jnp.float32) ** 2)

    g_dense = jax.grad(loss("dense"), argnums=(0, 1, 2))(q, k, v)
    g_fused = jax.grad(loss("cudnn"), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_fused, g_dense):
        a, b = np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32))
        assert np.linalg.norm(a - b) <= 2e-2 * np.linalg.norm(b), np.linalg.norm(a - b) / np.linalg.norm(b)


def _prefill_logits(cfg, flat, prompts, max_tokens=16):
    """The sampler's prefill (the prompt's keys only, the model's attention implementation) -> logits [B, V], and
    its greedy continuation."""
    from tgpo_jax.models.loading import model_from_flat
    from tgpo_jax.models.sampler import Sampler, SamplingParams

    sampler = Sampler(model_from_flat(cfg, flat))
    p = 64
    tokens = np.zeros((len(prompts), p), np.int32)
    valid = np.zeros((len(prompts), p), bool)
    for i, x in enumerate(prompts):
        tokens[i, p - len(x) :], valid[i, p - len(x) :] = x, True
    logits = sampler._prefill(sampler.weights, jnp.asarray(tokens), jnp.asarray(valid), p + max_tokens)[1]
    out = sampler.generate_ids(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return np.asarray(logits, np.float32), [toks for toks, _, _ in out]


# left-padded prompts of several lengths: padding queries see no valid key (the prefill lets them see themselves)
PREFILL_PROMPTS = [[5, 17, 33, 9], list(range(3, 40)), [250], [7] * 64]


@pytest.mark.parametrize("impl, dtype", [("xla", "float32")] + ([("cudnn", "bfloat16")] if ON_GPU else []))
def test_sampler_prefill_is_the_same_under_a_fused_attention(impl, dtype):
    from tgpo_jax.models.loading import flat_params

    cfg = tiny_config("qwen2", num_layers=2, eos_token_id=None, dtype=dtype, param_dtype=dtype)
    # scaled-up weights: peaked next-token distributions, so greedy has no near-ties to break differently
    flat = {k: v * (1.0 if "norm" in k else 4.0) for k, v in flat_params(init_model(cfg, seed=0)).items()}
    dense, dense_toks = _prefill_logits(cfg, flat, PREFILL_PROMPTS)
    fused, fused_toks = _prefill_logits(cfg.replace(attention=impl), flat, PREFILL_PROMPTS)
    assert np.isfinite(fused).all()
    if dtype == "float32":
        np.testing.assert_allclose(fused, dense, rtol=1e-4, atol=1e-4)
        assert fused_toks == dense_toks
    else:  # bf16 rounding of the probabilities and outputs: compare the logits as a whole and the first token
        assert np.linalg.norm(fused - dense) <= 3e-2 * np.linalg.norm(dense)
        assert [t[0] for t in fused_toks] == [t[0] for t in dense_toks]


@pytest.mark.parametrize("t, index", [(1, 0), (1, 13), (3, 9)])
def test_a_decode_steps_attention_equals_writing_its_keys_into_the_cache_first(t, index):
    rng = np.random.default_rng(t + index)
    b, s, h, kv, d = 2, 20, 4, 2, 16
    q, k, v = (jnp.asarray(rng.normal(size=(b, t, n, d)), jnp.float32) for n in (h, kv, kv))
    # the cache before the step: keys up to index, garbage beyond (a slot this step writes must not be read)
    ck, cv = (jnp.asarray(rng.normal(size=(b, s, kv, d)), jnp.float32) for _ in range(2))
    mask = np.zeros((b, t, s), bool)
    mask[:, :, :index] = rng.random((b, t, index)) < 0.8  # padding / other branches masked out
    for i in range(t):  # each new token sees itself and the step's earlier ones
        mask[:, i, index : index + i + 1] = True
    mask = jnp.asarray(mask)
    full_k = jax.lax.dynamic_update_slice_in_dim(ck, k, index, axis=1)
    full_v = jax.lax.dynamic_update_slice_in_dim(cv, v, index, axis=1)
    want = attention(q, full_k, full_v, mask)
    # the cache in KVCache's layouts: keys [B, K, S, Dh], values [B, K, Dh, S]
    got = cached_attention(q, k, v, ck.transpose(0, 2, 1, 3), cv.transpose(0, 2, 3, 1), mask, index)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
