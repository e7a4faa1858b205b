"""SFT training-step speed on one GPU: our jitted step (JAX) vs a transformers full fine-tuning step (PyTorch).

  python -m bench.gpu_step [--batch=8 --length=1024 --completion=128 --steps=8 --warmup=3]   # Qwen2.5-0.5B shape
  python -m bench.gpu_step --tiny --steps=2 --warmup=1                                         # CPU check, a tiny model

Model: the Qwen2.5-0.5B architecture (24 layers, d 896, 14 heads / 2 kv heads, MLP 4864, vocabulary 151936, tied
embeddings, qkv bias; 494M parameters), randomly initialised on both sides: no weights are needed.

Ours: the step ``launch/train.py`` runs for ``configs/sft.py:qwen2.5-0.5b`` (``tgpo_jax.training.step.Trainer
.train_step``, SFT loss, no reference), set up as ``tgpo_jax.training.loop.fit`` sets it up: that config's dtypes
(bf16 compute over float32 master weights), AdamW, clip 1.0, chunked log-probs (``train.chunk``), the config's mesh
(one device here), and collated SFT examples (``tgpo_jax.data.collate.build_example``, packed layout: a prompt of
``length - completion`` random tokens and one ``completion``-token action, loss on the action only). ``--our_remat``
runs it with the config's ``model.remat=True`` (each layer recomputed in the backward pass) and/or without;
``--our_attention`` with our dense einsum attention and/or ``auto`` (cuDNN's fused kernel on a GPU, dense on a CPU).

PyTorch: ``Qwen2ForCausalLM`` built from the same config (transformers' default attention, SDPA), the same tokens,
labels -100 on the prompt (the same token-mean NLL over the action), ``torch.optim.AdamW`` (fused on CUDA), clip 1.0.
``--torch_modes``: ``bf16`` = bf16 weights and optimizer state (the fastest; not mixed precision) and ``amp`` =
float32 weights with bf16 autocast (the like-for-like match of ours). Gradient checkpointing off unless
``--torch_grad_ckpt``.

Each side runs in its own subprocess (``--side``), so its GPU memory peak is its own; each prints one JSON line.
Reported per side: the median of ``--steps`` step times after ``--warmup`` untimed steps (ours: the first compiles),
tokens/s = batch x length / median (every position is computed on both sides), model FLOPs utilisation against
the GPU's dense bf16 peak (H100/H200 SXM: 989 TFLOP/s; ``--peak_tflops`` for another), and the peak GPU memory
(JAX: the allocator's peak_bytes_in_use; PyTorch: max_memory_allocated; on a CPU: process peak RSS).
Model FLOPs/step = 6 N T + 12 l h d_h L T (PaLM's count: N matmul parameters, the tied embedding once as the
output projection; the attention term without the causal half; recomputation not counted); ``--method=tgpo`` adds the
live reference's forward pass (8 N T + 16 l h d_h L T) and runs ours only.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import time

from absl import app, flags

from bench.shapes import QWEN25_05B, TINY
from bench.sides import run_side, versions

_SIDE = flags.DEFINE_enum("side", "all", ["all", "ours", "torch"], "what to run (all = the parent)")
_BATCH = flags.DEFINE_integer("batch", 8, "sequences per step")
_LENGTH = flags.DEFINE_integer("length", 1024, "tokens per sequence (prompt + action)")
_COMPLETION = flags.DEFINE_integer("completion", 128, "action tokens per sequence (the loss-carrying part)")
_STEPS = flags.DEFINE_integer("steps", 8, "timed steps per side (the median is reported)")
_WARMUP = flags.DEFINE_integer("warmup", 3, "untimed steps first (ours: the first compiles)")
_METHOD = flags.DEFINE_enum(
    "method",
    "sft",
    ["sft", "tgpo"],
    "ours: sft (compared with PyTorch) or tgpo (3 branches packed after one prompt, a live "
    "reference pass every step; ours only: dense vs fused attention on the tree mask)",
)
_TINY = flags.DEFINE_boolean("tiny", False, "a tiny model (2 layers, d 64, vocabulary 512), batch 2 x 128: a CPU check")
_OUR_REMAT = flags.DEFINE_list(
    "our_remat", ["true", "false"], "ours: model.remat settings to run (the config's is true)"
)
_OUR_ATTN = flags.DEFINE_list(
    "our_attention", ["dense", "auto"], "ours: model.attention settings to run (dense einsum | cudnn | xla | auto)"
)
_TORCH_MODES = flags.DEFINE_list(
    "torch_modes", ["bf16", "amp"], "PyTorch runs: bf16 (bf16 weights) | amp (fp32 + autocast)"
)
_TORCH_GC = flags.DEFINE_boolean("torch_grad_ckpt", False, "PyTorch: gradient checkpointing")
_PEAK = flags.DEFINE_float("peak_tflops", 0.0, "dense bf16 peak of the device in TFLOP/s (0 = from its name)")
_SEED = flags.DEFINE_integer("seed", 0, "data and initialisation seed")
_JSON_OUT = flags.DEFINE_string("json_out", "", "also write the raw results here (JSON)")
_TIMEOUT = flags.DEFINE_integer("side_timeout", 300, "seconds each side may take")
# internal: the parent passes these to its children
_REMAT = flags.DEFINE_boolean("remat", True, "(--side=ours) model.remat")
_ATTN = flags.DEFINE_string("attention", "dense", "(--side=ours) model.attention")
_TORCH_MODE = flags.DEFINE_enum("torch_mode", "bf16", ["bf16", "amp"], "(--side=torch) precision")

MARK = "GPU_STEP_JSON "
PEAKS = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "H20": 148e12, "A100": 312e12, "L40S": 362e12}


def hf_config() -> dict:
    return dict(TINY if _TINY.value else QWEN25_05B)


def shape() -> tuple[int, int, int]:
    if _TINY.value:
        return 2, 128, 32
    return _BATCH.value, _LENGTH.value, _COMPLETION.value


def sft_batch(method: str = "sft"):
    """Collated examples [B, 1, L] (packed layout) with random token ids: SFT, one action per node; TGPO, three
    branches (one successful, two not: two weighted pairs) after one prompt."""
    import numpy as np

    from tgpo_jax.data.collate import CollateConfig, build_example, node_selection, stack
    from tgpo_jax.data.synthetic import synthetic_nodes

    b, length, comp = shape()
    vocab = hf_config()["vocab_size"]
    n_act = 1 if method == "sft" else 3
    cfg = CollateConfig(
        method=method,
        layout="packed",
        max_len=length,
        max_prompt_len=length - n_act * comp,
        max_completion_len=comp,
        max_branches=3,
    )
    rng = np.random.default_rng(_SEED.value)
    out = []
    for i, node in enumerate(synthetic_nodes(b, seed=_SEED.value)):
        used = node_selection(node, cfg)[0]
        assert len(used) == n_act, used  # the prompt and the actions fill the row exactly
        prompt = rng.integers(3, vocab, length - n_act * comp).tolist()
        comps = [rng.integers(3, vocab, comp).tolist() for _ in node.branches]
        out.append(build_example(node, None, cfg, index=i, tokenized=(prompt, comps, False)))
    batch = stack(out)
    assert batch["segments"].min() >= 0 and int(batch["slot_valid"].sum()) == b * n_act, "a row is not full"
    return batch, cfg


def model_flops(n_matmul: int) -> float:
    c = hf_config()
    b, length, _ = shape()
    t = b * length
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    per_token = 6 if _METHOD.value == "sft" else 8  # TGPO: + the live reference's forward pass (2 per token)
    return (
        per_token * n_matmul * t
        + 2 * per_token * c["num_hidden_layers"] * c["num_attention_heads"] * head_dim * length * t
    )


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def emit(result: dict) -> None:
    print(MARK + json.dumps(result), flush=True)


def timed(step, n_warm: int, n_timed: int):
    times, losses = [], []
    for _ in range(n_warm + n_timed):
        t0 = time.perf_counter()
        losses.append(step())  # returns the loss as a Python float: waits for the step
        times.append(time.perf_counter() - t0)
    return times, losses


# ---------------------------------------------------------------------------------------------- ours
def run_ours() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from configs import sft, tgpo
    from tgpo_jax.training.loop import loss_config, optim_config
    from tgpo_jax import sharding as shd
    from tgpo_jax.models.config import ModelConfig
    from tgpo_jax.models.loading import shard_model
    from tgpo_jax.models.transformer import attention_impl, init_model, param_count
    from tgpo_jax.training.step import Trainer, to_global_batch

    # the launch/train.py config; its model path is replaced by random init
    cfg = (sft if _METHOD.value == "sft" else tgpo).get_config("qwen2.5-0.5b")
    cfg.model.remat = _REMAT.value
    cfg.model.attention = _ATTN.value
    m, o = cfg.model, cfg.optim
    mc = ModelConfig.from_hf_dict(
        hf_config(), dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat, attention=m.attention
    )
    mesh = shd.make_mesh(tuple(cfg.mesh.shape))
    model = shard_model(init_model(mc, seed=_SEED.value), mesh)
    n_params = param_count(model)
    n_matmul = n_params - (0 if mc.tie_word_embeddings else mc.vocab_size * mc.hidden_size)
    local, _ = sft_batch(_METHOD.value)
    batch = to_global_batch(local, mesh, o.grad_accum)
    total = _WARMUP.value + _STEPS.value
    # as tgpo_jax.training.loop.fit maps the config
    loss_cfg = loss_config(cfg)
    optim = optim_config(cfg, total)
    trainer = Trainer(model, loss_cfg, optim, mesh, chunk=cfg.train.chunk)
    del model
    state = trainer.init_state(cfg.train.seed)
    rep = NamedSharding(mesh, P())  # as bench/dpo_step.py: every state leaf on the mesh, so step 2 does not recompile
    state = jax.tree.map(lambda x: x if isinstance(x.sharding, NamedSharding) else jax.device_put(x, rep), state)
    holder = {"state": state}
    del state

    def step():
        holder["state"], metrics = trainer.train_step(holder["state"], batch)
        jax.block_until_ready(holder["state"])
        return float(metrics["loss"])

    times, losses = timed(step, _WARMUP.value, _STEPS.value)
    assert int(holder["state"]["step"]) == total, "a step was not finite"
    dev = jax.devices()[0]
    stats = dev.memory_stats() if dev.platform == "gpu" else None
    emit(
        {
            "side": "ours",
            "method": cfg.method,
            "reference": cfg.loss.reference,
            "remat": m.remat,
            "attention": m.attention,
            "attention_impl": attention_impl(m.attention, jnp.dtype(mc.dtype), mc.head_dim),
            "dtype": m.dtype,
            "param_dtype": m.param_dtype,
            "chunk": cfg.train.chunk,
            "optimizer": o.optimizer,
            "n_params": n_params,
            "n_matmul": n_matmul,
            "device": getattr(dev, "device_kind", dev.platform),
            "platform": dev.platform,
            "versions": {
                "jax": jax.__version__,
                **versions(("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "optax")),
            },
            "peak_bytes": int(stats["peak_bytes_in_use"]) if stats else peak_rss(),
            "peak_kind": "peak_bytes_in_use" if stats else "process peak RSS",
            "first_step_s": times[0],
            "step_s": times[_WARMUP.value :],
            "median_s": statistics.median(times[_WARMUP.value :]),
            "losses": losses,
            "loss_tokens": int(jnp.sum(local["slot"] >= 0)),
        }
    )


# ---------------------------------------------------------------------------------------------- PyTorch
def run_torch() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    import transformers

    mode = _TORCH_MODE.value
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hf = hf_config()
    theta = hf.pop("rope_theta")
    hf.pop("model_type")
    config = transformers.Qwen2Config(**hf, rope_parameters={"rope_type": "default", "rope_theta": theta})
    torch.manual_seed(_SEED.value)
    wdt = torch.bfloat16 if mode == "bf16" else torch.float32
    with torch.device(dev):  # initialised where it runs (a CPU init of 494M parameters takes a while)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=wdt)
    model.train()
    if _TORCH_GC.value:
        model.gradient_checkpointing_enable()
    n_params = sum(p.numel() for p in model.parameters())  # the tied embedding once
    n_matmul = n_params - (0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=dev == "cuda"
    )
    local, _ = sft_batch()
    tokens = torch.tensor(local["tokens"][:, 0, :], dtype=torch.long, device=dev)
    labels = torch.where(torch.tensor(local["slot"][:, 0, :] >= 0, device=dev), tokens, -100)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def step():
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=mode == "amp"):
            loss = model(input_ids=tokens, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        sync()
        return value

    times, losses = timed(step, _WARMUP.value, _STEPS.value)
    emit(
        {
            "side": "torch",
            "mode": mode,
            "grad_ckpt": _TORCH_GC.value,
            "attn": model.config._attn_implementation,
            "n_params": n_params,
            "n_matmul": n_matmul,
            "device": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu",
            "platform": dev,
            "versions": {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "transformers": transformers.__version__,
            },
            "peak_bytes": int(torch.cuda.max_memory_allocated()) if dev == "cuda" else peak_rss(),
            "peak_kind": "max_memory_allocated" if dev == "cuda" else "process peak RSS",
            "reserved_bytes": int(torch.cuda.max_memory_reserved()) if dev == "cuda" else None,
            "first_step_s": times[0],
            "step_s": times[_WARMUP.value :],
            "median_s": statistics.median(times[_WARMUP.value :]),
            "losses": losses,
            "loss_tokens": int(np.sum(local["slot"] >= 0)),
        }
    )


# ---------------------------------------------------------------------------------------------- parent
def child(args: list[str]) -> dict:
    return run_side("bench.gpu_step", MARK, args, _TIMEOUT.value)


def name(r: dict) -> str:
    if "error" in r:
        return " ".join(r["args"])
    if r["side"] == "ours":
        short = {"bfloat16": "bf16", "float32": "fp32"}
        return (
            f"ours {r.get('method', 'sft')} JAX {short[r['dtype']]} "
            f"compute/{short[r['param_dtype']]} weights remat "
            f"{'on' if r['remat'] else 'off'} attn {r.get('attention_impl', 'dense')}"
        )
    what = {"bf16": "bf16 weights", "amp": "fp32 weights + bf16 autocast"}[r["mode"]]
    return f"PyTorch {what}{' +ckpt' if r['grad_ckpt'] else ''} ({r['attn']})"


def device_peak(device: str) -> float:
    if _PEAK.value:
        return _PEAK.value * 1e12
    return next((v for k, v in PEAKS.items() if k in device), 0.0)


def main(argv):
    del argv
    if _SIDE.value == "ours":
        return run_ours()
    if _SIDE.value == "torch":
        return run_torch()
    common = [
        f"--steps={_STEPS.value}",
        f"--warmup={_WARMUP.value}",
        f"--seed={_SEED.value}",
        f"--batch={_BATCH.value}",
        f"--length={_LENGTH.value}",
        f"--completion={_COMPLETION.value}",
        f"--{'' if _TINY.value else 'no'}tiny",
        f"--method={_METHOD.value}",
    ]
    runs = [
        child(["--side=ours", f"--remat={r.lower() in ('1', 'true', 'on')}", f"--attention={a}", *common])
        for r in _OUR_REMAT.value
        for a in _OUR_ATTN.value
    ]
    runs += [
        child(["--side=torch", f"--torch_mode={mode}", f"--{'' if _TORCH_GC.value else 'no'}torch_grad_ckpt", *common])
        for mode in (_TORCH_MODES.value if _METHOD.value == "sft" else [])
    ]
    report(runs)


def report(runs: list[dict]) -> None:
    b, length, comp = shape()
    ok = [r for r in runs if "error" not in r]
    device = next((r["device"] for r in ok if r["platform"] in ("gpu", "cuda")), ok[0]["device"] if ok else "?")
    peak = device_peak(device)
    n_matmul = ok[0]["n_matmul"] if ok else 0
    flops = model_flops(n_matmul)
    c = hf_config()
    print()
    print(
        f"device: {device}; dense bf16 peak used for MFU: "
        + (f"{peak / 1e12:.0f} TFLOP/s" if peak else "unknown (give --peak_tflops)")
    )
    for r in ok:
        print(f"  {name(r)}: {r['versions']}")
    print(
        f"model: Qwen2.5-0.5B shape{' (TINY)' if _TINY.value else ''}, {c['num_hidden_layers']} layers, "
        f"d {c['hidden_size']}, vocab {c['vocab_size']}, {n_matmul / 1e6:.1f}M matmul params; random init"
    )
    print(
        f"batch {b} x {length} tokens ({length - comp} prompt + {comp} action, loss on the action), "
        f"T = {b * length} tokens/step; median of {_STEPS.value} steps after {_WARMUP.value} warm-up"
    )
    print(
        f"method {_METHOD.value}: model FLOPs/step = "
        + ("6NT + 12*l*h*dh*L*T" if _METHOD.value == "sft" else "8NT + 16*l*h*dh*L*T (with the reference forward)")
        + f" = {flops / 1e12:.2f} TFLOP"
    )
    print()
    hdr = f"{'run':<60}{'1st s':>7}{'median ms':>10}{'tokens/s':>10}{'TFLOP/s':>9}{'MFU':>7}{'peak GiB':>9}  losses"
    print(hdr)
    print("-" * (len(hdr) + 20))
    for r in runs:
        if "error" in r:
            print(f"{name(r):<60} FAILED ({r['error']})")
            continue
        tps = b * length / r["median_s"]
        fl = flops / r["median_s"]
        mfu = f"{fl / peak:7.1%}" if peak else f"{'n/a':>7}"
        print(
            f"{name(r):<60}{r['first_step_s']:7.1f}{r['median_s'] * 1e3:10.1f}{tps:10.0f}{fl / 1e12:9.1f}{mfu}"
            f"{r['peak_bytes'] / 2**30:9.2f}  {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
        )
    ours = [r for r in ok if r["side"] == "ours"]
    theirs = [r for r in ok if r["side"] == "torch"]
    print()
    for o in ours:
        for t in theirs:
            print(
                f"{name(o)} vs {name(t)}: tokens/s ratio {t['median_s'] / o['median_s']:.2f}x, "
                f"peak memory ratio {o['peak_bytes'] / t['peak_bytes']:.2f}x"
            )
    if ours and theirs:
        bo = min(ours, key=lambda r: r["median_s"])
        bt = min(theirs, key=lambda r: r["median_s"])
        print(f"fastest ours ({name(bo)}) / fastest PyTorch ({name(bt)}): {bt['median_s'] / bo['median_s']:.2f}x")
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w") as f:
            json.dump(
                {
                    "batch": b,
                    "length": length,
                    "completion": comp,
                    "tiny": _TINY.value,
                    "device": device,
                    "peak_flops": peak,
                    "model_flops_per_step": flops,
                    "runs": runs,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    app.run(main)
