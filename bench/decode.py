"""Batched decoding speed: our ``Sampler.generate_ids`` (JAX) vs transformers' ``generate`` (PyTorch), same weights.

  python -m bench.decode                                   # CPU: the bundled SmolLM2-135M-Instruct, float32
  python -m bench.decode --model=qwen2.5-0.5b --dtype=bfloat16 --our_attention=dense,auto    # a GPU host
  python -m bench.decode --model=tiny --runs=2             # a quick check

Both sides load one Hugging Face checkpoint written first by our exporter (``tgpo_jax.models.hf_export``): the
bundled SmolLM2's dequantised weights, or a random initialisation of the Qwen2.5-0.5B shape (no download needed).
Each side generates ``--new_tokens`` tokens greedily for ``--batch`` prompts of ``--prompt_len`` random token ids
(the same prompts), with no end-of-sequence token (every row runs to the end), so both do the same work: one prefill
of B x P tokens, then N single-token steps over a KV cache. Reported: the median of ``--runs`` whole calls after one
untimed call (ours: it compiles), new tokens/s = B x N / median, the prefill's share (ours: the jitted prefill alone;
PyTorch: ``generate`` with one new token), and how many leading tokens the two sides' greedy outputs share (the same
weights and prompts: in float32 they should agree until a near-tie of the top two logits).

Ours: the sampler the collection and evaluation run (prefill in one pass with the model's attention implementation,
``--our_attention``: ``auto`` = cuDNN's fused kernel on a GPU in bf16, else the blocked einsum; or ``dense``; then
jitted chunks of 16 decode steps, a ``lax.scan``, with the host checking stop conditions between chunks).
PyTorch (``--torch_modes``):
``dynamic`` = transformers' default cache, ``static`` = its static cache (on a CUDA device transformers compiles the
decode step with ``torch.compile`` for it; on a CPU it runs uncompiled). Each side runs in its own subprocess.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time

from absl import app, flags

from bench.sides import cpu_flags, run_side, versions

_SIDE = flags.DEFINE_enum("side", "all", ["all", "ours", "torch"], "what to run (all = the parent)")
_MODEL = flags.DEFINE_enum(
    "model",
    "smollm2",
    ["smollm2", "qwen2.5-0.5b", "tiny"],
    "smollm2: the bundled SmolLM2-135M-Instruct (real weights); qwen2.5-0.5b: that shape, "
    "random init; tiny: 2 layers, d 64, random init",
)
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "weights and compute on both sides")
_BATCH = flags.DEFINE_integer("batch", 8, "prompts per call (rows)")
_PROMPT = flags.DEFINE_integer("prompt_len", 448, "tokens per prompt (a multiple of 64: our bucket, no padding)")
_NEW = flags.DEFINE_integer("new_tokens", 64, "tokens generated per row (the collection's max_tokens is 64)")
_RUNS = flags.DEFINE_integer("runs", 3, "timed calls per side (the median is reported), after one untimed call")
_OUR_ATTN = flags.DEFINE_list(
    "our_attention", ["auto"], "ours: model.attention settings (auto | blocked | dense | cudnn)"
)
_TORCH_MODES = flags.DEFINE_list("torch_modes", ["dynamic", "static"], "PyTorch: cache implementations to run")
_SEED = flags.DEFINE_integer("seed", 0, "prompt and initialisation seed")
_JSON_OUT = flags.DEFINE_string("json_out", "", "also write the raw results here (JSON)")
_TIMEOUT = flags.DEFINE_integer("side_timeout", 600, "seconds each side may take")
# internal: the parent passes these to its children
_CKPT = flags.DEFINE_string("ckpt", "", "(children) the exported checkpoint both sides load")
_ATTN = flags.DEFINE_string("attention", "auto", "(--side=ours) model.attention")
_TORCH_MODE = flags.DEFINE_string("torch_mode", "dynamic", "(--side=torch) cache implementation")

MARK = "DECODE_JSON "


def prompts() -> list[list[int]]:
    import numpy as np

    with open(os.path.join(_CKPT.value, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    rng = np.random.default_rng(_SEED.value)
    return rng.integers(3, vocab, (_BATCH.value, _PROMPT.value)).tolist()


def emit(result: dict) -> None:
    print(MARK + json.dumps(result), flush=True)


def timed(call, runs: int) -> tuple[list[float], object]:
    out, times = None, []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    return times, out


# ---------------------------------------------------------------------------------------------- the checkpoint
def write_checkpoint(out_dir: str) -> str:
    """The one checkpoint both sides load, written by our exporter."""
    from tgpo_jax.models.config import ModelConfig, tiny_config
    from tgpo_jax.models.hf_export import export_hf
    from tgpo_jax.models.loading import load_model
    from tgpo_jax.models.transformer import init_model

    from bench.shapes import QWEN25_05B

    if _MODEL.value == "smollm2":
        model = load_model("bundled")
    elif _MODEL.value == "qwen2.5-0.5b":
        model = init_model(ModelConfig.from_hf_dict(QWEN25_05B), seed=_SEED.value)
    else:
        model = init_model(tiny_config("qwen2", vocab_size=512), seed=_SEED.value)
    return export_hf(model, out_dir, dtype=_DTYPE.value)


# ---------------------------------------------------------------------------------------------- ours
def run_ours() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tgpo_jax.models.loading import load_model
    from tgpo_jax.models.sampler import Sampler, SamplingParams
    from tgpo_jax.models.transformer import attention_impl

    # no end-of-sequence token: every row decodes all its tokens, as on the PyTorch side
    model = load_model(
        _CKPT.value, dtype=_DTYPE.value, param_dtype=_DTYPE.value, attention=_ATTN.value, eos_token_id=None
    )
    sampler = Sampler(model)
    ps = prompts()
    params = SamplingParams(temperature=0.0, max_tokens=_NEW.value)
    times, out = timed(lambda: sampler.generate_ids(ps, params), _RUNS.value)
    tokens = np.asarray(ps, np.int32)
    valid = np.ones_like(tokens, bool)
    cache_len = tokens.shape[1] + -(-_NEW.value // sampler.chunk) * sampler.chunk

    def prefill():
        return jax.block_until_ready(
            sampler._prefill(sampler.weights, jnp.asarray(tokens), jnp.asarray(valid), cache_len)
        )

    pre, _ = timed(prefill, _RUNS.value)
    dev = jax.devices()[0]
    cfg = model.cfg
    emit(
        {
            "side": "ours",
            "attention": _ATTN.value,
            "attention_impl": attention_impl(_ATTN.value, jnp.dtype(cfg.dtype), cfg.head_dim),
            "device": getattr(dev, "device_kind", dev.platform),
            "platform": dev.platform,
            "versions": {
                "jax": jax.__version__,
                **versions(("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax")),
            },
            "first_s": times[0],
            "call_s": times[1:],
            "median_s": statistics.median(times[1:]),
            "prefill_s": statistics.median(pre[1:]),
            "tokens": [t for t, _, _ in out],
        }
    )


# ---------------------------------------------------------------------------------------------- PyTorch
def run_torch() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[_DTYPE.value]
    model = transformers.AutoModelForCausalLM.from_pretrained(_CKPT.value, dtype=dtype).to(dev).eval()
    ids = torch.tensor(prompts(), dtype=torch.long, device=dev)
    attn = torch.ones_like(ids)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    mode = _TORCH_MODE.value

    def generate(n: int):
        # min_new_tokens = max_new_tokens and no EOS id: every row runs to the end, as on our side
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                cache_implementation=None if mode == "dynamic" else mode,
            )
        sync()
        return out

    times, out = timed(lambda: generate(_NEW.value), _RUNS.value)
    pre, _ = timed(lambda: generate(1), _RUNS.value)
    emit(
        {
            "side": "torch",
            "mode": mode,
            "attn": model.config._attn_implementation,
            "device": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu",
            "platform": dev,
            "threads": torch.get_num_threads(),
            "versions": {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "transformers": transformers.__version__,
            },
            "first_s": times[0],
            "call_s": times[1:],
            "median_s": statistics.median(times[1:]),
            "prefill_s": statistics.median(pre[1:]),
            "tokens": out[:, ids.shape[1] :].tolist(),
        }
    )


# ---------------------------------------------------------------------------------------------- parent
def child(args: list[str]) -> dict:
    return run_side("bench.decode", MARK, args, _TIMEOUT.value, shown=[a for a in args if not a.startswith("--ckpt")])


def name(r: dict) -> str:
    if "error" in r:
        return " ".join(a for a in r["args"] if not a.startswith("--ckpt"))
    if r["side"] == "ours":
        return f"ours JAX sampler, prefill attention {r['attention']} ({r['attention_impl']})"
    return f"transformers generate, {r['mode']} cache ({r['attn']})"


def shared_prefix(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean count of leading tokens two sides' rows share."""
    n = []
    for x, y in zip(a, b):
        k = 0
        while k < min(len(x), len(y)) and x[k] == y[k]:
            k += 1
        n.append(k)
    return sum(n) / len(n)


