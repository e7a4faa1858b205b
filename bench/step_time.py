"""Where the time of one training step and one evaluation step goes: a pretrained model on a real node dataset.

  python -m bench.step_time --dataset=<run>/datasets/round1                       # SFT, batch 8, rows of 576 tokens
  python -m bench.step_time --dataset=<run>/datasets/round1 --method=dpo --reps=5
  python -m bench.step_time --dataset=<run>/datasets/round1 --batch=1 --reps=1 --eval_batch=1 --new_tokens=4
                                                                   # a quick check (~10 min on 2 busy CPU cores)
  python -m bench.step_time --dataset=<run>/datasets/round1 --notrain                 # the evaluation step only

``--dataset``: an ArrayRecord node dataset directory (manifest.json inside), as the pipeline writes under
<run>/datasets/round1, tokenised for the model (``--model_path``, default the bundled SmolLM2-135M-Instruct).

Training step: set up as ``tgpo_jax.training.loop.fit`` sets it up, from ``configs/<method>.py:smollm2-135m`` with
model.path, data.train_dir, data.max_len / max_prompt_len / max_completion_len and train.batch_size replaced by the
flags: the config's mesh, ``build_model`` (compute dtype from the config's 'auto': ``tgpo_jax.hardware
.compute_dtype``, float32 master weights, model.remat on), the method's example source (``examples_for``) over the
dataset, ``loss_config`` / ``optim_config`` / ``update_mask`` -> ``Trainer``, a state from ``init_state``; batches
go through ``with_loss_positions`` and ``to_global_batch`` as fit's loop does. Each part is timed on its own, the
median of ``--reps`` calls after one untimed (warm-up) call, which for the jitted parts includes compiling:

1. data: collating one batch on the host (``NodeExamples[i]`` for ``--batch`` examples of a seeded permutation, then
   ``collate.stack``: what grain's batching does; in fit it runs in grain's 2 threads with 4 batches of prefetch, so
   it overlaps the step when it is shorter), and putting it on the device (``with_loss_positions`` +
   ``to_global_batch``);
2. the forward pass alone to the loss: ``Trainer.eval_step`` (the jitted loss function, no gradient; with DPO / TGPO
   the live reference's forward pass is in it too);
3. the whole jitted train step: ``Trainer.train_step`` (forward + backward + clip + AdamW update);
   backward + update = (3) - (2);
4. ``--variants``: (2) and (3) again with a fresh model and trainer for ``no_remat`` (model.remat=False) and
   ``lora16`` (model.lora_rank=16: only the adapters train; the live reference is the base without them). Without
   remat the backward keeps every layer's activations: at batch 8 x 576 several GiB on a CPU.

Reported: tokens in the batch (all positions = rows x row length, what the step computes; real = non-padding tokens;
loss = loss-carrying tokens), seconds, share of the train step, tokens/s (all positions) and loss tokens/s.

Evaluation step: what ``rollout.policies.model.ModelPolicy`` does for ``--eval_batch`` steps at once, on prompts of
the dataset (the records' chat messages, evenly spaced over the dataset), with the model loaded as the policy loads
it (``load_model`` + ``with_tokenizer_eos``, ``Sampler``) in the training's compute dtype, greedy (temperature 0, the
evaluation's default), ``--new_tokens`` new tokens at most, EOS ending a row (the table shows how many came):

a. tokenisation + chat template (``chat_ids``, per prompt). Fitting a page to the prompt budget
   (``prompt.build_messages``) is not timed: a record's prompt is fitted already;
b. the sampler's prefill, timed inside each ``Sampler.generate`` call (the call ModelPolicy makes): a subclass of
   the Sampler waits for the prefill's result and records its time; its prompts are left-padded to the sampler's
   64-token bucket;
c. decoding: the rest of that call (less the constraint set-up, when constrained): jitted chunks of 16 decode steps
   (a ``lax.scan``), so an unconstrained call computes whole chunks even when fewer tokens are asked for.
   Constrained (``--constrained``, valid-argument decoding: ``rollout/policies/constrain.py``) runs without a
   browser: the constraint needs only what a step offers (the page's element ids, each combobox's options and name,
   the strings the task quotes, the trailing SELECT steps), and all of it is in the prompt's text, so the benchmark
   parses each prompt back into a ``PolicyRequest`` (``request_from_prompt``) and calls ``constraints_for`` as
   ModelPolicy does; then the host picks every token (one jitted ``_feed`` call per token). Its one-time piece table
   (every token decoded once per tokenizer) is shown apart; ``constraints_for`` per step is a row of its own.

Printed: the CPU's flags (``bench.sides.cpu_flags``), JAX's backend and the compute dtype, the two tables, and
last one line of JSON with every figure (also written to ``--json_out``).
"""

