"""Preference and likelihood losses (docs/method.md §7): DPO and its TRL variants, TGPO, KTO, SFT.

Every loss takes *summed completion log-probs* per sequence (float32), reference log-probs precomputed or live.
Padded entries are marked False in a boolean ``valid`` mask; means run over valid entries only, with a
``max(count, 1)`` guard so an all-padding batch gives loss 0, never NaN. Each function is pure and jit-compatible
(string / float options are Python values, static under ``jax.jit``) and returns ``(loss, metrics)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
Metrics = dict[str, Array]

DPO_LOSS_TYPES = ("sigmoid", "robust", "hinge", "ipo")


def _masked_mean(x: Array, mask: Array) -> Array:
    """Mean of ``x`` over ``mask``; 0 when the mask is empty."""
    mask = mask.astype(jnp.float32)
    return jnp.sum(jnp.where(mask > 0, x, 0.0)) / jnp.maximum(jnp.sum(mask), 1.0)


def _clean(x: Array, valid: Array) -> Array:
    """Zero the padded entries *before* any arithmetic so garbage there cannot reach values or gradients."""
    return jnp.where(valid, jnp.asarray(x, jnp.float32), 0.0)


def dpo_loss(
    policy_chosen: Array,  # [P] summed log πθ(a_w|s)
    policy_rejected: Array,  # [P] summed log πθ(a_l|s)
    ref_chosen: Array,  # [P] summed log πref(a_w|s)
    ref_rejected: Array,  # [P] summed log πref(a_l|s)
    valid: Array,  # [P] bool, False for padded pairs
    weights: Array | None = None,  # [P] per-pair weight (TGPO), None for plain DPO
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[Array, Metrics]:
    """DPO over summed log-probs with TRL's ``sigmoid`` / ``robust`` / ``hinge`` / ``ipo`` variants.

    With ``weights`` the per-pair loss is scaled by w before the mean (TGPO: ``−w·logσ(βΔ)``).
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"unknown DPO loss_type {loss_type!r}; expected one of {DPO_LOSS_TYPES}")
    # robust divides by (1 − 2ls); only check when ls is a concrete Python number (not a tracer).
    if loss_type == "robust" and isinstance(label_smoothing, (int, float)) and not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"robust DPO needs 0 <= label_smoothing < 0.5, got {label_smoothing}")

    valid = jnp.asarray(valid, bool)
    chosen_ratio = _clean(policy_chosen, valid) - _clean(ref_chosen, valid)  # [P] log πθ/πref on a_w
    rejected_ratio = _clean(policy_rejected, valid) - _clean(ref_rejected, valid)  # [P] on a_l
    delta = chosen_ratio - rejected_ratio  # [P] Δ
    ls = label_smoothing

    if loss_type == "sigmoid":
        losses = -jax.nn.log_sigmoid(beta * delta) * (1 - ls) - jax.nn.log_sigmoid(-beta * delta) * ls
    elif loss_type == "robust":
        losses = (-jax.nn.log_sigmoid(beta * delta) * (1 - ls) + jax.nn.log_sigmoid(-beta * delta) * ls) / (1 - 2 * ls)
    elif loss_type == "hinge":
        losses = jax.nn.relu(1 - beta * delta)
    else:  # ipo; TRL length-normalises here, docs/method.md §7 keeps summed log-probs throughout
        losses = (delta - 1 / (2 * beta)) ** 2  # [P]

    if weights is not None:
        w = _clean(weights, valid)  # [P]
        losses = losses * w
    loss = _masked_mean(losses, valid)

    # Implicit rewards, as TRL logs them (metrics only: the gradient flows through ``loss``).
    chosen_rewards = jax.lax.stop_gradient(beta * chosen_ratio)  # [P]
    rejected_rewards = jax.lax.stop_gradient(beta * rejected_ratio)  # [P]
    metrics: Metrics = {
        "loss": loss,
        "rewards/chosen": _masked_mean(chosen_rewards, valid),
        "rewards/rejected": _masked_mean(rejected_rewards, valid),
        "rewards/margins": _masked_mean(chosen_rewards - rejected_rewards, valid),
        "rewards/accuracies": _masked_mean((chosen_rewards > rejected_rewards).astype(jnp.float32), valid),
        "logps/chosen": _masked_mean(_clean(policy_chosen, valid), valid),
        "logps/rejected": _masked_mean(_clean(policy_rejected, valid), valid),
        # Crude policy/ref divergence: mean log-ratio over both responses of each pair.
        "kl": _masked_mean(jax.lax.stop_gradient((chosen_ratio + rejected_ratio) / 2), valid),
    }
    if weights is not None:
        w = jax.lax.stop_gradient(w)
        n = jnp.sum(valid)
        w_mean = _masked_mean(w, valid)
        metrics["weights/mean"] = w_mean
        metrics["weights/std"] = jnp.sqrt(_masked_mean((w - w_mean) ** 2, valid))  # population std
        # min/max over valid pairs only; 0 for an all-padding batch instead of ±inf.
        metrics["weights/min"] = jnp.where(n > 0, jnp.min(jnp.where(valid, w, jnp.inf)), 0.0)
        metrics["weights/max"] = jnp.where(n > 0, jnp.max(jnp.where(valid, w, -jnp.inf)), 0.0)
    return loss, metrics


