"""One DPO train step on SmolLM2-135M, web-agent-shaped pairs: ours (JAX) vs TRL's DPOTrainer (PyTorch).

  python -m bench.dpo_step [--batch=4 --prompt_tokens=512 --steps=2 --warmup=1 --trl_precision=fp32]

Pairs: a long shared prompt shaped like a page's accessibility tree (lengths spread over about 0.8-1.2 x
``--prompt_tokens``) and two short actions (a one-line thought + the command, ~27-28 tokens with EOS).
Both sides run the bundled GGUF's weights (PyTorch through our dense HF export), the same pairs and
batch, full fine-tuning, AdamW lr 1e-5, grad clip 1.0, beta 0.1 sigmoid DPO, and a *live* reference
forward every step (ours: ``reference="live"``; TRL: ``precompute_ref_log_probs=False``). Ours computes
in bf16 (``--our_dtypes`` adds float32) over float32 parameters;
``--layouts`` picks packed (the prompt once + both branches) and plain
(prompt+chosen and prompt+rejected rows, like TRL).

TRL precision (``--trl_precision``, all three by default): ``amp`` (float32 weights, bf16 autocast: our numerics),
``bf16`` (bf16 weights, ``bf16=True``: fastest, but at lr 1e-5 most updates round away) and ``fp32`` (``bf16=False``).
Which is fastest depends on the CPU: with AVX512-BF16 (the table prints the flags) PyTorch's bf16 runs natively
and bf16 wins; on an AVX2 CPU without bf16 units PyTorch's bf16 crawls (some shapes ~1 GFLOP/s, a step tens of
minutes) and fp32 wins: there ``--trl_precision=fp32`` keeps the run short.
``--rounds=3`` runs every setting three times, alternating, and reports the median.

Each measurement runs in its own subprocess of this script (``--side=peak|ours|trl``), so memory peaks
are separable; each prints one JSON line, and the parent prints a table.
One file (≈ 460 lines) on purpose: both sides, the shared pairs and the table must be read together to check
that the comparison is like for like.

- tokens/s: logical tokens of the pairs per second of step wall time (median of the timed steps), the
  same count on both sides: sum over pairs of len(prompt + chosen) + len(prompt + rejected), which is
  what TRL processes (checked: both sides count the same). Our packed layout computes each prompt once,
  so it does less work for the same logical tokens.
- memory: process RSS. "peak" is the process's high-water mark over its whole life; "base" is the RSS
  after imports + model load; "train pk" is the high-water mark from there on (trainer set-up,
  reference copy, optimizer state, steps); "delta" = train pk - base.
- FLOP/s: model FLOPs = 6 * N * T (policy forward + backward) + 2 * N * T (live reference forward),
  N = parameter count (tied embedding counted once), T = logical tokens; attention score FLOPs are not
  counted. Reported against this CPU's bf16 matmul peak measured in the same run (a jitted JAX chain of
  bf16 n x n x n matmuls accumulated in float32, the model's own dot: ``tgpo_jax.models.matmul.proj``).
- load1: the 1-minute load average when the run ended; ~2 means this benchmark had the 2 cores alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from absl import app, flags

from bench.sides import cpu_flags

_SIDE = flags.DEFINE_enum("side", "all", ["all", "peak", "ours", "trl"], "what to run (all = parent)")
_BATCH = flags.DEFINE_integer("batch", 4, "preference pairs per step (both sides)")
_PROMPT = flags.DEFINE_integer("prompt_tokens", 512, "mean prompt length in tokens (spread 0.8-1.2x)")
_STEPS = flags.DEFINE_integer("steps", 2, "timed steps per side (median and best reported)")
_WARMUP = flags.DEFINE_integer("warmup", 1, "untimed steps first (ours: includes compilation)")
_SEED = flags.DEFINE_integer("seed", 0, "data seed")
_LAYOUTS = flags.DEFINE_list("layouts", ["packed", "plain"], "our layouts to run")
_OUR_DTYPES = flags.DEFINE_list(
    "our_dtypes", ["bfloat16"], "our compute dtypes to run (float32 parameters either way); bfloat16,float32 for both"
)
_ACCUM = flags.DEFINE_integer("grad_accum", 1, "our micro-batches per step (packed layout)")
_PLAIN_ACCUM = flags.DEFINE_integer(
    "plain_grad_accum",
    2,
    "our micro-batches per step for the plain layout: at the defaults it needs ~22 GiB in one micro-batch "
    "(attention keeps [T, T] float32 scores per layer for the backward pass), too much for a 24 GiB machine",
)
_ROUNDS = flags.DEFINE_integer("rounds", 1, "rounds of every setting, alternating; a setting's figure is the median")
_TRL_PREC = flags.DEFINE_list(
    "trl_precision",
    ["amp", "bf16", "fp32"],
    "TRL runs: bf16 (bf16 weights, bf16=True), amp (fp32 weights, bf16=True autocast), fp32 (bf16=False)",
)
_GC = flags.DEFINE_boolean(
    "grad_checkpointing", True, "rematerialise layers in the backward pass, both sides (TRL's own default is True)"
)
_THREADS = flags.DEFINE_integer("threads", 2, "torch intra-op threads (JAX's CPU client uses all cores)")
_MATMUL_N = flags.DEFINE_integer("matmul_n", 2048, "peak matmul size n (n x n x n)")
_MATMUL_REPS = flags.DEFINE_integer("matmul_reps", 5, "peak matmul repetitions (best is reported)")
# internal: passed from the parent to its children
_LAYOUT = flags.DEFINE_enum("layout", "packed", ["packed", "plain"], "(--side=ours) layout")
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "(--side=ours) compute dtype")
_PRECISION = flags.DEFINE_enum("precision", "bf16", ["bf16", "amp", "fp32"], "(--side=trl) precision")
_OBS = flags.DEFINE_list("observation_words", [], "(children) observation words per pair")
_JSON_OUT = flags.DEFINE_string("json_out", "", "also write the raw results here (JSON)")
_HF_DIR = flags.DEFINE_string("hf_dir", "", "(--side=trl) exported HF checkpoint directory")

MARK = "DPO_STEP_JSON "
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOP_FORMULA = "model FLOPs/step = 6*N*T (policy fwd+bwd) + 2*N*T (live reference fwd); N params, T logical tokens"


# ---------------------------------------------------------------------------------------------- data
def make_nodes(observation_words):
    """One two-branch node (one DPO pair) per entry; actions are a thought line + a command."""
    from tgpo_jax.data.synthetic import synthetic_nodes

    nodes = []
    for i, w in enumerate(observation_words):
        node = synthetic_nodes(
            1, seed=_SEED.value * 1000 + i, num_branches=2, observation_words=int(w), task_prefix=f"bench{i}"
        )[0]
        thought = f"Thought: the task asks for the {node.meta['target']}; I read the page and pick my next step."
        branches = [dataclasses.replace(b, action=f"{thought}\n{b.action}") for b in node.branches]
        nodes.append(dataclasses.replace(node, branches=branches))
    return nodes


def pair_texts(node):
    """(chosen action, rejected action) of the node's single pair."""
    from tgpo_jax.data.examples import preference_pairs

    (p,) = preference_pairs(node)
    return node.branches[p.chosen].action, node.branches[p.rejected].action


