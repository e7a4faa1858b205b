"""Export a training run (Orbax checkpoints) as a Hugging Face directory.

  python -m launch.export --run_dir=runs/tgpo --out=exports/tgpo            # latest checkpoint
  python -m launch.export --run_dir=runs/tgpo --step=200 --out=exports/tgpo-200 --dtype=bfloat16
The model is rebuilt from the run's config.json, its trained parameters restored (LoRA adapters are
folded into the weights) and written with the run's tokenizer; ``AutoModelForCausalLM.from_pretrained``
loads the result.
"""

from __future__ import annotations

from absl import app, flags

from launch.entry import prepare

DTYPES = ("float32", "bfloat16", "float16")


def _define_flags():
    flags.DEFINE_string("run_dir", None, "training run directory (config.json and checkpoints/ inside)")
    flags.DEFINE_integer("step", None, "checkpoint step to export (default: the latest)")
    flags.DEFINE_string("out", None, "output Hugging Face directory (replaced if it exists)")
    flags.DEFINE_enum("dtype", None, list(DTYPES), "weight dtype of the export (default: the run's param dtype)")
    flags.DEFINE_float("max_shard_gb", 2.0, "largest safetensors shard, in GiB")
    flags.mark_flags_as_required(["run_dir", "out"])


def main(argv):
    """Export the run's checkpoint as a Hugging Face directory and print its path and summary."""
    prepare(argv)
    from tgpo_jax.training.restore import export_run

    f = flags.FLAGS
    out_dir, summary = export_run(f.run_dir, f.out, step=f.step, dtype=f.dtype, max_shard_gb=f.max_shard_gb)
    print(out_dir)
    print(summary)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
