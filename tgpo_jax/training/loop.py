"""The training loop: config -> mesh, model, data, reference, optimizer -> steps, evals, checkpoints.

Resumes from the latest checkpoint in ``train.output_dir`` (parameters, optimizer, step, RNG and the
grain iterator), so a killed run continues exactly where its last checkpoint stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Callable

import jax

from tgpo_jax import sharding as shd
from tgpo_jax.hardware import compute_dtype
from tgpo_jax.data import examples as ex
from tgpo_jax.data.collate import CollateConfig
from tgpo_jax.files import write_text_atomic
from tgpo_jax.data.pipeline import make_dataset, steps_per_epoch
from tgpo_jax.data.trajectory import examples_for
from tgpo_jax.models.config import SCRATCH_PRESETS, scratch_config
from tgpo_jax.models.loading import load_model
from tgpo_jax.models.tokenizer import load_tokenizer
from tgpo_jax.training import reference as ref_lib
from tgpo_jax.training.checkpoint import Checkpointer
from tgpo_jax.training.logprobs import loss_positions
from tgpo_jax.training.metrics import MetricsWriter, read_metrics
from tgpo_jax.training.objective import LossConfig
from tgpo_jax.training.registry import freeze_fn, init_fn
from tgpo_jax.sections import from_section
from tgpo_jax.training.step import OptimConfig, Trainer, to_global_batch

log = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """A step produced a non-finite loss or gradient; nothing of it was applied or saved."""


def maybe_initialize_distributed(cfg) -> None:
    """Set the number of CPU devices and start ``jax.distributed`` when ``cfg.distributed`` asks for it (once)."""
    d = cfg.distributed
    if d.local_device_count:  # fake CPU devices per process (tests, CPU demos); must precede backend start
        jax.config.update("jax_num_cpu_devices", int(d.local_device_count))
    if not d.enabled or jax.distributed.is_initialized():
        return
    kw = {}
    if d.coordinator:  # explicit (multi-process on one machine, GPU hosts); else auto-detected (TPU pods, SLURM)
        kw = dict(coordinator_address=d.coordinator, num_processes=int(d.num_processes), process_id=int(d.process_id))
    jax.distributed.initialize(**kw)


def collate_config(cfg) -> CollateConfig:
    """The ``CollateConfig`` of a training config."""
    return from_section(
        CollateConfig,
        cfg.data,
        method=cfg.method,
        pairs=ex.pair_config(cfg.data),
        sft_slots=cfg.loss.sft_alpha > 0,
        margin_decisions=not cfg.loss.margin_copies,
    )


def with_loss_positions(local: dict) -> dict:
    """The host batch with ``loss_pos`` (``logprobs.loss_positions``: the vocabulary projection then runs on the loss
    tokens only, as narrow as the batch allows), on one device; on several the batch as it is. Why not there: with
    the batch sharded over two CPU devices the step hung in an all-reduce (tests/test_distributed.py): the two
    devices of one execution wait at different all-reduces; it reproduced with the persistent compilation cache's
    0.2 s threshold that the tests set and not in one run without it; the cause is not found yet."""
    if jax.device_count() > 1:
        return local
    return {**local, "loss_pos": loss_positions(local["slot"])}


def check_batch(cfg, mesh) -> None:
    """train.batch_size / optim.grad_accum examples per micro-batch must split over the data x fsdp devices."""
    n_batch = mesh.shape["data"] * mesh.shape["fsdp"]
    for key, value in (("train.batch_size", cfg.train.batch_size), ("optim.grad_accum", cfg.optim.grad_accum)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{key}={value!r}: must be a positive integer")
    micro = cfg.train.batch_size // cfg.optim.grad_accum
    if cfg.train.batch_size % cfg.optim.grad_accum or micro % n_batch:
        raise ValueError(
            f"batch_size {cfg.train.batch_size} / grad_accum {cfg.optim.grad_accum} = {micro} "
            f"examples per micro-batch must divide over the mesh's data x fsdp = {n_batch} devices"
        )


def loss_config(cfg, desirable_weight: float = 1.0, undesirable_weight: float = 1.0) -> LossConfig:
    """``cfg.loss`` -> the Trainer's LossConfig (KTO's class weights given: the dataset's, or cfg's fixed ones)."""
    return from_section(
        LossConfig,
        cfg.loss,
        method=cfg.method,
        desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight,
    )


def optim_config(cfg, total_steps: int) -> OptimConfig:
    """``cfg.optim`` -> the Trainer's OptimConfig for a run of ``total_steps`` (warmup_steps 0: warmup_fraction of
    them)."""
    o = cfg.optim
    return from_section(
        OptimConfig,
        o,
        warmup_steps=o.warmup_steps or int(o.warmup_fraction * total_steps),
        total_steps=total_steps,
    )


def model_overrides(m) -> dict:
    """What ``cfg.model`` sets on the checkpoint's ModelConfig (besides param_dtype)."""
    return dict(
        dtype=compute_dtype(m.dtype),
        remat=m.remat,
        train_layers=m.train_layers,
        lora_rank=m.lora_rank,
        lora_alpha=m.lora_alpha,
        attention=m.attention,
    )