def calibrate_observation_words(tokenizer, batch: int, mean_tokens: int) -> list[int]:
    """Observation word counts giving prompts spread evenly over 0.8-1.2 x mean_tokens."""
    from tgpo_jax.models.tokenizer import chat_ids

    def length(w):
        return len(chat_ids(tokenizer, make_nodes([w])[0].prompt))

    fr = [0.8 + 0.4 * i / max(batch - 1, 1) for i in range(batch)] if batch > 1 else [1.0]
    out = []
    for f in fr:  # smallest word count reaching the target length (lengths grow with w)
        lo, hi = 0, max(int(f * mean_tokens), 1)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if length(mid) < f * mean_tokens else (lo, mid)
        out.append(lo)
    return out


# ---------------------------------------------------------------------------------------------- memory
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class PhasePeak:
    """High-water mark of RSS from ``start()`` on: the kernel's VmHWM reset (clear_refs 5) when allowed,
    and a 5 ms sampler in any case (the larger of the two is reported)."""

    def __init__(self):
        self.sampled = 0
        self.reset_ok = False
        self._stop = threading.Event()

    def start(self):
        self.load_hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # whole life so far
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset_ok = True
        except OSError:
            pass
        self.sampled = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.005):
            self.sampled = max(self.sampled, rss_bytes())

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        phase = max(self.sampled, hwm_bytes() if self.reset_ok else 0)
        end_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {"phase_peak": phase, "peak": max(self.load_hwm, phase, end_maxrss), "hwm_reset": self.reset_ok}


