"""Decoder-only transformer (Llama 3.x / SmolLM2, Qwen2/2.5, Qwen3) in Flax NNX.

Layer weights are stacked on a leading layer axis and the forward pass is a ``lax.scan`` over
layers: compile time stays flat in depth (a 40-layer Qwen3-14B compiles like a 1-layer model) and
the same arrays shard with one rule per weight kind. Attention takes an explicit boolean mask
[B, T, S] so packed tree sequences (prompt + several branches) and KV-cache decoding share one path.

Shapes: B batch, T query length, S key length, D hidden, H heads, K kv heads, G = H // K,
Dh head dim, F MLP width, V vocab, L layers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgpo_jax.models.config import LORA_SPLIT, ModelConfig
from tgpo_jax.models.matmul import proj

# Every stacked per-layer weight: name -> shape builder (cfg -> shape without the L axis).
LAYER_SHAPES = {
    "attn_norm": lambda c: (c.hidden_size,),
    "q_proj": lambda c: (c.hidden_size, c.num_heads, c.head_dim),
    "k_proj": lambda c: (c.hidden_size, c.num_kv_heads, c.head_dim),
    "v_proj": lambda c: (c.hidden_size, c.num_kv_heads, c.head_dim),
    "o_proj": lambda c: (c.num_heads, c.head_dim, c.hidden_size),
    "q_bias": lambda c: (c.num_heads, c.head_dim),
    "k_bias": lambda c: (c.num_kv_heads, c.head_dim),
    "v_bias": lambda c: (c.num_kv_heads, c.head_dim),
    "o_bias": lambda c: (c.hidden_size,),
    "q_norm": lambda c: (c.head_dim,),
    "k_norm": lambda c: (c.head_dim,),
    "mlp_norm": lambda c: (c.hidden_size,),
    "gate_proj": lambda c: (c.hidden_size, c.intermediate_size),
    "up_proj": lambda c: (c.hidden_size, c.intermediate_size),
    "down_proj": lambda c: (c.intermediate_size, c.hidden_size),
}
NORMS = ("attn_norm", "mlp_norm", "q_norm", "k_norm")
BIASES = ("q_bias", "k_bias", "v_bias", "o_bias")


def layer_param_names(cfg: ModelConfig) -> list[str]:
    """Names of the per-layer weights ``cfg`` has: projections and norms, plus the biases and q/k norms its architecture
    uses."""
    names = ["attn_norm", "q_proj", "k_proj", "v_proj", "o_proj", "mlp_norm", "gate_proj", "up_proj", "down_proj"]
    if cfg.qkv_bias:
        names += ["q_bias", "k_bias", "v_bias"]
    if cfg.o_bias:
        names += ["o_bias"]
    if cfg.qk_norm:
        names += ["q_norm", "k_norm"]
    return names


class KVCache(NamedTuple):
    """Keys and values of the tokens decoded so far, in the compute dtype; 16-bit floats held as their bits (uint16).

    Layouts chosen for XLA:CPU's dots (its YNNPACK fusions): a decode step's scores read a layer's keys as [K, S, Dh]
    and its output reads the values as [K, Dh, S], each with the contracted axis minor. In the [B, S, K, Dh] layout
    the step copied and transposed every layer's cache (the values' transpose alone was 13 of the 105 thread-ms of a
    bf16 step of SmolLM2-135M at batch 8); as bf16 the
    cache, a loop carry, was copied to bits for the layer scan every step (``as_bits``)."""

    k: jax.Array  # [L, B, K, S, Dh]
    v: jax.Array  # [L, B, K, Dh, S]

    @classmethod
    def zeros(cls, cfg: ModelConfig, batch: int, length: int) -> "KVCache":
        """An empty cache for ``batch`` rows of ``length`` positions."""
        z = as_bits(jnp.zeros((cfg.num_layers, batch, cfg.num_kv_heads, length, cfg.head_dim), jnp.dtype(cfg.dtype)))
        return cls(z, z.swapaxes(-1, -2))

    def write(self, ks: jax.Array, vs: jax.Array, index) -> "KVCache":
        """The cache with a step's keys/values ks/vs [L, B, T, K, Dh] (the compute dtype) written at positions
        index..index+T-1."""
        return KVCache(
            jax.lax.dynamic_update_slice_in_dim(self.k, as_bits(ks).transpose(0, 1, 3, 2, 4), index, axis=3),
            jax.lax.dynamic_update_slice_in_dim(self.v, as_bits(vs).transpose(0, 1, 3, 4, 2), index, axis=4),
        )


# --------------------------------------------------------------------------- pure helpers
def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies [Dh/2] in the Hugging Face convention, with llama3/linear scaling."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    sc = cfg.rope_scaling
    if not sc:
        return inv.astype(np.float32)
    kind = sc.get("rope_type", sc.get("type"))
    factor = float(sc["factor"])
    if kind == "linear":
        return (inv / factor).astype(np.float32)
    if kind == "llama3":
        low, high = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        old_len = float(sc["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv.astype(np.float32)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """x [B, T, N, Dh], positions [B, T] -> rotated x (rotate-half convention, float32 angles)."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, Dh]
    cos, sin = jnp.cos(emb).astype(x.dtype), jnp.sin(emb).astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    """RMS-normalise ``x`` over its last axis (in float32) and scale by ``w``; the result has ``x``'s dtype."""
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return w.astype(x.dtype) * xf.astype(x.dtype)


