"""tgpo_jax/models/matmul.py: ``proj`` against numpy references, forward and both gradients, float32 and bf16."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from tgpo_jax.models.matmul import proj

SPEC = "btd,dhk->bthk"  # the q projection's: two free index groups on each side


def operands(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 5, 12)).astype(np.float32)
    w = rng.normal(size=(12, 3, 4)).astype(np.float32)
    g = rng.normal(size=(2, 5, 3, 4)).astype(np.float32)  # the cotangent of the output
    return [a.astype(dtype) for a in (x, w, g)]


def grads(x, w, g):
    out, vjp = jax.vjp(lambda x, w: proj(SPEC, x, w), jnp.asarray(x), jnp.asarray(w))
    return (np.asarray(out), *map(np.asarray, vjp(jnp.asarray(g))))


def test_float32_is_the_einsum_and_its_gradients():
    x, w, g = operands(np.float32)
    out, dx, dw = grads(x, w, g)
    np.testing.assert_allclose(out, np.einsum(SPEC, x, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, np.einsum("bthk,dhk->btd", g, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, np.einsum("btd,bthk->dhk", x, g), rtol=1e-5, atol=1e-5)


def test_bf16_rounds_float32_sums_once_in_both_passes():
    """Each of the three dots is the float32 sum of the bf16 operands' products, rounded to bf16 once: so within one
    bf16 rounding (relative 2^-8) of the numpy float64 reference; a wrong transpose or a lost rounding would not be."""
    x, w, g = operands(ml_dtypes.bfloat16)
    out, dx, dw = grads(x, w, g)
    assert out.dtype == dx.dtype == dw.dtype == ml_dtypes.bfloat16
    f = lambda a: a.astype(np.float64)  # noqa: E731
    for got, want in (
        (out, np.einsum(SPEC, f(x), f(w))),
        (dx, np.einsum("bthk,dhk->btd", f(g), f(w))),
        (dw, np.einsum("btd,bthk->dhk", f(x), f(g))),
    ):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2**-8, atol=1e-6)


def test_a_spec_it_cannot_transpose_is_refused():
    with pytest.raises(ValueError, match=r"index \['i'\] of the first operand appears nowhere else"):
        proj("ij,jk->k", jnp.ones((2, 3)), jnp.ones((3, 4)))


def test_a_bf16_models_embedding_table_gets_its_gradient():
    """Training a bf16 model reaches its embedding table: the rows of the tokens in the batch get a gradient, the
    others none (the decode path gathers the table as bits, which have no gradient; training must not)."""
    from flax import nnx

    from tgpo_jax.models.config import tiny_config
    from tgpo_jax.models.transformer import init_model

    m = init_model(tiny_config("llama", dtype="bfloat16", param_dtype="bfloat16"))
    tokens = jnp.asarray([[3, 5, 7, 5]], jnp.int32)
    g = nnx.grad(lambda m: m(tokens)[0].astype(jnp.float32).sum())(m)
    rows = np.abs(np.asarray(g.embed[...], np.float32)).sum(axis=1)
    assert (rows[[3, 5, 7]] > 0).all() and rows[[0, 1, 2, 4, 6, 8]].sum() == 0
