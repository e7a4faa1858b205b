"""The planted copy circuit: at initialisation a from-scratch model continues a repeated random sequence, an
unplanted one does not, and transformers computes the same predictions from the export."""

import numpy as np
import pytest

from recipes.scratch_copy import circuit
from tgpo_jax.models.config import scratch_config
from tgpo_jax.models.loading import flat_params, model_from_flat
from tgpo_jax.models.transformer import init_model

VOCAB = 2000


def _sequences(n=16, length=160, span=12, seed=0, vocab=VOCAB):
    """[filler | x | filler | x]: the second x is predictable only by copying from the first."""
    rng = np.random.default_rng(seed)
    toks = rng.integers(4, vocab, size=(n, length)).astype(np.int32)
    starts = rng.integers(length // 2, length - span, size=n)
    for i, s in enumerate(starts):
        first = rng.integers(0, length // 2 - span)
        toks[i, s : s + span] = toks[i, first : first + span]
    return toks, starts, span


def _copy_accuracy(logits, toks, starts, span):
    """Top-1 accuracy on tokens 2..span of the second occurrence (the first one has no cue)."""
    hits = [
        int(np.argmax(logits[i, s + j - 1])) == toks[i, s + j] for i, s in enumerate(starts) for j in range(1, span)
    ]
    return float(np.mean(hits))


def _logits(model, toks):
    return np.asarray(model(toks)[0])


def test_planted_model_copies_at_initialisation():
    cfg = scratch_config("copy", VOCAB)
    toks, starts, span = _sequences()
    planted = _copy_accuracy(_logits(circuit.init_planted(cfg, seed=1), toks), toks, starts, span)
    plain = _copy_accuracy(_logits(init_model(cfg, seed=1), toks), toks, starts, span)
    assert planted >= 0.95, planted  # measured 0.994 (0.955 with the one-token match)
    assert plain <= 0.05, plain  # chance is 1/2000


def test_two_token_match_keeps_the_copy_on_its_source_span():
    """Tokens drawn from 60 values repeat every few positions, so "what followed this token before" is ambiguous;
    matching the two preceding tokens resolves most of it (measured 0.83 vs 0.17 with one token, 400 tokens)."""
    cfg = scratch_config("copy", VOCAB)
    toks, starts, span = _sequences(n=32, length=400, vocab=64)
    init = {k: np.asarray(v) for k, v in flat_params(init_model(cfg, seed=1)).items()}

    def accuracy(bigram):
        flat = circuit.plant(init, cfg, seed=1, c=circuit.CircuitConfig(bigram=bigram))
        return _copy_accuracy(_logits(model_from_flat(cfg, flat), toks), toks, starts, span)

    two, one = accuracy(0.6), accuracy(0.0)
    assert two >= 0.7, two
    assert one <= 0.35, one


def test_three_token_match_crosses_stretches_that_recur():
    """With 24 values two-token stretches recur every few positions too; matching a third preceding token keeps
    more of the copy on its source span (measured 0.84 vs 0.56 with two, 400 tokens), and a plain copy loses
    little (0.98 vs 0.99)."""
    cfg = scratch_config("copy", VOCAB)
    init = {k: np.asarray(v) for k, v in flat_params(init_model(cfg, seed=1)).items()}

    def accuracy(trigram, vocab, length):
        toks, starts, span = _sequences(n=32, length=length, vocab=vocab)
        flat = circuit.plant(init, cfg, seed=1, c=circuit.CircuitConfig(bigram=0.7, trigram=trigram))
        return _copy_accuracy(_logits(model_from_flat(cfg, flat), toks), toks, starts, span)

    three, two = accuracy(0.5, 24, 400), accuracy(0.0, 24, 400)
    assert three >= 0.75, three
    assert two <= 0.65, two
    assert accuracy(0.5, VOCAB, 160) >= 0.95
    with pytest.raises(ValueError, match="trigram > 0 needs bigram"):
        circuit.check_fits(cfg, circuit.CircuitConfig(bigram=0.0, trigram=0.5))
    with pytest.raises(ValueError, match="hidden_size=160 < 6"):
        circuit.check_fits(scratch_config("copy", VOCAB, hidden_size=160), circuit.CircuitConfig(trigram=0.5))


def test_planted_model_is_an_ordinary_checkpoint(tmp_path, spm_tokenizer):
    """Export -> transformers' LlamaForCausalLM gives the same logits (rope_theta 1e7, untied head)."""
    import torch
    from transformers import AutoModelForCausalLM

    from tgpo_jax.models.hf_export import export_hf

    cfg = scratch_config("copy", len(spm_tokenizer), eos_token_id=spm_tokenizer.eos_token_id)
    model = circuit.init_planted(cfg, seed=2)
    export_hf(model, str(tmp_path / "m"), spm_tokenizer)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=torch.float32).eval()
    toks = np.random.default_rng(0).integers(4, len(spm_tokenizer), size=(2, 96)).astype(np.int32)
    with torch.no_grad():
        theirs = hf(torch.as_tensor(toks, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(_logits(model, toks), theirs, atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(rope_theta=1e4), "rope_theta"),
        (dict(hidden_size=96, num_heads=1, num_kv_heads=1), "hidden_size"),
        (dict(num_layers=1), "num_layers"),
        (dict(qk_norm=True), "qk_norm"),
        (dict(tie_word_embeddings=True), "tied"),
        (dict(num_kv_heads=1), "num_kv_heads"),
    ],
)
def test_models_that_cannot_hold_the_circuit_are_refused(over, match):
    with pytest.raises(ValueError, match=match):
        circuit.check_fits(scratch_config("copy", VOCAB, **over))


def test_recency_after_a_trigger_copies_from_the_nearest_match():
    """``A B`` far back, ``A C`` a few tokens back, then ``T A``: after a trigger token T (a command's verb or id)
    the circuit continues from the nearest A (C); after any other token matching stays position-invariant, so which
    A wins is decided by noise (about half the time C)."""
    cfg = scratch_config("copy", VOCAB)
    rng = np.random.default_rng(0)
    n, length, a_tok, b_tok, c_tok, trigger = 64, 400, 4, 5, 6, 7
    toks = rng.integers(10, VOCAB, size=(n, length)).astype(np.int32)
    far, near = rng.integers(20, 250, size=n), rng.integers(length - 30, length - 12, size=n)
    for i in range(n):
        toks[i, far[i] : far[i] + 2] = a_tok, b_tok
        toks[i, near[i] : near[i] + 2] = a_tok, c_tok
        toks[i, -1] = a_tok
    init = {k: np.asarray(v) for k, v in flat_params(init_model(cfg, seed=1)).items()}

    def nearest_rate(recency, before_last):
        t = toks.copy()
        t[:, -2] = before_last
        flat = circuit.plant(init, cfg, seed=1, c=circuit.CircuitConfig(recency=recency), recency_tokens=[trigger])
        last = _logits(model_from_flat(cfg, flat), t)[:, -1]
        assert (np.argmax(last, -1) == np.where(last[:, c_tok] > last[:, b_tok], c_tok, b_tok)).mean() > 0.9
        return float((last[:, c_tok] > last[:, b_tok]).mean())

    assert nearest_rate(20.0, trigger) >= 0.95
    assert 0.2 <= nearest_rate(20.0, toks[:, -2]) <= 0.8  # no trigger: the term is off
    assert 0.2 <= nearest_rate(0.0, trigger) <= 0.8  # no recency: the trigger alone does nothing
    with pytest.raises(ValueError, match="recency_tokens"):
        circuit.plant(init, cfg, c=circuit.CircuitConfig(recency=20.0))


def test_recency_token_ids_are_the_id_pieces_and_verbs():
    vocab = {"[6]": 10, "\u2581CLICK": 11, "\u2581[": 12, "CLICK": 13, "\u2581CLICKS": 14, "[6": 15, "12": 16}
    tok = type("Tok", (), {"get_vocab": lambda self: vocab})()
    assert circuit.recency_token_ids(tok, r"\[\d+\]|CLICK") == [10, 11, 13]


def test_model_config_sets_the_circuit():
    """model.circuit_bigram / model.circuit_recency reach the planted circuit; absent keys keep its defaults."""
    import ml_collections

    from recipes.scratch_copy import circuit_config

    got = circuit_config(
        ml_collections.ConfigDict({"circuit_bigram": 0.7, "circuit_recency": 3.0, "circuit_trigram": 0.5})
    )
    assert (got.bigram, got.recency, got.trigram) == (0.7, 3.0, 0.5)
    assert circuit_config(ml_collections.ConfigDict({})) == circuit.CircuitConfig()
