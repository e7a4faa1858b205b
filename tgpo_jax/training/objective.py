"""The training objective of each method, from slot log-probs of a collated batch (docs/method.md §7)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from tgpo_jax import losses

REFERENCE_MODES = ("live", "precomputed", "behaviour", "none")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """The training objective: method, beta, DPO variant, reference mode and the auxiliary SFT / NLL terms;
    ``ValueError`` for settings the method does not take."""

    method: str = "tgpo"  # sft | dpo | tgpo | kto | kto_tree | traj_dpo (Agent Q's trajectory-level baseline)
    beta: float = 0.1
    dpo_loss_type: str = "sigmoid"  # sigmoid | ipo | hinge | robust (DPO only; TGPO is weighted sigmoid)
    label_smoothing: float = 0.0
    desirable_weight: float = 1.0  # KTO; set from the class ratio by the trainer
    undesirable_weight: float = 1.0
    reference: str = "live"  # live | precomputed | behaviour | none (SFT)
    focal_gamma: float = 0.0  # SFT: focal exponent on each token's NLL (0 = plain NLL; tgpo_jax.losses.sft_loss)
    rpo_alpha: float = 0.0  # DPO / TGPO: weight of the chosen actions' token-mean NLL (losses.chosen_nll; 0 = off)
    # DPO / TGPO: log-ratios over this many tokens from a pair's first differing token (0 = the whole actions)
    decision_window: int = 0
    # DPO / TGPO: False = the log-ratios over decision tokens only (collate's token_weight > 0, margin_decisions)
    margin_copies: bool = True
    # DPO / TGPO / KTO / KTO-Tree: weight of the token-mean NLL over the batch's SFT slots (collate's slot_sft; 0 = off)
    sft_alpha: float = 0.0

    def __post_init__(self):
        if self.reference not in REFERENCE_MODES:
            raise ValueError(f"reference {self.reference!r}: expected one of {REFERENCE_MODES}")
        if not self.focal_gamma >= 0 or (self.focal_gamma and self.method != "sft"):
            raise ValueError(
                f"focal_gamma={self.focal_gamma}: must be >= 0, and is an SFT setting (method {self.method})"
            )
        if not self.rpo_alpha >= 0 or (self.rpo_alpha and self.method not in ("dpo", "tgpo", "traj_dpo")):
            raise ValueError(
                f"rpo_alpha={self.rpo_alpha}: must be >= 0, and is a DPO / TGPO setting (method {self.method})"
            )
        if self.decision_window < 0 or (self.decision_window and self.method not in ("dpo", "tgpo")):
            raise ValueError(
                f"decision_window={self.decision_window}: must be >= 0, and is a DPO / TGPO setting "
                f"(method {self.method})"
            )
        if not self.sft_alpha >= 0 or (self.sft_alpha and self.method not in ("dpo", "tgpo", "kto", "kto_tree")):
            raise ValueError(
                f"sft_alpha={self.sft_alpha}: must be >= 0, and is a DPO / TGPO / KTO setting (method {self.method})"
            )
        if not self.margin_copies and (self.method not in ("dpo", "tgpo") or self.reference != "live"):
            raise ValueError(
                f"margin_copies=False is a DPO / TGPO setting and needs the reference's token log-probs "
                f"(reference=live; method {self.method}, reference {self.reference})"
            )
        if self.decision_window and self.reference != "live":
            raise ValueError(
                f"decision_window={self.decision_window} needs the reference's token log-probs: "
                f"reference=live (a {self.reference} reference stores whole-action sums only)"
            )
        if self.method != "sft" and self.reference == "none":
            raise ValueError(f"method {self.method} needs a reference (live, precomputed or behaviour)")
        if self.method in ("kto", "kto_tree") and self.reference == "behaviour":
            raise ValueError(
                "KTO's KL term scores mismatched completions, which have no behaviour log-prob: "
                "use reference=live or precomputed"
            )
        if self.dpo_loss_type not in losses.DPO_LOSS_TYPES:
            raise ValueError(f"dpo_loss_type {self.dpo_loss_type!r}: expected one of {losses.DPO_LOSS_TYPES}")


def _global(idx, per_example: int):
    """[B, K] per-example slot indices -> [B*K] indices into the flattened [B*S] slot array."""
    b = idx.shape[0]
    return (idx + (jnp.arange(b, dtype=idx.dtype) * per_example)[:, None]).reshape(-1)


def reference_slots(batch: dict, cfg: LossConfig):
    """Reference slot log-probs carried by the batch (precomputed sidecar or behaviour policy)."""
    if cfg.reference == "precomputed":
        return batch["slot_ref"].reshape(-1)
    if cfg.reference == "behaviour":
        return batch["slot_behaviour"].reshape(-1)
    raise ValueError(f"reference {cfg.reference!r} is not carried by the batch")


def slot_token_counts(batch: dict):
    """Number of completion tokens of every slot, [B*S] in the flattened slot order of ``slot_logprobs``."""
    b, s = batch["slot_valid"].shape
    slot = batch["slot"].reshape(b, -1)  # [B, R*L] per-example ids, -1 off-slot
    ids = jnp.where(slot >= 0, slot + (jnp.arange(b, dtype=slot.dtype) * s)[:, None], b * s).reshape(-1)
    return jax.ops.segment_sum(jnp.ones(ids.shape, jnp.float32), ids, num_segments=b * s + 1)[: b * s]


def pair_token_logprobs(token_lp, batch: dict, which: str, window: int = 0, decisions: bool = False):
    """Summed log-probs [B*P] of each pair's ``which`` ('pair_chosen' / 'pair_rejected') slot over the ``window``
    tokens from the pair's first differing token (``pair_from``; 0 = to the end; docs/method.md §7 "Decision
    window"), and with ``decisions`` over its decision tokens only (``token_weight`` > 0: collate's
    ``margin_decisions``; §7 "Copies out of the margin").

    The two actions' shared prefix has the same log-probs in both (same prompt, same tokens before it), so it
    cancels in the margin anyway; the window also drops what follows the decision, which in the rejected action
    is mostly correct given it (a copy of the chosen element's name), and which a whole-action margin pushes down.
    """
    b = batch["slot_valid"].shape[0]
    lp = token_lp.reshape(b, -1)  # [B, R*L], 0 off-slot
    slot = batch["slot"].reshape(b, -1)  # [B, R*L] slot of each token, -1 off-slot
    pos = batch["slot_pos"].reshape(b, -1)  # [B, R*L] index of each token within its action
    idx, start = batch[which], batch["pair_from"]  # [B, P]
    inside = (slot[:, None, :] == idx[:, :, None]) & (pos[:, None, :] >= start[:, :, None])  # [B, P, R*L]
    if window:
        inside &= pos[:, None, :] < start[:, :, None] + window
    if decisions:
        inside &= (batch["token_weight"].reshape(b, -1) > 0)[:, None, :]
    return jnp.sum(jnp.where(inside, lp[:, None, :], 0.0), axis=-1).reshape(-1)


def objective(policy_slots, ref_slots, token_lp, token_on, batch: dict, cfg: LossConfig, ref_token_lp=None):
    """policy_slots/ref_slots [B*S]; token_lp/token_on (and the reference's ref_token_lp) [B*R, L] -> (loss,
    metrics)."""
    if cfg.method == "sft":
        weight = batch["token_weight"].reshape(token_on.shape) if "token_weight" in batch else None
        return losses.sft_loss(token_lp, token_on, focal_gamma=cfg.focal_gamma, token_weight=weight)
    s = batch["slot_valid"].shape[1]
    if cfg.method == "traj_dpo":
        return trajectory_dpo(policy_slots, ref_slots, batch, cfg)
    if cfg.method in ("dpo", "tgpo"):
        c, r = _global(batch["pair_chosen"], s), _global(batch["pair_rejected"], s)
        valid = batch["pair_valid"].reshape(-1)
        args = (policy_slots[c], policy_slots[r], ref_slots[c], ref_slots[r])
        if cfg.decision_window or not cfg.margin_copies:
            if ref_token_lp is None:
                raise ValueError(
                    "decision_window / margin_copies=False need the reference's token log-probs (ref_token_lp)"
                )
            w, dec = cfg.decision_window, not cfg.margin_copies
            args = tuple(
                pair_token_logprobs(t, batch, k, w, dec)
                for t, k in (
                    (token_lp, "pair_chosen"),
                    (token_lp, "pair_rejected"),
                    (ref_token_lp, "pair_chosen"),
                    (ref_token_lp, "pair_rejected"),
                )
            )
        if cfg.method == "tgpo":
            loss, metrics = losses.tgpo_loss(*args, batch["pair_weight"].reshape(-1), valid, beta=cfg.beta)
        else:
            loss, metrics = losses.dpo_loss(
                *args, valid, beta=cfg.beta, loss_type=cfg.dpo_loss_type, label_smoothing=cfg.label_smoothing
            )
        if cfg.rpo_alpha:
            nll = losses.chosen_nll(policy_slots[c], slot_token_counts(batch)[c], valid)
            loss = loss + cfg.rpo_alpha * nll
            metrics = {**metrics, "loss": loss, "nll/chosen": jax.lax.stop_gradient(nll)}
        return sft_term(loss, metrics, policy_slots, batch, cfg)
    items = _global(batch["item_slot"], s)
    kl = _global(jnp.maximum(batch["kl_slot"], 0), s)
    loss, metrics = losses.kto_loss(
        policy_slots[items],
        ref_slots[items],
        batch["item_desirable"].reshape(-1),
        batch["item_valid"].reshape(-1),
        policy_slots[kl],
        ref_slots[kl],
        (batch["kl_slot"] >= 0).reshape(-1),
        beta=cfg.beta,
        desirable_weight=cfg.desirable_weight,
        undesirable_weight=cfg.undesirable_weight,
    )
    return sft_term(loss, metrics, policy_slots, batch, cfg)


def sft_term(loss, metrics: dict, policy_slots, batch: dict, cfg: LossConfig):
    """``loss + sft_alpha · token-mean NLL`` over the batch's SFT slots (docs/method.md §7, "SFT term")."""
    if not cfg.sft_alpha:
        return loss, metrics
    weight = batch["slot_weight"].reshape(-1) if "slot_weight" in batch else None  # the family balance (or 1)
    nll = losses.chosen_nll(policy_slots, slot_token_counts(batch), batch["slot_sft"].reshape(-1), weight)
    loss = loss + cfg.sft_alpha * nll
    return loss, {**metrics, "loss": loss, "nll/sft": jax.lax.stop_gradient(nll)}


def trajectory_dpo(policy_slots, ref_slots, batch: dict, cfg: LossConfig):
    """Agent Q's trajectory-level DPO (docs/method.md §9.3): one pair per example, each side's log-prob the sum of
    its steps' slot log-probs (``slot_side`` +1 chosen, -1 rejected), then DPO's loss on those sums."""
    side = batch["slot_side"]  # [B, S]
    b = side.shape[0]

    def sides(x):  # [B*S] -> ([B] chosen sum, [B] rejected sum)
        x = x.reshape(b, -1)
        return jnp.sum(jnp.where(side > 0, x, 0.0), -1), jnp.sum(jnp.where(side < 0, x, 0.0), -1)

    (pc, pr), (rc, rr) = sides(policy_slots), sides(ref_slots)
    valid = jnp.any(side > 0, -1) & jnp.any(side < 0, -1)  # [B]
    loss, metrics = losses.dpo_loss(
        pc, pr, rc, rr, valid, beta=cfg.beta, loss_type=cfg.dpo_loss_type, label_smoothing=cfg.label_smoothing
    )
    if cfg.rpo_alpha:  # the anchor on the chosen trajectory's steps (token mean), as for step-level DPO
        chosen = ((side > 0) & valid[:, None]).reshape(-1)
        nll = losses.chosen_nll(policy_slots, slot_token_counts(batch), chosen)
        loss = loss + cfg.rpo_alpha * nll
        metrics = {**metrics, "loss": loss, "nll/chosen": jax.lax.stop_gradient(nll)}
    return loss, metrics
