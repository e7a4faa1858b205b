"""A tiny training workspace (tokenizer + synthetic node datasets) and config builder for tests."""

import os
import subprocess
import sys

from conftest import CORPUS
from tgpo_jax.data.io import write_dataset
from tgpo_jax.data.synthetic import ITEMS, synthetic_nodes
from tgpo_jax.models.tokenizer import train_sentencepiece

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_workspace(root, n_train=64, n_test=16):
    texts = CORPUS * 20 + [" ".join(ITEMS)] * 50 + ["Task: add the to the cart. Page: button CLICK SCROLL"] * 50
    tok = train_sentencepiece(texts, os.path.join(root, "tok"), vocab_size=400)
    write_dataset(synthetic_nodes(n_train, seed=1), os.path.join(root, "train"), num_shards=2)
    write_dataset(synthetic_nodes(n_test, seed=2), os.path.join(root, "test"))
    return {"root": str(root), "tok": tok, "train": os.path.join(root, "train"), "test": os.path.join(root, "test")}


OVERRIDES = {
    "data.max_len": 128,
    "data.max_prompt_len": 100,
    "data.max_completion_len": 16,
    "train.batch_size": 8,
    "train.progress": False,
    "train.save_every": 1000,
    "train.log_every": 1,
    "optim.learning_rate": 3e-3,
    "optim.warmup_fraction": 0.0,
    "optim.schedule": "constant",
    "mesh.shape": (1, 1, 1),
}


def tiny_config(work, method, out, **over):
    import importlib

    c = importlib.import_module(f"configs.{method}").get_config("tiny")
    c.model.tokenizer = work["tok"]
    c.data.train_dir, c.data.eval_dir, c.train.output_dir = work["train"], work["test"], str(out)
    for k, v in {**OVERRIDES, **over}.items():
        section, key = k.split(".")
        c[section][key] = v
    return c


def train_cli(work, method, out, extra=()):
    """(argv, env) of launch/train.py in a fresh process: 1 CPU device unless asked (no XLA_FLAGS inherited)."""
    args = [
        sys.executable,
        "-m",
        "launch.train",
        f"--config=configs/{method}.py:tiny",
        f"--config.model.tokenizer={work['tok']}",
        f"--config.data.train_dir={work['train']}",
        f"--config.data.eval_dir={work['test']}",
        f"--config.train.output_dir={out}",
    ]
    args += [f"--config.{k}={v}" for k, v in OVERRIDES.items() if k != "mesh.shape"] + list(extra)
    return args, {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}


def run_train_cli(work, method, out, extra=(), timeout=600, die_after=0):
    """launch/train.py in a fresh process; ``die_after`` > 0: the same entry point, but the process dies like a
    killed one (``os._exit(137)``: no cleanup, a save possibly in flight) after that training step."""
    args, env = train_cli(work, method, out, extra)
    if die_after:
        args[1:3] = ["-c", _DIE_AFTER.format(n=int(die_after))]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


_DIE_AFTER = """
import functools, os
from absl import app
import launch.train as entry
from tgpo_jax.training import loop
loop.train = functools.partial(loop.train, on_step=lambda step: os._exit(137) if step >= {n} else None)
app.run(entry.main)
"""
