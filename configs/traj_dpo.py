"""Agent Q's trajectory-level DPO baseline (docs/method.md §9.3) from the base config, trained on a trajectory-pair
dataset (``launch.build_dataset --values=trajectory``). Usage: --config=configs/traj_dpo.py[:preset].

One example is one pair: a row per step that differs between the two trajectories (plain layout), so
``data.max_branches`` is the most steps a pair may have (both sides together; longer pairs are left out, with a
warning) and a batch holds batch_size x max_branches rows."""

from configs import base


def get_config(preset: str = "smollm2-135m"):
    """The trajectory-level DPO config for the model preset ``preset``: plain layout, up to 16 rows per pair."""
    c = base.get_config(preset)
    c.method = "traj_dpo"
    c.loss.beta = 0.1
    c.data.layout = "plain"
    c.data.max_branches = 16
    c.train.output_dir = "runs/traj_dpo"
    return c
