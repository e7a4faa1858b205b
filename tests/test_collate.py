"""Collation: loss only on action tokens, EOS once, no merge across the prompt/action boundary."""

import numpy as np
import pytest

from tgpo_jax.data.collate import CollateConfig, build_example, node_selection, tokenize_node
from tgpo_jax.data.pipeline import NodeExamples, make_dataset
from tgpo_jax.data.io import write_dataset
from tgpo_jax.data.synthetic import synthetic_nodes
from tgpo_jax.models.tokenizer import chat_ids

CC = dict(max_len=320, max_prompt_len=240, max_completion_len=32, max_branches=3, max_pairs=3)


@pytest.fixture(scope="module")
def node():
    return synthetic_nodes(1, seed=5, num_branches=3, observation_words=4)[0]


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_loss_tokens_are_exactly_action_plus_eos(node, spm_tokenizer, layout):
    cc = CollateConfig(method="dpo", layout=layout, **CC)
    e = build_example(node, spm_tokenizer, cc)
    prompt = chat_ids(spm_tokenizer, node.prompt)
    for slot in range(3):
        action = node.branches[slot].action
        want = spm_tokenizer(action, add_special_tokens=False)["input_ids"] + [spm_tokenizer.eos_token_id]
        rows, cols = np.nonzero(e["slot"] == slot)
        assert e["tokens"][rows, cols].tolist() == want  # tokenised alone: nothing merged with the prompt
        assert (e["tokens"][rows, cols] == spm_tokenizer.eos_token_id).sum() == 1
        row = rows[0]
        p = len(prompt)
        # positions continue from the prompt end; the first token is predicted from the last prompt token
        assert e["positions"][row, cols].tolist() == list(range(p, p + len(want)))
        assert e["pred"][row, cols[0]] == p - 1
        assert e["tokens"][row, :p].tolist() == prompt
        assert (e["slot"][row, :p] == -1).all() and (e["segments"][row, :p] == 0).all()  # prompt: no loss


def test_pairs_point_at_higher_q_chosen(node, spm_tokenizer):
    cc = CollateConfig(method="tgpo", **CC)
    e = build_example(node, spm_tokenizer, cc)
    used, pairs, _ = node_selection(node, cc)
    assert e["pair_valid"].sum() == len(pairs) == 3
    for j in range(3):
        c, r = used[e["pair_chosen"][j]], used[e["pair_rejected"][j]]
        assert node.branches[c].q > node.branches[r].q
    assert np.isclose(sorted(e["pair_weight"][e["pair_valid"]])[-1], max(w for *_, w in pairs))


def test_long_prompt_is_cut_from_the_left(spm_tokenizer):
    node = synthetic_nodes(1, seed=6, observation_words=200)[0]
    cc = CollateConfig(method="dpo", **CC)
    prompt, _, truncated = tokenize_node(node, spm_tokenizer, cc)
    full = chat_ids(spm_tokenizer, node.prompt)
    assert truncated and len(full) > 240 and prompt == full[-240:]


def test_kto_items_and_kl_slot(node, spm_tokenizer):
    other = synthetic_nodes(2, seed=9)[1]
    cc = CollateConfig(method="kto", **CC)
    kl = tokenize_node(other, spm_tokenizer, cc)[1][0]
    e = build_example(node, spm_tokenizer, cc, kl_completion=kl)
    assert e["kl_slot"][0] == 3 and e["slot_valid"][3]
    rows, cols = np.nonzero(e["slot"] == 3)
    assert e["tokens"][rows, cols].tolist() == kl
    # plain KTO: every occurrence (2 successes of the right branch, 2 failures of each wrong one)
    assert e["item_valid"].sum() == 6 and e["item_desirable"][e["item_valid"]].sum() == 2


