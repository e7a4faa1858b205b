"""Export a training run (Orbax checkpoints) as a Hugging Face directory.

  python -m launch.export --run_dir=runs/tgpo --out=exports/tgpo            # latest checkpoint
  python -m launch.export --run_dir=runs/tgpo --step=200 --out=exports/tgpo-200 --dtype=bfloat16
The model is rebuilt from the run's config.json, its trained parameters restored (LoRA adapters are
folded into the weights) and written with the run's tokenizer; ``AutoModelForCausalLM.from_pretrained``
loads the result.
"""
from __future__ import annotations

import os

from absl import app, flags

from launch.entry import prepare

DTYPES = ("float32", "bfloat16", "float16")


def export_run(run_dir: str, out: str, *, step: int | None = None, dtype: str | None = None,
               max_shard_gb: float = 2.0) -> tuple[str, str]:
    """-> (output directory, one-line summary). ``dtype`` None = the run's parameter dtype."""
    import jax
    from flax import nnx

    from tgpo_jax.models.hf_export import export_hf
    from tgpo_jax.models.transformer import param_count
    from tgpo_jax.training.restore import restore_checkpoint

    if max_shard_gb <= 0:
        raise ValueError(f"max_shard_gb must be positive, got {max_shard_gb}")
    model, tokenizer, cfg, step = restore_checkpoint(run_dir, step)
    dtype = dtype or model.cfg.param_dtype
    lora = f", LoRA rank {model.cfg.lora_rank} merged" if model.cfg.lora_rank else ""
    n_params = param_count(model) - sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))
    out_dir = export_hf(model, out, tokenizer, dtype=dtype, max_shard_bytes=int(max_shard_gb * 1024**3))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    summary = (f"exported {cfg.method} run {os.path.abspath(run_dir)} step {step}: {model.cfg.model_type}, "
               f"{n_params / 1e6:.2f}M parameters{lora}, {dtype}, {size / 1e6:.1f} MB of safetensors")
    return out_dir, summary


def _define_flags():
    flags.DEFINE_string("run_dir", None, "training run directory (config.json and checkpoints/ inside)")
    flags.DEFINE_integer("step", None, "checkpoint step to export (default: the latest)")
    flags.DEFINE_string("out", None, "output Hugging Face directory (replaced if it exists)")
    flags.DEFINE_enum("dtype", None, list(DTYPES), "weight dtype of the export (default: the run's param dtype)")
    flags.DEFINE_float("max_shard_gb", 2.0, "largest safetensors shard, in GiB")
    flags.mark_flags_as_required(["run_dir", "out"])


def main(argv):
    prepare(argv)
    f = flags.FLAGS
    out_dir, summary = export_run(f.run_dir, f.out, step=f.step, dtype=f.dtype, max_shard_gb=f.max_shard_gb)
    print(out_dir)
    print(summary)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
