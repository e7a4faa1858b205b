"""Decision tokens (tgpo_jax/data/decisions.py): hand-worked sequences, a brute-force reference, and the collated
per-token weight that a DPO / TGPO margin without the copies reads (loss.margin_copies=False)."""

import numpy as np
import pytest

from tgpo_jax.data.collate import CollateConfig, build_example, tokenize_node
from tgpo_jax.data.decisions import decision_mask
from tgpo_jax.data.synthetic import synthetic_nodes


def brute_force(prompt, completion, max_n=8):
    """Reference: scan every earlier position for the longest matching suffix, then compare continuations."""
    seq = list(prompt) + list(completion)
    out = []
    for k, y in enumerate(completion):
        i = len(prompt) + k
        verdict = True
        for n in range(min(max_n, i), 0, -1):
            follow = {seq[j] for j in range(n, i) if seq[j - n : j] == seq[i - n : i]}
            if follow:
                verdict = follow != {y}
                break
        out.append(verdict)
    return np.array(out, bool)


def test_hand_worked():
    # prompt: a b c | a b d | e f      (letters as ints)
    a, b, c, d, e, f, g = range(1, 8)
    prompt = [a, b, c, a, b, d, e, f]
    # completion "b d e": before 'b' the context ends '... e f'; 'f' has no successor in the prompt -> decision;
    # before 'd' the context 'f b' never occurred, 'b' did, followed by {c, d}: ambiguous -> decision;
    # before 'e' the context 'b d' -> {e} -> copy.
    assert decision_mask(prompt, [b, d, e]).tolist() == [True, True, False]
    # "a b d e": 'a' after 'f': decision; 'b' after 'a' -> {b}: copy; 'd' after 'a b' -> {c, d}: decision (which
    # occurrence is meant); 'e' after 'a b d' -> {e}: copy.
    assert decision_mask(prompt, [a, b, d, e]).tolist() == [True, False, True, False]
    # the completion's own tokens count as context: "g a g a" -> the second 'a' after 'g' follows the first
    assert decision_mask(prompt, [g, a, g, a]).tolist() == [True, True, True, False]


def test_matches_brute_force_on_random_sequences():
    rng = np.random.default_rng(0)
    for vocab in (3, 6, 20):
        for _ in range(40):
            prompt = rng.integers(0, vocab, rng.integers(0, 30)).tolist()
            completion = rng.integers(0, vocab, rng.integers(1, 12)).tolist()
            np.testing.assert_array_equal(
                decision_mask(prompt, completion), brute_force(prompt, completion), err_msg=f"{prompt} | {completion}"
            )


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_collated_weight_marks_decisions(spm_tokenizer, layout):
    """DPO with margin_decisions: token_weight 1 on the decision tokens, 0 on the copies (the brute-force rule);
    without it, and for SFT, every action token weighs 1."""
    node = synthetic_nodes(1, seed=3, num_branches=3, observation_words=4)[0]
    kw = dict(method="dpo", layout=layout, max_len=320, max_prompt_len=240, max_completion_len=32, max_branches=3)
    plain = build_example(node, spm_tokenizer, CollateConfig(**kw))
    marked = build_example(node, spm_tokenizer, CollateConfig(margin_decisions=True, **kw))
    on = plain["slot"] >= 0
    assert on.any() and np.array_equal(marked["slot"] >= 0, on)
    assert (plain["token_weight"][on] == 1.0).all() and (plain["token_weight"][~on] == 0).all()
    assert (marked["token_weight"][~on] == 0).all()
    prompt, comps, _ = tokenize_node(node, spm_tokenizer, CollateConfig(**kw))
    copies = 0
    for slot in np.unique(plain["slot"][on]):
        rows, cols = np.nonzero(marked["slot"] == slot)
        ids = marked["tokens"][rows, cols].tolist()
        want = brute_force(prompt, ids).astype(np.float32)
        copies += int((want == 0).sum())
        np.testing.assert_array_equal(marked["token_weight"][rows, cols], want)
    assert copies, "no copy token: the mask would not be tested"
    sft = build_example(node, spm_tokenizer, CollateConfig(**{**kw, "method": "sft"}))
    assert set(np.unique(sft["token_weight"][sft["slot"] >= 0])) == {1.0}
