"""The KV-cache sampler against step-by-step full forward passes of the same model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.loading import flat_params, model_from_flat
from tgpo_jax.models.sampler import Sampler, SamplingParams
from tgpo_jax.models.transformer import init_model

PROMPTS = [[5, 17, 33, 9], [44, 3, 8, 100, 21, 7, 61, 90, 12], [250]]


def peaked_model(vocab=256, seed=0, **kw):
    """Random weights scaled up so next-token distributions are peaked (no argmax ties)."""
    cfg = tiny_config("llama", vocab_size=vocab, eos_token_id=None, **kw)
    m = init_model(cfg, seed=seed)
    flat = {p: v * (1.0 if "norm" in p else 6.0) for p, v in flat_params(m).items()}
    return model_from_flat(cfg, flat)


@nnx.jit
def _forward(model, tokens):
    return jax.nn.log_softmax(model(tokens)[0].astype(jnp.float32), axis=-1)


def full_forward_logprobs(model, seq, pad_to=64):
    """log softmax of an uncached forward over the whole sequence: [T, V].

    Right padding to a fixed length (one compile) cannot change earlier positions under a causal mask.
    """
    tokens = np.zeros((1, pad_to), np.int32)
    tokens[0, : len(seq)] = seq
    return np.asarray(_forward(model, jnp.asarray(tokens)))[0, : len(seq)]


@pytest.fixture(scope="module")
def model():
    return peaked_model()


def test_greedy_kv_cache_equals_stepwise_full_forward(model):
    out = Sampler(model).generate_ids(PROMPTS, SamplingParams(temperature=0.0, max_tokens=20))
    for prompt, (toks, lps, reason) in zip(PROMPTS, out):
        assert reason == "length" and len(toks) == 20
        seq = list(prompt)
        for tok, lp in zip(toks, lps):
            ref = full_forward_logprobs(model, seq)[-1]
            assert tok == int(ref.argmax())  # greedy == argmax of the uncached model
            assert abs(lp - ref[tok]) < 1e-4
            seq.append(tok)


def test_sampled_logprobs_equal_model_logprobs(model):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=3)
    for prompt, (toks, lps, _) in zip(PROMPTS, Sampler(model).generate_ids(PROMPTS, params)):
        ref = full_forward_logprobs(model, prompt + toks)
        want = [ref[len(prompt) - 1 + i, t] for i, t in enumerate(toks)]
        np.testing.assert_allclose(lps, want, atol=1e-4)


def test_top_k_samples_only_from_top_k(model):
    params = SamplingParams(temperature=2.0, top_k=3, max_tokens=16, seed=1)
    for prompt, (toks, _, _) in zip(PROMPTS, Sampler(model).generate_ids(PROMPTS, params)):
        ref = full_forward_logprobs(model, prompt + toks)
        for i, t in enumerate(toks):
            top3 = np.argsort(ref[len(prompt) - 1 + i])[-3:]
            assert t in top3


def test_tiny_top_p_and_top_k_one_are_greedy(model):
    greedy = Sampler(model).generate_ids(PROMPTS, SamplingParams(temperature=0.0, max_tokens=10))
    for params in (
        SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=10, seed=5),
        SamplingParams(temperature=1.0, top_k=1, max_tokens=10, seed=6),
    ):
        got = Sampler(model).generate_ids(PROMPTS, params)
        assert [g[0] for g in got] == [g[0] for g in greedy]


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.8)])
def test_first_token_frequencies_follow_the_filtered_distribution(top_k, top_p):
    model = peaked_model(vocab=64, seed=2)
    prompt = [3, 9, 27]
    n = 4000
    out = Sampler(model, bucket=8).generate_ids(
        [prompt] * n, SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, max_tokens=1, seed=11)
    )
    counts = np.bincount([o[0][0] for o in out], minlength=64) / n
    # numpy reference of temperature -> top-k -> top-p filtering
    z = full_forward_logprobs(model, prompt)[-1] / 0.7
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p)
    keep = np.zeros(64, bool)
    keep[order[:top_k] if top_k else order] = True
    if top_p < 1:
        cum = np.cumsum(p[order])
        keep_p = np.zeros(64, bool)
        keep_p[order[: int(np.searchsorted(cum, top_p) + 1)]] = True
        keep &= keep_p
    want = np.where(keep, p, 0)
    want /= want.sum()
    assert counts[~keep].sum() == 0
    assert 0.5 * np.abs(counts - want).sum() < 0.05  # total variation distance


def test_eos_stops_a_row_and_same_seed_repeats(model):
    greedy = Sampler(model).generate_ids(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12))
    eos = greedy[1][0][4]  # the 5th token row 1 produces
    m2 = model_from_flat(model.cfg.replace(eos_token_id=eos), flat_params(model))
    out = Sampler(m2).generate_ids(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12))
    toks, _, reason = out[1]
    first = greedy[1][0].index(eos)
    assert reason == "eos" and toks == greedy[1][0][: first + 1]
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=42)
    a, b = (Sampler(model).generate_ids(PROMPTS, params) for _ in range(2))
    assert [x[0] for x in a] == [x[0] for x in b]


def test_stop_strings(spm_tokenizer):
    model = peaked_model(vocab=len(spm_tokenizer), seed=4)
    sampler = Sampler(model, spm_tokenizer)
    prompt = spm_tokenizer("search for shoes", add_special_tokens=False)["input_ids"]
    free = sampler.generate([prompt], SamplingParams(temperature=0.0, max_tokens=16))[0]
    decode = lambda t: spm_tokenizer.decode(t, skip_special_tokens=False)  # noqa: E731
    # the text two tokens add after the 4th (or a later) one, if the whole output's text still holds it: a later
    # byte-fallback piece can turn a prefix's last characters into U+FFFD (which tokens a random model emits, and so
    # whether that happens, differs between backends)
    stop = next(
        c
        for k in range(4, 14)
        if (c := decode(free.tokens[: k + 2])[len(decode(free.tokens[:k])) :]).strip() and c in decode(free.tokens)
    )
    n = next(i for i in range(1, 17) if stop in decode(free.tokens[:i]))
    got = sampler.generate([prompt], SamplingParams(temperature=0.0, max_tokens=16, stop=(stop,)))[0]
    assert got.finish_reason == "stop"
    assert got.tokens == free.tokens[:n] and len(got.logprobs) == n
    full = decode(free.tokens[:n])
    assert got.text == full[: full.index(stop)] and stop not in got.text


def test_bad_requests_are_clear_errors(model):
    s = Sampler(model)
    with pytest.raises(ValueError, match="non-empty prompt"):
        s.generate_ids([[]])
    with pytest.raises(ValueError, match="max_position_embeddings"):
        s.generate_ids([[1] * 500], SamplingParams(max_tokens=64))
    with pytest.raises(ValueError, match="invalid sampling"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="tokenizer"):
        s.generate_ids([[1]], SamplingParams(stop=("x",)))


class _Allow:
    """A test constraint: only tokens in ``allowed`` (EOS when ``eos_ok``); records what it was given."""

    def __init__(self, allowed, eos_ok=False, eos=()):
        self.allowed, self.eos_ok, self.eos, self.seen = set(allowed), eos_ok, set(eos), []

    def allows(self, token):
        return self.eos_ok if token in self.eos else token in self.allowed

    def advance(self, token):
        self.seen.append(token)


def test_constrained_greedy_is_the_best_allowed_token_with_the_models_own_logprob(model):
    evens, thirds = _Allow(range(0, 256, 2)), _Allow(range(0, 256, 3))
    out = Sampler(model).generate_ids(PROMPTS[:2], SamplingParams(temperature=0.0, max_tokens=12), [evens, thirds])
    for prompt, c, (toks, lps, reason) in zip(PROMPTS, (evens, thirds), out):
        assert reason == "length" and len(toks) == 12 and c.seen == toks
        seq = list(prompt)
        for tok, lp in zip(toks, lps):
            ref = full_forward_logprobs(model, seq)[-1]
            allowed = sorted(c.allowed)
            assert tok == allowed[int(np.argmax(ref[allowed]))]  # argmax over the allowed tokens only
            assert abs(lp - ref[tok]) < 1e-4  # the unconstrained model's log-prob
            seq.append(tok)
    free = Sampler(model).generate_ids(PROMPTS[:1], SamplingParams(temperature=0.0, max_tokens=12))[0][0]
    assert any(t % 2 for t in free), "the unconstrained model must pick odd tokens for this test to mean anything"


@pytest.mark.parametrize("constrained", [False, True])
def test_a_new_sampler_over_other_weights_reuses_the_compiled_steps_and_samples_its_own_model(constrained):
    """Samplers of one architecture share jit's cache (the pipeline evaluates many models in one process), and the
    shared code still reads each sampler's own weights: its greedy tokens are its model's argmax."""
    a, b = peaked_model(seed=11), peaked_model(seed=12)
    params = SamplingParams(temperature=0.0, max_tokens=8)
    cons = (lambda: [_Allow(range(256)) for _ in PROMPTS]) if constrained else (lambda: None)
    first = Sampler(a).generate_ids(PROMPTS, params, cons())
    step = Sampler._feed if constrained else Sampler._decode_chunk
    compiled = (Sampler._prefill._cache_size(), step._cache_size())
    second = Sampler(b).generate_ids(PROMPTS, params, cons())
    assert (Sampler._prefill._cache_size(), step._cache_size()) == compiled  # nothing compiled again
    assert Sampler(a) == Sampler(b) and hash(Sampler(a)) == hash(Sampler(b))
    assert Sampler(a) != Sampler(peaked_model(vocab=128, seed=11))  # another architecture: its own code
    assert [t for t, _, _ in first] != [t for t, _, _ in second]  # other weights, other tokens
    for prompt, (toks, _, _) in zip(PROMPTS, second):
        seq = list(prompt)
        for tok in toks:
            assert tok == int(full_forward_logprobs(b, seq)[-1].argmax())
            seq.append(tok)


def test_greedy_choice_asks_the_constraint_only_down_to_the_first_allowed_token():
    # each ``allows`` parses the output so far (the agent's grammar): greedy needs no verdict past the first yes
    from tgpo_jax.models.sampler import choose_allowed

    logits = np.random.default_rng(0).normal(size=300)
    order = list(np.argsort(-logits))
    for rank in (0, 5, 100):  # the first allowed token inside the scanned top 64, and past it
        asked = []

        class Counting(_Allow):
            def allows(self, token):
                asked.append(token)
                return super().allows(token)

        c = Counting({int(t) for t in order[rank:]})
        assert choose_allowed(logits, c, 0.0, 0, 1.0, np.random.default_rng(0)) == order[rank]
        assert len(asked) == rank + 1 + (64 if rank >= 64 else 0)


def test_constrained_sampling_draws_from_the_renormalised_allowed_distribution():
    model = peaked_model(vocab=64, seed=2)
    prompt, allowed = [3, 9, 27], set(range(0, 64, 4))
    n = 1500
    out = Sampler(model, bucket=8).generate_ids(
        [prompt] * n, SamplingParams(temperature=0.7, max_tokens=1, seed=5), [_Allow(allowed) for _ in range(n)]
    )
    counts = np.bincount([o[0][0] for o in out], minlength=64) / n
    z = full_forward_logprobs(model, prompt)[-1] / 0.7
    p = np.where(np.isin(np.arange(64), sorted(allowed)), np.exp(z - z.max()), 0.0)
    p /= p.sum()
    assert counts[p == 0].sum() == 0
    assert 0.5 * np.abs(counts - p).sum() < 0.06  # total variation distance


def test_constraint_decides_eos_and_a_dead_end_ends_the_row(model):
    greedy = Sampler(model).generate_ids(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12))
    eos = greedy[1][0][4]
    m2 = model_from_flat(model.cfg.replace(eos_token_id=eos), flat_params(model))
    every = range(256)
    no_eos = _Allow(every, eos_ok=False, eos={eos})
    toks, _, reason = Sampler(m2).generate_ids([PROMPTS[1]], SamplingParams(temperature=0.0, max_tokens=12), [no_eos])[
        0
    ]
    assert reason == "length" and eos not in toks and len(toks) == 12
    with_eos = _Allow(every, eos_ok=True, eos={eos})
    toks, _, reason = Sampler(m2).generate_ids(
        [PROMPTS[1]], SamplingParams(temperature=0.0, max_tokens=12), [with_eos]
    )[0]
    assert reason == "eos" and toks == greedy[1][0][:5]
    dead = _Allow(())  # nothing allowed: the row ends at once, nothing emitted
    toks, lps, reason = Sampler(model).generate_ids(
        [PROMPTS[0]], SamplingParams(temperature=0.0, max_tokens=5), [dead]
    )[0]
    assert toks == [] and lps == [] and reason == "length"
    with pytest.raises(ValueError, match="one per prompt"):
        Sampler(model).generate_ids(PROMPTS, SamplingParams(max_tokens=2), [dead])


@pytest.mark.parametrize("constrained", [False, True])
def test_a_rows_sample_is_the_same_in_any_batch(model, constrained):
    """Each row samples from its own seed: alone, beside another row, or in another position, a row draws the same
    tokens (a resumed collection batches its episodes differently); another seed draws others."""
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=0)
    s = Sampler(model)

    def gen(prompts, seeds):
        allow = [_Allow(range(0, 256, 3)) for _ in prompts] if constrained else None
        return [x[0] for x in s.generate_ids(prompts, params, allow, row_seeds=seeds)]

    both = gen(PROMPTS[:2], [11, 22])
    assert gen(PROMPTS[1:2], [22]) == [both[1]]
    assert gen([PROMPTS[1], PROMPTS[0]], [22, 11]) == [both[1], both[0]]
    assert gen(PROMPTS[1:2], [23]) != [both[1]]


def test_a_bf16_decode_through_bit_slices_is_the_plain_decode_bit_for_bit(monkeypatch):
    """The bf16 decode slices its layers' weights and KV cache as uint16 bits (``transformer.as_bits``, a speed
    fix for XLA:CPU): the same tokens and log-probs, bit for bit, as slicing the bf16 arrays themselves."""
    import tgpo_jax.models.transformer as T

    cfg = tiny_config("llama", vocab_size=256, eos_token_id=None, dtype="bfloat16", param_dtype="bfloat16")
    m = init_model(cfg, seed=3)
    assert m.layers.q_proj[...].dtype == jnp.bfloat16
    params = SamplingParams(temperature=0.0, max_tokens=12)
    s = Sampler(m)
    assert {a.dtype for a in jax.tree.leaves(s.weights)} == {jnp.dtype(jnp.uint16)}
    bits = s.generate_ids(PROMPTS, params), s.generate_ids(PROMPTS, params, [_Allow(range(256)) for _ in PROMPTS])
    monkeypatch.setattr(T, "as_bits", lambda t: t)
    monkeypatch.setattr(T, "as_floats", lambda b, d: b)
    jax.clear_caches()  # the steps were traced with the bits: trace them again without
    s = Sampler(m)
    assert {a.dtype for a in jax.tree.leaves(s.weights)} == {jnp.dtype(jnp.bfloat16)}
    plain = s.generate_ids(PROMPTS, params), s.generate_ids(PROMPTS, params, [_Allow(range(256)) for _ in PROMPTS])
    jax.clear_caches()
    assert bits == plain


@pytest.mark.parametrize(
    "dtypes,tied,lora",
    [
        (("bfloat16", "float32"), True, 0),
        (("bfloat16", "bfloat16"), False, 0),
        (("bfloat16", "float32"), True, 4),
        (("float32", "float32"), True, 0),
    ],
)
def test_the_weights_made_ready_once_decode_as_the_models_own(dtypes, tied, lora):
    """On a CPU the sampler casts the weights to the compute dtype, holds 16-bit ones as bits and transposes tied
    embeddings into a head once (``Sampler._ready``): the same tokens and log-probs, bit for bit, sampled or
    constrained, as the steps reading the model's own weights (float32 master weights, LoRA, float32 alike)."""
    cfg = tiny_config(
        "llama",
        vocab_size=256,
        eos_token_id=None,
        dtype=dtypes[0],
        param_dtype=dtypes[1],
        tie_word_embeddings=tied,
        lora_rank=lora,
    )
    m = init_model(cfg, seed=5)
    if lora:  # LoRA factors that change the model (B starts at zero)
        m.layers.q_proj_lora_b[...] = jnp.full_like(m.layers.q_proj_lora_b[...], 0.05)
    s = Sampler(m)
    assert (s.weights["head"] is not None) == tied
    params = SamplingParams(temperature=0.8, max_tokens=12, seed=4)
    ready = s.generate_ids(PROMPTS, params), s.generate_ids(PROMPTS, params, [_Allow(range(256)) for _ in PROMPTS])
    s.weights = {"model": s.state, "head": None}  # the model's own arrays, as on other backends
    own = s.generate_ids(PROMPTS, params), s.generate_ids(PROMPTS, params, [_Allow(range(256)) for _ in PROMPTS])
    assert ready == own
    assert len({t for toks, _, _ in ready[0] for t in toks}) > 3  # a real sample, not one token repeated


