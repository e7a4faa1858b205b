"""Train a policy on a node dataset with SFT, DPO, KTO, KTO-Tree or TGPO.

  python -m launch.train --config=configs/tgpo.py:smollm2-135m \
      --config.data.train_dir=data/train --config.data.eval_dir=data/test --config.train.output_dir=runs/tgpo
  # multi-host (GPU hosts; TPU pods auto-detect the coordinator):
  python -m launch.train --config=configs/dpo.py:qwen3-14b --config.distributed.enabled=True \
      --config.distributed.coordinator=host0:1234 --config.distributed.num_processes=8 \
      --config.distributed.process_id=$RANK
Rerunning the same command resumes from the latest checkpoint in the output directory.
"""

from __future__ import annotations

import json

from absl import app
from ml_collections import config_flags

from launch.entry import prepare

_CONFIG = config_flags.DEFINE_config_file("config", "configs/tgpo.py", "training config file (path[:preset])")


def main(argv):
    """Train with the given config and print the run's summary as JSON."""
    prepare(argv)
    from tgpo_jax.training.loop import train

    summary = train(_CONFIG.value)
    print(json.dumps(summary, indent=2, default=float))


if __name__ == "__main__":
    app.run(main)