def build_model(cfg, mesh, tokenizer):
    """The model the config names, sharded on ``mesh``: loaded from ``model.path``, or a from-scratch preset initialised
    by ``model.init``; ``ValueError`` when neither is given."""
    m = cfg.model
    overrides = model_overrides(m)
    if m.path:
        return load_model(m.path, mesh=mesh, param_dtype=m.param_dtype, lora_seed=m.lora_seed, **overrides)
    if m.scratch not in SCRATCH_PRESETS:
        raise ValueError(
            f"model.path is empty and model.scratch={m.scratch!r}: give a checkpoint or one of "
            f"{sorted(SCRATCH_PRESETS)}"
        )
    mc = scratch_config(
        m.scratch,
        len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        param_dtype=m.param_dtype,
        **overrides,
    )
    from tgpo_jax.models.loading import shard_model

    return shard_model(init_fn(m.init)(mc, m, tokenizer), mesh)  # model.init: tgpo_jax/training/registry.py


def update_mask(cfg, model):
    """model.freeze -> the Trainer's update mask (None = train every entry)."""
    if not cfg.model.freeze:
        return None
    freeze = freeze_fn(cfg.model.freeze)  # tgpo_jax/training/registry.py
    if model.cfg.lora_rank:
        raise ValueError(
            f"model.freeze={cfg.model.freeze!r} freezes entries of full weights; with LoRA "
            "(model.lora_rank > 0) the base is frozen already"
        )
    from flax import nnx

    from tgpo_jax.models.loading import model_from_flat

    keep = {k: ~v for k, v in freeze(model.cfg, cfg.model).items()}
    return nnx.split(model_from_flat(model.cfg, keep), nnx.Param, ...)[1]


def _eval(trainer, state, source, cfg, mesh) -> dict:
    """Mean metrics over the held-out source (each batch weighted equally)."""
    nproc, pidx = jax.process_count(), jax.process_index()
    ds = make_dataset(
        source,
        batch_size=cfg.train.batch_size,
        seed=0,
        num_epochs=1,
        shuffle=False,
        process_index=pidx,
        process_count=nproc,
    )
    sums, n = {}, 0
    for i, local in enumerate(ds):
        if cfg.train.eval_batches and i >= cfg.train.eval_batches:
            break
        m = trainer.eval_step(state, to_global_batch(with_loss_positions(local), mesh, 1))
        for k, v in m.items():
            sums[k] = sums.get(k, 0.0) + float(v)
        n += 1
    return {k: v / max(n, 1) for k, v in sums.items()}


@dataclasses.dataclass
class TrainResult:
    """What ``train`` returns to callers in the same process: the summary, the final state and the trainer."""

    summary: dict  # JSON-safe: the final and eval metrics, as written to <output_dir>/summary.json
    state: dict  # the final train state (params, optimiser state, step)
    trainer: Trainer  # its jitted steps, for callers that keep evaluating the state