def emit(result: dict) -> None:
    result["loadavg_end"] = os.getloadavg()[0]  # other work on the machine skews timings: shown in the table
    print(MARK + json.dumps(result), flush=True)


def step_stats(times: list[float]) -> dict:
    return {"step_s": times, "median_s": statistics.median(times), "best_s": min(times)}


# ---------------------------------------------------------------------------------------------- sides
def run_peak() -> None:
    """bf16 (and fp32) matmul rate of this CPU: XLA (jitted) and PyTorch."""
    import jax
    import jax.numpy as jnp

    from tgpo_jax.models.matmul import proj

    n, reps, chain = _MATMUL_N.value, _MATMUL_REPS.value, 4
    out = {"side": "peak", "n": n, "chain": chain}
    for dt in ("bfloat16", "float32"):
        a = jax.random.normal(jax.random.key(0), (n, n), dt)
        b = (jax.random.normal(jax.random.key(1), (n, n), jnp.float32) / n**0.5).astype(dt)

        @jax.jit
        def f(x, w):
            for _ in range(chain):  # dependent chain: nothing to hoist or fuse away
                x = proj("ij,jk->ik", x, w)  # the model's own dot: float32 accumulation, one rounding
            return x

        f(a, b).block_until_ready()
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            f(a, b).block_until_ready()
            best = min(best, time.perf_counter() - t0)
        out[f"jax_{dt}_flops"] = chain * 2 * n**3 / best

    import torch

    torch.set_num_threads(_THREADS.value)
    # PyTorch's CPU bf16 matmul speed depends wildly on the shape on AVX2 (no AVX512-BF16/AMX): a square
    # 2048^3 bf16 mm runs at ~0.3 GFLOP/s, the model's linear layers at ~20. So PyTorch gets the model's
    # own shape: a 2048-token MLP up-projection (576 -> 1536), for context only.
    x32, w32 = torch.randn(2048, 576), torch.randn(1536, 576) / 24
    for dt in (torch.bfloat16, torch.float32):
        x, w = x32.to(dt), w32.to(dt)
        with torch.inference_mode():
            torch.nn.functional.linear(x, w)
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                for _ in range(chain):
                    torch.nn.functional.linear(x, w)
                best = min(best, time.perf_counter() - t0)
        out[f"torch_{str(dt).split('.')[-1]}_flops"] = chain * 2 * 2048 * 576 * 1536 / best
    emit(out)


