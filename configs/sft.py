"""sft from the base config (docs/method.md §7). Usage: --config=configs/sft.py[:preset]."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    c = base.get_config(preset)
    c.method = "sft"
    c.loss.reference = "none"
    c.optim.learning_rate = 1e-5
    c.train.output_dir = "runs/sft"
    return c
