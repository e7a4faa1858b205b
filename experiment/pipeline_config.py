"""The pipeline configuration's checks: list fields as given on the command line made tuples (``normalize``), and
clear errors for configurations that cannot run, before any work (``validate``)."""

from __future__ import annotations

import json
import os

from experiment.names import MODEL_KINDS
from rollout.envs.shop.tasks import ITEM_NAMES
from tgpo_jax.data.collate import PREFERENCE
from tgpo_jax.data.examples import pair_config

SHOP_TITLE = "tgpo-jax: TGPO on the embedded shop"  # configs/pipeline.py's default title


def shop_kwargs(cfg) -> dict:
    """The ``ShopEnv`` settings of a pipeline config (``SHOP_SETTINGS``): the shop its stages run and its models'
    policy.json record."""
    from rollout.envs.shop.env import shop_defaults

    # a setting the config lacks takes the shop's default
    kw = {k: cfg.env.get(k, d) for k, d in shop_defaults().items()}
    return {**kw, "seed": int(kw["seed"])}


def plain(cd) -> dict:
    """A config section as a plain JSON-safe dict."""
    return json.loads(cd.to_json_best_effort()) if hasattr(cd, "to_json_best_effort") else dict(cd)


def names(value) -> tuple:
    """A tuple field as given in a config file or on the command line (``--config.methods=sft,tgpo`` arrives as
    ``('sft,tgpo',)``): the comma-separated names, flattened."""
    items = [value] if isinstance(value, (str, int)) else list(value)
    return tuple(
        p.strip() if isinstance(p, str) else p
        for v in items
        for p in (str(v).split(",") if isinstance(v, str) else [v])
        if not isinstance(p, str) or p.strip()
    )


def normalize(cfg) -> None:
    """Normalise the config in place: list-valued settings to tuples of names, seeds to ints, a preset's settings for
    its own environment reset elsewhere (``for_environment``), and the title naming a user task file."""
    for section, key in (
        (None, "methods"),
        ("eval", "models"),
        ("rounds", "methods"),
        ("tasks", "families"),
        ("eval", "seeds"),
        (None, "train_seeds"),
        ("eval", "curve_methods"),
        ("eval", "search_models"),
    ):
        node = cfg if section is None else cfg[section]
        with node.ignore_type():
            node[key] = names(node[key])
    with cfg.eval.ignore_type():
        cfg.eval.seeds = tuple(int(s) for s in cfg.eval.seeds)
    with cfg.ignore_type():
        cfg.train_seeds = tuple(int(s) for s in cfg.train_seeds)
    for_environment(cfg)
    if cfg.env.name == "tasks" and cfg.title == SHOP_TITLE and cfg.env.tasks:  # the report names the user's tasks
        cfg.title = f"tgpo-jax: TGPO on {os.path.basename(cfg.env.tasks)}"


def for_environment(cfg) -> None:
    """Settings a preset made for its own environment apply there only. With another ``env.name`` (any preset on
    your task file) the preset's task families (the tiny preset's shop family ``procedure``, the miniwob preset's
    MiniWoB tasks) become every family, and its title the default (which then names the task file); off the shop,
    the shop's item wording ``env.item_names`` takes its default (no stage records it there). Families or a title
    given on the command line that differ from the preset's are kept (``validate`` checks the families)."""
    own = cfg.get("preset_env")
    if own is not None and cfg.env.name != own.name:
        if names(cfg.tasks.families) == names(own.families):
            with cfg.tasks.ignore_type():
                cfg.tasks.families = ()
        if cfg.title == own.title:
            cfg.title = SHOP_TITLE
    if cfg.env.name != "shop" and "item_names" in cfg.env:
        from rollout.envs.shop.env import shop_defaults

        cfg.env.item_names = shop_defaults()["item_names"]


def task_file_families(cfg) -> None:
    """``tasks.families`` on a task file: each must be a family of the file (an error now, not when the pipeline's
    environment starts)."""
    wanted = [f for f in names(cfg.tasks.families) if f]
    if cfg.env.name != "tasks" or not wanted or not cfg.env.tasks:
        return
    from rollout.envs.taskfile import load_tasks

    have = {t.family for t in load_tasks(cfg.env.tasks, cfg.env.origin or None)}
    unknown = sorted(set(wanted) - have)
    if unknown:
        raise ValueError(
            f"tasks.families {unknown}: not in {cfg.env.tasks}, whose families are {sorted(have)} ('' = every family)"
        )