def run_ours() -> None:
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec as P

    from tgpo_jax.data.collate import CollateConfig, build_example, stack, tokenize_node
    from tgpo_jax.models.loading import load_model
    from tgpo_jax.models.tokenizer import load_tokenizer
    from tgpo_jax.sharding import make_mesh
    from tgpo_jax.training.objective import LossConfig
    from tgpo_jax.training.step import OptimConfig, Trainer, to_global_batch

    layout = _LAYOUT.value
    mesh = make_mesh((1, 1, 1))
    tok = load_tokenizer("bundled")
    model = load_model("bundled", mesh=mesh, dtype=_DTYPE.value, param_dtype="float32", remat=_GC.value)
    n_params = sum(int(v.size) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))
    base = rss_bytes()
    mem = PhasePeak()
    mem.start()

    nodes = make_nodes(_OBS.value)
    probe = CollateConfig(method="dpo", layout=layout, max_len=4096, max_prompt_len=3072, max_completion_len=1024)
    toks = [tokenize_node(n, tok, probe) for n in nodes]
    plen = [len(p) for p, _, _ in toks]
    clen = [[len(c) for c in cs] for _, cs, _ in toks]
    logical = sum(2 * p + sum(cs) for p, cs in zip(plen, clen))
    need = max(p + (sum(cs) if layout == "packed" else max(cs)) for p, cs in zip(plen, clen))
    max_len = -(-need // 16) * 16  # pad rows to a multiple of 16
    max_c = max(max(cs) for cs in clen)
    cfg = CollateConfig(
        method="dpo",
        layout=layout,
        max_len=max_len,
        max_prompt_len=max_len - max_c,
        max_completion_len=max_c,
        max_branches=2,
        max_pairs=1,
    )
    local = stack([build_example(n, tok, cfg, index=i) for i, n in enumerate(nodes)])
    assert local["pair_valid"].all() and local["slot_valid"].all(), "a pair did not fit"
    ga = _ACCUM.value
    batch = to_global_batch(local, mesh, ga)

    trainer = Trainer(
        model, LossConfig(method="dpo", reference="live"), OptimConfig(learning_rate=1e-5, grad_accum=ga), mesh
    )
    del model
    state = trainer.init_state()
    # Guard: a state leaf off the mesh (an earlier init_state left step/Adam counts on a single device)
    # makes the second step compile again, as the step returns it on the mesh. Put any such leaf there.
    rep = NamedSharding(mesh, P())
    state = jax.tree.map(lambda x: x if isinstance(x.sharding, NamedSharding) else jax.device_put(x, rep), state)
    all_times, losses = [], []
    for _ in range(_WARMUP.value + _STEPS.value):
        t0 = time.perf_counter()
        state, metrics = trainer.train_step(state, batch)
        losses.append(float(metrics["loss"]))  # blocks on the step
        all_times.append(time.perf_counter() - t0)
    m = mem.stop()
    first, times = all_times[0], all_times[_WARMUP.value :]
    emit(
        {
            "side": "ours",
            "layout": layout,
            "dtype": _DTYPE.value,
            "grad_accum": ga,
            "n_params": n_params,
            "logical_tokens": logical,
            "prompt_lens": plen,
            "completion_lens": clen,
            "rows": int(local["tokens"].shape[0] * local["tokens"].shape[1]),
            "row_len": max_len,
            "padded_tokens": int(local["tokens"].size),
            "first_step_s": first,
            "losses": losses,
            "base_rss": base,
            **m,
            **step_stats(times),
        }
    )


def run_trl() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(_THREADS.value)
    import datasets
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    prec = _PRECISION.value
    tok = AutoTokenizer.from_pretrained(_HF_DIR.value)
    wdt = torch.bfloat16 if prec == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(_HF_DIR.value, dtype=wdt)
    n_params = sum(p.numel() for p in model.parameters())  # tied embedding counted once
    base = rss_bytes()
    mem = PhasePeak()
    mem.start()

    nodes = make_nodes(_OBS.value)
    rows = {"prompt": [], "chosen": [], "rejected": []}
    for n in nodes:
        chosen, rejected = pair_texts(n)
        rows["prompt"].append(tok.apply_chat_template(list(n.prompt), add_generation_prompt=True, tokenize=False))
        rows["chosen"].append(chosen)  # TRL appends EOS to non-conversational completions, as we do
        rows["rejected"].append(rejected)
    dataset = datasets.Dataset.from_dict(rows)

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.losses = [], []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    clock = Clock()
    with tempfile.TemporaryDirectory() as out_dir:
        args = DPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=_BATCH.value,
            gradient_accumulation_steps=1,
            max_steps=_WARMUP.value + _STEPS.value,
            learning_rate=1e-5,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            weight_decay=0.0,
            beta=0.1,
            loss_type=["sigmoid"],
            precompute_ref_log_probs=False,
            bf16=prec in ("bf16", "amp"),
            use_cpu=True,
            gradient_checkpointing=_GC.value,
            max_length=None,
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            dataloader_num_workers=0,
            disable_tqdm=True,
            seed=_SEED.value,
        )
        trainer = DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok, callbacks=[clock])
        ds = trainer.train_dataset
        plen = [len(x) for x in ds["prompt_ids"]]
        clen = [[len(c), len(r)] for c, r in zip(ds["chosen_ids"], ds["rejected_ids"])]
        logical = sum(2 * p + sum(cs) for p, cs in zip(plen, clen))
        trainer.train()
    m = mem.stop()
    times = clock.times[_WARMUP.value :]
    emit(
        {
            "side": "trl",
            "precision": prec,
            "trl_version": trl.__version__,
            "torch_version": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "n_params": n_params,
            "logical_tokens": logical,
            "prompt_lens": plen,
            "completion_lens": clen,
            "first_step_s": clock.times[0],
            "losses": clock.losses,
            "base_rss": base,
            **m,
            **step_stats(times),
        }
    )


