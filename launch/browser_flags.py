"""The flags that ``launch.collect`` and ``launch.evaluate`` share (which tasks, how each episode runs, how a model
samples), defined once with each launcher's own defaults, and the task selection both do with them."""

from __future__ import annotations

import os

from absl import app, flags, logging

from rollout.envs.shop.tasks import ITEM_NAMES

F = flags.FLAGS


def define(
    *,
    split: str,
    runs: int,
    runs_help: str,
    temperature: float,
    temperature_help: str,
    screenshots: bool,
    out: str,
    out_help: str,
) -> None:
    """Define the shared task, episode and sampling flags, with the calling launcher's defaults and help texts for the
    split, runs, temperature, screenshots and output directory."""
    from rollout.collect import CollectConfig
    from rollout.harness.runner import HarnessConfig

    h, c = HarnessConfig(), CollectConfig(out_dir="")  # the defaults live in the dataclasses, not here
    # which tasks
    flags.DEFINE_enum("env", "shop", ["shop", "miniwob", "tasks"], "environment (tasks: your own site, --tasks)")
    flags.DEFINE_string("tasks", None, "--env=tasks: the JSONL task file (docs/tasks.md)")
    flags.DEFINE_string(
        "tasks_origin", None, "--env=tasks: the site's origin (http://host:port) for the file's relative start URLs"
    )
    flags.DEFINE_enum("split", split, ["train", "test"], "task split (held-out: test)")
    flags.DEFINE_integer("num_tasks", 0, "first N tasks of the split, families interleaved (0 = all)")
    flags.DEFINE_list("task_ids", [], "explicit task ids (overrides --num_tasks)")
    flags.DEFINE_list(
        "families",
        [],
        "only these task families; 'all': every family (--env=miniwob: every task "
        "the miniwob package registers, not only the oracle's; named MiniWoB++ tasks need no oracle)",
    )
    # the shop's settings: default as the pipeline run that trained --model built its shop (policy.json)
    flags.DEFINE_enum("locale", None, ["en", "zh"], "shop catalogue locale; default: --model's (policy.json), else en")
    flags.DEFINE_integer(
        "shop_seed",
        None,
        "shop catalogue and task seed (the pipeline's env.seed); default: --model's (policy.json), else 0",
    )
    flags.DEFINE_enum(
        "item_names",
        None,
        list(ITEM_NAMES),
        "shop: how multi_cart tasks name their items: "
        "'second item [..]' (ordinal, the shop's wording) or 'item 2 [..]' (number, the tasks of a model "
        "trained before it); default: --model's (policy.json), else ordinal",
    )
    flags.DEFINE_integer("runs", runs, runs_help)
    # how the oracle words its thoughts; for a model, the wording it trained on (policy.json)
    flags.DEFINE_string(
        "thoughts",
        None,
        "the oracle's thought wording: plain, or a recipe's (scratch_copy, the "
        "from-scratch copy model's); a model's, whose rules the valid-argument decoding follows: "
        "default --model's (policy.json), else plain",
    )
    flags.DEFINE_enum(
        "page_ids",
        None,
        ["before", "after"],
        "where element ids stand in a page line: a model's "
        "prompt and the oracle's plain thoughts; default: --model's (policy.json), else before",
    )
    # how each episode runs
    flags.DEFINE_integer("contexts", c.contexts, "parallel browser contexts")
    flags.DEFINE_integer("max_steps", h.max_steps, "steps per episode")
    flags.DEFINE_integer(
        "step_slack", h.step_slack, "> 0: an episode stops at min(max_steps, the task's optimal length + slack)"
    )
    flags.DEFINE_integer("budget_tokens", h.budget_tokens, "observation text budget (tokens)")
    flags.DEFINE_bool("screenshots", screenshots, "save screenshots (the pHash is always recorded)")
    flags.DEFINE_float("step_timeout_s", h.step_timeout_s, "per-step watchdog")
    flags.DEFINE_float("episode_timeout_s", h.episode_timeout_s, "per-episode watchdog")
    # how a model policy samples
    flags.DEFINE_float("temperature", temperature, temperature_help)
    flags.DEFINE_integer("max_tokens", 128, "model policy: tokens per step")
    flags.DEFINE_integer("max_batch", 8, "model policy: largest sampler batch")
    flags.DEFINE_string("out", out, out_help)


def env_and_tasks(model: str | None = None):
    """The environment and the tasks the flags select (a usage error when they select none); ``model``: the model
    directory whose shop (catalogue locale and seed, task wording) is the default."""
    from rollout.collect import select_tasks
    from rollout.envs import make_env

    if (F.env == "tasks") != bool(F.tasks):
        raise app.UsageError("--tasks=FILE goes with --env=tasks (and --env=tasks needs it)")
    families = _families()
    given = {"locale": F.locale, "seed": F.shop_seed, "item_names": F.item_names}
    kwargs = (
        shop_settings({k: v for k, v in given.items() if v is not None}, model)
        if F.env == "shop"
        else {"path": F.tasks, "origin": F.tasks_origin}
        if F.env == "tasks"
        else _miniwob_tasks(families)
    )
    try:
        env = make_env(F.env, **kwargs)
        if F.env == "tasks":
            env.start()  # its site answers and its selectors parse, before a model loads or an episode runs
    except ValueError as e:  # a bad task file: its line and field; an unreachable site; an unknown MiniWoB++ task
        raise app.UsageError(str(e)) from None
    try:
        tasks = select_tasks(env, F.split, F.num_tasks, F.task_ids, () if families == "all" else families)
    except ValueError as e:
        env.stop()
        raise app.UsageError(str(e)) from None
    if not tasks:
        env.stop()
        raise app.UsageError("no tasks selected")
    return env, tasks