def attention_impl(kind: str, dtype, head_dim: int) -> str:
    """The implementation ``attention`` runs: ``auto`` takes cuDNN's fused kernel on a GPU where it applies (bf16/fp16,
    head_dim a multiple of 8 up to 128) and our blocked einsum elsewhere (the CPU, TPUs, float32)."""
    if kind != "auto":
        return kind
    fits = jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) and head_dim % 8 == 0 and head_dim <= 128
    return "cudnn" if fits and jax.default_backend() == "gpu" else "blocked"


# Query block of the ``blocked`` attention: on the CPU 64-256 all halve the dense time at 512 tokens; 128 is the middle.
ATTENTION_BLOCK = 128


def attention(q, k, v, mask, impl: str = "dense"):
    """q [B,T,H,Dh], k/v [B,S,K,Dh], mask [B,T,S] bool -> [B,T,H,Dh]. Grouped-query, float32 softmax.

    ``impl`` dense: float32 scores [B,K,G,T,S] materialised (and kept for the backward pass unless remat);
    blocked: the same per block of ``ATTENTION_BLOCK`` queries over only the keys up to the block's end, which skips
    the half of the scores a causal mask hides (about half the time on the CPU). It needs T == S and a mask under which
    no query sees a later position: every mask
    the project builds (``causal_mask``, ``segment_mask``, the sampler's prefill) is such.
    cudnn / xla: ``jax.nn.dot_product_attention`` with the same boolean mask (cuDNN turns it into an additive bias
    and never stores the scores). The tree layouts' masks are not causal-plus-padding, so the mask is passed whole."""
    if impl in ("cudnn", "xla"):
        return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation=impl)
    t = q.shape[1]
    if impl == "blocked":
        if k.shape[1] != t:
            raise ValueError(f"blocked attention needs as many keys as queries, got {t} queries and {k.shape[1]} keys")
        return _blocked_attention(q, k, v, mask, ATTENTION_BLOCK)
    if impl != "dense":
        raise ValueError(f"unknown attention implementation {impl!r}: dense, blocked, cudnn, xla or auto")
    return _dense_attention(q, k, v, mask)


