"""Collect browser episodes: tasks × K runs × a policy → an episodes directory.

  python -m launch.collect --env=shop --split=train --num_tasks=50 --runs=8 --policy=oracle \
      --wrong_choice=0.15 --loop=0.1 --malformed=0.05 --premature_stop=0.02 --out=data/episodes/train
  python -m launch.collect --env=miniwob --policy=model --model=bundled --out=data/episodes/miniwob
  python -m launch.collect --policy=http --http_url=http://127.0.0.1:8000 --http_model=tgpo --out=…
  # shard over processes / hosts (same --out on a shared disk, or merge the directories later):
  python -m launch.collect … --shard_index=$I --num_shards=4
  # Agent Q's search (docs/method.md §9.1): simulations per task, K proposals per node, a critic
  python -m launch.collect --mode=mcts --policy=model --model=runs/sft --simulations=16 --k=3 \
      --critic=http://127.0.0.1:8000 --critic_model=tgpo --out=data/episodes/search
Re-running the same command resumes: finished episodes are skipped, interrupted and errored ones re-run (a search:
finished tasks are skipped, an interrupted task is searched again).
"""

from __future__ import annotations

import dataclasses
import json

from absl import app, flags

from launch import browser_flags
from launch.entry import prepare
from rollout.harness.runner import HarnessConfig

F = flags.FLAGS
browser_flags.define(
    split="train",
    runs=4,
    runs_help="K: runs per task",
    temperature=0.7,
    temperature_help="model / http policy sampling temperature",
    screenshots=True,
    out="data/episodes",
    out_help="output collection directory",
)
flags.DEFINE_integer(
    "tree_tasks",
    0,
    "only the first N tasks get --runs runs (their trees), every other task one run; 0 = every task gets --runs",
)
flags.DEFINE_enum("policy", "oracle", ["oracle", "model", "http"], "policy")
flags.DEFINE_enum(
    "mode",
    "episodes",
    ["episodes", "mcts"],
    "episodes: --runs independent runs per task; mcts: Agent "
    "Q's search, --simulations episodes per task grown into a tree (rollout/search/)",
)
browser_flags.define_search("mcts")
flags.DEFINE_float("wrong_choice", 0.1, "oracle: rate of wrong item / option choices")
flags.DEFINE_float("loop", 0.1, "oracle: rate of redundant detours (link, then GO_BACK)")
flags.DEFINE_float("malformed", 0.03, "oracle: rate of malformed outputs")
flags.DEFINE_float("premature_stop", 0.02, "oracle: rate of premature STOP")
flags.DEFINE_float(
    "recover",
    0.0,
    "oracle: share of wrong clicks undone at once (GO_BACK, then the right choice): "
    "one run then holds a pair at the decision",
)
flags.DEFINE_float(
    "repeat",
    0.0,
    "oracle: rate of repeating the last command where it changes nothing (a stutter): "
    "one run then holds the repeat and the next step at one node",
)
flags.DEFINE_float(
    "wrong_button",
    0.0,
    'oracle: rate of pressing the product page\'s other button ("Add to cart" '
    'for "Buy Now" and back); undone at the recover rate where the task\'s check does not see it',
)
flags.DEFINE_float(
    "wrong_sort",
    0.0,
    "oracle: rate of clicking a sort link where the plan picks a product on a "
    "results page of a task without a sort (webshop, multi_cart), then back at once",
)
flags.DEFINE_string("model", "bundled", "model policy: checkpoint / HF directory / GGUF / 'bundled'")
flags.DEFINE_string("http_url", "http://127.0.0.1:8000", "http policy: OpenAI-compatible server base URL")
flags.DEFINE_string(
    "http_model", "bundled", "http policy: model name on that server (launch.serve names it after --model)"
)
flags.DEFINE_enum(
    "http_observation",
    "text",
    ["text", "both", "image"],
    "http policy: the page as text (the prompt "
    "our models train on); both: text and the screenshot as an image part (vision-language endpoints; "
    "needs --screenshots); image: only the screenshot, with each element's id drawn on it (turns "
    "--marks on; needs --screenshots)",
)
flags.DEFINE_bool(
    "marks",
    False,
    "draw each element's id on the saved screenshots (set-of-marks; the pHash stays the "
    "unmarked page's); needs --screenshots; --http_observation=image turns it on",
)
flags.DEFINE_integer("seed", 0, "collection seed (oracle mistakes, sampling)")
flags.DEFINE_integer("shard_index", 0, "this process's shard")
flags.DEFINE_integer("num_shards", 1, "number of shards")
flags.DEFINE_bool("retry_errored", True, "re-run episodes that errored in an earlier run")
flags.DEFINE_list("allow_origins", [], "GOTO / navigation allowlist beyond the environment's own origin")
flags.DEFINE_integer("recycle_after", HarnessConfig.recycle_after, "episodes per browser before a fresh one")