def test_bit_slices_round_trip_and_the_cache_write():
    from tgpo_jax.models.transformer import KVCache, as_bits, as_floats

    x = {
        "w": jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.bfloat16),
        "n": jnp.arange(3, dtype=jnp.int32),
        "f": jnp.ones((2,), jnp.float32),
    }
    b = as_bits(x)
    assert b["w"].dtype == jnp.uint16 and b["n"].dtype == jnp.int32 and b["f"].dtype == jnp.float32
    back = as_floats(b, jax.tree.map(lambda a: a.dtype, x))
    assert all(back[k].dtype == x[k].dtype and np.array_equal(np.asarray(back[k]), np.asarray(x[k])) for k in x)
    # the cache: keys [L, B, K, S, Dh], values [L, B, K, Dh, S], held as bits; a step's [L, B, T, K, Dh] written at 3
    cfg = tiny_config("llama", dtype="bfloat16", param_dtype="bfloat16")
    L, K, Dh = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
    rng = np.random.default_rng(1)
    ks, vs = (jnp.asarray(rng.normal(size=(L, 2, 2, K, Dh)), jnp.bfloat16) for _ in range(2))
    c = KVCache.zeros(cfg, 2, 8).write(ks, vs, 3)
    assert c.k.dtype == c.v.dtype == jnp.uint16 and c.k.shape == (L, 2, K, 8, Dh) and c.v.shape == (L, 2, K, Dh, 8)
    want = np.zeros((L, 2, 8, K, Dh), np.float32)
    want[:, :, 3:5] = np.asarray(ks, np.float32)
    np.testing.assert_array_equal(np.asarray(as_floats(c.k, jnp.bfloat16), np.float32), want.transpose(0, 1, 3, 2, 4))
    want[:, :, 3:5] = np.asarray(vs, np.float32)
    np.testing.assert_array_equal(np.asarray(as_floats(c.v, jnp.bfloat16), np.float32), want.transpose(0, 1, 3, 4, 2))
