"""The jitted, sharded train and eval steps.

The model is split into trainable parameters (all ``nnx.Param`` for full fine-tuning, only
``nnx.LoRAParam`` with LoRA) and frozen ones. The reference policy of live mode is the frozen base
(LoRA switched off) or a frozen copy of the initial weights (full fine-tuning). A step takes a
batch with a leading micro-batch axis [A, B/A, ...] and accumulates gradients over it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from tgpo_jax import sharding as shd
from tgpo_jax.models.transformer import Transformer
from tgpo_jax.training.logprobs import slot_logprobs
from tgpo_jax.training.objective import LossConfig, objective, reference_slots


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimizer (AdamW or SGD), its learning-rate schedule, clipping and gradient accumulation."""

    optimizer: str = "adamw"  # adamw | sgd (plain gradient descent: an update linear in the gradient)
    learning_rate: float = 1e-5
    warmup_steps: int = 0
    schedule: str = "cosine"  # cosine | linear | constant (after warmup)
    total_steps: int = 1000  # for the decay
    end_lr_fraction: float = 0.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    clip_norm: float = 1.0  # 0 = no clipping
    grad_accum: int = 1


def make_schedule(cfg: OptimConfig):
    """The learning-rate schedule: linear warmup, then cosine, linear or constant; ``ValueError`` for another."""
    warm = max(cfg.warmup_steps, 0)
    decay = max(cfg.total_steps - warm, 1)
    end = cfg.learning_rate * cfg.end_lr_fraction
    if cfg.schedule == "cosine":
        tail = optax.cosine_decay_schedule(cfg.learning_rate, decay, alpha=cfg.end_lr_fraction)
    elif cfg.schedule == "linear":
        tail = optax.linear_schedule(cfg.learning_rate, end, decay)
    elif cfg.schedule == "constant":
        tail = optax.constant_schedule(cfg.learning_rate)
    else:
        raise ValueError(f"schedule {cfg.schedule!r}: expected cosine, linear or constant")
    if not warm:
        return tail
    return optax.join_schedules([optax.linear_schedule(0.0, cfg.learning_rate, warm), tail], [warm])


def make_optimizer(cfg: OptimConfig):
    """The optax optimizer of ``cfg``: optional global-norm clipping, then AdamW or SGD with the schedule;
    ``ValueError`` for another optimizer."""
    parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm > 0 else []
    if cfg.optimizer == "adamw":
        parts.append(optax.adamw(make_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay))
    elif cfg.optimizer == "sgd":
        parts += ([optax.add_decayed_weights(cfg.weight_decay)] if cfg.weight_decay else []) + [
            optax.sgd(make_schedule(cfg))
        ]
    else:
        raise ValueError(f"optim.optimizer={cfg.optimizer!r}: expected adamw or sgd")
    return optax.chain(*parts)