def make_policy(env):
    """The policy the flags name, through the one loader (``experiment.evaluate.load_policy``): a model trained by the
    pipeline is prompted as it was trained (its ``policy.json``)."""
    from experiment.evaluate import load_policy
    from tgpo_jax.models.sampler import SamplingParams

    if F.policy == "http":
        from rollout.policies.http import OpenAIPolicy
        from rollout.policies.prompt import PromptConfig

        if F.http_observation == "both" and not F.screenshots:  # image: use_marks refused it before the browsers
            raise app.UsageError("--http_observation=both sends each step's screenshot: it needs --screenshots")
        return OpenAIPolicy(
            F.http_url,
            F.http_model,
            temperature=F.temperature,
            max_tokens=F.max_tokens,
            prompt=PromptConfig(budget_tokens=F.budget_tokens * 2),
            observation=F.http_observation,
        ), {"http_url": F.http_url, "http_model": F.http_model, "http_observation": F.http_observation}
    spec = (
        f"oracle:{F.wrong_choice},{F.loop},{F.malformed},{F.premature_stop},{F.recover},{F.repeat},"
        f"{F.wrong_button},{F.wrong_sort}"
        if F.policy == "oracle"
        else F.model
    )
    params = SamplingParams(temperature=F.temperature, max_tokens=F.max_tokens, seed=F.seed)
    try:
        policy = load_policy(
            spec,
            params=params,
            budget_tokens=F.budget_tokens * 2,
            max_batch=F.max_batch,
            env=env,
            seed=F.seed,
            page_ids=F.page_ids,
            thoughts=F.thoughts,
        )
    except ValueError as e:  # an unknown thought wording
        raise app.UsageError(str(e)) from None
    if F.policy == "oracle":
        policy.name = "oracle"  # the rates are in the metadata; a collection made before keeps resuming
        noise = dataclasses.asdict(policy.noise)
        for rate in ("wrong_button", "wrong_sort"):  # collections made before a rate existed keep resuming
            if not noise[rate]:
                del noise[rate]
        # the wording, as the pipeline's stage spec says it: every collection made before the setting was worded
        # scratch_copy, so one resumed with it keeps going, and one made with another wording is never resumed so
        wording = (
            {} if policy.thoughts == "scratch_copy" else {"thoughts": policy.thoughts, "page_ids": policy.page_ids}
        )
        return policy, {"noise": noise, **wording}
    return policy, {"model": F.model}


def use_marks() -> bool:
    """--marks, or implied by --http_observation=image (its endpoint names elements by the ids drawn on the page)."""
    marks = F.marks or (F.policy == "http" and F.http_observation == "image")
    if marks and not F.screenshots:
        why = "--marks" if F.marks else "--http_observation=image (which turns --marks on)"
        raise app.UsageError(f"{why} draws element ids on the saved screenshots: it needs --screenshots")
    return marks


def main(argv):
    """Collect episodes of the chosen tasks with the chosen policy (sampled runs or MCTS) into ``--out`` and print the
    counts as JSON."""
    prepare(argv)
    import asyncio

    from rollout.collect import CollectConfig, collect_async

    if F.mode == "mcts" and F.policy == "oracle":
        raise app.UsageError(
            "--mode=mcts needs a sampling policy (--policy=model or http): the oracle keeps "
            "per-episode memory and cannot propose at a replayed state"
        )
    marks = use_marks()  # before the environment starts: a usage error costs nothing
    env, tasks = browser_flags.env_and_tasks(F.model if F.policy == "model" else None)
    if F.policy == "oracle":
        browser_flags.require_oracle(env, tasks)
    policy, policy_meta = make_policy(env)
    harness = HarnessConfig(
        max_steps=F.max_steps,
        step_slack=F.step_slack,
        budget_tokens=F.budget_tokens,
        screenshots=F.screenshots,
        marks=marks,
        step_timeout_s=F.step_timeout_s,
        episode_timeout_s=F.episode_timeout_s,
        extra_origins=tuple(F.allow_origins),
        recycle_after=F.recycle_after,
    )
    cfg = CollectConfig(
        out_dir=F.out,
        runs=F.runs,
        tree_tasks=F.tree_tasks,
        seed=F.seed,
        contexts=F.contexts,
        shard_index=F.shard_index,
        num_shards=F.num_shards,
        retry_errored=F.retry_errored,
        harness=harness,
    )
    meta = {"split": F.split, "locale": browser_flags.locale(env), **policy_meta}

    async def go():
        try:
            if F.mode == "mcts":
                from rollout.search.driver import search_collect

                critic, search = browser_flags.search_setup()
                return await search_collect(
                    env, tasks, policy, critic, search, harness, F.out, seed=F.seed, contexts=F.contexts
                )
            return await collect_async(env, tasks, policy, cfg, meta=json.loads(json.dumps(meta, default=str)))
        finally:
            await policy.close()
            env.stop()

    counts = asyncio.run(go())
    print(
        json.dumps(
            {
                "out": F.out,
                "shard": f"{F.shard_index}/{F.num_shards}",
                **counts,
                "harness": dataclasses.asdict(harness),
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    app.run(main)
