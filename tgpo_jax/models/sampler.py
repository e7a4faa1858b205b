"""Batched KV-cache sampling with per-token log-probs of what was sampled.

Prompts are left-padded to a common length (bucketed to limit recompiles) and prefilled in one
pass; decoding runs in jitted chunks of ``chunk`` steps (a ``lax.scan``). Between chunks the host
checks stop strings and ends early once every row has finished. The log-prob returned for each
sampled token is the model's own (temperature-1, unfiltered) ``log softmax`` — the behaviour
policy's log-prob that off-policy preference training needs.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgpo_jax.models.transformer import KVCache, Transformer, causal_mask, positions_from_valid


@dataclasses.dataclass(frozen=True)
class SamplingParams:
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


def _bucket(n: int, size: int) -> int:
    return max(size, -(-n // size) * size)


class Sampler:
    def __init__(self, model: Transformer, tokenizer=None, *, chunk: int = 16, bucket: int = 64):
        self.cfg = model.cfg
        self.graphdef, self.state = nnx.split(model)
        self.tokenizer = tokenizer
        self.chunk = chunk
        self.bucket = bucket
        self.pad_id = self.cfg.pad_token_id if self.cfg.pad_token_id is not None else 0

    def update_model(self, model: Transformer) -> None:
        """Sample from new weights (same architecture) without recompiling."""
        self.graphdef, self.state = nnx.split(model)

    # ------------------------------------------------------------------ jitted pieces
    @functools.partial(jax.jit, static_argnums=(0, 4))
    def _prefill(self, state, tokens, valid, cache_len):
        model = nnx.merge(self.graphdef, state)
        b, p = tokens.shape
        cache = KVCache.zeros(self.cfg, b, cache_len)
        mask = jnp.pad(causal_mask(valid), ((0, 0), (0, 0), (0, cache_len - p)))  # [B, P, S]
        h, cache = model.hidden_states(tokens, positions_from_valid(valid), mask, cache, 0)
        logits = model.logits_from_hidden(h[:, -1:])[:, 0].astype(jnp.float32)  # [B, V]
        key_valid = jnp.pad(valid, ((0, 0), (0, cache_len - p)))
        next_pos = jnp.sum(valid, axis=-1).astype(jnp.int32)
        return cache, logits, key_valid, next_pos

    @functools.partial(jax.jit, static_argnums=(0, 2, 3))
    def _decode_chunk(self, state, steps: int, filters: tuple, carry, eos_ids):
        model = nnx.merge(self.graphdef, state)

        def step(carry, _):
            cache, logits, key_valid, pos, index, done, rng = carry
            rng, sub = jax.random.split(rng)
            tok = sample_logits(logits, sub, *filters)  # [B]
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tok[:, None], -1)[:, 0]
            tok = jnp.where(done, self.pad_id, tok)
            logp = jnp.where(done, 0.0, logp)
            emitted = ~done
            done = done | jnp.isin(tok, eos_ids)
            key_valid = key_valid.at[:, index].set(True)
            h, cache = model.hidden_states(tok[:, None], pos[:, None], key_valid[:, None, :], cache, index)
            logits = model.logits_from_hidden(h)[:, 0].astype(jnp.float32)
            return (cache, logits, key_valid, pos + 1, index + 1, done, rng), (tok, logp, emitted)

        carry, (toks, logps, emitted) = jax.lax.scan(step, carry, None, length=steps)
        return carry, toks.T, logps.T, emitted.T  # [B, steps]

    # ------------------------------------------------------------------ public API
    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams = SamplingParams()):
        """-> list of (tokens, logprobs, finish_reason) per prompt; EOS/stop handling included."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("generate needs at least one non-empty prompt")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode with")
        b = len(prompts)
        p = _bucket(max(len(x) for x in prompts), self.bucket)
        steps = _bucket(params.max_tokens, self.chunk)
        cache_len = p + steps
        longest = max(len(x) for x in prompts) + params.max_tokens
        if longest > self.cfg.max_position_embeddings:
            raise ValueError(f"longest prompt + max_tokens = {longest} exceeds the model's "
                             f"max_position_embeddings={self.cfg.max_position_embeddings}")
        tokens = np.full((b, p), self.pad_id, np.int32)
        valid = np.zeros((b, p), bool)
        for i, x in enumerate(prompts):
            tokens[i, p - len(x):] = x
            valid[i, p - len(x):] = True
        cache, logits, key_valid, pos = self._prefill(self.state, jnp.asarray(tokens), jnp.asarray(valid), cache_len)
        done = jnp.zeros((b,), bool)
        carry = (cache, logits, key_valid, pos, jnp.int32(p), done, jax.random.key(params.seed))
        eos = jnp.asarray(self.cfg.eos_token_ids or (-1,), jnp.int32)
        out_tok = [[] for _ in range(b)]
        out_lp = [[] for _ in range(b)]
        reason = [None] * b
        while min(len(t) for t in out_tok) < params.max_tokens and None in reason:
            carry, toks, lps, emitted = self._decode_chunk(
                self.state, self.chunk, (params.temperature, params.top_k, params.top_p), carry, eos)
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

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams = SamplingParams()) -> list[Completion]:
        if self.tokenizer is None:
            raise ValueError("generate() decodes text and needs a tokenizer; use generate_ids() without one")
        out = []
        for toks, lps, reason in self.generate_ids(prompts, params):
            body = toks[:-1] if reason == "eos" else toks
            text = self.tokenizer.decode(body, skip_special_tokens=False)
            if reason == "stop":
                idx = min(text.find(s) for s in params.stop if s in text)
                text = text[:idx]
            out.append(Completion(toks, lps, text, reason))
        return out