def _blocked_attention(q, k, v, mask, c: int):
    b, t, h, dh = q.shape
    kv = k.shape[2]
    # heads ahead of positions once, so each block's two einsums are plain batched matmuls (2x faster on the CPU)
    qt = q.reshape(b, t, kv, h // kv, dh).transpose(0, 2, 3, 1, 4)  # [B,K,G,T,Dh]
    kt, vt = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B,K,S,Dh]
    outs = []
    for i in range(0, t, c):
        e = min(i + c, t)  # queries i..e-1 read keys 0..e-1 only
        scores = jnp.einsum(
            "bkgtd,bksd->bkgts", qt[:, :, :, i:e], kt[:, :, :e], preferred_element_type=jnp.float32
        ) / math.sqrt(dh)
        scores = jnp.where(mask[:, None, None, i:e, :e], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        outs.append(proj("bkgts,bksd->bkgtd", probs, vt[:, :, :e]))
    return jnp.concatenate(outs, axis=3).transpose(0, 3, 1, 2, 4).reshape(b, t, h, dh)


def _dense_attention(q, k, v, mask):
    b, t, h, dh = q.shape
    kv = k.shape[2]
    q = q.reshape(b, t, kv, h // kv, dh)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) / math.sqrt(dh)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = proj("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, dh)


def cached_attention(q, k, v, ck, cv, mask, index):
    """A decode step's attention: q/k/v [B,T,*,Dh] for the step's T tokens (at positions index..index+T-1),
    ck [B,K,S,Dh] / cv [B,K,Dh,S] the cache *before* this step (``KVCache``'s layouts), mask [B,T,S] over the
    cache's positions -> [B,T,H,Dh].

    The same as writing k/v into the cache and attending over it (``attention``), but the cache is only read:
    the step's own keys are scored beside it and the softmax taken over both. So a step does not rebuild the
    cache (the layer scan would otherwise emit a whole new cache per token); the caller writes the step's keys into
    the cache once, after the layers."""
    b, t, h, dh = q.shape
    kv, s = ck.shape[1], ck.shape[2]
    qg = q.reshape(b, t, kv, h // kv, dh)
    new = (jnp.arange(s) >= index) & (jnp.arange(s) < index + t)  # [S]: the slots this step writes
    old_mask = mask & ~new[None, None, :]  # [B,T,S]
    new_mask = jax.lax.dynamic_slice_in_dim(mask, index, t, axis=2)  # [B,T,T]: which of the step's keys
    scale = 1.0 / math.sqrt(dh)
    s_old = jnp.einsum("btkgd,bksd->bkgts", qg, ck, preferred_element_type=jnp.float32) * scale
    s_new = jnp.einsum("btkgd,bukd->bkgtu", qg, k, preferred_element_type=jnp.float32) * scale
    low = jnp.finfo(jnp.float32).min
    scores = jnp.concatenate(
        [jnp.where(old_mask[:, None, None], s_old, low), jnp.where(new_mask[:, None, None], s_new, low)], axis=-1
    )  # [B,K,G,T,S+T]
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = proj("bkgts,bkds->btkgd", probs[..., :s], cv) + proj("bkgtu,bukd->btkgd", probs[..., s:], v)
    return out.reshape(b, t, h, dh)


HALF = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def as_bits(tree):
    """16-bit float arrays as uint16 of the same bits (other arrays as they are), for a scan to slice.

    Why: XLA:CPU slices a bf16 scan input by converting the whole stacked array to float32 once, outside the loop,
    and each iteration's slice back to bf16, so a bf16 decode step read its weights and KV cache as float32: in a
    step of SmolLM2-135M the projections took twice the time of the same dots alone. An integer slice is a plain copy
    of the bits."""
    return jax.tree.map(lambda a: jax.lax.bitcast_convert_type(a, jnp.uint16) if a.dtype in HALF else a, tree)


def as_floats(bits, dtypes):
    """The inverse of ``as_bits`` on its slices; ``dtypes``: the original tree's dtypes (``jax.tree.map(lambda a:
    a.dtype, tree)``)."""
    return jax.tree.map(lambda b, dt: jax.lax.bitcast_convert_type(b, dt) if dt in HALF else b, bits, dtypes)


def causal_mask(valid: jax.Array) -> jax.Array:
    """valid [B, S] (False on padding) -> [B, S, S]: query i sees valid keys j <= i."""
    s = valid.shape[-1]
    tri = jnp.tril(jnp.ones((s, s), dtype=bool))
    return tri[None] & valid[:, None, :]


def positions_from_valid(valid: jax.Array) -> jax.Array:
    """Positions counting only valid tokens (left padding keeps the first real token at 0)."""
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=-1) - 1, 0)


# --------------------------------------------------------------------------- the model
def lora_shapes(cfg: ModelConfig, name: str) -> tuple[tuple, tuple]:
    """(A, B) shapes without the layer axis: A [*in, r], B [r, *out] for a weight [*in, *out]."""
    shape = LAYER_SHAPES[name](cfg)
    k = LORA_SPLIT[name]
    return (*shape[:k], cfg.lora_rank), (cfg.lora_rank, *shape[k:])


def init_lora(cfg: ModelConfig, key) -> dict[str, jax.Array]:
    """Fresh stacked LoRA factors "<name>_lora_a/b"; B starts at zero so the adapted model equals the base."""
    out = {}
    if not cfg.lora_rank:
        return out
    pdt = jnp.dtype(cfg.param_dtype)
    for name, k in zip(cfg.lora_targets, jax.random.split(key, len(cfg.lora_targets))):
        a_shape, b_shape = lora_shapes(cfg, name)
        fan_in = int(np.prod(a_shape[:-1]))
        out[f"{name}_lora_a"] = jax.random.normal(k, (cfg.num_layers, *a_shape), pdt) / math.sqrt(fan_in)
        out[f"{name}_lora_b"] = jnp.zeros((cfg.num_layers, *b_shape), pdt)
    return out


def merge_lora(p: dict[str, jax.Array], scale: float) -> dict[str, jax.Array]:
    """Fold "<name>_lora_a/b" factors into their weights: W + scale * A @ B (stacked [L, ...] or one layer)."""
    out = {n: a for n, a in p.items() if "_lora_" not in n}
    for n in out:
        if f"{n}_lora_a" in p:
            a, b = p[f"{n}_lora_a"], p[f"{n}_lora_b"]
            contract = lambda a, b: scale * jnp.tensordot(a, b, axes=1)  # noqa: E731
            delta = jax.vmap(contract)(a, b) if a.ndim == LORA_SPLIT[n] + 2 else contract(a, b)
            out[n] = out[n] + delta.astype(out[n].dtype)
    return out


class Layers(nnx.Module):
    """All decoder layers' weights, each stacked on a leading [L] axis (LoRA factors likewise)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pdt = jnp.dtype(cfg.param_dtype)
        for name in layer_param_names(cfg):
            shape = (cfg.num_layers, *LAYER_SHAPES[name](cfg))
            if name in NORMS:
                value = jnp.ones(shape, pdt)
            elif name in BIASES:
                value = jnp.zeros(shape, pdt)
            else:
                value = 0.02 * jax.random.normal(rngs.params(), shape, pdt)
            setattr(self, name, nnx.Param(value))
        for name, value in init_lora(cfg, rngs.params()).items():
            setattr(self, name, nnx.LoRAParam(value))


class Transformer(nnx.Module):
    """A decoder-only transformer (Llama / Qwen2 / Qwen3) with stacked layers, optional LoRA adapters and a KV cache for
    decoding."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        pdt = jnp.dtype(cfg.param_dtype)
        self.embed = nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg.vocab_size, cfg.hidden_size), pdt))
        self.layers = Layers(cfg, rngs)
        self.final_norm = nnx.Param(jnp.ones((cfg.hidden_size,), pdt))
        if not cfg.tie_word_embeddings:
            self.lm_head = nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg.hidden_size, cfg.vocab_size), pdt))

    def layer_params(self, use_lora: bool = True) -> dict[str, jax.Array]:
        """Stacked per-layer weights; with LoRA, also the adapter factors "<name>_lora_a/b"."""
        names = layer_param_names(self.cfg)
        if self.cfg.lora_rank and use_lora:
            names = names + [f"{n}_lora_{ab}" for n in self.cfg.lora_targets for ab in "ab"]
        return {n: getattr(self.layers, n)[...] for n in names}

    # tokens [B,T] int, positions [B,T] int, mask [B,T,S] bool -> hidden [B,T,D] (after the final norm)
    def hidden_states(
        self,
        tokens,
        positions,
        mask,
        cache: KVCache | None = None,
        cache_index=None,
        use_lora: bool = True,
        prefill: bool = False,
    ):
        """use_lora=False runs the frozen base model: the reference policy of LoRA fine-tuning.

        prefill=True (with a cache and cache_index 0): the cache holds nothing yet, so this step attends over its
        own T keys alone (mask[..., :T]), with the model's attention implementation (cuDNN on a GPU), and writes
        them to the cache; the rest of the cache must be masked out (it is empty)."""
        cfg = self.cfg
        dt = jnp.dtype(cfg.dtype)
        embed = self.embed[...]
        if cache is not None:  # inference: gathered as bits (XLA:CPU converts a whole bf16 table to float32 to
            # gather from it); not in training, where a bitcast would stop the table's gradient
            x = as_floats(jnp.take(as_bits(embed), tokens, axis=0), embed.dtype).astype(dt)  # [B,T,D]
        else:
            x = jnp.take(embed, tokens, axis=0).astype(dt)  # [B,T,D]
        inv_freq = jnp.asarray(rope_inv_freq(cfg))
        params = self.layer_params(use_lora)
        lora_scale = cfg.lora_alpha / max(cfg.lora_rank, 1)
        # decode steps (a cache, not a prefill) keep the dense path: one query row, nothing to fuse
        impl = "dense" if cache is not None and not prefill else attention_impl(cfg.attention, dt, cfg.head_dim)
        t = tokens.shape[1]

        def layer(x, p, ck, cv):
            # LoRA: W + s * A @ B per layer inside the scan, so only one layer's merged weights exist at a time
            p = {n: a.astype(dt) for n, a in merge_lora(p, lora_scale).items()}
            h = rms_norm(x, p["attn_norm"], cfg.rms_norm_eps)
            q = proj("btd,dhk->bthk", h, p["q_proj"])
            k = proj("btd,dhk->bthk", h, p["k_proj"])
            v = proj("btd,dhk->bthk", h, p["v_proj"])
            if cfg.qkv_bias:
                q, k, v = q + p["q_bias"], k + p["k_bias"], v + p["v_bias"]
            if cfg.qk_norm:
                q = rms_norm(q, p["q_norm"], cfg.rms_norm_eps)
                k = rms_norm(k, p["k_norm"], cfg.rms_norm_eps)
            q, k = apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq)
            if ck is not None and not prefill:  # a decode step: read the cache, score this step's keys beside it
                a = cached_attention(q, k, v, ck.astype(dt), cv.astype(dt), mask, cache_index)
            else:  # no cache, or a prefill: this step's keys are all there is
                a = attention(q, k, v, mask[:, :, :t] if prefill else mask, impl)
            a = proj("bthk,hkd->btd", a, p["o_proj"])
            if cfg.o_bias:
                a = a + p["o_bias"]
            x = x + a
            h = rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps)
            g = proj("btd,df->btf", h, p["gate_proj"])
            u = proj("btd,df->btf", h, p["up_proj"])
            x = x + proj("btf,fd->btd", jax.nn.silu(g) * u, p["down_proj"])
            return x, k, v  # this step's keys/values [B,T,K,Dh]: the caller writes them into the cache

        if cfg.remat:
            layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)

        if cache is None:

            def body(x, p):
                x, _, _ = layer(x, p, None, None)
                return x, None

            cut = cfg.frozen_layers
            if cut:  # the layers below the trained ones as a constant: no gradient, no backward pass through them
                low = jax.lax.stop_gradient(jax.tree.map(lambda a: a[:cut], params))
                x, _ = jax.lax.scan(body, jax.lax.stop_gradient(x), low)
                x, params = jax.lax.stop_gradient(x), jax.tree.map(lambda a: a[cut:], params)
            x, _ = jax.lax.scan(body, x, params)
            new_cache = None
        else:
            xs = (params, cache.k, cache.v)
            dtypes = (jax.tree.map(lambda a: a.dtype, params), dt, dt)

            def body(x, xs):
                p, ck, cv = as_floats(xs, dtypes)
                x, k, v = layer(x, p, ck, cv)
                return x, (k, v)

            # the layer slices go in as their bits: see ``as_bits`` (inference only: a bitcast has no gradient)
            x, (ks, vs) = jax.lax.scan(body, x, as_bits(xs))  # ks/vs [L,B,T,K,Dh]
            # one write of the step's keys into the cache (in place where the cache is a loop's carry)
            new_cache = cache.write(ks, vs, cache_index)
        return rms_norm(x, self.final_norm[...].astype(dt), cfg.rms_norm_eps), new_cache

    def output_embedding(self) -> jax.Array:
        """[D, V] projection to the vocabulary (the transposed input embedding when tied)."""
        w = self.embed[...].T if self.cfg.tie_word_embeddings else self.lm_head[...]
        return w.astype(jnp.dtype(self.cfg.dtype))

    def logits_from_hidden(self, h: jax.Array, head: jax.Array | None = None) -> jax.Array:
        """h [B,T,D] -> logits [B,T,V]; ``head``: the [D, V] output projection in h's dtype where the caller keeps
        one ready (the sampler on a CPU: tied embeddings are otherwise transposed into a copy at every call)."""
        return proj("btd,dv->btv", h, self.output_embedding() if head is None else head)

    def __call__(self, tokens, positions=None, mask=None, cache: KVCache | None = None, cache_index=None):
        """tokens [B,T] -> (logits [B,T,V], cache). Defaults: positions 0..T-1, causal mask."""
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        if mask is None:
            mask = causal_mask(jnp.ones(tokens.shape, bool))
        h, cache = self.hidden_states(tokens, positions, mask, cache, cache_index)
        return self.logits_from_hidden(h), cache


def init_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """A randomly initialised model; one jitted initialiser instead of one compile per weight shape."""
    graphdef = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(params=seed))))[0]
    state = jax.jit(lambda: nnx.split(Transformer(cfg, rngs=nnx.Rngs(params=seed)))[1])()
    return nnx.merge(graphdef, state)


def param_count(model: Transformer) -> int:
    """Number of parameters (``nnx.Param`` entries) of ``model``."""
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def trained_param_count(model: Transformer) -> int:
    """Parameters a training step changes: LoRA's factors (else every weight), of the top ``train_layers`` layers only
    where that is set; with the layers below constant, an untied input embedding gets no gradient either."""
    cfg = model.cfg
    kind = nnx.LoRAParam if cfg.lora_rank else nnx.Param
    state = nnx.state(model, kind)
    layers = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["layers"])) if "layers" in state else 0
    total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state))
    if not cfg.frozen_layers:
        return total
    rest = total - layers
    if not cfg.lora_rank and not cfg.tie_word_embeddings:
        rest -= int(np.prod(model.embed.shape))
    return rest + layers * cfg.train_layers // cfg.num_layers