from __future__ import annotations

import gc
import json
import os
import re
import statistics
import sys
import time

from absl import app, flags

from bench.sides import cpu_flags, versions
import recipes

F = flags.FLAGS


def define_flags() -> None:
    """The command line's flags: defined only when run as a script, so that importing the module (its tests) defines
    no flag another entry point owns."""
    flags.DEFINE_string(
        "dataset",
        None,
        "node dataset directory (manifest.json inside), e.g. <run>/datasets/round1, tokenised for --model_path",
    )
    flags.DEFINE_enum("method", "sft", ["sft", "dpo", "tgpo"], "training method (configs/<method>.py)")
    flags.DEFINE_string("model_path", "bundled", "model.path: HF directory, .gguf or 'bundled'")
    flags.DEFINE_string("preset", "smollm2-135m", "configs/models.py preset the config starts from")
    flags.DEFINE_integer("batch", 8, "train.batch_size: examples (nodes) per train step")
    flags.DEFINE_integer("max_len", 576, "data.max_len: tokens per row")
    flags.DEFINE_integer("max_prompt_len", 512, "data.max_prompt_len")
    flags.DEFINE_integer("max_completion_len", 64, "data.max_completion_len")
    flags.DEFINE_integer("reps", 3, "timed calls per part (the median is reported), after one untimed call")
    flags.DEFINE_list(
        "variants",
        ["no_remat", "lora16"],
        "train-step variants also timed (each a fresh model): no_remat, lora16, "
        "top10 (model.train_layers=10), top10_no_remat; empty for none",
    )
    flags.DEFINE_boolean("train", True, "time the training step (--notrain: the evaluation step only)")
    flags.DEFINE_integer("eval_batch", 8, "prompts per evaluation step (0: no evaluation step)")
    flags.DEFINE_integer("new_tokens", 32, "evaluation: new tokens per prompt at most (EOS ends a row earlier)")
    flags.DEFINE_boolean("constrained", True, "evaluation: also time valid-argument (constrained) decoding")
    flags.DEFINE_integer("seed", 0, "which examples make the batch (a permutation of the dataset)")
    flags.DEFINE_boolean(
        "compile_cache",
        False,
        "use the persistent compilation cache, as the launch entry "
        "points do (first calls then load compiled programs instead of compiling)",
    )
    flags.DEFINE_string("json_out", "", "also write the figures here (JSON)")


VARIANTS = {
    "no_remat": {"remat": False},
    "lora16": {"lora_rank": 16},
    "top10": {"train_layers": 10},
    "top10_no_remat": {"train_layers": 10, "remat": False},
}


# ---------------------------------------------------------------------------------------------- pure helpers
def timed(call, reps: int) -> dict:
    """One untimed call (warm-up: compiling, caches), then ``reps`` timed ones -> {first_s, times, median_s, out}."""
    t0 = time.perf_counter()
    out = call()
    first = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    return {"first_s": first, "times": times, "median_s": statistics.median(times), "out": out}


def shares(parts: dict[str, float], total: float | None = None) -> dict[str, float]:
    """{name: seconds} -> {name: fraction of ``total``} (default: of the parts' sum); 0 where the total is 0."""
    t = sum(parts.values()) if total is None else total
    return {k: (v / t if t > 0 else 0.0) for k, v in parts.items()}


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if abs(x) < 1 else f"{x:.2f}"


def fmt_share(x: float | None) -> str:
    if x is None:
        return "-"
    return "<0.1%" if 0 < x < 0.001 else f"{x:.1%}"


