"""A planted copy circuit: the initialisation that lets a from-scratch model copy text from its prompt.

A web agent copies constantly (the quoted query into the search box, a product title, a name and an address into a
form). Transformers copy with an *induction circuit* — a previous-token head whose output an induction head matches
against ("find where the current token occurred before and predict what followed it") — but a small model trained
from scratch does not form one within a CPU budget: measured on a held-out copy task, 0 % exact copies after 800
steps of batch 32. This module writes the circuit into the initial
weights of a standard Llama-shaped model instead, so training only has to learn *when* to copy:

- the token embedding lives in a ``de``-dimensional subspace (unit rows) plus one constant dimension;
- layer 0, head 0 (previous-token head): its query and key come from the constant dimension only and sit in the
  highest-frequency rotary pairs, with the key's phase advanced by one position, so the score peaks at relative
  offset 1 whatever the content; its value copies the embedding of token i-1 into a second subspace (``prev``);
- layer 0, query head 2 / kv head 1 (second-previous-token head, the same construction at offset 2): writes the
  embedding of token i-2 into a fourth subspace (``prev2``); with ``trigram`` > 0 the next query head on kv head 1
  turns its query back by one position (offset 3) and writes token i-3 into a fifth subspace (``prev3``);
- layer 1, head 0 (induction head): its query is the current token's embedding and its key the ``prev`` subspace,
  both in the lowest-frequency rotary pairs, where RoPE barely rotates over the model's context (so the match is
  position-invariant); with ``bigram`` > 0 the query adds ``bigram`` x R e(i-1) and the key ``bigram`` x R e(j-2)
  (R a fixed random rotation, so the cross terms are noise), so a position whose two preceding tokens both match
  wins over one where only the last does: a copy stays on its source span through repeated tokens instead of
  hopping to another occurrence (measured: free-running copies of shop titles broke at such tokens); with
  ``trigram`` > 0 likewise ``trigram`` x R' e(i-2) against R' e(j-3) (a third match: a copy crosses a two-piece
  stretch that recurs elsewhere in the prompt, such as ``] with`` after every item name); its value
  writes ``copy_gain`` x the embedding of the attended token into a third subspace (``copy``);
- the output projection reads the ``copy`` subspace (the unembedding equals the embedding there), so at
  initialisation the model predicts exactly what the induction head copies, with no bias toward any other token;
- every other residual branch (all other attention outputs and every MLP's down projection) starts at zero, as in
  zero-initialised residual training, so the circuit is not drowned in noise; their other weights stay random.

- optionally (``recency`` > 0) a recency term gated by the previous token: layer 0's previous-token head also
  carries a flag of token i-1 (set in the embedding of ``recency_tokens``: the command's id pieces and verbs) into
  its own residual dimension, and the induction head adds ``recency``^2 cos(d theta) / sqrt(Dh) (d = distance, one
  unused rotary pair whose half turn spans the prompt) to its score wherever that flag is on. Where a command's
  argument starts (after ``CLICK``, after the id in ``SELECT [6] [``) the nearest match then wins the one-token ties
  among every ``[`` of the prompt, and the nearest is the thought just written; elsewhere (the thought copying from
  the task) matching stays position-invariant. Measured with the planted weights alone and the thought given:
  TYPE commands copy the thought's text in 120 of 120
  held-out steps at recency 12 (0 recency: 27), CLICK commands the thought's id in 310 of 310 at recency 20 (12: 206).

After planting, ``...A B ... A`` predicts ``B`` (tests/test_copy_circuit.py measures it on random sequences). The
result is an ordinary checkpoint: it trains, exports to Hugging Face format and loads in transformers like any other.
Pure numpy over the flat parameter dict (``loading.flat_params`` paths); no I/O.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tgpo_jax.models.config import ModelConfig

MAX_LOW_ANGLE = 1.0  # radians the fastest "position-invariant" rotary pair may turn over the model's context


@dataclasses.dataclass(frozen=True)
class CircuitConfig:
    """The planted circuit's sizes and gains: embedding subspace width, the previous-token and induction heads'
    amplitudes, the copy and output scales, and the optional bigram, trigram and gated-recency terms."""

    de: int = 32  # embedding subspace width (the ``prev`` subspace has the same width)
    prev_scale: float = 13.0  # previous-token head: query/key amplitude per rotary pair
    prev_pairs: int = 6  # highest-frequency rotary pairs the previous-token head uses
    match_scale: float = 13.0  # induction head: query/key gain (score of a match = match_scale**2 / sqrt(Dh))
    copy_gain: float = 3.0  # weight of the copied embedding against the current token's own
    out_scale: float = 2.0  # logit scale of the output projection over the embedding subspace
    bigram: float = 0.6  # weight of the second-previous-token match in the induction score (0: one-token match)
    trigram: float = 0.0  # weight of the third-previous-token match (0: off; needs bigram > 0)
    recency: float = 0.0  # amplitude of the gated recency term (0: off); needs ``recency_tokens`` at planting
    recency_pair: int = 9  # its rotary pair: theta = rope_theta^(-2 pair / Dh), a half turn over ~290 tokens at 1e7
    flag: float = 0.5  # the flag's value in the trigger tokens' embeddings


def check_fits(cfg: ModelConfig, c: CircuitConfig = CircuitConfig()) -> None:
    """Raise ValueError naming the constraint the model does not meet."""
    dh, half = cfg.head_dim, cfg.head_dim // 2
    problems = []
    if cfg.num_layers < 2:
        problems.append(f"num_layers={cfg.num_layers} < 2 (previous-token head in layer 0, induction head in 1)")
    width = _width(c)
    if width * c.de > cfg.hidden_size:
        problems.append(
            f"hidden_size={cfg.hidden_size} < {width}*de={width * c.de} (embedding, constant, prev, "
            "copy, prev2" + (", prev3)" if c.trigram else ")")
        )
    if c.bigram and cfg.num_kv_heads < 2:
        problems.append(f"num_kv_heads={cfg.num_kv_heads}: the second-previous-token head needs a kv head of its own")
    if c.trigram and not c.bigram:
        problems.append("trigram > 0 needs bigram > 0 (the third-previous-token head shares its kv head)")
    if c.trigram and cfg.num_heads // max(cfg.num_kv_heads, 1) < 2:
        problems.append(
            f"num_heads={cfg.num_heads} / num_kv_heads={cfg.num_kv_heads}: the third-previous-token "
            "head needs a second query head on kv head 1"
        )
    if c.de > dh or c.de % 2:
        problems.append(f"de={c.de} must be even and <= head_dim={dh}")
    if c.prev_pairs + c.de // 2 > half:
        problems.append(f"prev_pairs={c.prev_pairs} + de/2={c.de // 2} rotary pairs exceed head_dim/2={half}")
    if cfg.qk_norm:
        problems.append("qk_norm models normalise q and k, which breaks the planted magnitudes")
    if cfg.tie_word_embeddings:
        problems.append(
            "tied embeddings: the output projection must read the copy subspace, the input embedding must not"
        )
    m_low = half - c.de // 2  # the fastest pair the induction head uses
    angle = cfg.rope_theta ** (-2 * m_low / dh) * cfg.max_position_embeddings
    if angle > MAX_LOW_ANGLE:
        problems.append(
            f"rope_theta={cfg.rope_theta:g} is too small: the induction head's rotary pairs turn "
            f"{angle:.2f} rad over {cfg.max_position_embeddings} positions (max {MAX_LOW_ANGLE}); "
            "raise rope_theta (e.g. 1e7) or lower max_position_embeddings"
        )
    if c.recency and not 0 <= c.recency_pair < half - c.de // 2:
        problems.append(f"recency_pair={c.recency_pair} must be an unused rotary pair below {half - c.de // 2}")
    if c.recency and c.de >= dh:
        problems.append(f"recency needs a free value dimension in the previous-token head: de={c.de} >= {dh}")
    if problems:
        raise ValueError("cannot plant the copy circuit: " + "; ".join(problems))


def plant(
    flat: dict[str, np.ndarray], cfg: ModelConfig, seed: int = 0, c: CircuitConfig = CircuitConfig(), recency_tokens=()
) -> dict[str, np.ndarray]:
    """A copy of ``flat`` (path -> array, our layout) with the circuit written in; see the module docstring.
    ``recency_tokens``: token ids after which the recency term is on (needed when ``c.recency`` > 0)."""
    check_fits(cfg, c)
    if c.recency and not len(recency_tokens):
        raise ValueError(
            "CircuitConfig.recency > 0 needs recency_tokens (the ids after which a copy takes the nearest match)"
        )
    rng = np.random.default_rng(seed)
    p = {k: np.array(v, dtype=np.float32) for k, v in flat.items()}
    d, dh, v_size, de = cfg.hidden_size, cfg.head_dim, cfg.vocab_size, c.de
    half = dh // 2
    # residual layout: [emb | const | free | prev | copy | prev2 | prev3 (trigram) | free ...]
    const, prev, copy, prev2 = de, slice(2 * de, 3 * de), slice(3 * de, 4 * de), slice(4 * de, 5 * de)
    prev3 = slice(5 * de, 6 * de)

    emb = rng.standard_normal((v_size, de)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    rot, _ = np.linalg.qr(rng.standard_normal((de, de)))  # R: decorrelates the bigram term from the unigram one
    # R': the trigram term's own rotation, drawn only when it is on (so planting without it is unchanged)
    rot3 = np.linalg.qr(rng.standard_normal((de, de)))[0] if c.trigram else None
    embed = np.zeros((v_size, d), np.float32)  # [V, D]
    embed[:, :de] = emb
    embed[:, const] = 1.0
    p["embed"] = embed
    q, k, v, o = (p[f"layers/{n}"] for n in ("q_proj", "k_proj", "v_proj", "o_proj"))  # [L,D,H,Dh] .. [L,H,Dh,D]
    o[:] = 0.0
    p["layers/down_proj"][:] = 0.0
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dh, 2) / dh))  # [Dh/2], pair m = dims (m, m + Dh/2)

    # layer 0 sees [e | 1 | 0]: RMSNorm multiplies by 1 / rms = sqrt(D / 2)
    n0 = np.sqrt(d / 2.0)
    # (q head, kv head, key offset, query lag, out): score(i, j) = sum_m A^2 cos((i - j - offset - lag) theta_m) /
    # sqrt(Dh); the third-previous-token head reuses kv head 1's key (offset 2) and turns its query back one position
    heads = (
        [(0, 0, 1, 0, prev)]
        + ([(_second_head(cfg), 1, 2, 0, prev2)] if c.bigram else [])
        + ([(_second_head(cfg) + 1, 1, 2, 1, prev3)] if c.trigram else [])
    )
    for qh, kh, offset, lag, out in heads:
        q[0, :, qh, :] = 0.0
        if not lag:
            k[0, :, kh, :] = 0.0
            v[0, :, kh, :] = 0.0
        for m in range(c.prev_pairs):
            q[0, const, qh, m] = c.prev_scale * np.cos(lag * inv_freq[m]) / n0
            q[0, const, qh, m + half] = -c.prev_scale * np.sin(lag * inv_freq[m]) / n0
            if not lag:
                k[0, const, kh, m] = c.prev_scale * np.cos(offset * inv_freq[m]) / n0
                k[0, const, kh, m + half] = c.prev_scale * np.sin(offset * inv_freq[m]) / n0
        v[0, :de, kh, :de] = np.eye(de) / n0
        o[0, qh, :de, out] = np.eye(de)

    # layer 1 sees [e_i | 1 | 0 | e_(i-1) | 0 | e_(i-2) | e_(i-3)]: 1 / rms = sqrt(D / 5) (D / 4 without prev3,
    # D / 3 without prev2)
    units = 3.0 + bool(c.bigram) + bool(c.trigram)  # unit-norm parts of the residual from layer 1 on
    n1 = np.sqrt(d / units)
    low = list(range(half - de // 2, half)) + list(range(dh - de // 2, dh))  # the slowest rotary pairs
    for t in (q, k, v):
        t[1, :, 0, :] = 0.0
    s_match = c.match_scale / n1
    for j, dim in enumerate(low):  # e_i . e_(j-1)
        q[1, j, 0, dim] = s_match
        k[1, prev.start + j, 0, dim] = s_match
    if c.bigram:  # + bigram^2 (R e_(i-1)) . (R e_(j-2)): both preceding tokens match
        q[1, prev, 0, low] = c.bigram * s_match * rot.T  # [de (source dim), de (head dim)]
        k[1, prev2, 0, low] = c.bigram * s_match * rot.T
    if c.trigram:  # + trigram^2 (R' e_(i-2)) . (R' e_(j-3)): the third preceding token matches too
        q[1, prev2, 0, low] = c.trigram * s_match * rot3.T
        k[1, prev3, 0, low] = c.trigram * s_match * rot3.T
    v[1, :de, 0, :de] = np.eye(de) / n1
    o[1, 0, :de, copy] = c.copy_gain * np.eye(de)

    if c.recency:  # flag(i) in the embedding -> flag(i-1) by the previous-token head -> query on the slow pair
        flag, flag_prev = de + 1, de + 2  # two of the free dims between const and prev
        embed[np.asarray(recency_tokens, int), flag] = c.flag
        v[0, flag, 0, de] = 1.0 / n0  # head 0's value dims 0..de-1 carry e(i-1); dim de is free
        o[0, 0, de, flag_prev] = 1.0 / c.flag
        q[1, flag_prev, 0, c.recency_pair] = c.recency / n1
        k[1, const, 0, c.recency_pair] = c.recency / n1

    n_out = np.sqrt(d / (units + c.copy_gain**2))  # final [e_i | 1 | 0 | e_(i-1) | g e_copy | e_(i-2) | ..]
    head = np.zeros((d, v_size), np.float32)  # [D, V]
    head[copy] = emb.T * c.out_scale / n_out
    p["lm_head"] = head
    return p


def _width(c: CircuitConfig) -> int:
    """Residual dimensions the circuit uses, in units of ``de``."""
    return 6 if c.trigram else 5


def _second_head(cfg: ModelConfig) -> int:
    """The query head of the second-previous-token head: the first that reads kv head 1."""
    return cfg.num_heads // cfg.num_kv_heads


def recency_token_ids(tokenizer, pattern: str) -> list[int]:
    """Ids of the pieces that ``pattern`` matches in full (leading ``▁`` ignored): where the recency term is on."""
    import re

    rx = re.compile(pattern)
    return sorted(i for piece, i in tokenizer.get_vocab().items() if rx.fullmatch(piece.lstrip("\u2581")))


def init_planted(cfg: ModelConfig, seed: int = 0, c: CircuitConfig = CircuitConfig(), recency_tokens=()):
    """A randomly initialised ``Transformer`` with the copy circuit planted (same seed, same model)."""
    import jax.numpy as jnp

    from tgpo_jax.models.loading import flat_params, model_from_flat
    from tgpo_jax.models.transformer import init_model

    flat = plant(
        {k: np.asarray(v) for k, v in flat_params(init_model(cfg, seed=seed)).items()},
        cfg,
        seed=seed,
        c=c,
        recency_tokens=recency_tokens,
    )
    return model_from_flat(cfg, {k: jnp.asarray(v, cfg.param_dtype) for k, v in flat.items()})


def frozen_mask(cfg: ModelConfig, c: CircuitConfig = CircuitConfig()) -> dict[str, np.ndarray]:
    """Path -> bool array, True where fine-tuning must leave the planted circuit alone (``model.freeze``).

    Measured without it: SFT on agent actions erodes the circuit —
    induction accuracy on random repeats fell from 0.97 to 0.006 in 600 steps — because at most action tokens the
    copy prediction is wrong, and the cheapest fix for the loss is to silence copying everywhere. Frozen: the two
    heads (their query, key, value and output weights and their layers' input norms), the token embedding's
    circuit dimensions, the readout of the ``copy`` subspace, and every other branch's writes into the subspaces
    the circuit reads (layers 0-1) or the readout reads (all layers). The rest of the model learns *when* to copy
    by outvoting the copy logits where an action must not copy.
    """
    check_fits(cfg, c)
    de = c.de
    circuit = slice(0, _width(c) * de)  # emb | const | free | prev | copy | prev2 (| prev3): what it reads or writes
    copy = slice(3 * de, 4 * de)
    m = {
        "embed": np.zeros((cfg.vocab_size, cfg.hidden_size), bool),
        "final_norm": np.zeros((cfg.hidden_size,), bool),
        "lm_head": np.zeros((cfg.hidden_size, cfg.vocab_size), bool),
    }
    shapes = {
        "attn_norm": (cfg.hidden_size,),
        "mlp_norm": (cfg.hidden_size,),
        "q_proj": (cfg.hidden_size, cfg.num_heads, cfg.head_dim),
        "k_proj": (cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim),
        "v_proj": (cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim),
        "o_proj": (cfg.num_heads, cfg.head_dim, cfg.hidden_size),
        "gate_proj": (cfg.hidden_size, cfg.intermediate_size),
        "up_proj": (cfg.hidden_size, cfg.intermediate_size),
        "down_proj": (cfg.intermediate_size, cfg.hidden_size),
    }
    for name, shape in shapes.items():
        m[f"layers/{name}"] = np.zeros((cfg.num_layers, *shape), bool)
    m["embed"][:, : de + (3 if c.recency else 1)] = True  # with recency: the flag dims too
    m["final_norm"][copy] = True
    m["lm_head"][copy] = True
    for layer in (0, 1):
        m["layers/attn_norm"][layer] = True
        for name in ("q_proj", "k_proj", "v_proj"):
            m[f"layers/{name}"][layer, :, 0] = True
        m["layers/o_proj"][layer, :, :, circuit] = True  # head 0 writes only there; no other head may
        m["layers/o_proj"][layer, 0] = True
        m["layers/down_proj"][layer, :, circuit] = True
    if c.bigram:  # the second-previous-token head (layer 0, its query head, kv head 1)
        g = _second_head(cfg)
        m["layers/q_proj"][0, :, g] = True
        m["layers/k_proj"][0, :, 1] = True
        m["layers/v_proj"][0, :, 1] = True
        m["layers/o_proj"][0, g] = True
    if c.trigram:  # the third-previous-token head: its query and output (its key and value are kv head 1's)
        m["layers/q_proj"][0, :, g + 1] = True
        m["layers/o_proj"][0, g + 1] = True
    m["layers/o_proj"][:, :, :, copy] = True
    m["layers/down_proj"][:, :, copy] = True
    return m