def tgpo_loss(
    policy_chosen: Array,  # [P]
    policy_rejected: Array,  # [P]
    ref_chosen: Array,  # [P]
    ref_rejected: Array,  # [P]
    weights: Array,  # [P] w = |Q_w − Q_l| / σ(Q at s), docs/method.md §5
    valid: Array,  # [P] bool
    *,
    beta: float = 0.1,
) -> tuple[Array, Metrics]:
    """TGPO (docs/method.md §7): weighted DPO, ``−w·logσ(βΔ)`` averaged over valid pairs."""
    return dpo_loss(
        policy_chosen, policy_rejected, ref_chosen, ref_rejected, valid, weights, beta=beta, loss_type="sigmoid"
    )


def chosen_nll(
    policy_chosen: Array,  # [P] summed log πθ(a_w|s)
    chosen_tokens: Array,  # [P] number of tokens in a_w
    valid: Array,  # [P] bool
    weight: Array | None = None,  # [P] >= 0 per-action weight (the family balance); None = all 1
) -> Array:
    """Token-mean NLL of the chosen actions, ``−Σ log πθ(a_w|s) / Σ |a_w|`` over valid pairs (RPO's anchor); with
    ``weight``, ``−Σ w·log πθ(a_w|s) / Σ w·|a_w|``.

    Added as ``α·chosen_nll`` to DPO / TGPO (``loss.rpo_alpha``, docs/method.md §7). Why: Δ can grow by lowering the
    chosen action's likelihood as long as the rejected one falls faster; on the embedded shop's trees that moves
    mass onto neither branch (an early STOP), and the NLL term keeps the chosen branch likely."""
    valid = jnp.asarray(valid, bool)
    w = 1.0 if weight is None else jnp.asarray(weight, jnp.float32)
    tokens = jnp.sum(w * _clean(chosen_tokens, valid))
    # weighted token counts may be below 1; with none the numerator is 0 as well
    return -jnp.sum(w * _clean(policy_chosen, valid)) / jnp.where(tokens > 0, tokens, 1.0)


