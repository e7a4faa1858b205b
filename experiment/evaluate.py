"""Evaluation in the browser (docs/method.md §8, TGPO Table 1): success rate, average steps per episode and redundant
steps per episode (steps with ``R_red = -1``) of one policy on held-out tasks, over several seeds.

One collection per seed goes to ``<out_dir>/seed<k>`` (``rollout.collect``: re-running resumes, finished
episodes are never run again); the metrics are computed from the recordings and written to
``<out_dir>/eval.json``.

Definitions:
- success rate: finished episodes whose task check succeeded / finished episodes;
- average steps: recorded steps per finished episode (malformed outputs and STOP included);
- redundant steps: per episode, the steps with ``R_red = -1`` (docs/method.md §3: the next state revisits a state
  of the same trajectory, or the action changed nothing) in the graph of that episode *alone*
  (``build_task_graph([ep], task, TreeConfig(merge=...))``): inside a K-run training tree states merge across
  runs; for evaluation each trajectory is judged on its own. Which states are "the same" (``redundancy``):
  * ``"either"`` (default): the training tree's rule, URL and (action sequence or pHash), so evaluation and
    training count redundancy the same way;
  * ``"strict"``: URL and action sequence and pHash. Misses reloads: clicking the link of the page one is on
    reloads it (the DOM is replaced), which extends the action sequence, so the reloaded page is a new state;
  * ``"page"``: ``strict``, plus the ``either`` rule's revisits for the steps that loaded a page (navigation,
    reload, GO_BACK). It was needed while the harness recorded the 64-bit pHash, which could not tell the shop's
    pages apart (Home and Cart hashed equal; an option change never showed); with the 256-bit pHash it and
    ``either`` agree on the clean oracle (0) and on loops.
- errored episodes (browser crash, watchdog, policy exception) are counted apart and left out of the three
  metrics; a re-run of the same command retries them.
- element-level metrics (localisation, value match, answer exact match and token F1) for tasks whose check names
  HTML elements (the task-file environment): ``experiment.element_metrics``; each is averaged over the episodes where
  it applies (``<metric>_n`` of them) and is None elsewhere.

Seeds: the collection seed reaches the policy with every request. It changes the oracle's mistakes and a model's
sampling when ``temperature > 0``; with greedy decoding (``temperature = 0``, the default) a model policy
produces the same episodes under every seed, so the seeds only repeat the measurement (CI half-width 0).
The confidence interval is Student-t over the per-seed values (None with one seed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from typing import Callable, Sequence

from rollout.collect import select_tasks  # noqa: F401  (re-exported: evaluation selects tasks as collection does)
from rollout.core import Environment, Policy, Task
from rollout.policies.prompt import PromptConfig

METRICS = ("success_rate", "avg_steps", "redundant_steps", "avg_score")
REDUNDANCY_RULES = ("page", "strict", "either")


# ---------------------------------------------------------------- policies
def _parse_oracle(spec: str):
    """The noise of ``oracle[:rates]``: named (``oracle:wrong_choice=0.15,loop=0.1``; the others 0) or positional
    (``oracle:0.15,0.1,0.05,0.02``: four to eight rates in ``OracleNoise``'s field order)."""
    import dataclasses

    from rollout.policies.oracle import OracleNoise

    names = [f.name for f in dataclasses.fields(OracleNoise)]
    rates = spec.split(":", 1)[1] if ":" in spec else ""
    if not rates.strip():
        return OracleNoise()
    parts = [p.strip() for p in rates.split(",")]
    named = ["=" in p for p in parts]
    if any(named) and not all(named):
        raise ValueError(f"--model={spec!r}: oracle rates are all named (wrong_choice=0.15,...) or all positional")
    if all(named):
        pairs = [(k.strip(), v) for k, v in (p.split("=", 1) for p in parts)]
        keys = [k for k, _ in pairs]
        unknown = sorted(set(keys) - set(names))
        if unknown:
            raise ValueError(f"--model={spec!r}: unknown oracle rate(s) {unknown}; known: {', '.join(names)}")
        if len(set(keys)) != len(keys):
            raise ValueError(f"--model={spec!r}: an oracle rate is named twice")
        return OracleNoise(**dict(zip(keys, _rates(spec, [v for _, v in pairs]))))
    if len(parts) not in (4, 5, 6, 7, 8):
        raise ValueError(
            f"--model={spec!r}: expected oracle:<wrong_choice>,<loop>,<malformed>,<premature_stop>"
            f"[,<recover>[,<repeat>[,<wrong_button>[,<wrong_sort>]]]] (four to eight rates in [0, 1]) or named "
            f"rates (oracle:wrong_choice=0.15,loop=0.1), got {len(parts)} value(s)"
        )
    return OracleNoise(*_rates(spec, parts))


def _rates(spec: str, values: list[str]) -> list[float]:
    try:
        return [float(v) for v in values]
    except ValueError as e:
        raise ValueError(f"--model={spec!r}: oracle rates must be numbers ({e})") from None


def trained_thoughts(saved: dict) -> str:
    """The thought wording a model trained on, from its ``policy.json`` (``saved_prompt``), else (no file) plain."""
    return saved.get("thoughts", "plain")


def is_run_dir(path: str) -> bool:
    """A training run directory (``launch.train``'s output): ``config.json`` and ``checkpoints/``."""
    return os.path.isfile(os.path.join(path, "config.json")) and os.path.isdir(os.path.join(path, "checkpoints"))


def load_policy(
    model: str,
    *,
    params,
    prompt: PromptConfig | None = None,
    budget_tokens: int = 2048,
    max_batch: int = 8,
    step: int | None = None,
    env: Environment | None = None,
    seed: int = 0,
    prompt_style: str | None = None,
    thought_chars: int | None = None,
    page_ids: str | None = None,
    history_last: bool | None = None,
    keep_recent: int | None = None,
    page_cut: str | None = None,
    constrain: bool = False,
    thoughts: str | None = None,
) -> Policy:
    """The policy named by ``model``:

    - ``oracle`` / ``oracle:<wrong_choice>,<loop>,<malformed>,<premature_stop>[,<recover>[,<repeat>[,<wrong_button>
      [,<wrong_sort>]]]]``:
      the (noisy) oracle of ``env``;
    - a training run directory (``config.json`` + ``checkpoints/``): checkpoint ``step`` (default: the latest),
      LoRA adapters folded in;
    - a Hugging Face directory, a ``.gguf`` file or ``'bundled'``.

    ``params`` (``SamplingParams``) sets decoding for model policies. The policy's ``name`` describes it.
    ``prompt``: how a model is prompted, whole; without it, from the fields below over those saved with the model.
    The system text is ``prompt_style`` (``prompt.SYSTEM_PROMPTS``) when given, else the one saved next to the
    model (``policy.json``, written by the pipeline for the models it trains), else the full grammar; likewise
    ``thought_chars``, the characters of each earlier step's thought kept in the history (default 160), and
    ``page_ids``, where page lines put element ids (default "before"), ``history_last`` (the previous actions after
    the page; default False), ``keep_recent`` (history items kept before the page is cut; default
    ``prompt.KEEP_RECENT``) and ``page_cut`` (how a page too long for the budget is cut; default "end").
    ``constrain``: valid-argument decoding (``rollout/policies/constrain.py``) for model policies.
    ``thoughts``: the oracle's thought wording (a name registered with ``rollout/policies/thoughts.py``; default
    plain), its element ids where ``page_ids`` puts them (default "before"); for a model, the wording its thoughts
    were trained on, which the valid-argument decoding's rules follow: given, else ``trained_thoughts``.
    """
    from tgpo_jax.models.loading import BUNDLED_ALIASES

    if model == "oracle" or model.startswith("oracle:"):
        from rollout.policies.oracle import OraclePolicy

        if env is None:
            raise ValueError(f"--model={model!r}: the oracle policy needs the environment (env=...)")
        noise = _parse_oracle(model)
        return OraclePolicy(
            env, noise, seed=seed, name=model, thoughts=thoughts or "plain", page_ids=page_ids or "before"
        )
    from rollout.policies.model import ModelPolicy

    from rollout.policies.prompt import saved_prompt

    saved = saved_prompt(model)
    prompt = prompt or PromptConfig.from_saved(
        saved,
        prompt_style,
        budget_tokens=budget_tokens,
        thought_chars=thought_chars,
        page_ids=page_ids,
        history_last=history_last,
        keep_recent=keep_recent,
        page_cut=page_cut,
    )
    kw = dict(
        params=params,
        prompt=prompt,
        max_batch=max_batch,
        constrain=constrain,
        thoughts=thoughts or trained_thoughts(saved),
    )
    if os.path.isdir(model) and is_run_dir(model):
        from tgpo_jax.models.loading import merged_model, with_tokenizer_eos
        from tgpo_jax.models.sampler import Sampler
        from tgpo_jax.training.restore import restore_checkpoint

        restored = restore_checkpoint(model, step)
        tokenizer = restored.tokenizer
        net = with_tokenizer_eos(merged_model(restored.model), tokenizer)
        return ModelPolicy(Sampler(net, tokenizer), tokenizer, name=f"model:{model}@{restored.step}", **kw)
    if step is not None:
        raise ValueError(
            f"--step={step} given, but {model!r} is not a training run directory (config.json + checkpoints/)"
        )
    hf_dir = os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json"))
    gguf = os.path.isfile(model) and model.endswith(".gguf")
    if model in BUNDLED_ALIASES or hf_dir or gguf:
        return ModelPolicy.from_path(model, name=f"model:{model}", **kw)
    what = (
        "a directory without config.json"
        if os.path.isdir(model)
        else "a file that is not .gguf"
        if os.path.exists(model)
        else "nothing exists there"
    )
    raise FileNotFoundError(
        f"cannot load a policy from {model!r} ({what}): expected a training run directory (config.json + "
        f"checkpoints/), a Hugging Face directory (config.json + safetensors), a .gguf file, one of "
        f"{list(BUNDLED_ALIASES)}, or oracle / oracle:<wrong_choice>,<loop>,<malformed>,<premature_stop>"
        f"[,<recover>[,<repeat>[,<wrong_button>[,<wrong_sort>]]]]"
    )


def policy_for_seed(policy, seed: int):
    """The policy to run seed ``seed`` with. The oracle draws its mistakes from its own seed: a copy with ``seed``.
    A callable without ``act`` is a factory ``seed -> policy``. Other policies get the seed with each request."""
    from rollout.policies.oracle import OraclePolicy

    if isinstance(policy, OraclePolicy):
        return policy.with_seed(seed)
    if callable(policy) and not hasattr(policy, "act"):
        return policy(seed)
    return policy


# ---------------------------------------------------------------- tasks
# ---------------------------------------------------------------- configuration
@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What to evaluate on and how. ``seeds``: one collection each (they matter for the oracle and for sampling
    with ``temperature > 0``; a greedy model policy gives the same episodes under every seed). ``temperature``
    is the model policies' decoding temperature (0 = greedy), recorded with the result."""

    out_dir: str
    env: str = "shop"
    split: str = "test"
    num_tasks: int = 0  # 0 = all tasks of the split (after the family filter)
    families: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    runs: int = 1  # runs per task per seed
    contexts: int = 4  # parallel browser contexts
    max_steps: int = 30
    step_slack: int = 0  # > 0: a task with a known optimal length stops at min(max_steps, optimal + step_slack)
    temperature: float = 0.0
    screenshots: bool = False
    budget_tokens: int = 1024  # observation text budget (harness)
    step_timeout_s: float = 180.0
    episode_timeout_s: float = 1800.0
    retry_errored: bool = True
    progress: bool = True
    redundancy: str = "either"  # which states are the same for redundant steps: "page" | "strict" | "either"

    def __post_init__(self):
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty (got {self.seeds})")
        if self.runs < 1 or self.contexts < 1 or self.max_steps < 1 or self.num_tasks < 0:
            raise ValueError(f"invalid evaluation config: {self}")
        if self.redundancy not in REDUNDANCY_RULES:
            raise ValueError(f"redundancy={self.redundancy!r}; expected one of {REDUNDANCY_RULES}")

    def harness(self):
        """The ``HarnessConfig`` of the evaluation's episodes (step limits, prompt budget, screenshots, timeouts)."""
        from rollout.harness.runner import HarnessConfig

        return HarnessConfig(
            max_steps=self.max_steps,
            step_slack=self.step_slack,
            budget_tokens=self.budget_tokens,
            screenshots=self.screenshots,
            step_timeout_s=self.step_timeout_s,
            episode_timeout_s=self.episode_timeout_s,
        )


# ---------------------------------------------------------------- metrics
def _r_red(ep, task: Task | None, merge: str) -> list[bool]:
    from trees.build import TreeConfig, build_task_graph
    from trees.graph import StateRef

    graph = build_task_graph([ep], task, TreeConfig(merge=merge))
    return [graph.rewards[StateRef(0, t)]["r_red"] < 0 for t in range(len(ep.steps))]


def redundant_flags(ep, task: Task | None, rule: str = "either") -> list[bool]:
    """Per step of one episode: ``R_red = -1`` in the graph of that episode alone, states merged by ``rule``."""
    if rule not in REDUNDANCY_RULES:
        raise ValueError(f"redundancy rule {rule!r}; expected one of {REDUNDANCY_RULES}")
    if not ep.steps:
        return []
    if rule != "page":
        return _r_red(ep, task, rule)
    strict, either = _r_red(ep, task, "strict"), _r_red(ep, task, "either")
    return [
        s or (e and bool((step.get("effect") or {}).get("navigated"))) for s, e, step in zip(strict, either, ep.steps)
    ]


def episode_redundancy(ep, task: Task | None, rule: str = "either") -> int:
    """Steps of one episode with ``R_red = -1`` (see the module docstring for ``rule``)."""
    return sum(redundant_flags(ep, task, rule))


def _summarize(rows: Sequence[dict]) -> dict:
    n = len(rows)
    if not n:
        return {"episodes": 0, **{m: None for m in METRICS}}
    return {
        "episodes": n,
        "success_rate": sum(r["success"] for r in rows) / n,
        "avg_steps": sum(r["steps"] for r in rows) / n,
        "redundant_steps": sum(r["redundant"] for r in rows) / n,
        "avg_score": sum(r["score"] for r in rows) / n,
    }


def seed_metrics(out_dir: str, tasks: Sequence[Task], runs: int, redundancy: str = "either") -> dict:
    """The metrics of one seed's collection, over the episodes of ``tasks`` × ``runs`` only."""
    from rollout.recording import iter_episodes

    from experiment.element_metrics import ELEMENT_METRICS, episode_metrics, summarize
    from rollout.envs.checks import parse_check

    by_id = {t.task_id: t for t in tasks}
    parsed = {
        t.task_id: parse_check(t.goal["check"], t.goal.get("start_url", ""))
        for t in tasks
        if isinstance(t.goal, dict) and "check" in t.goal
    }
    rows, errored = [], 0
    for ep in iter_episodes(out_dir, include_errored=True):
        task = by_id.get(ep.task_id)
        if task is None or ep.summary["run"] >= runs:
            continue
        if ep.summary["status"] == "errored":
            errored += 1
            continue
        rows.append(
            {
                "task_id": ep.task_id,
                "run": int(ep.summary["run"]),
                "family": task.family,
                "success": bool(ep.summary["success"]),
                "steps": int(ep.summary["steps"]),
                "score": float(ep.summary["score"]),
                "redundant": episode_redundancy(ep, task, redundancy),
                "optimal": task.optimal_steps,
            }
        )
        if ep.task_id in parsed:
            final = (ep.summary["final"] or {}).get("check")
            rows[-1].update(episode_metrics(ep.steps, final, parsed[ep.task_id]))
    out = _summarize(rows)
    if any(r.get(m) is not None for r in rows for m in ELEMENT_METRICS):
        out["elements"] = summarize(rows)
    out["errored"] = errored
    out["missing"] = len(tasks) * runs - len(rows) - errored
    out["avg_optimal_steps"] = sum(r["optimal"] for r in rows) / len(rows) if rows else None
    out["by_family"] = {
        f: _summarize([r for r in rows if r["family"] == f]) for f in sorted({r["family"] for r in rows})
    }
    out["episodes_table"] = sorted(rows, key=lambda r: (r["task_id"], r["run"]))  # per-task pairing (experiment.stats)
    return out


def mean_ci95(values: Sequence[float]) -> tuple[float | None, dict | None]:
    """(mean, {"low", "high", "half_width"}) with a Student-t 95% interval; the interval is None for < 2 values."""
    from experiment.stats import t_interval

    mean, half = t_interval(values)
    return mean, (None if half is None else {"low": mean - half, "high": mean + half, "half_width": half})


def aggregate(per_seed: Sequence[dict]) -> tuple[dict, dict]:
    """(means, 95% intervals) of the metrics over the per-seed results (element metrics: the seeds where they apply)."""
    from experiment.element_metrics import ELEMENT_METRICS

    means, cis = {}, {}
    for m in METRICS:
        means[m], cis[m] = mean_ci95([s[m] for s in per_seed])
    for m in ELEMENT_METRICS:  # over the seeds where the metric applies (the same tasks in every seed)
        vals = [s["elements"][m] for s in per_seed if (s.get("elements") or {}).get(m) is not None]
        if vals:
            means[m], cis[m] = mean_ci95(vals)
    return means, cis


# ---------------------------------------------------------------- evaluation
def _check_settings(out_dir: str, meta: dict) -> None:
    """The finished collection in ``out_dir`` was made with these settings (as ``collect`` checks on resume)."""
    from rollout.recording import RecordingError

    with open(os.path.join(out_dir, "collection.json"), encoding="utf-8") as f:
        old = json.load(f)
    diff = {k: (old.get(k), v) for k, v in meta.items() if old.get(k) != v}
    if diff:
        raise RecordingError(
            f"{out_dir} holds a collection with other settings ("
            + ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in sorted(diff.items()))
            + "); use another output directory"
        )


