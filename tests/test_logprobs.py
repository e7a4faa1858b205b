"""Chunked log-probs equal the naive computation; tree packing equals separate prompt+branch sequences."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tgpo_jax.data.collate import CollateConfig, build_example, stack, tokenize_node
from tgpo_jax.data.synthetic import synthetic_nodes
from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.transformer import init_model, param_count, trained_param_count
from tgpo_jax.training.logprobs import loss_positions, naive_token_logprobs, segment_mask, slot_logprobs, token_logprobs
from tgpo_jax.training.plan import counted_flops
from tgpo_jax.training.objective import LossConfig, objective, slot_token_counts


def test_chunked_equals_naive_values_and_gradients():
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.standard_normal((3, 30, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 50)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 50, (3, 30)))
    np.testing.assert_allclose(token_logprobs(h, w, y, chunk=7), naive_token_logprobs(h, w, y), atol=1e-5)
    loss = lambda f: lambda h, w: jnp.sum(f(h, w) * jnp.linspace(0, 1, 30))  # noqa: E731
    g1 = jax.grad(loss(lambda h, w: token_logprobs(h, w, y, chunk=7)), argnums=(0, 1))(h, w)
    g2 = jax.grad(loss(lambda h, w: naive_token_logprobs(h, w, y)), argnums=(0, 1))(h, w)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_chunked_logprobs_never_build_full_float32_logits():
    """The jaxpr of the chunked version holds no [N, T, V] array; the naive one does."""
    h = jax.ShapeDtypeStruct((2, 256, 8), jnp.float32)
    w = jax.ShapeDtypeStruct((8, 1000), jnp.float32)
    y = jax.ShapeDtypeStruct((2, 256), jnp.int32)

    def sizes(jaxpr):
        for eqn in jaxpr.eqns:
            yield from (int(np.prod(v.aval.shape)) for v in eqn.outvars)
            for sub in eqn.params.values():  # scan / remat / pjit bodies
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from sizes(inner)

    def biggest(f):
        jaxpr = jax.make_jaxpr(jax.grad(lambda h, w, y: jnp.sum(f(h, w, y))))(h, w, y)
        return max(sizes(jaxpr.jaxpr))

    assert biggest(lambda h, w, y: token_logprobs(h, w, y, chunk=32)) <= 2 * 32 * 1000
    assert biggest(naive_token_logprobs) >= 2 * 256 * 1000


def test_segment_mask():
    seg = jnp.asarray([[0, 0, 1, 1, 2, 2, -1]])
    m = np.asarray(segment_mask(seg))[0]
    assert m[3].tolist() == [1, 1, 1, 1, 0, 0, 0]  # branch 1 sees the prompt and itself
    assert m[5].tolist() == [1, 1, 0, 0, 1, 1, 0]  # branch 2 never sees branch 1
    assert not m[:, 6].any()  # padding is never attended to


@pytest.fixture(scope="module")
def setup(spm_tokenizer):
    cfg = tiny_config("qwen3", vocab_size=len(spm_tokenizer), qk_norm=True)
    model = init_model(cfg, seed=1)
    model = nnx.merge(*(lambda g, s: (g, jax.tree.map(lambda x: x * 3.0, s)))(*nnx.split(model)))  # sharper
    nodes = synthetic_nodes(4, seed=3, num_branches=3, observation_words=6)
    return model, nodes


def independent_branch_logprob(model, prompt, completion):
    """log p(completion | prompt) from one ordinary causal forward over prompt + completion."""
    seq = jnp.asarray([prompt + completion])
    logp = jax.nn.log_softmax(model(seq)[0][0].astype(jnp.float32), -1)
    p = len(prompt)
    return float(sum(logp[p - 1 + i, t] for i, t in enumerate(completion)))


def dpo_batch(nodes, tokenizer, layout):
    """The nodes collated for DPO with three slots each: (collate config, per-node examples, stacked batch)."""
    cc = CollateConfig(
        method="dpo", layout=layout, max_len=256, max_prompt_len=160, max_completion_len=32, max_branches=3, max_pairs=3
    )
    exs = [build_example(n, tokenizer, cc) for n in nodes]
    return cc, exs, jax.tree.map(jnp.asarray, stack(exs))


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_slot_logprobs_equal_separate_sequences(setup, spm_tokenizer, layout):
    model, nodes = setup
    cc, exs, batch = dpo_batch(nodes, spm_tokenizer, layout)
    got = np.asarray(jax.jit(lambda b: slot_logprobs(model, b, chunk=64)[0])(batch)).reshape(len(nodes), -1)
    for i, node in enumerate(nodes):
        prompt, comps, _ = tokenize_node(node, spm_tokenizer, cc)
        # slots are assigned to the node's used branches in index order
        for slot, b in enumerate(range(3)):
            assert exs[i]["slot_valid"][slot]
            want = independent_branch_logprob(model, prompt, comps[b])
            assert abs(got[i, slot] - want) < 1e-3 * max(1.0, abs(want)), (i, slot, got[i, slot], want)


def test_loss_positions_lists_each_rows_loss_tokens_then_zeros():
    slot = np.full((2, 1, 200), -1, np.int32)
    slot[0, 0, 150:190], slot[1, 0, 20:25], slot[1, 0, 100:103] = 0, 1, 2  # 40 and 8 loss tokens
    pos = loss_positions(slot)
    assert pos.shape == (2, 1, 64) and pos.dtype == np.int32  # the narrowest width that holds 40
    assert pos[0, 0, :40].tolist() == list(range(150, 190)) and not pos[0, 0, 40:].any()
    assert pos[1, 0, :8].tolist() == [20, 21, 22, 23, 24, 100, 101, 102] and not pos[1, 0, 8:].any()
    slot[0, 0, 10:60] = 3  # 90 loss tokens: 128 wide; then no wider than the row
    assert loss_positions(slot).shape[-1] == 128 and loss_positions(np.zeros((1, 1, 100), np.int32)).shape[-1] == 100
    assert loss_positions(slot, width=96).shape[-1] == 96
    with pytest.raises(ValueError, match="less than a row's 90 loss tokens"):
        loss_positions(slot, width=64)


@pytest.mark.parametrize("method,layout", [("dpo", "packed"), ("dpo", "plain"), ("kto", "packed"), ("sft", "packed")])
def test_the_projection_on_loss_positions_only_gives_the_same_logprobs_and_gradients(
    setup, spm_tokenizer, method, layout
):
    """``loss_pos`` changes where the vocabulary projection runs, not what it computes: slot and token log-probs
    and the parameters' gradients equal the every-position path's (float32 rounding)."""
    model, nodes = setup
    cc = CollateConfig(
        method=method,
        layout=layout,
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
    )
    exs = [build_example(n, spm_tokenizer, cc, kl_completion=[5, 6, 7]) for n in nodes]
    batch = jax.tree.map(jnp.asarray, stack(exs))
    narrow = {**batch, "loss_pos": jnp.asarray(loss_positions(np.asarray(batch["slot"])))}
    assert narrow["loss_pos"].shape[-1] < batch["tokens"].shape[-1]  # the narrow path is the one taken
    g, state = nnx.split(model)

    def run(b):
        def f(s):
            per_slot, tok, on = slot_logprobs(nnx.merge(g, s), b, chunk=64)
            return jnp.sum(per_slot * jnp.arange(1, per_slot.size + 1)), (per_slot, tok, on)

        return jax.jit(jax.grad(f, has_aux=True))(state)

    (g_all, (s_all, t_all, on_all)), (g_pos, (s_pos, t_pos, on_pos)) = run(batch), run(narrow)
    valid = np.asarray(batch["slot_valid"]).reshape(-1)
    assert float(jnp.abs(s_all[valid]).min()) > 0.1  # non-trivial log-probs
    np.testing.assert_allclose(s_pos, s_all, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(t_pos, t_all, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(on_pos, on_all)
    for a, b in zip(jax.tree.leaves(g_all), jax.tree.leaves(g_pos)):
        scale = float(np.abs(np.asarray(a)).max())
        np.testing.assert_allclose(b, a, atol=1e-5 * scale, rtol=1e-4)


def test_packed_branch_is_independent_of_other_branches(setup, spm_tokenizer):
    model, nodes = setup
    cc = CollateConfig(
        method="dpo",
        layout="packed",
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
    )
    node = nodes[0]
    changed = dataclasses.replace(
        node, branches=[node.branches[0], node.branches[1], dataclasses.replace(node.branches[2], action="GO_BACK")]
    )
    f = jax.jit(lambda b: slot_logprobs(model, b, chunk=64)[0])
    a = np.asarray(f(jax.tree.map(jnp.asarray, stack([build_example(node, spm_tokenizer, cc)]))))
    b = np.asarray(f(jax.tree.map(jnp.asarray, stack([build_example(changed, spm_tokenizer, cc)]))))
    np.testing.assert_allclose(a[:2], b[:2], atol=1e-5)
    assert abs(a[2] - b[2]) > 1e-3


def test_remat_gives_the_same_gradients(setup, spm_tokenizer):
    model, nodes = setup
    cc = CollateConfig(
        method="dpo",
        layout="packed",
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
    )
    batch = jax.tree.map(jnp.asarray, stack([build_example(n, spm_tokenizer, cc) for n in nodes[:2]]))

    def grads(m):
        g, state = nnx.split(m)
        f = lambda s: jnp.sum(slot_logprobs(nnx.merge(g, s), batch, chunk=64)[0])  # noqa: E731
        return jax.jit(jax.grad(f))(state)

    remat = nnx.merge(nnx.split(model)[0], nnx.split(model)[1])
    remat.cfg = model.cfg.replace(remat=True)
    for a, b in zip(jax.tree.leaves(grads(model)), jax.tree.leaves(grads(remat))):
        scale = float(np.abs(np.asarray(a)).max())
        np.testing.assert_allclose(a, b, atol=1e-5 * scale, rtol=1e-4)


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_rpo_objective_adds_the_chosen_token_mean_nll(setup, spm_tokenizer, layout):
    """slot_token_counts are the completions' token counts; rpo_alpha adds α·(−Σ log p(a_w) / Σ |a_w|) to DPO."""
    model, nodes = setup
    cc, exs, batch = dpo_batch(nodes, spm_tokenizer, layout)
    counts = np.asarray(slot_token_counts(batch)).reshape(len(nodes), -1)
    for i, node in enumerate(nodes):
        _, comps, _ = tokenize_node(node, spm_tokenizer, cc)
        for slot in range(3):
            assert counts[i, slot] == len(comps[slot]), (i, slot)
    pol = slot_logprobs(model, batch, chunk=64)[0]
    ref = pol * 0.5  # any reference: the anchor term does not read it
    plain_cfg, rpo_cfg = LossConfig(method="dpo"), LossConfig(method="dpo", rpo_alpha=0.7)
    base, _ = objective(pol, ref, None, None, batch, plain_cfg)
    loss, m = objective(pol, ref, None, None, batch, rpo_cfg)
    # independent: sum the chosen slots' log-probs and token counts pair by pair
    pol_np, s = np.asarray(pol).reshape(len(nodes), -1), counts.shape[1]
    lp = toks = 0.0
    for i, ex in enumerate(exs):
        for p in range(len(ex["pair_valid"])):
            if ex["pair_valid"][p]:
                c = ex["pair_chosen"][p]
                lp, toks = lp + pol_np[i, c], toks + counts[i, c]
    nll = -lp / toks
    assert toks > 0 and s == 3
    np.testing.assert_allclose(float(m["nll/chosen"]), nll, rtol=1e-5)
    np.testing.assert_allclose(float(loss), float(base) + 0.7 * nll, rtol=1e-5)
    assert float(m["loss"]) == float(loss)


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_decision_window_scores_the_tokens_from_where_the_actions_differ(setup, spm_tokenizer, layout):
    """pair_from is the first differing token; a window of 2 gives DPO on log p of those two tokens alone (checked
    against separate forwards of two models); a window as long as the actions equals the whole-action loss (the
    shared prefix cancels)."""
    model, nodes = setup
    ref_model = init_model(model.cfg, seed=7)
    cc, exs, batch = dpo_batch(nodes, spm_tokenizer, layout)
    pol, tok_lp, _ = slot_logprobs(model, batch, chunk=64)
    ref, ref_tok, _ = slot_logprobs(ref_model, batch, chunk=64)
    beta, w = 0.3, 2
    want, shared = [], 0
    forward = nnx.jit(lambda m, x: jax.nn.log_softmax(m(x)[0].astype(jnp.float32), -1))
    for i, node in enumerate(nodes):
        prompt, comps, _ = tokenize_node(node, spm_tokenizer, cc)
        ex = exs[i]
        for p in np.flatnonzero(ex["pair_valid"]):
            a, b = comps[ex["pair_chosen"][p]], comps[ex["pair_rejected"][p]]  # slot k = branch k here
            d = next(k for k in range(min(len(a), len(b)) + 1) if k == min(len(a), len(b)) or a[k] != b[k])
            assert ex["pair_from"][p] == d
            shared += d > 0

            def window(m, seq):  # log p of seq[d:d+w] given the prompt and seq[:d], from one whole forward
                logp = forward(m, jnp.asarray([(prompt + seq + [0] * 256)[:256]]))[0]  # causal: padding after
                return float(sum(logp[len(prompt) - 1 + k, seq[k]] for k in range(d, min(d + w, len(seq)))))

            delta = (window(model, a) - window(ref_model, a)) - (window(model, b) - window(ref_model, b))
            want.append(-np.log(1 / (1 + np.exp(-beta * delta))))
    assert shared, "no pair shares a prefix: the window would not be tested"
    loss, _ = objective(pol, ref, tok_lp, None, batch, LossConfig(method="dpo", beta=beta, decision_window=w), ref_tok)
    np.testing.assert_allclose(float(loss), np.mean(want), rtol=2e-4, atol=1e-5)
    whole, _ = objective(pol, ref, tok_lp, None, batch, LossConfig(method="dpo", beta=beta), ref_tok)
    long, _ = objective(pol, ref, tok_lp, None, batch, LossConfig(method="dpo", beta=beta, decision_window=64), ref_tok)
    np.testing.assert_allclose(float(long), float(whole), rtol=1e-4)
    assert abs(float(loss) - float(whole)) > 1e-3  # the window changes the loss


