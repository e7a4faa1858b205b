"""Training steps with the vocabulary projection on every position vs on the loss positions only (``loss_pos``).

  python -m bench.loss_positions --run=<a pipeline run> [--preset=default --methods=sft,tgpo,kto --steps=8 --rounds=3]

The run's own round-1 dataset and tokenizer (README command 1 makes one), each method collated as the preset
trains it, a from-scratch model of the preset's shape, and the real ``Trainer`` steps. In each round every method
runs ``--steps`` steps without ``loss_pos`` and then with it, on the same batches; medians over rounds. Prints
seconds per step, the ratio, the rows' mean loss tokens against their length, and the CPU's flags.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
from absl import app, flags

import recipes

_RUN = flags.DEFINE_string("run", None, "a pipeline run directory (datasets/round1 and tokenizer inside)")
_PRESET = flags.DEFINE_string("preset", "default", "the pipeline preset whose collation and model to use")
_METHODS = flags.DEFINE_list("methods", ["sft", "tgpo", "kto"], "methods to time")
_STEPS = flags.DEFINE_integer("steps", 8, "timed steps per method, variant and round")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "rounds (the variants alternate within each)")


def _setup(method: str, pcfg, run: str):
    import jax

    from tgpo_jax import sharding as shd
    from tgpo_jax.data.collate import stack
    from tgpo_jax.data.pipeline import NodeExamples
    from tgpo_jax.models.tokenizer import load_tokenizer
    from tgpo_jax.training import loop
    from tgpo_jax.training.step import Trainer, to_global_batch

    recipes.register_all()  # the preset's model.init / model.freeze (scratch-copy's planted circuit)
    cfg = pcfg[method]
    tok = load_tokenizer(os.path.join(run, "tokenizer"))
    ccfg = loop.collate_config(cfg)
    src = NodeExamples(os.path.join(run, "datasets", "round1"), tok, ccfg)
    mesh = shd.make_mesh((1, -1, 1))
    cfg.model.tokenizer = os.path.join(run, "tokenizer")
    model = loop.build_model(cfg, mesh, tok)
    lc = loop.loss_config(cfg, *src.class_weights) if method.startswith("kto") else loop.loss_config(cfg)
    # one trainer per variant: a trainer's jitted step is built for one batch structure
    trainers = [
        Trainer(
            model,
            lc,
            loop.optim_config(cfg, 1000),
            mesh,
            chunk=cfg.train.chunk,
            update_mask=loop.update_mask(cfg, model),
        )
        for _ in range(2)
    ]
    b = cfg.train.batch_size
    rng = np.random.default_rng(0)
    locals_ = [stack([src[int(i)] for i in rng.choice(len(src), b, replace=False)]) for _ in range(_STEPS.value)]
    plain = [to_global_batch(x, mesh, 1) for x in locals_]
    narrow = [to_global_batch(loop.with_loss_positions(x), mesh, 1) for x in locals_]
    fill = float(np.mean([(x["slot"] >= 0).sum(-1).mean() for x in locals_]))
    width = float(np.mean([b["loss_pos"].shape[-1] for b in narrow]))
    sides = []
    for trainer, batches in zip(trainers, (plain, narrow)):  # compile and warm each variant on its shapes
        state = trainer.init_state(0)
        for bt in batches:
            state, m = trainer.train_step(state, bt)
        jax.block_until_ready(m["loss"])
        sides.append([trainer, state, batches])
    return sides, dict(length=ccfg.max_len, loss_tokens=fill, loss_pos_width=width)


def _time(trainer, state, batches):
    import jax

    t0 = time.perf_counter()
    for bt in batches:
        state, m = trainer.train_step(state, bt)
    jax.block_until_ready(m["loss"])
    return state, (time.perf_counter() - t0) / len(batches)


def main(argv):
    del argv
    if not _RUN.value or not os.path.isdir(os.path.join(_RUN.value, "datasets", "round1")):
        raise SystemExit("--run: give a pipeline run directory that holds datasets/round1 (README command 1 makes one)")
    from bench.sides import cpu_flags
    from configs.pipeline import get_config

    pcfg = get_config(_PRESET.value)
    setups = {m: _setup(m, pcfg, _RUN.value) for m in _METHODS.value}
    times = {m: {"every": [], "loss_pos": []} for m in setups}
    for r in range(_ROUNDS.value):
        for m, (sides, _) in setups.items():
            took = []
            for side in sides:
                side[1], t = _time(*side)
                took.append(t)
            a, b = took
            times[m]["every"].append(a)
            times[m]["loss_pos"].append(b)
            print(f"round {r + 1} {m}: every position {a:.3f} s, loss positions {b:.3f} s", flush=True)
    print(f"CPU flags: {cpu_flags()}; preset {_PRESET.value}; batch {pcfg.sft.train.batch_size}")
    rows = {}
    for m, t in times.items():
        a, b = float(np.median(t["every"])), float(np.median(t["loss_pos"]))
        info = setups[m][1]
        rows[m] = dict(every_s=a, loss_pos_s=b, speedup=a / b, **info)
        print(
            f"{m:9s} every position {a:.3f} s/step, loss positions {b:.3f} s/step: {a / b:.2f}x "
            f"(rows {info['length']} long, {info['loss_tokens']:.0f} loss tokens, "
            f"loss_pos {info['loss_pos_width']:.0f} wide)"
        )
    print("RESULT " + json.dumps(rows))


if __name__ == "__main__":
    app.run(main)
