"""Log-probs of completion tokens without materialising float32 [batch, length, vocab] logits.

``token_logprobs`` maps over sequence chunks: only one chunk's logits [N, c, V] exist at a time, and
``jax.checkpoint`` makes the backward pass recompute them per chunk instead of storing them.
``slot_logprobs`` runs the model over collated rows (``tgpo_jax.data.collate``) with the segment-aware
mask and sums token log-probs per slot (one completion each). With the batch's ``loss_pos`` (``loss_positions``:
where each row's loss-carrying tokens are) the vocabulary projection runs on those positions only: a row is mostly
prompt, and the projection with its log-softmax, computed again in the backward pass, is about a quarter of a
training step's work when it runs on every position.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tgpo_jax.models.transformer import Transformer


def token_logprobs(hidden: jax.Array, w_out: jax.Array, targets: jax.Array, chunk: int = 128) -> jax.Array:
    """hidden [N, T, D] (state predicting each target), w_out [D, V], targets [N, T] -> log p [N, T] f32."""
    n, t, d = hidden.shape
    c = min(chunk, t)
    pad = (-t) % c
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(n, -1, c, d).swapaxes(0, 1)  # [C, N, c, D]
    y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(n, -1, c).swapaxes(0, 1)  # [C, N, c]

    @jax.checkpoint
    def one(h_c, y_c):
        logits = jnp.einsum("ncd,dv->ncv", h_c, w_out, preferred_element_type=jnp.float32)
        picked = jnp.take_along_axis(logits, y_c[..., None], axis=-1)[..., 0]
        return picked - jax.nn.logsumexp(logits, axis=-1)

    out = jax.lax.map(lambda xs: one(*xs), (h, y))  # [C, N, c]
    return out.swapaxes(0, 1).reshape(n, -1)[:, :t]


def naive_token_logprobs(hidden, w_out, targets):
    """Reference: full float32 logits, then log softmax (tests and tiny models only)."""
    logits = jnp.einsum("ntd,dv->ntv", hidden, w_out, preferred_element_type=jnp.float32)
    return jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]


def segment_mask(segments: jax.Array) -> jax.Array:
    """segments [N, L] (-1 pad, 0 prompt, k completion k) -> attention mask [N, L, L].

    A query sees earlier keys of the prompt and of its own segment: branches packed after one
    prompt never see each other.
    """
    q, k = segments[:, :, None], segments[:, None, :]
    causal = jnp.tril(jnp.ones((segments.shape[1],) * 2, bool))[None]
    return causal & (k >= 0) & ((k == 0) | (k == q))


def flatten_rows(batch: dict) -> dict:
    """[B, R, L] rows -> [B*R, L]; per-example slot ids -> global ids (offset by example)."""
    b, r, length = batch["tokens"].shape
    s = batch["slot_valid"].shape[1]
    offset = (jnp.arange(b, dtype=jnp.int32) * s)[:, None, None]
    slot = jnp.where(batch["slot"] >= 0, batch["slot"] + offset, -1)
    flat = {k: batch[k].reshape(b * r, length) for k in ("tokens", "positions", "segments", "pred")}
    flat["slot"] = slot.reshape(b * r, length)
    return flat


LOSS_POS_MIN = 64  # the smallest loss_pos width; wider ones double (few shapes, so few compiles)


def loss_positions(slot: np.ndarray, width: int | None = None) -> np.ndarray:
    """slot [..., L] (the batch's, -1 where no loss) -> loss_pos [..., K] int32: each row's loss-carrying positions
    in order, then 0 (a prompt position: never a loss token). K = ``width``, or the smallest of 64, 128, 256, ...
    (at most L) that holds the batch's fullest row. Host-side numpy: K is a shape, and jit compiles once per K."""
    on = np.asarray(slot) >= 0
    length = on.shape[-1]
    need = int(on.sum(-1).max(initial=0))
    if width is None:
        width = LOSS_POS_MIN
        while width < need:
            width *= 2
        width = min(width, length)
    if need > width:
        raise ValueError(f"loss_pos width {width} is less than a row's {need} loss tokens")
    order = np.argsort(~on, axis=-1, kind="stable")[..., :width]  # loss positions first, in order
    return np.where(np.take_along_axis(on, order, -1), order, 0).astype(np.int32)


def slot_logprobs(model: Transformer, batch: dict, *, use_lora: bool = True, chunk: int = 128):
    """Summed log-prob of every slot's completion.

    batch: collated examples stacked on a leading [B] axis, optionally with ``loss_pos`` [B, R, K]
    (``loss_positions``). Returns (slot log-probs [B*S] f32, token log-probs [B*R, L] f32 with 0 off-slot,
    loss-token mask [B*R, L]).
    """
    rows = flatten_rows(batch)
    num_slots = batch["slot_valid"].size
    h, _ = model.hidden_states(
        rows["tokens"], rows["positions"], segment_mask(rows["segments"]), use_lora=use_lora
    )  # [N, L, D]
    on = rows["slot"] >= 0
    n, length = on.shape
    if "loss_pos" in batch:  # the projection on the loss positions only, scattered back to [N, L]
        pos = batch["loss_pos"].reshape(n, -1)  # [N, K]
        take = lambda a: jnp.take_along_axis(a, pos, axis=1)  # noqa: E731
        slot_k = take(rows["slot"])
        on_k = slot_k >= 0
        h_pred = jnp.take_along_axis(h, take(rows["pred"])[..., None], axis=1)  # [N, K, D]
        lp_k = jnp.where(on_k, token_logprobs(h_pred, model.output_embedding(), take(rows["tokens"]), chunk), 0.0)
        lp = jnp.zeros((n, length), jnp.float32).at[jnp.arange(n)[:, None], pos].add(lp_k)  # padding adds 0 at 0
        ids = jnp.where(on_k, slot_k, num_slots).reshape(-1)
        per_slot = jax.ops.segment_sum(lp_k.reshape(-1), ids, num_segments=num_slots + 1)[:num_slots]
        return per_slot, lp, on
    h_pred = jnp.take_along_axis(h, rows["pred"][..., None], axis=1)  # [N, L, D]
    lp = token_logprobs(h_pred, model.output_embedding(), rows["tokens"], chunk)
    lp = jnp.where(on, lp, 0.0)
    ids = jnp.where(on, rows["slot"], num_slots).reshape(-1)
    per_slot = jax.ops.segment_sum(lp.reshape(-1), ids, num_segments=num_slots + 1)[:num_slots]
    return per_slot, lp, on
