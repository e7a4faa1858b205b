"""kto_tree from the base config (docs/method.md §7). Usage: --config=configs/kto_tree.py[:preset]."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    """The KTO-Tree training config for the model preset ``preset``."""
    c = base.get_config(preset)
    c.method = "kto_tree"
    c.train.output_dir = "runs/kto_tree"
    return c