def main(argv):
    del argv
    if _SIDE.value == "ours":
        return run_ours()
    if _SIDE.value == "torch":
        return run_torch()
    if _PROMPT.value % 64:
        raise app.UsageError(
            f"--prompt_len={_PROMPT.value}: use a multiple of 64 (our sampler's bucket), so that neither side pads"
        )
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        print(f"writing the checkpoint ({_MODEL.value}, {_DTYPE.value}) ...", file=sys.stderr, flush=True)
        ckpt = write_checkpoint(os.path.join(tmp, "model"))
        common = [
            f"--ckpt={ckpt}",
            f"--model={_MODEL.value}",
            f"--dtype={_DTYPE.value}",
            f"--batch={_BATCH.value}",
            f"--prompt_len={_PROMPT.value}",
            f"--new_tokens={_NEW.value}",
            f"--runs={_RUNS.value}",
            f"--seed={_SEED.value}",
        ]
        runs = [child(["--side=ours", f"--attention={a}", *common]) for a in _OUR_ATTN.value]
        runs += [child(["--side=torch", f"--torch_mode={m}", *common]) for m in _TORCH_MODES.value]
    report(runs)


def report(runs: list[dict]) -> None:
    b, p, n = _BATCH.value, _PROMPT.value, _NEW.value
    ok = [r for r in runs if "error" not in r]
    device = next((r["device"] for r in ok if r["platform"] in ("gpu", "cuda")), ok[0]["device"] if ok else "?")
    print()
    print(f"device: {device}; CPU flags: {cpu_flags()}; {os.cpu_count()} CPUs")
    for r in ok:
        print(f"  {name(r)}: {r['versions']}" + (f", {r['threads']} threads" if "threads" in r else ""))
    print(
        f"model: {_MODEL.value} ({'bundled weights' if _MODEL.value == 'smollm2' else 'random init'}), "
        f"{_DTYPE.value}; batch {b} x prompt {p} tokens, {n} new tokens per row, greedy, no EOS; "
        f"median of {_RUNS.value} calls after one untimed call"
    )
    print()
    hdr = f"{'run':<58}{'1st s':>7}{'median s':>9}{'prefill s':>10}{'new tok/s':>10}{'decode tok/s':>13}"
    print(hdr)
    print("-" * len(hdr))
    for r in runs:
        if "error" in r:
            print(f"{name(r):<58} FAILED ({r['error']})")
            continue
        dec = b * (n - 1) / max(r["median_s"] - r["prefill_s"], 1e-9)  # the steps after the prefill's first token
        print(
            f"{name(r):<58}{r['first_s']:7.1f}{r['median_s']:9.3f}{r['prefill_s']:10.3f}{b * n / r['median_s']:10.0f}"
            f"{dec:13.0f}"
        )
    ours = [r for r in ok if r["side"] == "ours"]
    theirs = [r for r in ok if r["side"] == "torch"]
    print()
    for o in ours:
        for t in theirs:
            print(
                f"{name(o)} vs {name(t)}: new tokens/s {t['median_s'] / o['median_s']:.2f}x; greedy outputs share "
                f"{shared_prefix(o['tokens'], t['tokens']):.1f} of {n} leading tokens per row"
            )
    if ours and theirs:
        bo = min(ours, key=lambda r: r["median_s"])
        bt = min(theirs, key=lambda r: r["median_s"])
        print(f"fastest ours ({name(bo)}) / fastest PyTorch ({name(bt)}): {bt['median_s'] / bo['median_s']:.2f}x")
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w") as f:
            json.dump(
                {
                    "model": _MODEL.value,
                    "dtype": _DTYPE.value,
                    "batch": b,
                    "prompt_len": p,
                    "new_tokens": n,
                    "device": device,
                    "cpu_flags": cpu_flags(),
                    "runs": runs,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    app.run(main)