def _all_finished(out_dir: str, tasks: Sequence[Task], runs: int) -> bool:
    from rollout.recording import FINISHED, episode_status

    return os.path.isfile(os.path.join(out_dir, "collection.json")) and all(
        episode_status(out_dir, t.task_id, r) in FINISHED for t in tasks for r in range(runs)
    )


async def evaluate_async(
    env: Environment,
    tasks: Sequence[Task],
    policy: Policy | Callable[[int], Policy],
    cfg: EvalConfig,
    meta: dict | None = None,
) -> dict:
    """One (resumable) collection per seed into ``<out_dir>/seed<k>``, then the metrics per seed and across seeds.

    Returns (and writes atomically to ``<out_dir>/eval.json``)::

        {"per_seed": [{"seed", "success_rate", "avg_steps", "redundant_steps", "avg_score", "episodes",
                       "errored", "missing", "avg_optimal_steps", "by_family": {...}, "collect": {counts}}, ...],
         "mean": {metric: value}, "ci95": {metric: {"low", "high", "half_width"} | None},
         "episodes": n (finished, all seeds), "errored": n, "policy": name, "tasks": n, "config": {...}}
    """
    from rollout.collect import CollectConfig, collect_async
    from rollout.recording import write_json_atomic

    tasks = list(tasks)
    if not tasks:
        raise ValueError("no tasks to evaluate on")
    os.makedirs(cfg.out_dir, exist_ok=True)
    harness = cfg.harness()
    name = getattr(policy, "name", None) or getattr(policy, "__name__", type(policy).__name__)
    per_seed = []
    for seed in cfg.seeds:
        seed_dir = os.path.join(cfg.out_dir, f"seed{seed}")
        p = policy_for_seed(policy, seed)
        ccfg = CollectConfig(
            out_dir=seed_dir,
            runs=cfg.runs,
            seed=seed,
            contexts=cfg.contexts,
            retry_errored=cfg.retry_errored,
            progress=cfg.progress,
            harness=harness,
        )
        collect_meta = {"split": cfg.split, "evaluation": True, "temperature": cfg.temperature, **(meta or {})}
        collect_meta = json.loads(json.dumps(collect_meta, default=str))
        if _all_finished(seed_dir, tasks, cfg.runs):  # resumed and complete: no browser to start
            _check_settings(
                seed_dir,
                {
                    "env": env.name,
                    "runs": cfg.runs,
                    "seed": seed,
                    "num_tasks": len(tasks),
                    "policy": getattr(p, "name", type(p).__name__),
                    "max_steps": harness.max_steps,
                    **({"step_slack": harness.step_slack} if harness.step_slack else {}),
                    **collect_meta,
                },
            )
            counts = {"skipped": len(tasks) * cfg.runs, "total": len(tasks) * cfg.runs}
        else:
            counts = await collect_async(env, tasks, p, ccfg, meta=collect_meta)
        row = {"seed": seed, **seed_metrics(seed_dir, tasks, cfg.runs, cfg.redundancy), "collect": counts}
        per_seed.append(row)
    mean, ci = aggregate(per_seed)
    result = {
        "per_seed": per_seed,
        "mean": mean,
        "ci95": ci,
        "episodes": sum(s["episodes"] for s in per_seed),
        "errored": sum(s["errored"] for s in per_seed),
        "policy": name,
        "tasks": len(tasks),
        "task_ids": [t.task_id for t in tasks],
        "config": dataclasses.asdict(cfg),
        **({"meta": meta} if meta else {}),
    }
    result = json.loads(json.dumps(result, default=str))
    write_json_atomic(os.path.join(cfg.out_dir, "eval.json"), result)
    return result


