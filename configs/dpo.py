"""dpo from the base config (docs/method.md §7). Usage: --config=configs/dpo.py[:preset]."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    """The DPO training config for the model preset ``preset``."""
    c = base.get_config(preset)
    c.method = "dpo"
    c.loss.beta = 0.1
    c.train.output_dir = "runs/dpo"
    return c
