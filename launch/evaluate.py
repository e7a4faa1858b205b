"""Evaluate a policy in the browser on held-out tasks (docs/method.md §8): success rate, average steps per episode and
redundant steps per episode (R_red = -1), per seed and mean ± 95% CI across seeds.

  python -m launch.evaluate --model=runs/tgpo --env=shop --split=test --seeds=0,1,2 --out=eval/tgpo
  python -m launch.evaluate --model=runs/tgpo --step=400 --num_tasks=60 --out=eval/tgpo-400
  python -m launch.evaluate --model=bundled --temperature=0.7 --out=eval/base       # HF dir / .gguf too
  python -m launch.evaluate --model=oracle:0.1,0.1,0.03,0.02 --out=eval/noisy-oracle
  python -m launch.evaluate --model=runs/tgpo --search=mcts --simulations=8 --temperature=0.7 --out=eval/tgpo-search

One collection per seed goes to <out>/seed<k>; the result is printed and written to <out>/eval.json.
Re-running the same command resumes (finished episodes are not run again). With --temperature=0 (greedy) a model
policy gives the same episodes under every seed; seeds matter for sampling and for the oracle.
"""

from __future__ import annotations

import json
import os

from absl import app, flags, logging

from launch import browser_flags
from launch.entry import prepare

F = flags.FLAGS
browser_flags.define(
    split="test",
    runs=1,
    runs_help="runs per task per seed",
    temperature=0.0,
    temperature_help="model policy sampling temperature (0 = greedy)",
    screenshots=False,
    out="data/eval",
    out_help="output directory (seed<k>/ collections and eval.json)",
)
flags.DEFINE_string(
    "model",
    None,
    "training run directory / HF directory / .gguf / 'bundled' / "
    "oracle[:<wrong_choice>,<loop>,<malformed>,<premature_stop>]",
)
flags.DEFINE_integer("step", None, "checkpoint step of a run directory (default: the latest)")
flags.DEFINE_list("seeds", ["0", "1", "2"], "one collection per seed")
flags.DEFINE_float("top_p", 1.0, "model policy nucleus sampling (1 = off)")
flags.DEFINE_bool(
    "constrain",
    False,
    "model policy: valid-argument decoding (every bracketed group one the page or "
    "the task offers: rollout/policies/constrain.py); a pipeline model's default, like --max_tokens, "
    "--max_steps and --step_slack, is the one its evaluation used (policy.json)",
)
flags.DEFINE_integer(
    "prompt_tokens",
    0,
    "model policy prompt budget in the model's tokens (0 = the one saved "
    "with the model in policy.json, else 2 x --budget_tokens)",
)
flags.DEFINE_enum("prompt_style", None, ["full", "compact"], "system text (default: saved with the model, else full)")
flags.DEFINE_enum(
    "redundancy",
    "either",
    ["either", "strict", "page"],
    "which states are the same when counting redundant steps per episode (see experiment/evaluate.py)",
)
flags.DEFINE_enum(
    "search",
    "none",
    ["none", "mcts"],
    "mcts: Agent Q's search at inference (docs/method.md §9.1): "
    "--simulations per task with the success check as reward; solved = a simulation succeeded",
)
browser_flags.define_search("search")
flags.mark_flag_as_required("model")


def main(argv):
    """Evaluate the policy on the chosen tasks and seeds; the table goes to stderr, the results as JSON to stdout."""
    prepare(argv)
    import asyncio

    from experiment.evaluate import EvalConfig, evaluate_async, format_table, load_policy
    from tgpo_jax.models.sampler import SamplingParams

    try:
        seeds = tuple(int(s) for s in F.seeds)
    except ValueError:
        raise app.UsageError(f"--seeds must be integers, got {F.seeds}") from None
    from rollout.policies.prompt import saved_prompt

    try:
        trained = saved_prompt(F.model) if os.path.isdir(F.model) else {}  # policy.json, read once
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    saved = trained.get("evaluation", {})
    names = browser_flags.EVALUATION_FLAGS
    run = browser_flags.evaluation_settings(
        saved, {k: F[k].value for k in names if F[k].present}, {k: F[k].default for k in names}
    )
    if saved:
        logging.info("evaluating as the pipeline that trained %s did (flags given override): %s", F.model, run)
    cfg = EvalConfig(
        out_dir=F.out,
        env=F.env,
        split=F.split,
        num_tasks=F.num_tasks,
        families=tuple(F.families),
        seeds=seeds,
        runs=F.runs,
        contexts=F.contexts,
        max_steps=run["max_steps"],
        step_slack=run["step_slack"],
        temperature=F.temperature,
        screenshots=F.screenshots,
        budget_tokens=F.budget_tokens,
        step_timeout_s=F.step_timeout_s,
        episode_timeout_s=F.episode_timeout_s,
        redundancy=F.redundancy,
    )
    env, tasks = browser_flags.env_and_tasks(F.model)
    if F.model.startswith("oracle"):
        browser_flags.require_oracle(env, tasks)
    params = SamplingParams(temperature=F.temperature, top_p=F.top_p, max_tokens=run["max_tokens"], seed=0)
    try:
        prompt_tokens = F.prompt_tokens or trained.get("budget_tokens") or F.budget_tokens * 2
        policy = load_policy(
            F.model,
            params=params,
            budget_tokens=prompt_tokens,
            max_batch=F.max_batch,
            step=F.step,
            env=env,
            prompt_style=F.prompt_style,
            constrain=run["constrain"],
            page_ids=F.page_ids,
            thoughts=F.thoughts,
        )
    except (FileNotFoundError, ValueError) as e:
        raise app.UsageError(str(e)) from None
    meta = {
        "model": F.model,
        "step": F.step,
        "locale": browser_flags.locale(env),
        "max_tokens": run["max_tokens"],
        "top_p": F.top_p,
        "constrain": run["constrain"],
    }

    if F.search == "mcts" and F.model.startswith("oracle"):
        raise app.UsageError(
            "--search=mcts needs a sampling model policy: the oracle cannot propose at a replayed state"
        )

    async def go():
        try:
            if F.search == "mcts":
                from experiment.evaluate import search_evaluate_async

                critic, search = browser_flags.search_setup()
                return await search_evaluate_async(env, tasks, policy, critic, search, cfg, meta=meta)
            return await evaluate_async(env, tasks, policy, cfg, meta=meta)
        finally:
            await policy.close()
            env.stop()

    result = asyncio.run(go())
    import sys

    if F.search == "none":
        print(format_table(result), file=sys.stderr)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    app.run(main)
