"""Agent Q in the main job (docs/method.md §9.1, §9.3): the stage bodies of its baselines and of search at inference,
and what the report says of them. Functions of the pipeline ``p`` (``experiment.pipeline.Pipeline``), as
``experiment.outputs`` is.

- ``traj_dpo``: trajectory pairs from round 1's episodes (the trees' own, so the same browser budget);
- ``search_dpo``: a second round-1 collection, Agent Q's search with the first seed's SFT model proposing, whose
  trees' nodes become records for DPO;
- ``eval.search_models``: search at inference on the first held-out tasks, beside the plain evaluation.
"""

from __future__ import annotations

import dataclasses
import json

from experiment.names import display_name, model_name
from experiment.pipeline_config import plain as _plain
from experiment.stages import Stage


def search_stages(p) -> list[Stage]:
    """The search collection after the first seed's SFT, and its records."""
    c = p.cfg
    sft = model_name("sft", 1, p.tag(p.seeds[0]))
    collect = {
        k: v
        for k, v in _plain(c.collect).items()
        if k in ("seed", "max_steps", "step_slack", "top_p", "max_tokens", "budget_tokens", "screenshots")
    }
    spec = {
        "env": _plain(c.env),
        "tasks": _plain(c.tasks),
        "collect": collect,
        "search": _plain(c.search),
        "proposer": sft,
        **p.prompt_spec(),
        **p.thoughts_spec(),
    }
    n = min(c.search.tasks, c.tasks.num_train)
    return [
        Stage(
            "collect-search-r1",
            lambda: collect_search(p),
            spec,
            (sft,),
            (p.search_episodes(1),),
            f"Agent Q's search on {n} training tasks, {c.search.simulations} simulations each, "
            f"{display_name(sft)} proposing {c.search.k}",
        ),
        Stage(
            "dataset-search-r1",
            lambda: build_search(p),
            {"dataset": _plain(c.dataset), **p.prompt_spec()},
            ("collect-search-r1",),
            (p.search_dataset(1),),
            "the search trees' nodes as records",
        ),
    ]


def build_trajectories(p) -> dict:
    """Round 1's trajectory pairs for traj_dpo (trees/trajectory_records.py), prompts as the tree dataset's."""
    from trees.dataset import build_dataset

    bcfg = dataclasses.replace(
        p.build_config(),
        values="trajectory",
        traj_max_pairs=p.cfg.traj.max_pairs,
        traj_max_steps=p.cfg.traj_dpo.data.max_branches,
    )
    summary = build_dataset([p.episodes(1)], p.traj_dataset(1), bcfg, progress=p.progress)
    summary["broken_episodes"] = len(summary["broken_episodes"])
    check_enough_pairs(summary["records"], p.cfg.traj_dpo.train.batch_size)
    return {
        k: summary[k]
        for k in ("tasks", "episodes", "successful_episodes", "records", "trajectory_pairs", "broken_episodes")
    }


def check_enough_pairs(records: int, batch_size: int) -> None:
    """Said where the pairs are counted, not after SFT has trained (traj_dpo would fail at its first batch)."""
    if records < batch_size:
        raise RuntimeError(
            f"the episodes gave {records} trajectory pairs, fewer than one traj_dpo batch of {batch_size}: collect "
            "more runs per task (collect.runs, collect.tree_tasks) or set --config.traj_dpo.train.batch_size to at "
            f"most {records}"
        )


def collect_search(p) -> dict:
    """Search the first ``search.tasks`` training tasks with the first seed's SFT model as the proposer
    (rollout/search/driver.py); resumable by task."""
    from rollout.harness.runner import HarnessConfig
    from rollout.recording import iter_episodes
    from rollout.search.driver import LogprobCritic, SearchConfig, search_collect

    c, s = p.cfg.collect, p.cfg.search
    sft = p.model_dir(model_name("sft", 1, p.tag(p.seeds[0])))
    policy = p.policy(sft, s.temperature, c.top_p, c.max_tokens, c.max_batch, c.seed, constrain=s.constrain)
    harness = HarnessConfig(
        max_steps=c.max_steps, step_slack=c.step_slack, budget_tokens=c.budget_tokens, screenshots=c.screenshots
    )
    tasks = p.tasks("train")[: s.tasks]
    counts = p.with_policy(
        policy,
        search_collect(
            p.env,
            tasks,
            policy,
            LogprobCritic(),
            SearchConfig(s.simulations, s.k, s.c, s.alpha),
            harness,
            p.search_episodes(1),
            seed=c.seed,
            contexts=c.contexts,
            progress=p.progress,
        ),
    )
    # the browser budget, beside round 1's: every executed step, replayed prefixes included
    counts["browser_steps"] = sum(len(e.steps) for e in iter_episodes(p.search_episodes(1)))
    counts["round1_browser_steps"] = sum(len(e.steps) for e in iter_episodes(p.episodes(1)))
    return counts


