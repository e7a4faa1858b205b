"""Training step time on one CPU device vs the cores split into several simulated devices, side by side.

  python -m bench.train_devices --run=runs/pipeline/runs/sft [--devices=1,2 --steps=30 --warmup=5]

XLA's CPU backend runs the small matmuls of a from-scratch model (the default's 3.8M-parameter ``copy`` model,
batch 8 x 448 tokens) mostly on one thread, so a 2-core machine idles a core. With ``distributed.
local_device_count`` = N the process gets N CPU devices and the trainer's mesh splits the batch across them (one
thread each). This benchmark replays a finished training run's own configuration (``<run>/config.json``: model,
data, optimiser) for ``--steps`` steps per device count, each in a fresh subprocess (the device count is fixed at
backend start), and prints the median step time after ``--warmup`` steps (compilation), the ratio against one
device, the 1-minute load average when each side ended (≈ 2 on an idle 2-core machine means it had the cores to
itself), and the CPU's vector flags (machines of this kind differ: AVX2 only, or AVX-512 with bf16 units).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from bench.sides import cpu_flags
import recipes

_RUN = flags.DEFINE_string("run", None, "a training run directory (holds config.json) whose setting is replayed")
_DEVICES = flags.DEFINE_list("devices", ["1", "2"], "CPU device counts to compare")
_STEPS = flags.DEFINE_integer("steps", 30, "steps per side")
_MESH = flags.DEFINE_enum(
    "mesh", "run", ["run", "data", "fsdp"], "the devices' mesh: the run's own, or all on the data / fsdp axis"
)
_WARMUP = flags.DEFINE_integer("warmup", 5, "first steps not timed (compilation)")
_SIDE = flags.DEFINE_integer("side", 0, "(internal) run one side with this many devices and print its step times")
_OUT = flags.DEFINE_string("out_dir", "", "(internal) the side's output directory")


def run_side(n: int) -> None:
    import ml_collections

    with open(os.path.join(_RUN.value, "config.json")) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    cfg.train.update(
        output_dir=_OUT.value,
        max_steps=_STEPS.value,
        progress=False,
        save_every=10**9,
        async_checkpoint=False,
        curve_points=0,
        eval_every=0,
    )
    cfg.distributed.local_device_count = n
    if _MESH.value != "run":
        cfg.mesh.shape = (-1, 1, 1) if _MESH.value == "data" else (1, -1, 1)
    from tgpo_jax.training.loop import train

    recipes.register_all()  # the run's model.init / model.freeze may name a recipe's
    train(cfg)
    rows = [json.loads(ln) for ln in open(os.path.join(_OUT.value, "metrics.jsonl"))]
    times = [r["time"] for r in rows if "train/loss" in r]
    print(json.dumps({"devices": n, "step_s": [b - a for a, b in zip(times, times[1:])]}))


def main(argv):
    del argv
    if _RUN.value is None or not os.path.isfile(os.path.join(_RUN.value, "config.json")):
        raise app.UsageError(
            f"--run={_RUN.value!r}: no config.json there (a training run directory, e.g. runs/pipeline/runs/sft)"
        )
    if _SIDE.value:
        return run_side(_SIDE.value)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    res = {}
    for d in _DEVICES.value:
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.train_devices",
                    f"--run={_RUN.value}",
                    f"--side={d}",
                    f"--steps={_STEPS.value}",
                    f"--mesh={_MESH.value}",
                    f"--out_dir={tmp}",
                ],
                capture_output=True,
                text=True,
                env=env,
            )
        if r.returncode != 0:
            sys.exit(f"bench.train_devices: the {d}-device side failed:\n{r.stderr[-3000:]}")
        side = json.loads(r.stdout.strip().splitlines()[-1])
        res[int(d)] = (statistics.median(side["step_s"][_WARMUP.value :]), os.getloadavg()[0])
    base = res[min(res)][0]
    print(
        f"CPU: {os.cpu_count()} cores, flags: {cpu_flags()}; run: {_RUN.value}; "
        f"mesh {_MESH.value}; {_STEPS.value} steps per side, median after {_WARMUP.value}"
    )
    print(f"{'devices':>8} {'s/step':>8} {'speed-up':>9} {'load1':>6}")
    for d, (s, load) in sorted(res.items()):
        print(f"{d:>8} {s:>8.3f} {base / s:>8.2f}x {load:>6.2f}")


if __name__ == "__main__":
    app.run(main)