@pytest.mark.parametrize("layout", ["packed", "plain"])
def test_a_margin_without_copies_scores_the_decision_tokens_alone(setup, spm_tokenizer, layout):
    """margin_copies=False: each action's log-ratio sums over its decision tokens (decisions.decision_mask against
    the prompt) and nothing else, checked against separate forwards of two models; the chosen anchor still reads
    the whole action."""
    from tgpo_jax.data.decisions import decision_mask

    model, nodes = setup
    ref_model = init_model(model.cfg, seed=7)
    cc = CollateConfig(
        method="dpo",
        layout=layout,
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
        margin_decisions=True,
    )
    exs = [build_example(n, spm_tokenizer, cc) for n in nodes]
    batch = jax.tree.map(jnp.asarray, stack(exs))
    pol, tok_lp, _ = slot_logprobs(model, batch, chunk=64)
    ref, ref_tok, _ = slot_logprobs(ref_model, batch, chunk=64)
    beta, want, copies = 0.3, [], 0
    forward = nnx.jit(lambda m, x: jax.nn.log_softmax(m(x)[0].astype(jnp.float32), -1))
    for i, node in enumerate(nodes):
        prompt, comps, _ = tokenize_node(node, spm_tokenizer, cc)
        ex = exs[i]
        for p in np.flatnonzero(ex["pair_valid"]):
            a, b = comps[ex["pair_chosen"][p]], comps[ex["pair_rejected"][p]]

            def decided(m, seq):  # log p of seq's decision tokens given the prompt, from one whole forward
                logp = forward(m, jnp.asarray([(prompt + seq + [0] * 256)[:256]]))[0]
                keep = decision_mask(prompt, seq)
                return float(sum(logp[len(prompt) - 1 + k, seq[k]] for k in np.flatnonzero(keep)))

            copies += int((~decision_mask(prompt, a)).sum() + (~decision_mask(prompt, b)).sum())
            delta = (decided(model, a) - decided(ref_model, a)) - (decided(model, b) - decided(ref_model, b))
            want.append(-np.log(1 / (1 + np.exp(-beta * delta))))
    assert copies, "no copy token in any pair: the mask would not be tested"
    cfg = LossConfig(method="dpo", beta=beta, margin_copies=False)
    loss, _ = objective(pol, ref, tok_lp, None, batch, cfg, ref_tok)
    np.testing.assert_allclose(float(loss), np.mean(want), rtol=2e-4, atol=1e-5)
    whole, _ = objective(pol, ref, tok_lp, None, batch, LossConfig(method="dpo", beta=beta), ref_tok)
    assert abs(float(loss) - float(whole)) > 1e-3  # the copies were in the whole-action margin
    with pytest.raises(ValueError, match="margin_copies=False"):
        LossConfig(method="kto", margin_copies=False)
    with pytest.raises(ValueError, match="reference=live"):
        LossConfig(method="tgpo", reference="precomputed", margin_copies=False)
    with pytest.raises(ValueError, match="margin_decisions is a DPO / TGPO setting"):
        CollateConfig(method="sft", margin_decisions=True)


