"""sft from the base config (docs/method.md §7). Usage: --config=configs/sft.py[:preset]."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    """The SFT training config for the model preset ``preset``: no reference model, learning rate 1e-5."""
    c = base.get_config(preset)
    c.method = "sft"
    c.loss.reference = "none"
    c.optim.learning_rate = 1e-5
    c.train.output_dir = "runs/sft"
    return c