def test_node_examples_pipeline(tmp_path, spm_tokenizer):
    nodes = synthetic_nodes(20, seed=1)
    single = [n.__class__(**{**n.__dict__, "branches": n.branches[:1], "node_id": n.node_id + "s"}) for n in nodes[:5]]
    write_dataset(nodes + single, str(tmp_path / "d"), num_shards=2)
    cc = CollateConfig(method="dpo", **CC)
    src = NodeExamples(str(tmp_path / "d"), spm_tokenizer, cc, weight_norm="dataset_mean")
    assert len(src) == 20  # single-branch nodes give DPO nothing and are skipped
    weights = np.concatenate([src[i]["pair_weight"][src[i]["pair_valid"]] for i in range(len(src))])
    assert np.isclose(weights.mean(), 1.0)  # dataset-mean normalisation

    def epoch(pidx, pcount, seed=0):
        ds = make_dataset(src, batch_size=4, seed=seed, num_epochs=1, process_index=pidx, process_count=pcount)
        return [int(i) for b in ds for i in b["index"]]

    a, b = epoch(0, 2), epoch(1, 2)
    assert not set(a) & set(b) and sorted(a + b) == list(range(20))  # processes split the epoch
    assert epoch(0, 1) == epoch(0, 1) and epoch(0, 1) != epoch(0, 1, seed=1)

    ds = make_dataset(src, batch_size=4, seed=3, num_epochs=3)
    it = iter(ds)
    for _ in range(4):
        next(it)
    state = it.get_state()
    rest = [next(it)["index"].tolist() for _ in range(6)]
    it2 = iter(ds)
    it2.set_state(state)
    assert [next(it2)["index"].tolist() for _ in range(6)] == rest  # exact resume of the data order
    # epochs reshuffle: the second epoch is not the first again
    it3 = iter(make_dataset(src, batch_size=20, seed=3, num_epochs=2))
    assert next(it3)["index"].tolist() != next(it3)["index"].tolist()


def test_family_balance_weighs_every_family_alike(tmp_path, spm_tokenizer):
    """SFT with ``family_balance``: family "a" has 3 nodes with one SFT item each, "b" one node with one, and a node
    without a family is its own group ""; the weights 5 / (3 · 3), 5 / (3 · 1) and 5 / (3 · 1) give each family a
    third of the loss, and the mean item weight is 1. Off, every loss token weighs 1."""
    import dataclasses

    base = synthetic_nodes(5, seed=2)
    fams = ["a", "a", "a", "b", None]
    nodes = [dataclasses.replace(n, meta={**n.meta, **({"family": f} if f else {})}) for n, f in zip(base, fams)]
    for n in nodes:  # one successful branch per node, so every node is one item
        assert sum(b.n_success > 0 for b in n.branches) == 1
    write_dataset(nodes, str(tmp_path / "d"))
    on = NodeExamples(str(tmp_path / "d"), spm_tokenizer, CollateConfig(method="sft", family_balance=True, **CC))
    off = NodeExamples(str(tmp_path / "d"), spm_tokenizer, CollateConfig(method="sft", **CC))
    want = {"a": 5 / 9, "b": 5 / 3, "": 5 / 3}
    got = []
    for i, f in enumerate(fams):
        e_on, e_off = on[i], off[i]
        mask = e_off["token_weight"] > 0
        assert mask.any() and np.all(e_off["token_weight"][mask] == 1.0)
        np.testing.assert_allclose(e_on["token_weight"][mask], want[f or ""], rtol=1e-6)
        assert np.all(e_on["token_weight"][~mask] == 0)
        got.append(float(e_on["token_weight"][mask][0]))
    assert np.isclose(np.mean(got), 1.0)
    with pytest.raises(ValueError, match="family_balance weighs SFT"):
        CollateConfig(method="tgpo", family_balance=True, **CC)
    # TGPO with the SFT term: the same weights on the node's slots (objective.sft_term reads slot_weight)
    tg = NodeExamples(
        str(tmp_path / "d"), spm_tokenizer, CollateConfig(method="tgpo", family_balance=True, sft_slots=True, **CC)
    )
    plain = NodeExamples(str(tmp_path / "d"), spm_tokenizer, CollateConfig(method="tgpo", sft_slots=True, **CC))
    for i in range(len(tg)):
        f = tg.node_family[i] or ""
        np.testing.assert_allclose(tg[i]["slot_weight"], want[f], rtol=1e-6)
        assert np.all(plain[i]["slot_weight"] == 1.0)
        np.testing.assert_array_equal(tg[i]["token_weight"], plain[i]["token_weight"])


def test_weighted_chosen_nll_is_the_weighted_token_mean():
    import jax.numpy as jnp

    from tgpo_jax.losses import chosen_nll

    lp = np.array([-3.0, -1.0, -4.0, -2.0], np.float32)  # summed log-probs of four actions
    n = np.array([3, 2, 4, 1], np.float32)  # their tokens
    valid = np.array([True, True, False, True])
    w = np.array([0.5, 2.0, 9.0, 1.0], np.float32)
    want = -(0.5 * -3 + 2 * -1 + 1 * -2) / (0.5 * 3 + 2 * 2 + 1 * 1)
    assert np.isclose(float(chosen_nll(jnp.asarray(lp), jnp.asarray(n), jnp.asarray(valid), jnp.asarray(w))), want)
    assert np.isclose(float(chosen_nll(jnp.asarray(lp), jnp.asarray(n), jnp.asarray(valid))), 6 / 6)