def test_decision_window_needs_a_live_reference():
    with pytest.raises(ValueError, match="reference=live"):
        LossConfig(method="tgpo", reference="precomputed", decision_window=1)
    with pytest.raises(ValueError, match="DPO / TGPO setting"):
        LossConfig(method="kto", decision_window=1)


@pytest.mark.parametrize("method", ["dpo", "kto", "kto_tree"])
def test_sft_term_is_the_token_mean_nll_of_every_successful_branch(setup, spm_tokenizer, method):
    """sft_slots marks the node's SFT items (pairs' or items' branches keep their slots first); sft_alpha adds
    α·(−Σ log p / Σ tokens) over exactly those slots, pairs / KTO items or not."""
    from tgpo_jax.data import examples as ex
    from tgpo_jax.data.collate import node_selection

    model, nodes = setup
    cc = CollateConfig(
        method=method,
        layout="packed",
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
        kl_slot=False,
        sft_slots=True,
    )
    exs = [build_example(n, spm_tokenizer, cc) for n in nodes]
    batch = jax.tree.map(jnp.asarray, stack(exs))
    pol = slot_logprobs(model, batch, chunk=64)[0]
    pol_np = np.asarray(pol).reshape(len(nodes), -1)
    lp = toks = marked = 0
    for i, node in enumerate(nodes):
        _, comps, _ = tokenize_node(node, spm_tokenizer, cc)
        sft = set(ex.sft_items(node))
        assert sft, "the synthetic node has no successful branch"
        used = node_selection(node, cc)[0]
        assert sft <= set(used) and len(used) <= 3  # every branch fits: slot k = used[k]
        for slot, b in enumerate(used):
            assert bool(exs[i]["slot_sft"][slot]) == (b in sft), (i, slot)
            if b in sft:
                lp, toks, marked = lp + pol_np[i, slot], toks + len(comps[b]), marked + 1
    assert marked < 3 * len(nodes)  # some slots are not SFT items: the mask matters
    ref = pol * 0.5
    base, _ = objective(pol, ref, None, None, batch, LossConfig(method=method))
    loss, m = objective(pol, ref, None, None, batch, LossConfig(method=method, sft_alpha=0.4))
    np.testing.assert_allclose(float(m["nll/sft"]), -lp / toks, rtol=1e-5)
    np.testing.assert_allclose(float(loss), float(base) + 0.4 * (-lp / toks), rtol=1e-5)
    with pytest.raises(ValueError, match="DPO / TGPO / KTO setting"):
        LossConfig(method="sft", sft_alpha=1.0)