def shop_settings(given: dict, model: str | None) -> dict:
    """The shop's settings (``ShopEnv`` kwargs: catalogue locale and seed, multi_cart's wording): each from ``given``
    (the flags set), else as the pipeline run that trained ``model`` built its shop (``policy.json``'s ``shop``), else
    the default. Why: another seed is another catalogue and other
    tasks, another wording fails multi_cart for the wording alone, and nothing in an episode would say so; a flag
    that differs from the model's is said in the log."""
    from rollout.envs.shop.env import shop_defaults
    from rollout.policies.prompt import saved_prompt

    try:
        saved = saved_prompt(model) if model and os.path.isdir(model) else {}
    except ValueError as e:  # a policy.json that names no known prompt: say so before the browser starts
        raise app.UsageError(str(e)) from None
    trained = saved.get("shop", {})
    for k, v in given.items():
        if k in trained and v != trained[k]:
            logging.warning(
                "--%s=%s, but %s was trained on a shop with %s=%s",
                "shop_seed" if k == "seed" else k,
                v,
                model,
                k,
                trained[k],
            )
    return {k: given.get(k, trained.get(k, d)) for k, d in shop_defaults().items()}


EVALUATION_FLAGS = ("constrain", "max_tokens", "max_steps", "step_slack")


def evaluation_settings(saved: dict, given: dict, defaults: dict) -> dict:
    """The decoding and step cap of launch.evaluate: a flag given on the command line, else the setting the pipeline
    evaluated the model with (``saved``: policy.json's ``evaluation``), else the flag's default. Without it a pipeline
    model evaluated there decoded unconstrained with another step cap, and its success differed from the report's."""
    return {k: given[k] if k in given else saved.get(k, defaults[k]) for k in EVALUATION_FLAGS}


def _families():
    """--families as given, or "all" (every family: no filter, and every MiniWoB++ task)."""
    names = list(F.families)
    if "all" in names and names != ["all"]:
        raise app.UsageError(f"--families={','.join(names)}: 'all' selects every family; give it alone")
    return "all" if names == ["all"] else names


def _miniwob_tasks(families) -> dict:
    """MiniWoB++ pages to serve: by default the tasks with a scripted oracle (what the pipelines collect from);
    --families=all every registered task; named families, or the tasks of --task_ids (miniwob/<task>/<seed>), any."""
    if families == "all":
        return {"task_names": "all"}
    named = families or [i.split("/")[1] for i in F.task_ids if i.count("/") == 2]
    return {"task_names": list(dict.fromkeys(named))} if named else {}


def require_oracle(env, tasks) -> None:
    """The oracle follows each task's scripted plan: tasks it cannot play (a MiniWoB++ task without a plan, a task-file
    task without ``plan``) are a usage error here, before any episode runs, not an errored episode per task."""
    try:
        env.require_oracle(tasks)
    except ValueError as e:
        env.stop()
        raise app.UsageError(str(e)) from None


def locale(env) -> str | None:
    """The shop's catalogue locale for a run's metadata (None for other environments)."""
    return env.locale if F.env == "shop" else None


def define_search(prefix: str) -> None:
    """Agent Q's search flags (docs/method.md §9.1), shared by launch.collect (--mode=mcts) and launch.evaluate
    (--search=mcts); ``prefix`` leads each help text."""
    flags.DEFINE_integer("simulations", 8, f"{prefix}: simulations (episodes) per task")
    flags.DEFINE_integer("k", 3, f"{prefix}: commands proposed per expanded node (samples of the policy)")
    flags.DEFINE_float("c_exp", 1.0, f"{prefix}: UCB1 exploration constant")
    flags.DEFINE_float("alpha", 0.5, f"{prefix}: Q = alpha * search value + (1 - alpha) * critic value")
    flags.DEFINE_string(
        "critic",
        "logprob",
        f"{prefix}: 'logprob' (rank proposals by the policy's own log-prob) or "
        "the base URL of an OpenAI-compatible server whose model ranks them",
    )
    flags.DEFINE_string("critic_model", "bundled", f"{prefix}: the critic's model name on that server")


def search_setup():
    """-> (critic, SearchConfig) from the search flags."""
    from rollout.search.critic import ModelCritic
    from rollout.search.driver import LogprobCritic, SearchConfig

    F = flags.FLAGS
    critic = LogprobCritic() if F.critic == "logprob" else ModelCritic(F.critic, F.critic_model)
    return critic, SearchConfig(simulations=F.simulations, k=F.k, c=F.c_exp, alpha=F.alpha)
