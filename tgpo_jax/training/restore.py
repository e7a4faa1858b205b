"""Rebuild a trained model from a run directory: ``config.json`` + the Orbax checkpoints of ``train``.

``restore_checkpoint(run_dir)`` builds the model exactly as the run did (``loop.build_model``: the same base
checkpoint or from-scratch preset, dtypes and LoRA rank), then reads only the trainable parameters of
one checkpoint (all ``nnx.Param`` for full fine-tuning, the ``nnx.LoRAParam`` adapters with LoRA) into
it; the optimizer state in the checkpoint is never read. The returned model still carries its LoRA
adapters; ``export_hf`` folds them into the weights.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, NamedTuple

import jax
import ml_collections
import orbax.checkpoint as ocp
from flax import nnx

from tgpo_jax import sharding as shd

log = logging.getLogger(__name__)


def _config_path(run_dir: str) -> str:
    return os.path.join(os.path.abspath(run_dir), "config.json")


def _checkpoint_dir(run_dir: str) -> str:
    return os.path.join(os.path.abspath(run_dir), "checkpoints")


def load_run_config(run_dir: str) -> ml_collections.ConfigDict:
    """The ConfigDict a run was trained with (``<run_dir>/config.json``, written by ``train``)."""
    path = _config_path(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"run directory {os.path.abspath(run_dir)} does not exist")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.path.abspath(run_dir)} is not a training run directory: no config.json in it")
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))


def _manager(run_dir: str) -> ocp.CheckpointManager:
    directory = _checkpoint_dir(run_dir)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no checkpoints in {os.path.abspath(run_dir)} (expected {directory})")
    return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(read_only=True, create=False))


def checkpoint_steps(run_dir: str) -> list[int]:
    """The steps with a complete checkpoint in ``<run_dir>/checkpoints``, ascending."""
    mgr = _manager(run_dir)
    try:
        return sorted(int(s) for s in mgr.all_steps())
    finally:
        mgr.close()


def _mesh_for(cfg):
    """The run's mesh shape over the local devices; all local devices on the fsdp axis if it does not fit."""
    try:
        return shd.make_mesh(tuple(cfg.mesh.shape))
    except (ValueError, AttributeError):
        return shd.make_mesh((1, -1, 1), devices=jax.local_devices())


class RestoredRun(NamedTuple):
    """A model rebuilt from a run's checkpoint, with its tokenizer, the run's config and the step restored."""

    model: Any  # Transformer, with its LoRA adapters if the run trained them
    tokenizer: Any
    cfg: ml_collections.ConfigDict
    step: int


def restore_checkpoint(run_dir: str, step: int | None = None, *, mesh=None) -> RestoredRun:
    """-> (model, tokenizer, cfg, step) of ``run_dir`` at checkpoint ``step`` (default: the latest).

    ``mesh`` places the parameters (default: the run's mesh shape, or all local devices if that does
    not fit this machine). Raises FileNotFoundError for a directory that is not a run or holds no
    checkpoint, ValueError (listing the available steps) for a step that was not saved.
    """
    from tgpo_jax.models.tokenizer import load_tokenizer
    from tgpo_jax.training.loop import build_model

    run_dir = os.path.abspath(run_dir)
    cfg = load_run_config(run_dir)
    mgr = _manager(run_dir)
    try:
        steps = sorted(int(s) for s in mgr.all_steps())
        if not steps:
            raise FileNotFoundError(f"no checkpoints in {run_dir} ({_checkpoint_dir(run_dir)} is empty)")
        step = steps[-1] if step is None else int(step)
        if step not in steps:
            raise ValueError(f"no checkpoint for step {step} in {run_dir}; available steps: {steps}")

        mesh = mesh if mesh is not None else _mesh_for(cfg)
        tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
        model = build_model(cfg, mesh, tokenizer)
        # the same split as training.step.Trainer: the checkpoint's "params" is the trainable part
        trainable = nnx.LoRAParam if model.cfg.lora_rank else nnx.Param
        graphdef, params, frozen = nnx.split(model, trainable, ...)
        target = {"params": jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), params)}
        restore_args = ocp.checkpoint_utils.construct_restore_args(target)
        try:
            out = mgr.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeRestore(target, restore_args=restore_args, partial_restore=True),
                    meta=ocp.args.JsonRestore(),
                ),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"checkpoint step {step} of {run_dir} cannot be read back: a damaged file in "
                f"{_checkpoint_dir(run_dir)}/{step}, or not the model its config.json builds "
                f"(model.path={cfg.model.path!r}, scratch={cfg.model.scratch!r}, "
                f"lora_rank={cfg.model.lora_rank}): {e}"
            ) from e
    finally:
        mgr.close()
    restored = out["state"]["params"]
    log.info("restored %s at step %d", run_dir, step)
    return RestoredRun(nnx.merge(graphdef, restored, frozen), tokenizer, cfg, step)


def export_run(
    run_dir: str, out: str, *, step: int | None = None, dtype: str | None = None, max_shard_gb: float = 2.0
) -> tuple[str, str]:
    """-> (output directory, one-line summary). ``dtype`` None = the run's parameter dtype."""
    import jax
    from flax import nnx

    from tgpo_jax.models.hf_export import export_hf
    from tgpo_jax.models.transformer import param_count

    if max_shard_gb <= 0:
        raise ValueError(f"max_shard_gb must be positive, got {max_shard_gb}")
    model, tokenizer, cfg, step = restore_checkpoint(run_dir, step)
    dtype = dtype or model.cfg.param_dtype
    lora = f", LoRA rank {model.cfg.lora_rank} merged" if model.cfg.lora_rank else ""
    n_params = param_count(model) - sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))
    out_dir = export_hf(model, out, tokenizer, dtype=dtype, max_shard_bytes=int(max_shard_gb * 1024**3))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    summary = (
        f"exported {cfg.method} run {os.path.abspath(run_dir)} step {step}: {model.cfg.model_type}, "
        f"{n_params / 1e6:.2f}M parameters{lora}, {dtype}, {size / 1e6:.1f} MB of safetensors"
    )
    return out_dir, summary