def curve_methods(cfg) -> tuple[str, ...]:
    """The methods whose success-vs-steps curve is measured: ``eval.curve_methods``, where ``("*",)`` is each trained
    method that Table 1 evaluates (the default preset's: its curves follow ``--config.methods``)."""
    if tuple(cfg.eval.curve_methods) != ("*",):
        return tuple(cfg.eval.curve_methods)
    wanted = cfg.eval.models or cfg.methods
    return tuple(m for m in cfg.methods if m in wanted)


def validate(cfg) -> None:
    """Clear errors for configurations that cannot run, before any work."""
    bad = [m for m in cfg.methods if m not in MODEL_KINDS]
    if bad or "sft" not in cfg.methods:
        raise ValueError(
            f"methods {list(cfg.methods)}: expected 'sft' plus any of {MODEL_KINDS[1:]} "
            "(the preference methods start from the SFT model)"
        )
    s = cfg.search
    bad = [m for m in cfg.eval.search_models if m not in cfg.methods]
    if bad or (cfg.eval.search_models and cfg.eval.search_tasks < 1):
        raise ValueError(
            f"eval.search_models {list(cfg.eval.search_models)}: expected trained methods "
            f"{list(cfg.methods)} and eval.search_tasks >= 1 (got {cfg.eval.search_tasks})"
        )
    if (cfg.eval.search_models or "search_dpo" in cfg.methods) and (
        s.simulations < 1 or s.k < 1 or not 0 <= s.alpha <= 1
    ):
        raise ValueError(f"search: simulations >= 1, k >= 1 and 0 <= alpha <= 1 expected; got {dict(s)}")
    if "search_dpo" in cfg.methods and (s.tasks < 1 or s.k < 2):
        raise ValueError(
            f"methods with 'search_dpo' need search.tasks >= 1 and k >= 2 (pairs compare a node's edges); got {dict(s)}"
        )
    j = cfg.judge
    if "judge_dpo" in cfg.methods and (
        j.k < (1 if j.mode == "dpo1" else 2)
        or j.tasks < 1
        or j.mode not in ("dpo1", "dpo2", "dpo3")
        or not 0 <= j.threshold <= 100
        or j.max_tokens < 1
        or j.concurrency < 1
        or bool(j.url) != bool(j.model)
    ):
        raise ValueError(
            f"methods with 'judge_dpo' need judge.k >= 2 (1 for dpo1), tasks >= 1, "
            f"mode dpo1 / dpo2 / dpo3, "
            f"0 <= threshold <= 100, max_tokens and concurrency >= 1, and judge.model with judge.url "
            f"(url '' = the built-in reference judge); got {dict(j)}"
        )
    if "traj_dpo" in cfg.methods and cfg.collect.runs < 2 and not cfg.collect.reuse:
        raise ValueError(
            f"methods with 'traj_dpo' need collect.runs >= 2 (got {cfg.collect.runs}): its pairs are a "
            "successful and a failed run of the same task"
        )
    bad = [m for m in cfg.eval.models if m != "base" and m not in cfg.methods]
    if bad:
        raise ValueError(f"eval.models {bad}: expected 'base' or one of the trained methods {list(cfg.methods)}")
    if cfg.rounds.count < 1:
        raise ValueError(f"rounds.count={cfg.rounds.count}: must be >= 1")
    if not cfg.train_seeds or len(set(cfg.train_seeds)) != len(cfg.train_seeds) or min(cfg.train_seeds) < 0:
        raise ValueError(f"train_seeds={list(cfg.train_seeds)}: expected distinct non-negative integers")
    if cfg.rounds.count > 1 and len(cfg.train_seeds) > 1:
        raise ValueError(
            "rounds.count > 1 with several train_seeds: each seed would need its own round-2 "
            "collection; run the rounds with one seed"
        )
    if cfg.sft_continue and "sft" in curve_methods(cfg):
        raise ValueError(
            "sft_continue with SFT's curve (eval.curve_methods): the curve's snapshots would be the "
            "second phase's alone; leave 'sft' out of eval.curve_methods or set sft_continue=False"
        )
    trained = set(cfg.methods) | ({"sft_more"} if cfg.sft_continue else set()) | set(cfg.rounds.methods)
    for m in sorted(trained & set(MODEL_KINDS)):  # refused now, not after the stages before its training ran
        try:
            pair_config(cfg[m].data)
        except ValueError as e:
            raise ValueError(f"{m}.data: {e} (docs/method.md §5-6)") from None
        if cfg[m].data.get("kto_reachable", False) and m != "kto":
            raise ValueError(f"{m}.data.kto_reachable: a plain-KTO setting (kto.data.kto_reachable)")
    named = () if tuple(cfg.eval.curve_methods) == ("*",) else cfg.eval.curve_methods
    bad = [m for m in named if m not in cfg.methods]
    if bad:
        raise ValueError(
            f"eval.curve_methods {bad}: expected trained methods {list(cfg.methods)}, or '*' alone "
            f"(each evaluated method)"
        )
    if cfg.eval.curve_methods and cfg.eval.curve_points < 2:
        raise ValueError(f"eval.curve_points={cfg.eval.curve_points}: a curve needs at least 2 points")
    if cfg.rounds.count > 1:
        bad = [m for m in cfg.rounds.methods if m not in PREFERENCE]
        if bad or not cfg.rounds.methods:
            raise ValueError(f"rounds.methods {list(cfg.rounds.methods)}: expected a non-empty subset of {PREFERENCE}")
        if cfg.rounds.behaviour not in (*cfg.rounds.methods, "sft"):
            raise ValueError(
                f"rounds.behaviour={cfg.rounds.behaviour!r} must be 'sft' or one of rounds.methods "
                f"{list(cfg.rounds.methods)} (its round r-1 model collects round r)"
            )
    if cfg.rounds.runs < 0 or cfg.rounds.tree_tasks < 0:
        raise ValueError(
            f"rounds.runs={cfg.rounds.runs}, rounds.tree_tasks={cfg.rounds.tree_tasks}: expected >= 0 (0 = as round 1)"
        )
    if cfg.env.name not in ("shop", "miniwob", "tasks"):
        raise ValueError(f"env.name={cfg.env.name!r}: expected shop, miniwob or tasks")
    if (cfg.env.name == "tasks") != bool(cfg.env.tasks):
        raise ValueError(
            "env.name='tasks' needs env.tasks = a JSONL task file (docs/tasks.md), and env.tasks is only "
            f"read with it (env.name={cfg.env.name!r}, env.tasks={cfg.env.tasks!r})"
        )
    task_file_families(cfg)
    if cfg.env.get("item_names", ITEM_NAMES[0]) not in ITEM_NAMES:
        raise ValueError(
            f"env.item_names={cfg.env.item_names!r}: expected {' or '.join(ITEM_NAMES)} (how multi_cart "
            "names its items)"
        )
    if cfg.tasks.num_train < 1 or cfg.tasks.num_test < 1:
        raise ValueError("tasks.num_train and tasks.num_test must be >= 1")
    if cfg.pretrain_window < 0:
        raise ValueError(f"pretrain_window={cfg.pretrain_window}: tokens per window, or 0 for no pretraining")
    if cfg.prompt_tokens < 64:
        raise ValueError(f"prompt_tokens={cfg.prompt_tokens}: too small for the system prompt and the task")
    scratch = not cfg.sft.model.path
    if scratch and cfg.collect.policy == "base":
        raise ValueError(
            "collect.policy='base' with a from-scratch model: its tokenizer is trained on the first "
            "collection, so round 1 needs another behaviour policy (e.g. the noisy oracle)"
        )
    if scratch and not cfg.sft.model.scratch:
        raise ValueError("sft.model.path is empty and sft.model.scratch names no from-scratch preset")
    prompt_config(cfg)  # the prompt's fields, validated where they are made
    import recipes
    from rollout.policies.thoughts import thoughts

    recipes.register_all()  # a preset's thoughts may name a recipe's wording
    thoughts(cfg.thoughts)  # one no recipe registers: ValueError naming the known ones
    if cfg.export.select not in ("success_rate", "avg_steps", "redundant_steps"):
        raise ValueError(f"export.select={cfg.export.select!r}: expected success_rate, avg_steps or redundant_steps")


def prompt_config(cfg):
    """The run's ``PromptConfig``: how its models are prompted, in training and in the browser (``ValueError`` naming
    a bad field)."""
    from rollout.policies.prompt import SYSTEM_PROMPTS, PromptConfig

    if cfg.prompt_style not in SYSTEM_PROMPTS:
        raise ValueError(f"prompt_style={cfg.prompt_style!r}: expected one of {sorted(SYSTEM_PROMPTS)}")
    return PromptConfig(
        budget_tokens=cfg.prompt_tokens,
        system_prompt=SYSTEM_PROMPTS[cfg.prompt_style],
        thought_chars=cfg.history_thoughts,
        page_ids=cfg.page_ids,
        history_last=cfg.history_last,
        keep_recent=cfg.keep_recent,
        page_cut=cfg.page_cut,
    )