def test_training_the_top_layers_gives_the_full_gradients_there_zero_below_and_skips_their_backward(
    setup, spm_tokenizer
):
    """model.train_layers=k: the top k layers' gradients are the full model's, the layers below get none, and the
    backward pass skips them (fewer FLOPs in the compiled gradient)."""
    model, nodes = setup
    cc = CollateConfig(
        method="dpo",
        layout="packed",
        max_len=256,
        max_prompt_len=160,
        max_completion_len=32,
        max_branches=3,
        max_pairs=3,
    )
    batch = jax.tree.map(jnp.asarray, stack([build_example(n, spm_tokenizer, cc) for n in nodes[:2]]))
    layers = model.cfg.num_layers
    assert layers >= 2

    def grad_fn(cfg):
        g, state = nnx.split(model)
        m = nnx.merge(g, state)
        m.cfg = cfg
        g, state = nnx.split(m)
        f = lambda s: jnp.sum(slot_logprobs(nnx.merge(g, s), batch, chunk=64)[0])  # noqa: E731
        return jax.grad(f), state

    full_fn, state = grad_fn(model.cfg)
    top_fn, top_state = grad_fn(model.cfg.replace(train_layers=1))
    full, top = jax.jit(full_fn)(state), jax.jit(top_fn)(top_state)
    cut = layers - 1
    for name, a in full["layers"].items():
        b = np.asarray(top["layers"][name][...])
        a = np.asarray(a[...])
        scale = max(float(np.abs(a[cut:]).max()), 1e-12)
        np.testing.assert_allclose(b[cut:], a[cut:], atol=1e-5 * scale, rtol=1e-4)
        assert not b[:cut].any(), name
        if name.endswith("proj"):
            assert np.abs(a[:cut]).max() > 0, name  # the full model's lower layers do learn
    # the parameters the step changes, as counted for reports: the non-layer leaves with a gradient, the top layer
    moved = sum(int(np.asarray(g[...]).size) for k, g in top.items() if k != "layers" and np.abs(g[...]).max() > 0)
    moved += sum(int(np.asarray(g[...])[cut:].size) for g in top["layers"].values())
    top_model = nnx.merge(nnx.split(model)[0], top_state)
    top_model.cfg = model.cfg.replace(train_layers=1)
    assert trained_param_count(top_model) == moved < param_count(model) == trained_param_count(model)
    # every dot product of the gradient's program, scans times their length: the lower layers' backward is gone
    flops = lambda fn, s: counted_flops(jax.make_jaxpr(fn)(s).jaxpr)  # noqa: E731
    forward = counted_flops(
        jax.make_jaxpr(lambda s: slot_logprobs(nnx.merge(nnx.split(model)[0], s), batch, chunk=64)[0])(state).jaxpr
    )
    full_f, top_f = flops(full_fn, state), flops(top_fn, top_state)
    assert full_f > 2.5 * forward  # forward + a backward of about twice its cost
    assert top_f < forward + (full_f - forward) * (1.5 / layers) + 0.05 * forward, (forward, full_f, top_f)
    with pytest.raises(ValueError, match="train_layers"):
        model.cfg.replace(train_layers=layers + 1)