def evaluate(env: Environment, tasks: Sequence[Task], policy, cfg: EvalConfig, meta: dict | None = None) -> dict:
    """``evaluate_async`` from synchronous code (closes nothing: the caller owns the policy and the env)."""
    return asyncio.run(evaluate_async(env, tasks, policy, cfg, meta))


def format_table(result: dict) -> str:
    """A one-line-per-metric text summary: mean ± CI half-width."""
    lines = [
        f"{result['policy']} on {result['tasks']} tasks × {len(result['per_seed'])} seed(s): "
        f"{result['episodes']} episodes ({result['errored']} errored)"
    ]
    from experiment.element_metrics import ELEMENT_METRICS

    for m in (*METRICS, *ELEMENT_METRICS):
        v, ci = result["mean"].get(m), result["ci95"].get(m)
        if v is None:
            continue
        lines.append(f"  {m:16s} {v:.4f}" + (f" ± {ci['half_width']:.4f}" if ci else ""))
    return "\n".join(lines)


async def search_evaluate_async(
    env: Environment, tasks: Sequence[Task], policy: Policy, critic, search, cfg: EvalConfig, meta: dict | None = None
) -> dict:
    """Agent Q's search at inference (docs/method.md §9.1): ``search.simulations`` simulations per held-out task,
    the environment's success check as the reward that the search backs up (the paper's setting: the agent may act,
    observe the outcome and try again). A task counts as solved when a simulation succeeded; ``first_success`` is
    the first simulation's success (the critic's best proposals, then the policy), ``browser_steps`` the steps
    executed across all simulations. One seed (``cfg.seeds[0]``); written to ``<out_dir>/eval.json`` (resumable by
    task). -> the result, with per-family rows."""
    from rollout.recording import iter_episodes, write_json_atomic
    from rollout.search.driver import search_collect, tree_path

    tasks = list(tasks)
    if not tasks:
        raise ValueError("no tasks to evaluate on")
    out = os.path.join(cfg.out_dir, f"search-seed{cfg.seeds[0]}")
    counts = await search_collect(
        env,
        tasks,
        policy,
        critic,
        search,
        cfg.harness(),
        out,
        seed=cfg.seeds[0],
        contexts=cfg.contexts,
        progress=cfg.progress,
    )
    by_task: dict[str, list] = {}
    for e in iter_episodes(out):
        by_task.setdefault(e.task_id, []).append(e)
    rows = []
    for t in tasks:
        if not os.path.exists(tree_path(out, t.task_id)):
            continue
        eps = sorted(by_task.get(t.task_id, []), key=lambda e: e.summary["run"])
        rows.append(
            {
                "task_id": t.task_id,
                "family": t.family,
                "success": any(e.summary["success"] for e in eps),
                "first_success": bool(eps and eps[0].summary["run"] == 0 and eps[0].summary["success"]),
                "simulations_to_success": next((k + 1 for k, e in enumerate(eps) if e.summary["success"]), None),
                "browser_steps": sum(len(e.steps) for e in eps),
            }
        )

    def summarise(rs):
        n = max(len(rs), 1)
        return {
            "tasks": len(rs),
            "success_rate": sum(r["success"] for r in rs) / n,
            "first_success_rate": sum(r["first_success"] for r in rs) / n,
            "browser_steps_per_task": sum(r["browser_steps"] for r in rs) / n,
        }

    result = {
        "search": dataclasses.asdict(search),
        "mean": summarise(rows),
        "by_family": {f: summarise([r for r in rows if r["family"] == f]) for f in sorted({r["family"] for r in rows})},
        "tasks_table": rows,
        "counts": counts,
        "policy": getattr(policy, "name", type(policy).__name__),
        "task_ids": [t.task_id for t in tasks],
        "config": dataclasses.asdict(cfg),
        **({"meta": meta} if meta else {}),
    }
    result = json.loads(json.dumps(result, default=str))
    write_json_atomic(os.path.join(cfg.out_dir, "eval.json"), result)
    return result
