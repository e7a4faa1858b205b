"""Projections whose dots accumulate in float32 in the forward *and* the backward pass.

XLA:CPU runs a bf16 x bf16 dot that returns bf16 at about half the rate of the same dot asked for a float32 result
(measured on an AVX512-BF16 EPYC: 2048x576x1536 at 191 vs 380 GFLOP/s). ``proj`` asks for the float32 result and rounds
it to the input dtype, which is
what the bf16 dot computes anyway (float32 accumulation, one rounding). Its backward does the same for both transposed
dots, with the cotangent rounded to the compute dtype first, as a plain bf16 einsum's backward would see it; JAX's own
transpose of a ``preferred_element_type=float32`` dot would instead multiply a float32 cotangent by a bf16 operand,
which XLA:CPU runs as a float32 dot. In float32 ``proj`` is an ordinary einsum.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def _split(spec: str) -> tuple[str, str, str]:
    ins, out = spec.replace(" ", "").split("->")
    a, b = ins.split(",")
    return a, b, out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def proj(spec: str, x: jax.Array, w: jax.Array) -> jax.Array:
    """``jnp.einsum(spec, x, w)`` in x's dtype, accumulated in float32.

    spec is a plain two-operand contraction (every index of an operand appears in the other operand or the output:
    no index is summed within one operand), so both transposes are einsums of the same letters."""
    check_spec(spec)
    return jnp.einsum(spec, x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def _fwd(spec, x, w):
    return proj(spec, x, w), (x, w)


def _bwd(spec, res, g):
    x, w = res
    a, b, out = _split(spec)
    g = g.astype(x.dtype)
    dx = jnp.einsum(f"{out},{b}->{a}", g, w, preferred_element_type=jnp.float32).astype(x.dtype)
    dw = jnp.einsum(f"{a},{out}->{b}", x, g, preferred_element_type=jnp.float32).astype(w.dtype)
    return dx, dw


proj.defvjp(_fwd, _bwd)


def check_spec(spec: str) -> None:
    """Raise ValueError for a spec ``proj``'s backward cannot transpose (an index summed within one operand)."""
    a, b, out = _split(spec)
    for name, mine, other in (("first", a, b), ("second", b, a)):
        lonely = set(mine) - set(other) - set(out)
        if lonely:
            raise ValueError(f"proj spec {spec!r}: index {sorted(lonely)} of the {name} operand appears nowhere else")
