"""Forward throughput of SmolLM2-135M, batch 4 x 512, bf16: ours (jitted JAX) vs transformers (PyTorch).

  python -m bench.forward_throughput [--batch=4 --length=512 --reps=5]

Both run the bundled GGUF's weights (PyTorch through our dense export); both compute the full [B, T, V] logits.
Prints tokens/s each and the ratio, measured side by side in one run (alternating, best of ``reps``).
"""

from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags

from bench.sides import cpu_flags

_BATCH = flags.DEFINE_integer("batch", 4, "batch size")
_LENGTH = flags.DEFINE_integer("length", 512, "sequence length")
_REPS = flags.DEFINE_integer("reps", 5, "timed repetitions per side (best is reported)")
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "compute dtype for both")


def main(argv):
    del argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import jax
    import numpy as np
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM

    from tgpo_jax.models.hf_export import export_hf
    from tgpo_jax.models.loading import load_model

    b, t = _BATCH.value, _LENGTH.value
    tokens = np.random.default_rng(0).integers(0, 49152, size=(b, t)).astype(np.int32)

    ours = load_model("bundled", dtype=_DTYPE.value, param_dtype=_DTYPE.value)
    graphdef, state = nnx.split(ours)

    @jax.jit
    def forward(state, tokens):
        return nnx.merge(graphdef, state)(tokens)[0]

    # transformers keeps GGUF weights packed (quantized kernels); give PyTorch an ordinary dense
    # checkpoint of the same weights instead: our export, loaded by transformers.
    tdt = torch.bfloat16 if _DTYPE.value == "bfloat16" else torch.float32
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, os.path.join(tmp, "smollm2"), dtype=_DTYPE.value)
        ref = AutoModelForCausalLM.from_pretrained(os.path.join(tmp, "smollm2"), dtype=tdt).eval()
    ttokens = torch.tensor(tokens, dtype=torch.long)

    def run_ours():
        forward(state, tokens).block_until_ready()

    def run_torch():
        with torch.inference_mode():
            ref(ttokens).logits

    run_ours(), run_torch()  # compile / warm up
    best = {"ours": float("inf"), "torch": float("inf")}
    for _ in range(_REPS.value):
        for name, fn in (("ours", run_ours), ("torch", run_torch)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    tps = {k: b * t / v for k, v in best.items()}
    print(
        f"SmolLM2-135M forward, batch {b} x {t}, {_DTYPE.value}, torch threads {torch.get_num_threads()}, "
        f"jax devices {jax.devices()[0].platform}; CPU flags: {cpu_flags()}"
    )
    print(f"  ours (JAX, jit):        {tps['ours']:9.1f} tokens/s  ({best['ours'] * 1e3:.0f} ms)")
    print(f"  transformers (PyTorch): {tps['torch']:9.1f} tokens/s  ({best['torch'] * 1e3:.0f} ms)")
    print(f"  ratio ours / PyTorch:   {tps['ours'] / tps['torch']:.2f}x")


if __name__ == "__main__":
    app.run(main)
