"""Golden tests for tgpo_jax.losses against an independent float64 numpy reference."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tgpo_jax.losses import chosen_nll, dpo_loss, kto_class_weights, kto_loss, sft_loss, tgpo_loss

ATOL = 1e-6
RTOL = 1e-5


# ---------------------------------------------------------------- numpy reference (float64, no module code)


def np_log_sigmoid(x):
    # log σ(x) = −log(1 + e^{−x}), split by sign so neither branch overflows.
    x = np.asarray(x, np.float64)
    return np.where(x >= 0, -np.log1p(np.exp(-np.abs(x))), x - np.log1p(np.exp(-np.abs(x))))


def np_sigmoid(x):
    return np.exp(np_log_sigmoid(x))


def np_dpo(pc, pr, rc, rr, valid, weights=None, beta=0.1, loss_type="sigmoid", ls=0.0):
    v = np.asarray(valid, bool)
    pc, pr, rc, rr = (np.asarray(a, np.float64)[v] for a in (pc, pr, rc, rr))
    d = (pc - rc) - (pr - rr)
    if loss_type == "sigmoid":
        losses = -np_log_sigmoid(beta * d) * (1 - ls) - np_log_sigmoid(-beta * d) * ls
    elif loss_type == "robust":
        losses = (-np_log_sigmoid(beta * d) * (1 - ls) + np_log_sigmoid(-beta * d) * ls) / (1 - 2 * ls)
    elif loss_type == "hinge":
        losses = np.maximum(0.0, 1 - beta * d)
    elif loss_type == "ipo":
        losses = (d - 1 / (2 * beta)) ** 2
    n = len(d)
    out = {}
    if weights is not None:
        w = np.asarray(weights, np.float64)[v]
        losses = losses * w
        out.update({"weights/mean": w.mean(), "weights/min": w.min(), "weights/max": w.max(), "weights/std": w.std()})
    cr, rj = beta * (pc - rc), beta * (pr - rr)
    out.update(
        {
            "loss": losses.sum() / max(n, 1),
            "rewards/chosen": cr.mean(),
            "rewards/rejected": rj.mean(),
            "rewards/margins": (cr - rj).mean(),
            "rewards/accuracies": (cr > rj).mean(),
            "logps/chosen": pc.mean(),
            "logps/rejected": pr.mean(),
            "kl": (((pc - rc) + (pr - rr)) / 2).mean(),
        }
    )
    return out


def np_kto(pl, rl, des, valid, kpl, krl, kvalid, beta=0.1, wd=1.0, wu=1.0):
    v, des, kv = np.asarray(valid, bool), np.asarray(des, bool), np.asarray(kvalid, bool)
    kl = (np.asarray(kpl, np.float64)[kv] - np.asarray(krl, np.float64)[kv]).mean() if kv.any() else 0.0
    kl = max(kl, 0.0)
    r = np.asarray(pl, np.float64) - np.asarray(rl, np.float64)
    pl = np.asarray(pl, np.float64)
    d, u = v & des, v & ~des
    chosen = wd * (1 - np_sigmoid(beta * (r[d] - kl)))
    rejected = wu * (1 - np_sigmoid(beta * (kl - r[u])))
    losses = np.concatenate([chosen, rejected])
    mean = lambda a: a.mean() if len(a) else 0.0  # noqa: E731
    cr, rj = mean(beta * r[d]), mean(beta * r[u])
    return {
        "loss": losses.mean() if len(losses) else 0.0,
        "kl": kl,
        "rewards/chosen": cr,
        "rewards/rejected": rj,
        "rewards/margins": cr - rj,
        "count/desirable": d.sum(),
        "count/undesirable": u.sum(),
        "logps/chosen": mean(pl[d]),
        "logps/rejected": mean(pl[u]),
    }


def assert_metrics(got, want):
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k]), v, rtol=RTOL, atol=ATOL, err_msg=k)


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def pairs():
    rng = np.random.default_rng(0)
    p = 13
    ref_c = rng.uniform(-60, -5, p).astype(np.float32)
    ref_r = rng.uniform(-60, -5, p).astype(np.float32)
    pol_c = (ref_c + rng.normal(0, 4, p)).astype(np.float32)
    pol_r = (ref_r + rng.normal(0, 4, p)).astype(np.float32)
    w = rng.uniform(0.1, 3.0, p).astype(np.float32)
    valid = np.ones(p, bool)
    valid[[2, 7, 12]] = False  # padding
    return pol_c, pol_r, ref_c, ref_r, valid, w


@pytest.fixture
def kto_batch():
    rng = np.random.default_rng(1)
    s, k = 11, 9
    ref = rng.uniform(-50, -5, s).astype(np.float32)
    pol = (ref + rng.normal(0, 5, s)).astype(np.float32)
    des = rng.random(s) < 0.5
    des[:2] = [True, False]  # both classes present
    valid = np.ones(s, bool)
    valid[[4, 9]] = False
    kref = rng.uniform(-50, -5, k).astype(np.float32)
    # Shifted up so the KL estimate is positive and the clamp does not hide it.
    kpol = (kref + rng.normal(3, 2, k)).astype(np.float32)
    kvalid = np.ones(k, bool)
    kvalid[[1, 8]] = False
    return pol, ref, des, valid, kpol, kref, kvalid


def with_garbage(arrays, valid, value=1e4):
    return [np.where(valid, a, np.float32(value)).astype(np.float32) for a in arrays]


# ---------------------------------------------------------------- DPO / TGPO


@pytest.mark.parametrize("loss_type", ["sigmoid", "robust", "hinge", "ipo"])
@pytest.mark.parametrize("ls", [0.0, 0.2])
@pytest.mark.parametrize("use_w", [False, True])
def test_dpo_matches_numpy(pairs, loss_type, ls, use_w):
    pc, pr, rc, rr, valid, w = pairs
    weights = w if use_w else None
    beta = 0.3
    loss, m = dpo_loss(pc, pr, rc, rr, valid, weights, beta=beta, loss_type=loss_type, label_smoothing=ls)
    want = np_dpo(pc, pr, rc, rr, valid, weights, beta=beta, loss_type=loss_type, ls=ls)
    assert_metrics(m, want)
    np.testing.assert_allclose(float(loss), want["loss"], rtol=RTOL, atol=ATOL)


def test_label_smoothing_changes_sigmoid_and_robust(pairs):
    pc, pr, rc, rr, valid, _ = pairs
    for lt in ("sigmoid", "robust"):
        a, _ = dpo_loss(pc, pr, rc, rr, valid, loss_type=lt)
        b, _ = dpo_loss(pc, pr, rc, rr, valid, loss_type=lt, label_smoothing=0.2)
        assert abs(float(a) - float(b)) > 1e-3


def test_tgpo_matches_numpy_and_wrapper(pairs):
    pc, pr, rc, rr, valid, w = pairs
    loss, m = tgpo_loss(pc, pr, rc, rr, w, valid, beta=0.2)
    assert_metrics(m, np_dpo(pc, pr, rc, rr, valid, w, beta=0.2))
    loss2, _ = dpo_loss(pc, pr, rc, rr, valid, w, beta=0.2)
    assert float(loss) == float(loss2)


def test_tgpo_zero_margin_is_weighted_log2():
    # Δ = 0 ⇒ each pair costs w·log 2; padded pair (w=100) must not count.
    z = np.zeros(4, np.float32)
    w = np.array([1.0, 2.0, 3.0, 100.0], np.float32)
    valid = np.array([True, True, True, False])
    loss, m = tgpo_loss(z, z, z, z, w, valid)
    assert float(loss) == pytest.approx((1 + 2 + 3) / 3 * math.log(2), abs=1e-6)
    assert float(m["weights/max"]) == pytest.approx(3.0)
    assert float(m["weights/min"]) == pytest.approx(1.0)
    assert float(m["rewards/accuracies"]) == 0.0  # ties are not wins


def test_dpo_hand_values():
    # One pair, Δ = 10, β = 0.1: sigmoid = log(1+e^{-1}); hinge = relu(1-1) = 0; ipo = (10 - 5)^2 = 25.
    pc, pr, rc, rr = (np.array([x], np.float32) for x in (-10.0, -20.0, -15.0, -15.0))
    valid = np.array([True])
    assert float(dpo_loss(pc, pr, rc, rr, valid)[0]) == pytest.approx(math.log1p(math.exp(-1)), abs=1e-6)
    assert float(dpo_loss(pc, pr, rc, rr, valid, loss_type="hinge")[0]) == pytest.approx(0.0, abs=1e-6)
    assert float(dpo_loss(pc, pr, rc, rr, valid, loss_type="ipo")[0]) == pytest.approx(25.0, abs=1e-4)


def test_dpo_grad_matches_analytic(pairs):
    pc, pr, rc, rr, valid, w = pairs
    beta = 0.25
    g = jax.grad(lambda x: dpo_loss(x, pr, rc, rr, valid, w, beta=beta)[0])(jnp.asarray(pc))
    d = (pc.astype(np.float64) - rc) - (pr.astype(np.float64) - rr)
    want = np.where(valid, -beta * (1 - np_sigmoid(beta * d)) * w / valid.sum(), 0.0)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-7)
    # Rejected side gets the opposite sign; reference inputs would too but are constants in training.
    g_r = jax.grad(lambda x: dpo_loss(pc, x, rc, rr, valid, w, beta=beta)[0])(jnp.asarray(pr))
    np.testing.assert_allclose(np.asarray(g_r), -want, rtol=1e-5, atol=1e-7)


def test_dpo_padding_garbage_is_ignored(pairs):
    pc, pr, rc, rr, valid, w = pairs
    clean_loss, clean_m = dpo_loss(pc, pr, rc, rr, valid, w)
    dirty = with_garbage([pc, pr, rc, rr, w], valid)
    loss, m = dpo_loss(*dirty[:4], valid, dirty[4])
    assert float(loss) == float(clean_loss)
    for k in clean_m:
        assert float(m[k]) == float(clean_m[k]), k
    g = jax.grad(lambda x: dpo_loss(x, *dirty[1:4], valid, dirty[4])[0])(jnp.asarray(dirty[0]))
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g)[~valid] == 0)


@pytest.mark.parametrize("loss_type", ["sigmoid", "robust", "hinge", "ipo"])
def test_dpo_all_invalid_is_zero(pairs, loss_type):
    pc, pr, rc, rr, valid, w = pairs
    none = np.zeros_like(valid)
    loss, m = dpo_loss(pc, pr, rc, rr, none, w, loss_type=loss_type)
    assert float(loss) == 0.0
    assert all(np.isfinite(float(v)) for v in m.values())


@pytest.mark.parametrize("loss_type", ["sigmoid", "robust", "hinge", "ipo"])
def test_dpo_jit_matches_eager(pairs, loss_type):
    pc, pr, rc, rr, valid, w = pairs
    kw = dict(beta=0.3, loss_type=loss_type, label_smoothing=0.1)
    eager = dpo_loss(pc, pr, rc, rr, valid, w, **kw)
    jitted = jax.jit(dpo_loss, static_argnames=("beta", "loss_type", "label_smoothing"))(pc, pr, rc, rr, valid, w, **kw)
    np.testing.assert_allclose(float(jitted[0]), float(eager[0]), rtol=1e-6, atol=1e-7)
    for k in eager[1]:
        np.testing.assert_allclose(float(jitted[1][k]), float(eager[1][k]), rtol=1e-6, atol=1e-7, err_msg=k)
    tg = jax.jit(tgpo_loss, static_argnames=("beta",))(pc, pr, rc, rr, w, valid, beta=0.3)
    np.testing.assert_allclose(float(tg[0]), float(tgpo_loss(pc, pr, rc, rr, w, valid, beta=0.3)[0]), rtol=1e-6)


def test_dpo_unknown_loss_type(pairs):
    pc, pr, rc, rr, valid, _ = pairs
    with pytest.raises(ValueError, match="bco_pair.*sigmoid"):
        dpo_loss(pc, pr, rc, rr, valid, loss_type="bco_pair")
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(pc, pr, rc, rr, valid, loss_type="robust", label_smoothing=0.5)


# ---------------------------------------------------------------- KTO


@pytest.mark.parametrize("wd,wu", [(1.0, 1.0), (0.4, 1.0), (1.0, 2.5)])
def test_kto_matches_numpy(kto_batch, wd, wu):
    pol, ref, des, valid, kpol, kref, kvalid = kto_batch
    loss, m = kto_loss(pol, ref, des, valid, kpol, kref, kvalid, beta=0.2, desirable_weight=wd, undesirable_weight=wu)
    want = np_kto(pol, ref, des, valid, kpol, kref, kvalid, beta=0.2, wd=wd, wu=wu)
    assert want["kl"] > 0.5  # the reference point is actually exercised
    assert_metrics(m, want)
    np.testing.assert_allclose(float(loss), want["loss"], rtol=RTOL, atol=ATOL)


def test_kto_kl_clamped_at_zero(kto_batch):
    pol, ref, des, valid, kpol, kref, kvalid = kto_batch
    kpol_neg = kref - 5.0  # negative KL estimate → clamped to 0
    loss, m = kto_loss(pol, ref, des, valid, kpol_neg, kref, kvalid)
    assert float(m["kl"]) == 0.0
    assert_metrics(m, np_kto(pol, ref, des, valid, kpol_neg, kref, kvalid))


def test_kto_kl_has_no_gradient(kto_batch):
    pol, ref, des, valid, kpol, kref, kvalid = kto_batch
    g_kl = jax.grad(lambda x: kto_loss(pol, ref, des, valid, x, kref, kvalid)[0])(jnp.asarray(kpol))
    assert np.all(np.asarray(g_kl) == 0.0)
    g_pol = np.asarray(jax.grad(lambda x: kto_loss(x, ref, des, valid, kpol, kref, kvalid)[0])(jnp.asarray(pol)))
    assert np.all(g_pol[valid] != 0) and np.all(g_pol[~valid] == 0)
    # Analytic: d/dr of 1 − σ(β(r − KL)) is −βσ(1−σ); of 1 − σ(β(KL − r)) is +βσ(1−σ); mean over valid.
    kl = max(float((kpol[kvalid] - kref[kvalid]).astype(np.float64).mean()), 0.0)
    r = pol.astype(np.float64) - ref
    s_d, s_u = np_sigmoid(0.1 * (r - kl)), np_sigmoid(0.1 * (kl - r))
    want = np.where(des, -0.1 * s_d * (1 - s_d), 0.1 * s_u * (1 - s_u)) * valid / valid.sum()
    np.testing.assert_allclose(g_pol, want, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("case", ["only_desirable", "only_undesirable", "all_invalid", "no_kl"])
def test_kto_degenerate_batches_are_finite(kto_batch, case):
    pol, ref, des, valid, kpol, kref, kvalid = kto_batch
    if case == "only_desirable":
        des = np.ones_like(des)
    elif case == "only_undesirable":
        des = np.zeros_like(des)
    elif case == "all_invalid":
        valid = np.zeros_like(valid)
    else:
        kvalid = np.zeros_like(kvalid)
    loss, m = kto_loss(pol, ref, des, valid, kpol, kref, kvalid)
    assert np.isfinite(float(loss))
    assert all(np.isfinite(float(v)) for v in m.values())
    assert_metrics(m, np_kto(pol, ref, des, valid, kpol, kref, kvalid))
    if case == "all_invalid":
        assert float(loss) == 0.0
    if case == "only_desirable":
        assert float(m["rewards/rejected"]) == 0.0 and float(m["count/undesirable"]) == 0.0


def test_kto_padding_garbage_is_ignored(kto_batch):
    pol, ref, des, valid, kpol, kref, kvalid = kto_batch
    clean_loss, clean_m = kto_loss(pol, ref, des, valid, kpol, kref, kvalid)
    pol_g, ref_g = with_garbage([pol, ref], valid)
    kpol_g, kref_g = with_garbage([kpol, kref], kvalid, value=-1e4)
    loss, m = kto_loss(pol_g, ref_g, des, valid, kpol_g, kref_g, kvalid)
    assert float(loss) == float(clean_loss)
    for k in clean_m:
        assert float(m[k]) == float(clean_m[k]), k


def test_kto_jit_matches_eager(kto_batch):
    kw = dict(beta=0.2, desirable_weight=0.5, undesirable_weight=1.0)
    eager = kto_loss(*kto_batch, **kw)
    jitted = jax.jit(kto_loss, static_argnames=tuple(kw))(*kto_batch, **kw)
    np.testing.assert_allclose(float(jitted[0]), float(eager[0]), rtol=1e-6, atol=1e-7)
    for k in eager[1]:
        np.testing.assert_allclose(float(jitted[1][k]), float(eager[1][k]), rtol=1e-6, atol=1e-7, err_msg=k)


def test_kto_class_weights():
    assert kto_class_weights(30, 10) == pytest.approx((1 / 3, 1.0))
    assert kto_class_weights(10, 30) == pytest.approx((1.0, 1 / 3))
    assert kto_class_weights(0, 5) == (1.0, 1.0)
    assert kto_class_weights(5, 0) == (1.0, 1.0)
    assert kto_class_weights(7, 7) == (1.0, 1.0)
    w_d, w_u = kto_class_weights(12, 5)
    assert isinstance(w_d, float) and isinstance(w_u, float)
    assert w_d * 12 == pytest.approx(w_u * 5)
    with pytest.raises(ValueError):
        kto_class_weights(-1, 3)


# ---------------------------------------------------------------- SFT


def test_sft_matches_numpy():
    rng = np.random.default_rng(2)
    logps = -rng.exponential(2.0, (4, 9)).astype(np.float32)
    mask = rng.random((4, 9)) < 0.6
    mask[3] = False  # a fully padded row
    loss, m = sft_loss(logps, mask)
    want = -(logps.astype(np.float64) * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(loss), want, rtol=RTOL, atol=ATOL)
    assert float(m["tokens"]) == mask.sum()
    np.testing.assert_allclose(float(m["ppl"]), np.exp(want), rtol=1e-5)
    # Garbage in masked-out (prompt / pad) positions does not count.
    dirty = np.where(mask, logps, np.float32(-1e4))
    assert float(sft_loss(dirty, mask)[0]) == float(loss)
    jitted = jax.jit(sft_loss)(logps, mask)
    np.testing.assert_allclose(float(jitted[0]), float(loss), rtol=1e-6)
    g = np.asarray(jax.grad(lambda x: sft_loss(x, mask)[0])(jnp.asarray(logps)))
    np.testing.assert_allclose(g, -mask.astype(np.float64) / mask.sum(), rtol=1e-6)


def test_sft_focal_matches_numpy_value_and_gradient():
    rng = np.random.default_rng(5)
    logps = -rng.exponential(1.0, (3, 7))
    mask = rng.random((3, 7)) < 0.7
    for gamma in (1.0, 2.0):
        loss, m = sft_loss(logps.astype(np.float32), mask, focal_gamma=gamma)
        p = np.exp(logps)
        want = -(((1 - p) ** gamma) * logps * mask).sum() / mask.sum()
        np.testing.assert_allclose(float(loss), want, rtol=1e-5)
        np.testing.assert_allclose(float(m["nll"]), -(logps * mask).sum() / mask.sum(), rtol=1e-5)
        # d/dx of -(1 - e^x)^g x = g (1 - e^x)^(g-1) e^x x - (1 - e^x)^g, per token, over the token count
        g = np.asarray(jax.grad(lambda x: sft_loss(x, mask, focal_gamma=gamma)[0])(jnp.asarray(logps, jnp.float32)))
        want_g = (gamma * (1 - p) ** (gamma - 1) * p * logps - (1 - p) ** gamma) * mask / mask.sum()
        np.testing.assert_allclose(g, want_g, rtol=1e-4, atol=1e-7)
    # a token the model is sure of carries (almost) nothing; a hard one keeps most of its NLL
    sure, hard = (
        sft_loss(np.array([[-1e-4, -2.0]], np.float32), np.array([[True, False]]), focal_gamma=2.0)[0],
        sft_loss(np.array([[-1e-4, -2.0]], np.float32), np.array([[False, True]]), focal_gamma=2.0)[0],
    )
    assert float(sure) < 1e-11 and float(hard) == pytest.approx(2.0 * (1 - np.exp(-2.0)) ** 2, rel=1e-5)


def test_sft_empty_mask():
    loss, m = sft_loss(np.full((2, 3), -5.0, np.float32), np.zeros((2, 3), bool))
    assert float(loss) == 0.0 and float(m["tokens"]) == 0.0 and float(m["ppl"]) == 1.0


def test_sft_token_weight_is_a_weighted_mean():
    rng = np.random.default_rng(9)
    logps = -rng.exponential(1.0, (3, 7))
    mask = rng.random((3, 7)) < 0.7
    w = rng.choice([1.0, 4.0], (3, 7))
    loss, m = sft_loss(logps.astype(np.float32), mask, token_weight=w.astype(np.float32))
    want = -(w * logps * mask).sum() / (w * mask).sum()
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    np.testing.assert_allclose(float(m["nll"]), -(logps * mask).sum() / mask.sum(), rtol=1e-5)  # metric: plain mean
    g = np.asarray(jax.grad(lambda x: sft_loss(x, mask, token_weight=w)[0])(jnp.asarray(logps, jnp.float32)))
    np.testing.assert_allclose(g, -(w * mask) / (w * mask).sum(), rtol=1e-5, atol=1e-8)
    # weight 1 everywhere is the plain token mean
    ones = sft_loss(logps.astype(np.float32), mask, token_weight=np.ones((3, 7), np.float32))[0]
    np.testing.assert_allclose(float(ones), float(sft_loss(logps.astype(np.float32), mask)[0]), rtol=1e-6)


def test_chosen_nll_is_a_token_mean_over_valid_pairs_only():
    lp = np.array([-3.0, -8.0, np.nan, -1.0], np.float32)  # [P]; the padded entry holds garbage
    tokens = np.array([3.0, 4.0, 99.0, 1.0], np.float32)
    valid = np.array([True, True, False, True])
    got, g = jax.value_and_grad(chosen_nll)(lp, tokens, valid)
    np.testing.assert_allclose(float(got), 12.0 / 8.0, rtol=RTOL)
    np.testing.assert_allclose(np.asarray(g), [-1 / 8, -1 / 8, 0.0, -1 / 8], rtol=RTOL)
    assert float(chosen_nll(lp, tokens, np.zeros(4, bool))) == 0.0  # all padding: 0, not NaN