def decode_steps(new_tokens: list[int], chunk: int, constrained: bool) -> int:
    """Decode steps the batch computed for rows of ``new_tokens``: unconstrained, whole jitted chunks of ``chunk``
    steps until the longest row is done; constrained, one step (``_feed``) per token of the longest row."""
    longest = max(new_tokens, default=0)
    return longest if constrained else -(-longest // chunk) * chunk


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


# ---------------------------------------------------------------------------------------------- prompt -> request
_Q = r'"(?:[^"\\]|\\.)*"'  # a JSON-quoted string, as the observation text quotes names, values and options
_ID_BEFORE = re.compile(r"^\s*\[(?P<id>[^\]\s]+)\] (?P<role>\S+) (?P<name>" + _Q + r")(?P<rest>.*)$")
_ID_AFTER = re.compile(r"^\s*(?P<role>\S+) (?P<name>" + _Q + r")\[(?P<id>[^\]\s]+)\](?P<rest>.*)$")
_OPTIONS = re.compile(r"options=(\[(?:" + _Q + r",?)*\])")
_VALUE = re.compile(r"value=(" + _Q + r")")
_HISTORY = re.compile(r"^\d+\. (?P<line>.*)$")
_ERROR = re.compile(r" \(error: (?P<kind>[^()]*)\)$")


def parse_prompt(user: str) -> dict:
    """The user message of a policy prompt (``rollout.policies.prompt._user_text``) -> its parts: ``instruction``,
    ``history`` [(command, thought, error)], ``url``, ``title``, ``page`` (the page's lines after its header) and
    ``elements`` [{id, role, name, value, options}] (element lines with the id before the role or after the name)."""
    from rollout.policies.prompt import ANSWER_CUE

    m = re.match(r"Task: (?P<task>.*?)\n\n", user, re.S)
    if m is None:
        raise ValueError("not a policy prompt: no 'Task: ...' paragraph")
    body = user[: user.rfind("\n\n" + ANSWER_CUE)] if ANSWER_CUE in user else user
    pa, cp = body.find("\nPrevious actions:\n"), body.find("\nCurrent page:\n")
    if pa < 0 or cp < 0:
        raise ValueError("not a policy prompt: no 'Previous actions:' or 'Current page:' section")
    if pa < cp:  # history first (the default)
        actions, page = body[pa + len("\nPrevious actions:\n") : cp], body[cp + len("\nCurrent page:\n") :]
    else:  # history_last
        page, actions = body[cp + len("\nCurrent page:\n") : pa], body[pa + len("\nPrevious actions:\n") :]
    history = []
    for line in actions.strip("\n").split("\n"):
        h = _HISTORY.match(line)
        if h is None:  # "None", "(k earlier actions omitted)"
            continue
        text, error = h["line"], None
        e = _ERROR.search(text)
        if e:
            text, error = text[: e.start()], e["kind"]
        command, _, thought = text.partition(" | ")
        history.append((command, thought, error))
    lines = page.strip("\n").split("\n")
    url = title = ""
    while lines and lines[0].startswith(("URL: ", "Title: ", "Last action error")):
        head = lines.pop(0)
        if head.startswith("URL: "):
            url = head[len("URL: ") :]
        elif head.startswith("Title: "):
            title = head[len("Title: ") :]
    elements = []
    for line in lines:
        e = _ID_BEFORE.match(line) or _ID_AFTER.match(line)
        if e is None:
            continue
        opts, value = _OPTIONS.search(e["rest"]), _VALUE.search(e["rest"])
        elements.append(
            {
                "id": e["id"],
                "role": e["role"],
                "name": json.loads(e["name"]),
                "value": json.loads(value[1]) if value else None,
                "options": tuple(json.loads(opts[1])) if opts else (),
            }
        )
    return {
        "instruction": m["task"],
        "history": history,
        "url": url,
        "title": title,
        "page": "\n".join(lines),
        "elements": elements,
    }


def request_from_prompt(messages, key: str = "bench/0"):
    """A ``PolicyRequest`` rebuilt from a record's chat messages: what valid-argument decoding reads of a step
    (``constrain.step_strings``: the task, the page's elements, the history's commands and errors)."""
    from rollout.core import Element, HistoryItem, Observation, PolicyRequest, Task

    user = next(m["content"] for m in messages if m["role"] == "user")
    p = parse_prompt(user)
    task = Task(
        task_id=key, env="bench", family="", instruction=p["instruction"], start_path="/", optimal_steps=0, split="test"
    )
    obs = Observation(
        url=p["url"], title=p["title"], text=p["page"], elements=tuple(Element(**e) for e in p["elements"])
    )
    history = tuple(HistoryItem(command=c, thought=t, error=e) for c, t, e in p["history"])
    return PolicyRequest(task=task, observation=obs, history=history, step=len(history), episode_key=key, seed=0)


# ---------------------------------------------------------------------------------------------- training step
def make_config(variant: dict | None = None):
    """``configs/<method>.py:<preset>`` with the flags' model, dataset, row sizes and batch (and a variant's model
    settings)."""
    from configs import dpo, sft, tgpo

    cfg = {"sft": sft, "dpo": dpo, "tgpo": tgpo}[F.method].get_config(F.preset)
    cfg.model.path = F.model_path
    cfg.data.train_dir = os.path.abspath(F.dataset)
    cfg.data.eval_dir = ""
    cfg.data.max_len, cfg.data.max_prompt_len = F.max_len, F.max_prompt_len
    cfg.data.max_completion_len = F.max_completion_len
    cfg.train.batch_size = F.batch
    for k, v in (variant or {}).items():
        cfg.model[k] = v
    return cfg


def build_trainer(cfg, mesh, tokenizer, train_src):
    """Model, loss, optimiser and Trainer as ``loop.fit`` builds them; -> (trainer, state, info)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    from tgpo_jax.data.pipeline import steps_per_epoch
    from tgpo_jax.models.transformer import param_count, trained_param_count
    from tgpo_jax.training.loop import build_model, loss_config, optim_config, update_mask
    from tgpo_jax.training.step import Trainer

    if cfg.loss.reference not in ("live", "none"):
        raise app.UsageError(f"loss.reference={cfg.loss.reference}: the benchmark times live / none references only")
    recipes.register_all()  # the config's model.init / model.freeze may name a recipe's
    model = build_model(cfg, mesh, tokenizer)
    w_d, w_u = (
        train_src.class_weights
        if cfg.loss.kto_weights == "auto"
        else (cfg.loss.desirable_weight, cfg.loss.undesirable_weight)
    )
    total = cfg.train.max_steps or steps_per_epoch(train_src, cfg.train.batch_size) * cfg.train.num_epochs
    trainer = Trainer(
        model,
        loss_config(cfg, w_d, w_u),
        optim_config(cfg, total),
        mesh,
        chunk=cfg.train.chunk,
        update_mask=update_mask(cfg, model),
    )
    info = {
        "n_params": param_count(model),
        "n_trainable": trained_param_count(model),
        "dtype": model.cfg.dtype,
        "param_dtype": model.cfg.param_dtype,
        "remat": model.cfg.remat,
        "lora_rank": model.cfg.lora_rank,
        "attention": model.cfg.attention,
    }
    del model
    state = trainer.init_state(cfg.train.seed)
    # as bench/dpo_step.py: a state leaf off the mesh would make the second step compile again
    rep = NamedSharding(mesh, P())
    state = jax.tree.map(lambda x: x if isinstance(x.sharding, NamedSharding) else jax.device_put(x, rep), state)
    return trainer, state, info


def time_forward_and_step(trainer, state, batch, reps: int) -> dict:
    """(2) the jitted loss alone, (3) the jitted train step; the forward first (the step donates the state)."""
    import jax

    fwd = timed(lambda: jax.block_until_ready(trainer.eval_step(state, batch)), reps)
    holder = {"state": state}

    def step():
        holder["state"], m = trainer.train_step(holder["state"], batch)
        jax.block_until_ready((holder["state"], m))
        return m

    stp = timed(step, reps)
    finite = bool(stp["out"]["finite"])
    return {
        "forward": strip(fwd),
        "step": strip(stp),
        "loss": float(fwd["out"]["loss"]),
        "finite": finite,
        "steps_done": int(holder["state"]["step"]),
    }


def strip(t: dict) -> dict:
    return {k: v for k, v in t.items() if k != "out"}


def run_train(cfg, tokenizer, mesh) -> dict:
    import jax
    import numpy as np

    from tgpo_jax.data.collate import stack
    from tgpo_jax.data.trajectory import examples_for
    from tgpo_jax.training.loop import check_batch, collate_config, with_loss_positions
    from tgpo_jax.training.step import to_global_batch

    check_batch(cfg, mesh)
    ccfg = collate_config(cfg)
    t0 = time.perf_counter()
    src = examples_for(cfg.method)(
        cfg.data.train_dir, tokenizer, ccfg, weight_norm=cfg.data.weight_norm, copy_swap=cfg.data.copy_swap
    )
    src_s = time.perf_counter() - t0
    b, reps = cfg.train.batch_size, F.reps
    order = np.random.default_rng(F.seed).permutation(len(src))
    draws = iter(range(10**9))

    def collate():  # a new batch each call: no reader cache helps
        k = next(draws)
        return stack([src[int(order[(k * b + j) % len(src)])] for j in range(b)])

    col = timed(collate, reps)
    local = col["out"]
    put = timed(
        lambda: jax.block_until_ready(to_global_batch(with_loss_positions(local), mesh, cfg.optim.grad_accum)), reps
    )
    batch = put["out"]
    tokens = {
        "positions": int(local["tokens"].size),
        "real": int((local["segments"] >= 0).sum()),
        "loss": int((local["slot"] >= 0).sum()),
        "rows": int(local["tokens"].shape[0] * local["tokens"].shape[1]),
        "row_len": int(local["tokens"].shape[-1]),
    }
    out = {
        "examples": len(src),
        "source_setup_s": src_s,
        "tokens": tokens,
        "collate": strip(col),
        "to_device": strip(put),
        "settings": {},
    }
    for name in ["base"] + [v for v in F.variants if v]:
        print(f"  timing the train step: {name} ...", file=sys.stderr, flush=True)
        vcfg = cfg if name == "base" else make_config(VARIANTS[name])
        trainer, state, info = build_trainer(vcfg, mesh, tokenizer, src)
        r = time_forward_and_step(trainer, state, batch, reps)
        if not r["finite"] or r["steps_done"] != reps + 1:
            print(
                f"  WARNING: {name}: a step was not finite (steps applied {r['steps_done']} of {reps + 1})",
                file=sys.stderr,
                flush=True,
            )
        out["settings"][name] = {**info, **r}
        del trainer, state
        gc.collect()
    return out


# ---------------------------------------------------------------------------------------------- evaluation step
def clocked_sampler(model, tokenizer):
    """A ``Sampler`` whose prefill waits for its result and records its wall time, so that one ``generate`` call
    splits into its own prefill and decoding (the decoding waits for the prefill's result anyway). Its compiled steps
    are the Sampler's own (jit's cache is keyed by the architecture, not the class)."""
    from tgpo_jax.models.sampler import Sampler

    class ClockedSampler(Sampler):
        prefill_times: list[float] = []

        def _prefill(self, weights, tokens, valid, cache_len):
            import jax

            t0 = time.perf_counter()
            out = jax.block_until_ready(Sampler._prefill(self, weights, tokens, valid, cache_len))
            self.prefill_times.append(time.perf_counter() - t0)
            return out

    sampler = ClockedSampler(model, tokenizer)
    sampler.prefill_times = []
    return sampler


def time_generate(sampler, prompts, params, seeds, reps: int, make_constraints=None) -> dict:
    """One untimed ``generate`` call (ModelPolicy's), then ``reps`` timed ones, each split into constraint set-up
    (``make_constraints``, when given), prefill and decoding (the rest of the call)."""

    def call():
        sampler.prefill_times.clear()
        t0 = time.perf_counter()
        cons = make_constraints() if make_constraints else None
        setup = time.perf_counter() - t0
        cs = sampler.generate(prompts, params, row_seeds=seeds, constraints=cons)
        total = time.perf_counter() - t0
        pre = sum(sampler.prefill_times)
        return {"call_s": total, "setup_s": setup, "prefill_s": pre, "decode_s": total - setup - pre}, cs

    first, _ = call()
    runs = [call() for _ in range(reps)]
    parts = {k: [r[k] for r, _ in runs] for k in first}
    return {
        "first": first,
        "times": parts,
        **{k: statistics.median(v) for k, v in parts.items()},
        **completions(runs[-1][1]),
    }


def run_eval(cfg, tokenizer, dtype: str) -> dict:
    import numpy as np

    from tgpo_jax.data.io import DatasetReader
    from tgpo_jax.models.loading import load_model, with_tokenizer_eos
    from tgpo_jax.models.sampler import SamplingParams, _bucket
    from tgpo_jax.models.tokenizer import chat_ids

    reps, n = F.reps, F.eval_batch
    reader = DatasetReader(cfg.data.train_dir)
    nodes = [reader[int(i)] for i in np.linspace(0, len(reader) - 1, n).round()]
    messages = [list(node.prompt) for node in nodes]
    # as ModelPolicy.from_path loads a model, in the training's compute dtype
    sampler = clocked_sampler(with_tokenizer_eos(load_model(cfg.model.path, dtype=dtype), tokenizer), tokenizer)
    params = SamplingParams(temperature=0.0, max_tokens=F.new_tokens, seed=0)
    seeds = list(range(n))

    tok = timed(lambda: [chat_ids(tokenizer, m) for m in messages], reps)
    prompts = tok["out"]
    out = {
        "prompts": n,
        "prompt_tokens": [len(x) for x in prompts],
        "padded_to": _bucket(max(len(x) for x in prompts), sampler.bucket),
        "chunk": sampler.chunk,
        "tokenize": strip(tok),
        "unconstrained": time_generate(sampler, prompts, params, seeds, reps),
    }
    if F.constrained:
        from experiment.evaluate import trained_thoughts
        from rollout.policies.constrain import _piece_table, constraints_for
        from rollout.policies.prompt import saved_prompt

        requests = [request_from_prompt(m, f"bench/{i}") for i, m in enumerate(messages)]
        eos = sampler.cfg.eos_token_ids or ()
        recipes.register_all()  # the wording may be a recipe's
        wording = trained_thoughts(saved_prompt(cfg.model.path))  # the rules of the thoughts the model trained on
        t0 = time.perf_counter()
        _piece_table(tokenizer)  # once per tokenizer (lru_cache): every token decoded
        pieces_s = time.perf_counter() - t0
        out["constrained"] = {
            "piece_table_once_s": pieces_s,
            "elements": [len(r.observation.elements) for r in requests],
            **time_generate(
                sampler, prompts, params, seeds, reps, lambda: constraints_for(requests, tokenizer, eos, wording)
            ),
        }
    return out


def completions(cs) -> dict:
    return {
        "new_tokens": [len(c.tokens) for c in cs],
        "finish": [c.finish_reason for c in cs],
        "texts": [c.text for c in cs],
    }


# ---------------------------------------------------------------------------------------------- report
def train_table(t: dict, method: str, batch: int, reps: int) -> list[str]:
    tk = t["tokens"]
    base = t["settings"]["base"]
    step = base["step"]["median_s"]
    fwd = base["forward"]["median_s"]
    lines = [
        f"TRAIN STEP: {method}, batch {batch} examples = {tk['rows']} rows x {tk['row_len']} tokens; "
        f"tokens: {tk['positions']} positions, {tk['real']} real ({tk['real'] / tk['positions']:.0%} fill), "
        f"{tk['loss']} loss-carrying; {base['dtype']} compute over {base['param_dtype']} weights, "
        f"remat {'on' if base['remat'] else 'off'}, {base['n_trainable'] / 1e6:.1f}M of "
        f"{base['n_params'] / 1e6:.1f}M parameters trained",
        f"median of {reps} after one untimed call (1st s: that call, compiling included); "
        "share = of the train step (3)",
    ]
    hdr = f"{'part':<46}{'1st s':>9}{'median s':>10}{'share':>8}{'tok/s':>10}{'loss tok/s':>11}"
    lines += ["", hdr, "-" * len(hdr)]

    def row(name, first, med, share, with_rates=True):
        r1 = fmt_rate(rate(tk["positions"], med)) if with_rates else "-"
        r2 = fmt_rate(rate(tk["loss"], med)) if with_rates else "-"
        lines.append(f"{name:<46}{fmt_s(first):>9}{fmt_s(med):>10}{fmt_share(share):>8}{r1:>10}{r2:>11}")

    row(
        "(1) data: collate one batch (host)",
        t["collate"]["first_s"],
        t["collate"]["median_s"],
        t["collate"]["median_s"] / step,
        False,
    )
    row(
        "(1) data: to device (+ loss positions)",
        t["to_device"]["first_s"],
        t["to_device"]["median_s"],
        t["to_device"]["median_s"] / step,
        False,
    )
    row("(2) forward to the loss (jit, no grad)", base["forward"]["first_s"], fwd, fwd / step)
    row("(3) train step (fwd + bwd + update)", base["step"]["first_s"], step, 1.0)
    row("    backward + update = (3) - (2)", None, step - fwd, (step - fwd) / step)
    for name, s in t["settings"].items():
        if name == "base":
            continue
        label = {"no_remat": "remat off", "lora16": "LoRA r16"}.get(name, name)
        vs, vf = s["step"]["median_s"], s["forward"]["median_s"]
        lines.append(f"(4) {label}: {s['n_trainable'] / 1e6:.2f}M trained")
        row("      (2) forward to the loss", s["forward"]["first_s"], vf, vf / step)
        row("      (3) train step", s["step"]["first_s"], vs, vs / step)
        row("      backward + update = (3) - (2)", None, vs - vf, (vs - vf) / step)
    if len(t["settings"]) > 1:
        lines.append("(4) rows: share = of the base train step (3); over 100% is slower than it")
    return lines


def eval_parts(e: dict) -> dict:
    """{column: {part: seconds}} of the evaluation step: unconstrained and (when run) constrained; each column's
    prefill and decoding are medians over its own ``generate`` calls."""
    cols = {}
    for c in ("unconstrained", "constrained"):
        g = e.get(c)
        if g:
            cols[c] = {
                "tokenize + chat template": e["tokenize"]["median_s"],
                "constraint set-up": g["setup_s"],
                "prefill": g["prefill_s"],
                "decode": g["decode_s"],
            }
    return cols


def eval_table(e: dict, new_tokens: int) -> list[str]:
    cols = eval_parts(e)
    pt = e["prompt_tokens"]
    lines = [
        f"EVAL STEP: {e['prompts']} prompts of {min(pt)}-{max(pt)} tokens (padded to {e['padded_to']}), greedy, "
        f"<= {new_tokens} new tokens per row; new tokens per row: unconstrained "
        f"{e['unconstrained']['new_tokens']}"
        + (f", constrained {e['constrained']['new_tokens']}" if "constrained" in e else ", constrained not run"),
        "share = of that column's step (the sum of its parts)",
    ]
    hdr = f"{'part':<28}" + "".join(f"{c + ' s':>18}{'share':>8}" for c in cols)
    lines += ["", hdr, "-" * len(hdr)]
    names = list(next(iter(cols.values())))
    sh = {c: shares(p) for c, p in cols.items()}
    for name in names:
        if name == "constraint set-up" and "constrained" not in cols:
            continue
        lines.append(
            f"{name:<28}"
            + "".join(
                f"{fmt_s(p[name]) if (name != 'constraint set-up' or c == 'constrained') else '-':>18}"
                f"{fmt_share(sh[c][name]) if (name != 'constraint set-up' or c == 'constrained') else '-':>8}"
                for c, p in cols.items()
            )
        )
    lines.append(f"{'step':<28}" + "".join(f"{fmt_s(sum(p.values())):>18}{'100.0%':>8}" for p in cols.values()))
    n = e["prompts"]
    extra = [
        f"prefill: {fmt_rate(rate(sum(pt), cols['unconstrained']['prefill']))} prompt tok/s "
        f"({fmt_rate(rate(n * e['padded_to'], cols['unconstrained']['prefill']))} with padding)"
    ]
    for c, p in cols.items():
        new = sum(e[c]["new_tokens"])
        steps = decode_steps(e[c]["new_tokens"], e["chunk"], c == "constrained")
        how = "one jitted _feed call each" if c == "constrained" else f"jitted chunks of {e['chunk']}"
        extra.append(
            f"{c} decode: {new} new tokens, {fmt_rate(rate(new, p['decode']))} new tok/s; {steps} decode "
            f"steps of the batch computed ({how}), {fmt_s(p['decode'] / max(steps, 1))} s each"
        )
    extra.append("first calls (compiling included): " + ", ".join(f"{c} {e[c]['first']['call_s']:.1f} s" for c in cols))
    if "constrained" in e:
        c = e["constrained"]
        extra.append(
            f"constrained: piece table built once per tokenizer in {c['piece_table_once_s']:.2f} s (not in "
            f"the step); elements parsed per prompt {c['elements']}"
        )
    return lines + extra


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not F.dataset or not os.path.isfile(os.path.join(F.dataset, "manifest.json")):
        raise app.UsageError(f"--dataset={F.dataset!r}: give a node dataset directory (manifest.json inside)")
    unknown = [v for v in F.variants if v and v not in VARIANTS]
    if unknown:
        raise app.UsageError(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if F.compile_cache:
        from launch.entry import compile_cache

        compile_cache()
    import jax

    from tgpo_jax import sharding as shd
    from tgpo_jax.hardware import compute_dtype
    from tgpo_jax.models.tokenizer import load_tokenizer
    from tgpo_jax.training.loop import maybe_initialize_distributed

    cfg = make_config()
    maybe_initialize_distributed(cfg)
    mesh = shd.make_mesh(tuple(cfg.mesh.shape))
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
    dtype = compute_dtype(cfg.model.dtype)
    dev = jax.devices()[0]
    result = {
        "method": cfg.method,
        "model": cfg.model.path,
        "dataset": cfg.data.train_dir,
        "batch": F.batch,
        "max_len": F.max_len,
        "max_prompt_len": F.max_prompt_len,
        "max_completion_len": F.max_completion_len,
        "reps": F.reps,
        "cpu_flags": cpu_flags(),
        "cpus": os.cpu_count(),
        "backend": jax.default_backend(),
        "device": getattr(dev, "device_kind", dev.platform),
        "devices": jax.device_count(),
        "dtype_config": cfg.model.dtype,
        "dtype": dtype,
        "versions": {"jax": jax.__version__, **versions(("jaxlib", "flax", "optax"))},
    }
    if F.train:
        print(f"running: train step ({cfg.method}) ...", file=sys.stderr, flush=True)
        result["train"] = run_train(cfg, tokenizer, mesh)
        gc.collect()
    if F.eval_batch > 0:
        print("running: evaluation step ...", file=sys.stderr, flush=True)
        result["eval"] = run_eval(cfg, tokenizer, dtype)
    result["loadavg_end"] = os.getloadavg()[0]

    print()
    print(
        f"CPU flags: {result['cpu_flags']}; {result['cpus']} CPUs; JAX backend {result['backend']} "
        f"({result['device']}, {result['devices']} device(s)); compute dtype {dtype} (config '{cfg.model.dtype}'); "
        f"model {cfg.model.path}; load1 at the end {result['loadavg_end']:.1f}"
    )
    if "train" in result:
        print(f"dataset {cfg.data.train_dir}: {result['train']['examples']} usable examples for {cfg.method}")
        print()
        print("\n".join(train_table(result["train"], cfg.method, F.batch, F.reps)))
    if "eval" in result:
        print()
        print("\n".join(eval_table(result["eval"], F.new_tokens)))
        result["eval"]["parts"] = eval_parts(result["eval"])
    print()
    print(json.dumps(result, default=float))
    if F.json_out:
        with open(F.json_out, "w") as f:
            json.dump(result, f, indent=1, default=float)


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("dataset")
    app.run(main)
