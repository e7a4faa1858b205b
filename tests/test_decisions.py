"""Decision tokens (tgpo_jax/data/decisions.py): hand-worked sequences, a brute-force reference, and the collated
per-token weight that the SFT loss uses."""
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
            follow = {seq[j] for j in range(n, i) if seq[j - n:j] == seq[i - n:i]}
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
            np.testing.assert_array_equal(decision_mask(prompt, completion), brute_force(prompt, completion),
                                          err_msg=f"{prompt} | {completion}")


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_collated_weight_marks_decisions(spm_tokenizer, layout):
    node = synthetic_nodes(1, seed=3, num_branches=3, observation_words=4)[0]
    kw = dict(method="sft", layout=layout, max_len=320, max_prompt_len=240, max_completion_len=32, max_branches=3)
    plain = build_example(node, spm_tokenizer, CollateConfig(**kw))
    weighted = build_example(node, spm_tokenizer, CollateConfig(decision_weight=4.0, **kw))
    on = plain["slot"] >= 0
    assert on.any() and np.array_equal(weighted["slot"] >= 0, on)
    assert (plain["token_weight"][on] == 1.0).all() and (plain["token_weight"][~on] == 0).all()
    assert (weighted["token_weight"][~on] == 0).all()
    prompt, comps, _ = tokenize_node(node, spm_tokenizer, CollateConfig(**kw))
    for slot in np.unique(plain["slot"][on]):
        rows, cols = np.nonzero(weighted["slot"] == slot)
        ids = weighted["tokens"][rows, cols].tolist()
        want = np.where(brute_force(prompt, ids), 4.0, 1.0)
        np.testing.assert_array_equal(weighted["token_weight"][rows, cols], want)
    # preference methods never carry the weight (their losses sum whole completions)
    dpo = build_example(node, spm_tokenizer, CollateConfig(**{**kw, "method": "dpo"}, decision_weight=4.0))
    assert set(np.unique(dpo["token_weight"][dpo["slot"] >= 0])) <= {1.0}


def test_decision_weight_must_be_positive():
    with pytest.raises(ValueError, match="decision_weight=0"):
        CollateConfig(method="sft", decision_weight=0.0)


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_head_weight_weights_the_thoughts_first_words_only(spm_tokenizer, layout):
    import dataclasses

    from tgpo_jax.data import examples as ex
    from tgpo_jax.data.collate import head_span

    node = synthetic_nodes(1, seed=3, num_branches=3, observation_words=4)[0]
    actions = ['Thought: Set combobox "size" to size [red].\nCommand: SELECT [6] [red]',
               'Thought: Click button "Buy Now".\nCommand: CLICK [7]',
               "CLICK [hat]"]  # no thought: every token weighs 1
    ids = lambda t: spm_tokenizer(t, add_special_tokens=False)["input_ids"]
    # hand-derived spans: the tokens of "Thought:" then those of the first word(s)
    assert head_span(actions[0], spm_tokenizer) == (len(ids("Thought:")), len(ids("Thought: Set")))
    assert head_span(actions[1], spm_tokenizer, 2) == (len(ids("Thought:")), len(ids("Thought: Click button")))
    assert head_span(actions[2], spm_tokenizer) is None and head_span("Thought:", spm_tokenizer) is None
    kw = dict(method="sft", layout=layout, max_len=400, max_prompt_len=240, max_completion_len=120, max_branches=3)
    (item,) = set(ex.sft_items(node, ex.PairConfig()))  # this node's one SFT item (its successful branch)
    for action in actions:
        branches = list(node.branches)
        branches[item] = dataclasses.replace(branches[item], action=action)
        out = build_example(dataclasses.replace(node, branches=tuple(branches)), spm_tokenizer,
                            CollateConfig(head_weight=5.0, **kw))
        rows, cols = np.nonzero(out["slot"] == 0)
        assert out["tokens"][rows, cols].tolist() == ids(action) + [spm_tokenizer.eos_token_id]
        want = np.ones(len(cols), np.float32)
        span = head_span(action, spm_tokenizer)
        if span is not None:
            want[span[0]:span[1]] = 5.0
            assert span[1] > span[0]
        np.testing.assert_array_equal(out["token_weight"][rows, cols], want)
    node = dataclasses.replace(node, branches=tuple(branches))
    # preference methods never carry it; a weight of 0 is refused
    dpo = build_example(node, spm_tokenizer, CollateConfig(**{**kw, "method": "dpo"}, head_weight=5.0))
    assert set(np.unique(dpo["token_weight"][dpo["slot"] >= 0])) <= {1.0}
    with pytest.raises(ValueError, match="head_weight=0"):
        CollateConfig(method="sft", head_weight=0.0)