# ---------------------------------------------------------------------------------------------- parent
def child(args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "bench.dpo_step", *args]
    print("  running: " + " ".join(args), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if p.returncode or not lines:
        sys.stderr.write(p.stdout[-4000:] + "\n" + p.stderr[-8000:] + "\n")
        raise RuntimeError(f"child {' '.join(args)} failed (exit {p.returncode})")
    out = json.loads(lines[-1][len(MARK) :])
    print(f"    done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def gib(b: float) -> str:
    return f"{b / 2**30:.2f}"


def run_all() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tgpo_jax.models.hf_export import export_hf
    from tgpo_jax.models.loading import load_model
    from tgpo_jax.models.tokenizer import load_tokenizer

    tok = load_tokenizer("bundled")
    obs = calibrate_observation_words(tok, _BATCH.value, _PROMPT.value)
    common = [
        f"--batch={_BATCH.value}",
        f"--steps={_STEPS.value}",
        f"--warmup={_WARMUP.value}",
        f"--seed={_SEED.value}",
        f"--threads={_THREADS.value}",
        f"--observation_words={','.join(map(str, obs))}",
        f"--{'' if _GC.value else 'no'}grad_checkpointing",
    ]
    peak = child(
        [
            "--side=peak",
            f"--matmul_n={_MATMUL_N.value}",
            f"--matmul_reps={_MATMUL_REPS.value}",
            f"--threads={_THREADS.value}",
        ]
    )
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "smollm2")
        export_hf(load_model("bundled", param_dtype="float32"), hf_dir, tok, dtype="float32")
        for k in range(_ROUNDS.value):  # each round runs every setting once: ours and TRL alternate over time
            if _ROUNDS.value > 1:
                print(f"round {k + 1} of {_ROUNDS.value}", file=sys.stderr, flush=True)
            runs = []
            for layout in _LAYOUTS.value:
                ga = _PLAIN_ACCUM.value if layout == "plain" else _ACCUM.value
                for dtype in _OUR_DTYPES.value:
                    runs.append(
                        child(["--side=ours", f"--layout={layout}", f"--dtype={dtype}", f"--grad_accum={ga}", *common])
                    )
            for prec in _TRL_PREC.value:
                runs.append(child(["--side=trl", f"--precision={prec}", f"--hf_dir={hf_dir}", *common]))
            rounds.append(runs)
    report([peak, *map(combine, zip(*rounds))])


def combine(same: tuple[dict, ...]) -> dict:
    """One setting over the rounds: the median of the rounds' median step times, the worst memory."""
    out = dict(same[0])
    out["round_median_s"] = [r["median_s"] for r in same]
    out["median_s"] = statistics.median(out["round_median_s"])
    out["best_s"] = min(r["best_s"] for r in same)
    out["first_step_s"] = statistics.median(r["first_step_s"] for r in same)
    for key in ("peak", "phase_peak", "loadavg_end"):
        out[key] = max(r[key] for r in same)
    out["base_rss"] = min(r["base_rss"] for r in same)
    return out


def report(results: list[dict]) -> None:
    peak = results[0]
    runs = results[1:]
    bf16_peak = peak["jax_bfloat16_flops"]
    toks = {r["logical_tokens"] for r in runs}
    if len(toks) != 1:
        print(
            f"WARNING: sides counted different logical tokens: "
            f"{[(name(r), r['logical_tokens'], r['prompt_lens'], r['completion_lens']) for r in runs]}"
        )
    t = runs[0]["logical_tokens"]
    n = runs[0]["n_params"]
    flops = 8 * n * t
    r0 = runs[0]
    print()
    print(
        f"DPO train step, SmolLM2-135M (N = {n / 1e6:.1f}M params), batch {_BATCH.value} pairs, "
        f"prompts {min(r0['prompt_lens'])}-{max(r0['prompt_lens'])} tokens, "
        f"actions {min(min(c) for c in r0['completion_lens'])}-{max(max(c) for c in r0['completion_lens'])} "
        f"tokens (incl. EOS); T = {t} logical tokens/step (sum of prompt+chosen and prompt+rejected)"
    )
    print(
        f"full fine-tuning, AdamW, live reference forward each step, grad checkpointing "
        f"{'on' if _GC.value else 'off'} (both); {_STEPS.value} timed steps after {_WARMUP.value} warm-up; "
        f"torch threads {_THREADS.value}, {os.cpu_count()} CPUs; CPU flags: {cpu_flags()}"
        + (f"; {_ROUNDS.value} rounds, medians" if _ROUNDS.value > 1 else "")
    )
    print(
        f"{FLOP_FORMULA} -> {flops / 1e12:.2f} TFLOP/step "
        f"(6NT = {6 * n * t / 1e12:.2f}, 2NT ref = {2 * n * t / 1e12:.2f})"
    )
    print(
        f"matmul peak ({peak['n']}^3, jit): JAX bf16 {bf16_peak / 1e9:.0f} GFLOP/s (JAX fp32 "
        f"{peak['jax_float32_flops'] / 1e9:.0f}); for context, PyTorch linear 2048x576->1536: bf16 "
        f"{peak['torch_bfloat16_flops'] / 1e9:.0f}, fp32 {peak['torch_float32_flops'] / 1e9:.0f} GFLOP/s"
    )
    print()
    hdr = (
        f"{'run':<22}{'1st s':>7}{'median s':>9}{'best s':>8}{'tok/s':>8}{'GFLOP/s':>9}{'of bf16 pk':>11}"
        f"{'peak GiB':>9}{'base GiB':>9}{'train pk':>9}{'delta GiB':>10}{'rows x len':>12}{'load1':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in runs:
        tps = t / r["median_s"]
        fl = flops / r["median_s"]
        shape = f"{r['rows']}x{r['row_len']}" if r["side"] == "ours" else "dyn pad"
        print(
            f"{name(r):<22}{r['first_step_s']:7.1f}{r['median_s']:9.2f}{r['best_s']:8.2f}{tps:8.1f}{fl / 1e9:9.1f}"
            f"{fl / bf16_peak:11.1%}"
            f"{gib(r['peak']):>9}{gib(r['base_rss']):>9}{gib(r['phase_peak']):>9}"
            f"{gib(r['phase_peak'] - r['base_rss']):>10}{shape:>12}{r['loadavg_end']:7.1f}"
        )
    print()
    ours = [r for r in runs if r["side"] == "ours"]
    trls = [r for r in runs if r["side"] == "trl"]
    for o in ours:
        for tr in trls:
            per_round = ", ".join(
                f"{b / a:.2f}" for a, b in zip(o.get("round_median_s", []), tr.get("round_median_s", []))
            )
            goal = 2.2 if tr["precision"] == "amp" else 2.0
            print(
                f"{name(o)} vs {name(tr)}: throughput {tr['median_s'] / o['median_s']:.2f}x (goal >= {goal}x)"
                + (f" [rounds: {per_round}]" if len(o.get("round_median_s", [])) > 1 else "")
                + ", "
                f"peak RSS {o['peak'] / tr['peak']:.2f}x, train-phase delta "
                f"{(o['phase_peak'] - o['base_rss']) / max(tr['phase_peak'] - tr['base_rss'], 1):.2f}x "
                f"(goal <= 0.5x)"
            )
    print(
        "loss per step (same pairs every step; later steps should roughly agree across runs): "
        + "; ".join(f"{name(r)} " + " ".join(f"{x:.3f}" for x in r["losses"]) for r in runs)
    )
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w") as f:
            json.dump(results, f, indent=1)


def name(r: dict) -> str:
    if r["side"] == "ours":
        dt = "" if r.get("dtype", "bfloat16") == "bfloat16" else " fp32"
        return f"ours {r['layout']}{dt}" + (f" accum {r['grad_accum']}" if r["grad_accum"] > 1 else "")
    return f"TRL {r['trl_version']} {r['precision']}"


def main(argv):
    del argv
    {"all": run_all, "peak": run_peak, "ours": run_ours, "trl": run_trl}[_SIDE.value]()


if __name__ == "__main__":
    app.run(main)