def build_search(p) -> dict:
    """The search dataset stage: node records from round 1's search trees (``values=mcts``) and its counts;
    ``RuntimeError`` when no node yields a pair at the margin theta."""
    from trees.dataset import build_dataset
    from tgpo_jax.data.examples import PairConfig, preference_pairs
    from tgpo_jax.data.io import DatasetReader

    bcfg = dataclasses.replace(p.build_config(), values="mcts")
    summary = build_dataset([p.search_episodes(1)], p.search_dataset(1), bcfg, progress=p.progress)
    summary["broken_episodes"] = len(summary["broken_episodes"])
    theta = p.cfg.search_dpo.data.margin
    with DatasetReader(p.search_dataset(1)) as reader:
        usable = sum(bool(preference_pairs(r, PairConfig(margin=theta))) for r in reader)
    if not usable:  # said here, where it is decided, not as a failed read in search_dpo
        raise RuntimeError(
            f"the search gave no node whose edges' values differ by more than theta = {theta} "
            f"({summary['records']} nodes with two or more edges run): search more "
            "(search.simulations, search.tasks) or lower search_dpo.data.margin"
        )
    summary["nodes_with_pairs"] = usable
    return {
        k: summary[k]
        for k in ("tasks", "episodes", "successful_episodes", "records", "nodes_with_pairs", "broken_episodes")
    }


def search_evaluate(p, name: str) -> dict:
    """Agent Q's search at inference (experiment/evaluate.py): ``name`` proposes, its log-probs rank."""
    from experiment.evaluate import EvalConfig, search_evaluate_async
    from rollout.search.driver import LogprobCritic, SearchConfig

    e, s = p.cfg.eval, p.cfg.search
    policy = p.policy(p.model_dir(name), s.temperature, e.top_p, e.max_tokens, e.max_batch, 0, constrain=s.constrain)
    tasks = p.tasks("test")[: e.search_tasks]
    ecfg = EvalConfig(
        out_dir=p.path("eval-search", name),
        env=p.cfg.env.name,
        split="test",
        num_tasks=len(tasks),
        families=tuple(f for f in p.cfg.tasks.families if f),
        seeds=tuple(e.seeds),
        runs=1,
        contexts=e.contexts,
        max_steps=e.max_steps,
        step_slack=e.step_slack,
        temperature=s.temperature,
        progress=p.progress,
        redundancy=e.redundancy,
    )
    meta = {"model": name, "constrain": bool(s.constrain), "prompt_tokens": p.cfg.prompt_tokens}
    result = p.with_policy(
        policy,
        search_evaluate_async(
            p.env, tasks, policy, LogprobCritic(), SearchConfig(s.simulations, s.k, s.c, s.alpha), ecfg, meta=meta
        ),
    )
    return {"mean": result["mean"]}


# ---------------------------------------------------------------- the report's parts
def search_rows(p, evals: dict) -> list[dict]:
    """Search at inference beside each model's plain evaluation on the same held-out tasks."""
    from experiment import results

    out = []
    for name in p.search_models():
        with open(p.path("eval-search", name, "eval.json"), encoding="utf-8") as f:
            ev = json.load(f)
        ids = [r["task_id"] for r in ev["tasks_table"]]
        plain = results.task_values(evals[name], "success_rate", set(ids)) if name in evals else {}
        out.append(
            {
                "model": display_name(name),
                "tasks": len(ids),
                "simulations": ev["search"]["simulations"],
                "plain": sum(plain.values()) / len(plain) if plain and len(plain) == len(ids) else None,
                **{k: ev["mean"][k] for k in ("first_success_rate", "success_rate", "browser_steps_per_task")},
            }
        )
    return out


def budget_notes(p) -> list[str]:
    """The browser budget of Agent Q's baselines beside the trees': what each one's training data cost."""
    out = []
    if "traj_dpo" in p.cfg.methods:
        with open(p.path("stages", "dataset-traj-r1.json")) as f:
            r = json.load(f)["result"]
        out.append(
            f"Trajectory DPO: {r['trajectory_pairs'].get('pairs', 0)} pairs (successful vs failed run of a "
            f"task) from round 1's {r['episodes']} episodes, the trees' own (the same browser budget); pairs "
            f"left out: {({k: v for k, v in r['trajectory_pairs'].items() if k != 'pairs'}) or 'none'}."
        )
    if "search_dpo" in p.cfg.methods:
        with open(p.path("stages", "collect-search-r1.json")) as f:
            r = json.load(f)["result"]
        s = p.cfg.search
        out.append(
            f"DPO (search): Agent Q's search on {r['tasks']} training tasks ({s.simulations} simulations, "
            f"k {s.k}, c {s.c}, α {s.alpha}), the first seed's SFT proposing: {r['browser_steps']} browser "
            f"steps, beside round 1's {r['round1_browser_steps']} for the trees."
        )
    return out