def kto_loss(
    policy_logps: Array,  # [S] summed log πθ(a|s) per example
    ref_logps: Array,  # [S] summed log πref(a|s)
    desirable: Array,  # [S] bool label
    valid: Array,  # [S] bool, False for padding
    kl_policy_logps: Array,  # [K] log πθ on mismatched (prompt, completion) pairs
    kl_ref_logps: Array,  # [K] log πref on the same mismatched pairs
    kl_valid: Array,  # [K] bool
    *,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Array, Metrics]:
    """KTO as TRL's KTOTrainer: KL reference point from mismatched pairs, detached and clamped at 0."""
    valid = jnp.asarray(valid, bool)
    kl_valid = jnp.asarray(kl_valid, bool)
    desirable = jnp.asarray(desirable, bool)
    is_d = valid & desirable  # [S]
    is_u = valid & ~desirable  # [S]

    kl = _masked_mean(_clean(kl_policy_logps, kl_valid) - _clean(kl_ref_logps, kl_valid), kl_valid)
    kl = jnp.maximum(jax.lax.stop_gradient(kl), 0.0)  # a baseline, not something to optimise

    logratio = _clean(policy_logps, valid) - _clean(ref_logps, valid)  # [S] r
    losses = jnp.where(
        desirable,
        desirable_weight * (1 - jax.nn.sigmoid(beta * (logratio - kl))),
        undesirable_weight * (1 - jax.nn.sigmoid(beta * (kl - logratio))),
    )  # [S]
    # TRL concatenates the weighted desirable and undesirable losses and takes one mean over all of them.
    loss = _masked_mean(losses, valid)

    rewards = jax.lax.stop_gradient(beta * logratio)  # [S]
    chosen_rewards = _masked_mean(rewards, is_d)  # 0 when the batch has no desirable example
    rejected_rewards = _masked_mean(rewards, is_u)
    policy = jax.lax.stop_gradient(_clean(policy_logps, valid))
    metrics: Metrics = {
        "loss": loss,
        "kl": kl,
        "rewards/chosen": chosen_rewards,
        "rewards/rejected": rejected_rewards,
        "rewards/margins": chosen_rewards - rejected_rewards,
        "count/desirable": jnp.sum(is_d).astype(jnp.float32),
        "count/undesirable": jnp.sum(is_u).astype(jnp.float32),
        "logps/chosen": _masked_mean(policy, is_d),
        "logps/rejected": _masked_mean(policy, is_u),
    }
    return loss, metrics


def kto_class_weights(n_desirable: int, n_undesirable: int) -> tuple[float, float]:
    """(w_D, w_U) with w_D·n_D = w_U·n_U and the larger class at weight 1; (1, 1) if a class is empty."""
    if n_desirable < 0 or n_undesirable < 0:
        raise ValueError(f"class counts must be >= 0, got n_desirable={n_desirable}, n_undesirable={n_undesirable}")
    if n_desirable == 0 or n_undesirable == 0:
        return 1.0, 1.0
    if n_desirable >= n_undesirable:
        return float(n_undesirable) / float(n_desirable), 1.0
    return 1.0, float(n_desirable) / float(n_undesirable)


def sft_loss(
    token_logps: Array,  # [N, T] log πθ of each target token
    loss_mask: Array,  # [N, T] bool/0-1, True on action tokens only (prompt tokens never carry loss)
    focal_gamma: float = 0.0,
    token_weight: Array | None = None,  # [N, T] >= 0 per-token weight (family balance); None = all 1
) -> tuple[Array, Metrics]:
    """Token-mean negative log-likelihood over the masked (action) tokens.

    ``focal_gamma`` > 0: the focal form -(1 - p)^γ log p (Lin et al. 2017). Why: most action tokens are copies the
    model gets right early (p → 1), and their mean hides the few decision tokens it still gets wrong; the focal
    weight leaves those the gradient (docs/method.md §7). ``token_weight``: a weighted mean instead,
    Σ w·(-log p) / Σ w over the mask (each task family's weight: ``data.family_balance``). The metrics' ``nll``
    and ``ppl`` are the plain mean."""
    mask = jnp.asarray(loss_mask).astype(bool)
    n_tokens = jnp.sum(mask).astype(jnp.float32)
    lp = _clean(token_logps, mask)  # [N, T], 0 off the mask
    nll = -jnp.sum(lp) / jnp.maximum(n_tokens, 1.0)
    base = jnp.where(mask, 1.0 if token_weight is None else jnp.asarray(token_weight, jnp.float32), 0.0)  # [N, T]
    w = base * (-jnp.expm1(lp)) ** focal_gamma if focal_gamma else base  # (1 - p)^γ; 0 off the mask
    loss = -jnp.sum(w * lp) / jnp.maximum(jnp.sum(base), 1e-9)  # normalised by the weights, not the focal factor
    metrics: Metrics = {
        "loss": loss,
        "tokens": n_tokens,
        "nll": jax.lax.stop_gradient(nll),
        "ppl": jnp.exp(jax.lax.stop_gradient(nll)),
    }
    return loss, metrics