class Trainer:
    """Holds the split model and builds the jitted steps; the training state is a plain pytree."""

    def __init__(
        self,
        model: Transformer,
        loss_cfg: LossConfig,
        optim_cfg: OptimConfig,
        mesh,
        *,
        chunk: int = 128,
        update_mask=None,
    ):
        self.loss_cfg, self.optim_cfg, self.mesh, self.chunk = loss_cfg, optim_cfg, mesh, chunk
        self.lora = bool(model.cfg.lora_rank)
        trainable = nnx.LoRAParam if self.lora else nnx.Param
        self.graphdef, params, self.frozen = nnx.split(model, trainable, ...)
        self.model_cfg = model.cfg
        self.tx = make_optimizer(optim_cfg)
        # full fine-tuning with a live reference keeps a frozen copy of the initial weights
        self.ref_params = params if (loss_cfg.reference == "live" and not self.lora) else None
        self._train = self._eval = self._ref = None
        self.initial_params = params
        # update_mask: a pytree like the trainable parameters, 1 where updates apply and 0 where they are frozen
        # (entries of a tensor, e.g. a planted circuit's slices; no weight decay reaches them either)
        self.update_mask = (
            None
            if update_mask is None
            else jax.tree.map(lambda m, p: jax.device_put(jnp.asarray(m, p.dtype), p.sharding), update_mask, params)
        )

    # ------------------------------------------------------------------ state
    def state_shardings(self) -> dict[str, Any]:
        """The train state's shardings: parameters as placed, optimizer moments as their parameter, the rest
        replicated."""
        repl = NamedSharding(self.mesh, P())
        param_sh = jax.tree.map(lambda x: x.sharding, self.initial_params)
        opt_sh = optax.tree_map_params(
            self.tx,
            lambda _, s: s,
            jax.eval_shape(self.tx.init, self.initial_params),
            param_sh,
            transform_non_params=lambda _: repl,
        )
        return {"step": repl, "params": param_sh, "opt_state": opt_sh, "rng": repl}

    def abstract_state(self) -> dict[str, Any]:
        """``init_state``'s shapes, dtypes and shardings (ShapeDtypeStructs), with nothing allocated: works on a
        model of ShapeDtypeStructs too (``tgpo_jax/training/plan.py``)."""
        shapes = {
            "step": jax.ShapeDtypeStruct((), jnp.int32),
            "params": self.initial_params,
            "opt_state": jax.eval_shape(self.tx.init, self.initial_params),
            "rng": jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))),
        }
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, self.state_shardings()
        )

    def init_state(self, seed: int = 0) -> dict[str, Any]:
        """A fresh train state (step, a copy of the initial parameters, optimizer state, RNG key data), sharded."""
        params = jax.tree.map(jnp.copy, self.initial_params)  # the state owns (and donates) its own buffers
        repl = NamedSharding(self.mesh, P())
        opt_state = jax.jit(self.tx.init, out_shardings=self.state_shardings()["opt_state"])(params)
        put = lambda x: jax.device_put(x, repl)  # noqa: E731
        return {
            "step": put(jnp.zeros((), jnp.int32)),
            "params": params,
            "opt_state": opt_state,
            "rng": put(jax.random.key_data(jax.random.key(seed))),
        }

    def model(self, params, frozen=None) -> Transformer:
        """The ``Transformer`` of ``params`` with the frozen weights (the trainer's own unless ``frozen`` is given)."""
        return nnx.merge(self.graphdef, params, self.frozen if frozen is None else frozen)

    # ------------------------------------------------------------------ loss
    def _loss(self, params, ref_params, batch, frozen=None):
        model = self.model(params, frozen)
        cfg = self.loss_cfg
        pol, tok_lp, tok_on = slot_logprobs(model, batch, chunk=self.chunk)
        ref_tok = None
        if cfg.reference == "live":
            ref_model = model if self.lora else self.model(ref_params, frozen)
            ref, ref_tok, _ = jax.lax.stop_gradient(slot_logprobs(ref_model, batch, use_lora=False, chunk=self.chunk))
        elif cfg.reference == "none":
            ref = jnp.zeros_like(pol)
        else:
            ref = reference_slots(batch, cfg)
        return objective(pol, ref, tok_lp, tok_on, batch, cfg, ref_tok)

    def _train_step(self, state, ref_params, mask, frozen, batch):
        def micro(carry, mb):
            grads, metrics = carry
            (loss, m), g = jax.value_and_grad(self._loss, has_aux=True)(state["params"], ref_params, mb, frozen)
            m = {**m, "loss": loss}
            return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, metrics, m)), None

        zeros = jax.tree.map(jnp.zeros_like, state["params"])
        first = jax.tree.map(lambda x: x[0], batch)
        m_shape = jax.eval_shape(lambda: self._loss(state["params"], ref_params, first, frozen)[1])
        m0 = {**jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), m_shape), "loss": jnp.zeros((), jnp.float32)}
        (grads, metrics), _ = jax.lax.scan(micro, (zeros, m0), batch)
        a = batch["tokens"].shape[0]
        grads = jax.tree.map(lambda g: g / a, grads)
        metrics = jax.tree.map(lambda m: m / a, metrics)
        grad_norm = optax.global_norm(grads)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        if mask is not None:
            updates = jax.tree.map(jnp.multiply, updates, mask)
        updates = self._freeze_below(updates)
        params = optax.apply_updates(state["params"], updates)
        # the updated parameters too: a finite gradient times a huge learning rate can overflow them
        finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm) & jnp.isfinite(optax.global_norm(params))
        # a non-finite step changes nothing: the host stops the run with the last good state intact
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        rng = jax.random.key_data(jax.random.split(jax.random.wrap_key_data(state["rng"]))[0])
        new_state = {
            "step": state["step"] + finite.astype(jnp.int32),
            "params": keep(params, state["params"]),
            "opt_state": keep(opt_state, state["opt_state"]),
            "rng": rng,
        }
        lr = make_schedule(self.optim_cfg)(state["step"])
        return new_state, {**metrics, "grad_norm": grad_norm, "finite": finite, "learning_rate": lr}

    def _freeze_below(self, updates):
        """With ``train_layers``: no update at all below the trained layers (nor to an untied input embedding). Their
        gradients are zero already; this keeps weight decay off them too, so they stay the reference's."""
        cut, tied = self.model_cfg.frozen_layers, self.model_cfg.tie_word_embeddings
        if not cut:
            return updates

        def freeze(path, u):
            top = getattr(path[0], "key", None)
            if top == "layers":
                return u.at[:cut].set(0)
            return jnp.zeros_like(u) if top == "embed" and not tied else u  # (LoRA's updates hold no embed)

        return jax.tree_util.tree_map_with_path(freeze, updates)

    # ------------------------------------------------------------------ jitted entry points
    def batch_sharding(self, batch) -> dict:
        """Shard the example axis (axis 1 of [A, B, ...]) over the data-parallel mesh axes."""
        return {
            k: NamedSharding(self.mesh, P(None, shd.BATCH_AXES, *([None] * (v.ndim - 2)))) for k, v in batch.items()
        }

    def jit_train_step(self, state, batch):
        """The jitted ``_train_step(state, ref_params, update_mask, frozen, batch)`` for states and batches shaped
        and sharded like these (arrays, or ShapeDtypeStructs with shardings: ``tgpo_jax/training/plan.py`` lowers
        it without allocating). The frozen weights (the base under LoRA) are an argument, not a closed-over
        constant: a constant would be baked into the compiled program."""
        sh = lambda tree: jax.tree.map(lambda x: x.sharding, tree)  # noqa: E731
        state_sh = sh(state)
        return jax.jit(
            self._train_step,
            in_shardings=(
                state_sh,
                sh(self.ref_params),
                sh(self.update_mask),
                sh(self.frozen),
                self.batch_sharding(batch),
            ),
            out_shardings=(state_sh, None),
            donate_argnums=(0,),
        )

    def train_step(self, state, batch):
        """One optimizer step on ``batch`` (compiled on first use); the new state and the metrics."""
        if self._train is None:
            self._train = self.jit_train_step(state, batch)
        return self._train(state, self.ref_params, self.update_mask, self.frozen, batch)

    def eval_step(self, state, batch):
        """The loss and metrics of the state's parameters on ``batch`` (its first micro-batch), without updating."""
        if self._eval is None:
            self._eval = jax.jit(lambda p, r, f, b: self._loss(p, r, jax.tree.map(lambda x: x[0], b), f))
        loss, metrics = self._eval(state["params"], self.ref_params, self.frozen, batch)
        return {**metrics, "loss": loss}

    def jit_reference_logprobs(self):
        """The jitted reference pass ``(params, frozen, batch [A, B, ...]) -> slot log-probs [A*B, S]``."""

        def ref(params, frozen, b):
            b = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), b)
            return slot_logprobs(self.model(params, frozen), b, use_lora=False, chunk=self.chunk)[0]

        return jax.jit(ref)

    def reference_logprobs(self, batch):
        """Reference slot log-probs [A*B, S] of a batch (for the precomputed sidecar)."""
        if self._ref is None:
            self._ref = self.jit_reference_logprobs()
        out = self._ref(self.initial_params, self.frozen, batch)
        return out.reshape(-1, batch["slot_valid"].shape[-1])


def to_global_batch(local: dict, mesh, grad_accum: int) -> dict:
    """Per-process numpy batch [b_local, ...] -> global arrays [A, B/A, ...] sharded over data axes."""
    out = {}
    for k, v in local.items():
        if v.shape[0] % grad_accum:
            raise ValueError(f"per-process batch {v.shape[0]} does not divide into {grad_accum} micro-batches")
        v = v.reshape(grad_accum, v.shape[0] // grad_accum, *v.shape[1:])
        sh = NamedSharding(mesh, P(None, shd.BATCH_AXES, *([None] * (v.ndim - 2))))
        out[k] = jax.make_array_from_process_local_data(sh, v)
    return out