def snapshot_period(total: int, points: int) -> int:
    """Steps between the snapshots a success-vs-steps curve of ``points`` points keeps over ``total`` steps."""
    return -(-total // points)


def train(cfg, on_step: Callable[[int], None] | None = None) -> dict:
    """Run (or resume) one training job; returns its summary (JSON-safe: the final and eval metrics).
    ``on_step(step)`` runs after each step, its checkpoint save included (callers' logging, or a test that kills
    the process there)."""
    return fit(cfg, on_step).summary


def fit(cfg, on_step: Callable[[int], None] | None = None) -> TrainResult:
    """``train``, also returning the live final state and its trainer."""
    maybe_initialize_distributed(cfg)
    out_dir = os.path.abspath(cfg.train.output_dir)
    os.makedirs(out_dir, exist_ok=True)
    mesh = shd.make_mesh(tuple(cfg.mesh.shape))
    check_batch(cfg, mesh)
    for section, key in (("model", "path"), ("model", "tokenizer"), ("data", "train_dir"), ("data", "eval_dir")):
        value = cfg[section][key]
        if value and os.path.exists(value):  # the saved config must work from any working directory
            cfg[section][key] = os.path.abspath(value)
    check_resume(out_dir, cfg)
    if jax.process_index() == 0:
        write_text_atomic(os.path.join(out_dir, "config.json"), cfg.to_json_best_effort(indent=2))

    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
    model = build_model(cfg, mesh, tokenizer)
    ccfg = collate_config(cfg)
    if not cfg.data.train_dir:
        raise ValueError("data.train_dir is empty: point it at a node dataset directory (manifest.json inside)")
    if cfg.data.copy_swap and cfg.loss.reference in ("precomputed", "behaviour"):
        raise ValueError(
            f"data.copy_swap > 0 with loss.reference={cfg.loss.reference}: a swapped example has no "
            "stored reference log-probs; use a live reference (or none) or copy_swap=0"
        )
    source = examples_for(cfg.method)  # tree nodes, or trajectory pairs for traj_dpo
    train_src = source(
        cfg.data.train_dir, tokenizer, ccfg, weight_norm=cfg.data.weight_norm, copy_swap=cfg.data.copy_swap
    )
    eval_src = (
        source(cfg.data.eval_dir, tokenizer, ccfg, weight_norm=cfg.data.weight_norm) if cfg.data.eval_dir else None
    )
    if train_src.weight_scale != 1.0 and eval_src is not None:
        eval_src.weight_scale = train_src.weight_scale  # one normaliser: the training set's

    w_d, w_u = (
        train_src.class_weights
        if cfg.loss.kto_weights == "auto"
        else (cfg.loss.desirable_weight, cfg.loss.undesirable_weight)
    )
    loss_cfg = loss_config(cfg, w_d, w_u)
    per_epoch = steps_per_epoch(train_src, cfg.train.batch_size)
    total = cfg.train.max_steps or per_epoch * cfg.train.num_epochs
    trainer = Trainer(
        model, loss_cfg, optim_config(cfg, total), mesh, chunk=cfg.train.chunk, update_mask=update_mask(cfg, model)
    )
    if loss_cfg.reference == "precomputed":
        cache = cfg.loss.reference_cache or os.path.join(out_dir, "reference")
        for src in filter(None, (train_src, eval_src)):
            src.ref_table = ref_lib.reference_table(
                trainer, src, cache, batch_size=cfg.train.batch_size, model_id=cfg.model.path or cfg.model.scratch
            )
    elif loss_cfg.reference == "behaviour":
        ref_lib.check_behaviour_logprobs(train_src)

    # curve_points > 0: also snapshot (and keep) every total/curve_points steps, for a success-vs-steps curve
    period = snapshot_period(total, cfg.train.curve_points) if cfg.train.curve_points else 0
    ckpt = Checkpointer(
        os.path.join(out_dir, "checkpoints"),
        keep=cfg.train.keep,
        async_save=cfg.train.async_checkpoint,
        keep_period=period or None,
    )
    writer = MetricsWriter(out_dir)
    state = trainer.init_state(cfg.train.seed)
    ds = make_dataset(
        train_src,
        batch_size=cfg.train.batch_size,
        seed=cfg.data.shuffle_seed,
        num_epochs=None if cfg.train.max_steps else cfg.train.num_epochs,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    it = iter(ds)
    start = 0
    if ckpt.latest_step() is not None:
        state, meta = ckpt.restore_intact(state)
        it.set_state(meta["data_state"])
        start = int(meta["step"])
        log.info("resumed from step %d", start)
    # rows logged after the step we start from (a killed run's, even one killed before its first checkpoint) go:
    # they are logged again
    _truncate_metrics(writer.path, start)

    summary = {
        "method": cfg.method,
        "steps": total,
        "per_epoch": per_epoch,
        "dataset": dataclasses.asdict(train_src.stats),
        "kto_class_weights": [w_d, w_u],
        "weight_scale": train_src.weight_scale,
    }
    bar = _progress(cfg, total, start)
    step, last, t0, ran = start, {}, time.perf_counter(), 0
    try:
        while step < total:
            local = next(it)
            batch = to_global_batch(with_loss_positions(local), mesh, cfg.optim.grad_accum)
            state, m = trainer.train_step(state, batch)
            if not bool(m["finite"]):
                ckpt.wait()
                good = ckpt.latest_step()
                raise TrainingDiverged(
                    f"step {step + 1}: non-finite loss {float(m['loss'])}, grad norm "
                    f"{float(m['grad_norm'])} or updated parameters; the update was not applied. "
                    "Last good checkpoint: "
                    + (f"step {good} in {ckpt.directory}" if good is not None else "none saved yet")
                )
            step += 1
            ran += 1
            if step % cfg.train.log_every == 0 or step == total:
                last = writer.write(step, {**m, "steps_per_sec": ran / (time.perf_counter() - t0)})
                bar.set_postfix(loss=f"{last['train/loss']:.4f}")
            if cfg.train.eval_every and eval_src is not None and step % cfg.train.eval_every == 0:
                writer.write(step, _eval(trainer, state, eval_src, cfg, mesh), prefix="eval")
            if step % cfg.train.save_every == 0 or step == total or (period and step % period == 0):
                ckpt.save(step, state, data_state=it.get_state())
            bar.update(1)
            if on_step is not None:
                on_step(step)
    finally:
        bar.close()
        ckpt.wait()
        writer.flush()
    if eval_src is not None:
        summary["eval"] = writer.write(step, _eval(trainer, state, eval_src, cfg, mesh), prefix="eval")
    summary["final"] = last
    summary["final_step"] = step
    if jax.process_index() == 0:
        write_text_atomic(os.path.join(out_dir, "summary.json"), json.dumps(summary, indent=2, default=float))
    ckpt.close()
    writer.close()
    return TrainResult(summary=summary, state=state, trainer=trainer)


# keys a resumed run may change: logging, saving, progress and layout, none of which changes what is computed
RESUME_FREE = (
    "train.output_dir",
    "train.progress",
    "train.log_every",
    "train.save_every",
    "train.keep",
    "train.async_checkpoint",
    "train.eval_every",
    "train.eval_batches",
    "train.chunk",
    "train.restart",
    "mesh.",
    "distributed.",
)


class ConfigChanged(ValueError):
    """A run directory holds checkpoints of another configuration."""


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_changes(saved: dict, now: dict) -> dict[str, tuple]:
    """{dotted key: (saved value, value now)} where two configs (as JSON) differ, less the ``RESUME_FREE`` keys."""
    a, b = _flat(saved), _flat(now)
    return {
        k: (a.get(k, "<absent>"), b.get(k, "<absent>"))
        for k in sorted(set(a) | set(b))
        if a.get(k, "<absent>") != b.get(k, "<absent>") and not k.startswith(RESUME_FREE)
    }


def check_resume(out_dir: str, cfg) -> None:
    """Resuming into a directory whose checkpoints another configuration wrote is refused, the changed keys named;
    ``train.restart=True`` starts over instead, with the old run moved aside (nothing is deleted)."""
    ck_dir, saved_path = os.path.join(out_dir, "checkpoints"), os.path.join(out_dir, "config.json")
    has_ckpt = os.path.isdir(ck_dir) and any(n.isdigit() for n in os.listdir(ck_dir))
    if not has_ckpt or jax.process_index() != 0:
        return
    if cfg.train.restart:
        aside = os.path.join(out_dir, "replaced-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
        os.makedirs(aside)
        for name in ("checkpoints", "config.json", "metrics.jsonl", "summary.json", "reference"):
            if os.path.exists(os.path.join(out_dir, name)):
                os.rename(os.path.join(out_dir, name), os.path.join(aside, name))
        log.warning("train.restart: the previous run in %s moved to %s; starting over", out_dir, aside)
        return
    if not os.path.exists(saved_path):
        return  # checkpoints from before config.json was written: nothing to compare
    try:
        with open(saved_path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigChanged(
            f"{saved_path} is unreadable ({e}); it holds checkpoints of a run whose configuration "
            "cannot be compared. Use another train.output_dir, or --config.train.restart=True to move "
            "that run aside and start over"
        ) from None
    changed = config_changes(saved, json.loads(cfg.to_json_best_effort()))
    if changed:
        diff = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changed.items())[:8])
        raise ConfigChanged(
            f"{out_dir} holds checkpoints of another configuration ({len(changed)} key(s) changed: "
            f"{diff}{' ...' if len(changed) > 8 else ''}). Resuming would mix two runs: use another "
            "train.output_dir, or --config.train.restart=True to move that run aside and start over"
        )


def _truncate_metrics(path: str, step: int) -> None:
    """Drop metric rows logged after the step the run starts from (they will be logged again), and lines a kill cut
    short (``read_metrics`` skips them with a warning)."""
    if not os.path.exists(path) or jax.process_index() != 0:
        return
    rows = [r for r in read_metrics(os.path.dirname(path)) if r.get("step", step + 1) <= step]
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def _progress(cfg, total: int, start: int):
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=start,
        desc=f"{cfg.method}",
        unit="step",
        disable=not cfg.train.progress or jax.process_index() != 0,
        dynamic_ncols=True,
    )
