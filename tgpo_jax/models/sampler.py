"""Batched KV-cache sampling with per-token log-probs of what was sampled.

Prompts are left-padded to a common length (bucketed to limit recompiles) and prefilled in one
pass; decoding runs in jitted chunks of ``chunk`` steps (a ``lax.scan``). Between chunks the host
checks stop strings and ends early once every row has finished. The log-prob returned for each
sampled token is the model's own (temperature-1, unfiltered) ``log softmax`` — the behaviour
policy's log-prob that off-policy preference training needs.

Constrained decoding: with ``constraints`` (one ``TokenConstraint`` per prompt, e.g. the agent's output grammar
in ``rollout/policies/constrain.py``) the host picks every token: the best-scoring token the row's constraint
allows (greedy), or a draw from the filtered distribution renormalised over the allowed tokens. Rows then decode
one token per jitted call. The log-prob kept is still the model's own unconstrained one.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgpo_jax.models import transformer as T
from tgpo_jax.models.transformer import KVCache, Transformer, causal_mask, positions_from_valid


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample: temperature (0 greedy), top-k (0 off), top-p (1 off), token limit, stop strings and seed;
    ``ValueError`` for out-of-range values."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.max_tokens < 1:
            raise ValueError(f"invalid sampling parameters: {self}")


@dataclasses.dataclass
class Completion:
    """One sampled completion: its tokens and their log-probs, the decoded text and why sampling ended."""

    tokens: list[int]  # sampled tokens, including the EOS / stop-completing token
    logprobs: list[float]  # model log-prob of each sampled token
    text: str  # decoded text, EOS and stop string removed
    finish_reason: str  # "eos" | "stop" | "length"


def sample_logits(logits: jax.Array, rng: jax.Array, temperature: float, top_k: int, top_p: float) -> jax.Array:
    """logits [B, V] float32 -> tokens [B]. Filters apply to the temperature-scaled distribution."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1)
    x = logits / temperature
    if top_k:
        kth = jax.lax.top_k(x, top_k)[0][:, -1:]  # [B, 1]
        x = jnp.where(x < kth, -jnp.inf, x)
    if top_p < 1.0:
        sorted_x = jnp.sort(x, axis=-1)[:, ::-1]  # descending
        cum = jnp.cumsum(jax.nn.softmax(sorted_x, axis=-1), axis=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        cutoff_idx = jnp.sum(cum - jax.nn.softmax(sorted_x, axis=-1) < top_p, axis=-1, keepdims=True) - 1
        cutoff = jnp.take_along_axis(sorted_x, jnp.maximum(cutoff_idx, 0), axis=-1)
        x = jnp.where(x < cutoff, -jnp.inf, x)
    return jax.random.categorical(rng, x, axis=-1)


class TokenConstraint(Protocol):
    """Which tokens may come next in one row (EOS ids included); ``advance`` records the token taken."""

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next."""

    def advance(self, token: int) -> None:
        """Record that ``token`` was taken."""


def _filtered_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """[V] logits -> [V] probabilities after temperature, top-k and top-p (as ``sample_logits`` filters them)."""
    x = logits.astype(np.float64) / temperature
    if top_k:
        x = np.where(x < np.sort(x)[-top_k], -np.inf, x)
    p = np.exp(x - x.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        cum = np.cumsum(p[order])
        keep = order[: int(np.sum(cum - p[order] < top_p))]
        q = np.zeros_like(p)
        q[keep] = p[keep]
        p = q / q.sum()
    return p


def choose_allowed(
    logits: np.ndarray,
    constraint: TokenConstraint,
    temperature: float,
    top_k: int,
    top_p: float,
    rng: np.random.Generator,
    scan: int = 64,
) -> int | None:
    """The next token of one row under its constraint, or None when the constraint allows no token at all.

    Greedy: the highest logit allowed. Sampling: a draw from the filtered distribution over its allowed tokens
    (the ``scan`` likeliest first; all of them only when none of those is allowed), else the likeliest allowed."""
    probs = _filtered_probs(logits, temperature, top_k, top_p) if temperature > 0 else None
    score = logits if probs is None else np.where(probs > 0, probs, -1.0)
    top = np.argpartition(-score, min(scan, len(score) - 1))[:scan]
    if probs is None:  # greedy: the first allowed in logit order; each check parses the output so far
        return next(
            (
                int(t)
                for pool in (top[np.argsort(-score[top])], np.argsort(-score))
                for t in pool
                if constraint.allows(int(t))
            ),
            None,
        )
    for pool in (top[np.argsort(-score[top])], np.argsort(-score)):
        ok = [int(t) for t in pool if constraint.allows(int(t))]
        if probs is not None:
            live = [t for t in ok if probs[t] > 0]
            if live:
                w = probs[live] / probs[live].sum()
                return live[int(rng.choice(len(live), p=w))]
        if ok:
            return max(ok, key=lambda t: logits[t])
    return None


@functools.partial(jax.jit, static_argnums=1)
def _cast_bits(a: jax.Array, dtype) -> jax.Array:
    return T.as_bits(a.astype(dtype))


def _bucket(n: int, size: int) -> int:
    return max(size, -(-n // size) * size)


class Sampler:
    """Batched sampling from a ``Transformer`` with a KV cache: prompts padded to buckets, decoding in jitted chunks,
    optional per-row token constraints."""

    def __init__(self, model: Transformer, tokenizer=None, *, chunk: int = 16, bucket: int = 64):
        self.cfg = model.cfg
        self.tokenizer = tokenizer
        self.chunk = chunk
        self.bucket = bucket
        self.pad_id = self.cfg.pad_token_id if self.cfg.pad_token_id is not None else 0
        self.update_model(model)

    def update_model(self, model: Transformer) -> None:
        """Sample from new weights (same architecture) without recompiling."""
        self.graphdef, self.state = nnx.split(model)
        self.weights = self._ready(self.state)

    # The jitted steps take ``self`` as a static argument, so jit's cache is keyed by it. Keyed by what the compiled
    # code depends on (the architecture and the model config), not by the instance: a new Sampler over other weights
    # of the same model reuses the steps compiled for the last one. The pipeline evaluates 3-18 models in one
    # process, and each evaluation met 13+ prompt shapes of ~3 s of compiling each.
    def _jit_key(self):
        return self.graphdef, self.cfg, self.pad_id

    def __eq__(self, other):
        return isinstance(other, Sampler) and self._jit_key() == other._jit_key()

    def __hash__(self):
        return hash(self._jit_key())

    # ------------------------------------------------------------------ the weights as the steps read them
    def _ready(self, state) -> dict:
        """What the jitted steps take: ``{"model": state, "head": [D, V] output projection or None}``.

        On a CPU, work every step would otherwise repeat on the whole model is done once here: without LoRA the
        weights are cast to the compute dtype (the layers cast them anyway: the same numbers), 16-bit floats are
        held as their bits (``transformer.as_bits``: XLA:CPU converted the stacked bf16 weights to bits at every
        call), and tied embeddings get their transpose as the head (XLA:CPU transposed the [V, D] table into a copy
        at every call). The arrays that change are copies while the caller keeps its model (a float32 model's are
        its own); on other backends (and abstract weights, as ``training.plan`` compiles) nothing is copied."""
        leaves = jax.tree.leaves(state)
        on_cpu = bool(leaves) and all(
            isinstance(a, jax.Array) and {d.platform for d in a.devices()} == {"cpu"} for a in leaves
        )
        if not on_cpu:
            return {"model": state, "head": None}
        dt = jnp.dtype(self.cfg.dtype)

        def ready(a):
            to = dt if not self.cfg.lora_rank and jnp.issubdtype(a.dtype, jnp.floating) else a.dtype
            return _cast_bits(a, to) if to != a.dtype or to in T.HALF else a

        head = nnx.merge(self.graphdef, state).output_embedding() if self.cfg.tie_word_embeddings else None
        return {"model": jax.tree.map(ready, state), "head": T.as_bits(head)}  # the head is in the compute dtype

    def _model(self, weights) -> tuple[Transformer, jax.Array | None]:
        """(model, head) inside a jitted step: the bits of ``_ready`` back as floats (a bitcast XLA folds away)."""

        def floats(tree, dtype):
            return jax.tree.map(lambda a: jax.lax.bitcast_convert_type(a, dtype) if a.dtype == jnp.uint16 else a, tree)

        # the model's weights were cast to the compute dtype where there is no LoRA; the head always is
        model = floats(weights["model"], jnp.dtype(self.cfg.param_dtype if self.cfg.lora_rank else self.cfg.dtype))
        return nnx.merge(self.graphdef, model), floats(weights["head"], jnp.dtype(self.cfg.dtype))

    # ------------------------------------------------------------------ jitted pieces
    @functools.partial(jax.jit, static_argnums=(0, 4))
    def _prefill(self, weights, tokens, valid, cache_len):
        model, head = self._model(weights)
        b, p = tokens.shape
        cache = KVCache.zeros(self.cfg, b, cache_len)
        # a left-padding query sees no valid key; it attends to itself so that no row of the mask is empty (a fused
        # kernel's softmax over an empty row may give NaN, which would reach the valid rows through the values)
        pad_self = jnp.eye(p, dtype=bool)[None] & ~valid[:, :, None]
        mask = causal_mask(valid) | pad_self  # [B, P, P]: the prompt's keys only (prefill)
        h, cache = model.hidden_states(tokens, positions_from_valid(valid), mask, cache, 0, prefill=True)
        logits = model.logits_from_hidden(h[:, -1:], head)[:, 0].astype(jnp.float32)  # [B, V]
        key_valid = jnp.pad(valid, ((0, 0), (0, cache_len - p)))
        next_pos = jnp.sum(valid, axis=-1).astype(jnp.int32)
        return cache, logits, key_valid, next_pos

    # the carry (KV cache) is donated: the chunk writes its keys in place instead of into a copy of the cache
    @functools.partial(jax.jit, static_argnums=(0, 2, 3), donate_argnums=(4,))
    def _decode_chunk(self, weights, steps: int, filters: tuple, carry, eos_ids):
        model, head = self._model(weights)

        def step(carry, _):
            cache, logits, key_valid, pos, index, done, rng = carry  # rng: one key per row [B]
            pairs = jax.vmap(jax.random.split)(rng)  # [B, 2]
            rng, sub = pairs[:, 0], pairs[:, 1]
            # each row draws from its own key: what a row samples does not depend on the rows beside it
            tok = jax.vmap(lambda lg, k: sample_logits(lg[None], k, *filters)[0])(logits, sub)  # [B]
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tok[:, None], -1)[:, 0]
            tok = jnp.where(done, self.pad_id, tok)
            logp = jnp.where(done, 0.0, logp)
            emitted = ~done
            done = done | jnp.isin(tok, eos_ids)
            key_valid = key_valid.at[:, index].set(True)
            h, cache = model.hidden_states(tok[:, None], pos[:, None], key_valid[:, None, :], cache, index)
            logits = model.logits_from_hidden(h, head)[:, 0].astype(jnp.float32)
            return (cache, logits, key_valid, pos + 1, index + 1, done, rng), (tok, logp, emitted)

        carry, (toks, logps, emitted) = jax.lax.scan(step, carry, None, length=steps)
        return carry, toks.T, logps.T, emitted.T  # [B, steps]

    # cache and key mask donated: without it every token copied the whole cache (constrained decoding feeds one
    # token per call; 1.4-1.5x a step on the large preset's model)
    @functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(2, 3))
    def _feed(self, weights, cache, key_valid, pos, index, tok):
        """One token per row (``tok`` [B], chosen on the host) -> the next logits [B, V] and the advanced cache."""
        model, head = self._model(weights)
        key_valid = key_valid.at[:, index].set(True)
        h, cache = model.hidden_states(tok[:, None], pos[:, None], key_valid[:, None, :], cache, index)
        logits = model.logits_from_hidden(h, head)[:, 0].astype(jnp.float32)
        return cache, logits, key_valid, pos + 1, index + 1

    # ------------------------------------------------------------------ public API
    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams = SamplingParams(),
        constraints: Sequence[TokenConstraint] | None = None,
        row_seeds: Sequence[int] | None = None,
    ):
        """-> list of (tokens, logprobs, finish_reason) per prompt; EOS/stop handling included. With
        ``constraints`` (one per prompt) every token is one its row's constraint allows. Each row samples from its
        own seed, ``row_seeds[i]`` (default: ``params.seed`` and the row's index), so a row's sample is the same in
        any batch (a resumed collection batches its episodes differently)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("generate needs at least one non-empty prompt")
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError(f"{len(constraints)} constraints for {len(prompts)} prompts: one per prompt")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode with")
        b = len(prompts)
        if row_seeds is not None and len(row_seeds) != b:
            raise ValueError(f"{len(row_seeds)} row seeds for {len(prompts)} prompts: one per prompt")
        seeds = [int(x) for x in row_seeds] if row_seeds is not None else None
        p = _bucket(max(len(x) for x in prompts), self.bucket)
        steps = _bucket(params.max_tokens, self.chunk)
        cache_len = p + steps
        longest = max(len(x) for x in prompts) + params.max_tokens
        if longest > self.cfg.max_position_embeddings:
            raise ValueError(
                f"longest prompt + max_tokens = {longest} exceeds the model's "
                f"max_position_embeddings={self.cfg.max_position_embeddings}"
            )
        tokens = np.full((b, p), self.pad_id, np.int32)
        valid = np.zeros((b, p), bool)
        for i, x in enumerate(prompts):
            tokens[i, p - len(x) :] = x
            valid[i, p - len(x) :] = True
        cache, logits, key_valid, pos = self._prefill(self.weights, jnp.asarray(tokens), jnp.asarray(valid), cache_len)
        if constraints is not None:
            return self._generate_constrained(params, constraints, (cache, logits, key_valid, pos, jnp.int32(p)), seeds)
        done = jnp.zeros((b,), bool)
        if seeds is None:
            base = jax.random.key(params.seed)
            keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(b))
        else:
            keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
        carry = (cache, logits, key_valid, pos, jnp.int32(p), done, keys)
        eos = jnp.asarray(self.cfg.eos_token_ids or (-1,), jnp.int32)
        out_tok = [[] for _ in range(b)]
        out_lp = [[] for _ in range(b)]
        reason = [None] * b
        while min(len(t) for t in out_tok) < params.max_tokens and None in reason:
            carry, toks, lps, emitted = self._decode_chunk(
                self.weights, self.chunk, (params.temperature, params.top_k, params.top_p), carry, eos
            )
            toks, lps, emitted = np.asarray(toks), np.asarray(lps), np.asarray(emitted)
            host_done = np.asarray(carry[5]).copy()
            for i in range(b):
                if reason[i] is not None:
                    continue
                checked = len(out_tok[i])  # no stop string lies within the tokens already checked
                for t, lp in zip(toks[i][emitted[i]], lps[i][emitted[i]]):
                    out_tok[i].append(int(t))
                    out_lp[i].append(float(lp))
                    if int(t) in self.cfg.eos_token_ids:
                        reason[i] = "eos"
                        break
                    if len(out_tok[i]) >= params.max_tokens:
                        break
                if params.stop:
                    cut = self._stop_cut(out_tok[i], params.stop, checked)
                    if cut is not None:
                        out_tok[i], out_lp[i], reason[i] = out_tok[i][:cut], out_lp[i][:cut], "stop"
                if reason[i] is None and len(out_tok[i]) >= params.max_tokens:
                    reason[i] = "length"
                host_done[i] = reason[i] is not None
            carry = carry[:5] + (jnp.asarray(host_done),) + carry[6:]
        return [(t, lp, r or "length") for t, lp, r in zip(out_tok, out_lp, reason)]

    def _generate_constrained(self, params: SamplingParams, constraints, state, seeds=None):
        """Host-driven decoding, one token per row per step, each allowed by its row's constraint."""
        cache, logits, key_valid, pos, index = state
        b = len(constraints)
        rngs = [np.random.default_rng(seeds[i] if seeds is not None else (params.seed, i)) for i in range(b)]
        eos = set(self.cfg.eos_token_ids or ())
        out_tok, out_lp, reason = [[] for _ in range(b)], [[] for _ in range(b)], [None] * b
        for _ in range(params.max_tokens):
            host = np.asarray(logits)  # [B, V]
            feed = np.full((b,), self.pad_id, np.int32)
            for i in range(b):
                if reason[i] is not None:
                    continue
                tok = choose_allowed(host[i], constraints[i], params.temperature, params.top_k, params.top_p, rngs[i])
                if tok is None:  # the grammar has no way on: end the row as it stands
                    reason[i] = "constraint"
                    continue
                constraints[i].advance(tok)
                row = host[i].astype(np.float64)
                out_tok[i].append(tok)
                out_lp[i].append(float(row[tok] - row.max() - np.log(np.exp(row - row.max()).sum())))
                feed[i] = tok
                if tok in eos:
                    reason[i] = "eos"
                elif params.stop and self._stop_cut(out_tok[i], params.stop, len(out_tok[i]) - 1) is not None:
                    reason[i] = "stop"
            if None not in reason:
                break
            cache, logits, key_valid, pos, index = self._feed(
                self.weights, cache, key_valid, pos, index, jnp.asarray(feed)
            )
        return [(t, lp, r if r in ("eos", "stop") else "length") for t, lp, r in zip(out_tok, out_lp, reason)]

    def _stop_cut(self, toks: list[int], stop: tuple[str, ...], start: int = 0) -> int | None:
        """Length of the shortest token prefix (longer than ``start``) whose text holds a stop string."""
        text = self.tokenizer.decode(toks, skip_special_tokens=False)
        if not any(s in text for s in stop):
            return None
        for n in range(start + 1, len(toks) + 1):
            prefix = self.tokenizer.decode(toks[:n], skip_special_tokens=False)
            if any(s in prefix for s in stop):
                return n
        return len(toks)  # pragma: no cover - the full text contains it

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams = SamplingParams(),
        constraints: Sequence[TokenConstraint] | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample a completion per prompt (token ids) and decode it, the EOS token and anything from a stop string on
        removed; ``ValueError`` without a tokenizer."""
        if self.tokenizer is None:
            raise ValueError("generate() decodes text and needs a tokenizer; use generate_ids() without one")
        out = []
        for toks, lps, reason in self.generate_ids(prompts, params, constraints, row_seeds):
            body = toks[:-1] if reason == "eos" else toks
            text = self.tokenizer.decode(body, skip_special_tokens=False)
            if reason == "stop":
                idx = min(text.find(s) for s in params.stop if s in text)
                text = text[:idx]
            out.append(Completion(toks, lps, text, reason))
        return out
