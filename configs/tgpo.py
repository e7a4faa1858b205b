"""tgpo from the base config (docs/method.md §7). Usage: --config=configs/tgpo.py[:preset]."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    """The TGPO training config for the model preset ``preset``."""
    c = base.get_config(preset)
    c.method = "tgpo"
    c.data.weight_norm = "none"
    c.train.output_dir = "runs/tgpo"
    return c
