"""Collection: tasks × K runs × one policy → an episodes directory (resumable and shardable).

Episodes are enumerated in a fixed order (task order, then run) and shard ``i`` of ``n`` takes every
n-th one, so processes or hosts split the work without talking to each other. Finished episodes
(``summary.json`` present) are skipped on a re-run; interrupted ones are re-run; errored ones are
re-run unless ``retry_errored=False``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from typing import Sequence

from tqdm.auto import tqdm

from rollout.core import Environment, Policy, Task
from rollout.harness.pool import BrowserPool
from rollout.harness.runner import HarnessConfig, run_episode
from rollout.recording import FINISHED, check_collection, episode_status, write_tasks

log = logging.getLogger(__name__)


class CollectionAborted(RuntimeError):
    """Too many episodes in a row errored: something is wrong beyond single episodes."""


@dataclasses.dataclass(frozen=True)
class CollectConfig:
    """How a collection runs: the output directory, K runs per task (on the first ``tree_tasks`` tasks when set), the
    seed, parallel browser contexts, this shard of the task list, error handling and the harness settings."""

    out_dir: str
    runs: int = 4  # K: runs per task from the same start state
    tree_tasks: int = 0  # > 0: only the first this-many tasks get K runs (their trees); every other task one run
    seed: int = 0
    contexts: int = 4  # episodes in parallel (browser contexts)
    shard_index: int = 0
    num_shards: int = 1
    retry_errored: bool = True
    max_consecutive_errors: int = 25
    progress: bool = True
    harness: HarnessConfig = HarnessConfig()

    def __post_init__(self):
        if self.runs < 1 or self.contexts < 1:
            raise ValueError(f"runs and contexts must be >= 1 (got {self.runs}, {self.contexts})")
        if self.tree_tasks < 0:
            raise ValueError(f"tree_tasks must be >= 0 (0 = every task gets {self.runs} runs), got {self.tree_tasks}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} must be in [0, num_shards={self.num_shards})")


def select_tasks(
    env: Environment, split: str, num_tasks: int = 0, task_ids: Sequence[str] = (), families: Sequence[str] = ()
) -> list[Task]:
    """The tasks of a split: only ``families`` if given;
    ``task_ids`` in their order if given; else the first ``num_tasks`` (0 = all) with families interleaved."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks={num_tasks}: the number of tasks to take, >= 0 (0 = the whole split)")
    tasks = env.tasks(split)
    if families:
        unknown = set(families) - {t.family for t in tasks}
        if unknown:
            raise ValueError(f"unknown task families {sorted(unknown)}; have {sorted({t.family for t in tasks})}")
        tasks = [t for t in tasks if t.family in families]
    if task_ids:
        by_id = {t.task_id: t for t in tasks}
        missing = [i for i in task_ids if i not in by_id]
        if missing:
            raise ValueError(f"no such task ids in the {split} split: {missing[:5]}")
        return [by_id[i] for i in task_ids]
    if num_tasks:
        by_family: dict[str, list] = {}
        for t in tasks:
            by_family.setdefault(t.family, []).append(t)
        mixed = [t for group in zip(*by_family.values()) for t in group]
        chosen = {t.task_id for t in mixed}
        tasks = (mixed + [t for t in tasks if t.task_id not in chosen])[:num_tasks]
    return list(tasks)


def shard_episodes(
    tasks: list[Task], runs: int, shard_index: int, num_shards: int, tree_tasks: int = 0
) -> list[tuple[Task, int]]:
    """This shard's (task, run) pairs: ``runs`` runs of each of the first ``tree_tasks`` tasks (all when 0), one run
    of every other task; every ``num_shards``-th pair of that fixed order."""
    episodes = [(t, r) for i, t in enumerate(tasks) for r in range(runs if not tree_tasks or i < tree_tasks else 1)]
    return episodes[shard_index::num_shards]


async def collect_async(
    env: Environment, tasks: list[Task], policy: Policy, cfg: CollectConfig, meta: dict | None = None
) -> dict:
    """Run every unfinished episode of this shard; returns counts by status (and browser launches)."""
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate task ids in the task list")
    check_collection(
        cfg.out_dir,
        {
            "env": env.name,
            "runs": cfg.runs,
            "seed": cfg.seed,
            **({"tree_tasks": cfg.tree_tasks} if cfg.tree_tasks else {}),
            "policy": getattr(policy, "name", type(policy).__name__),
            "num_tasks": len(tasks),
            "max_steps": cfg.harness.max_steps,
            **({"step_slack": cfg.harness.step_slack} if cfg.harness.step_slack else {}),
            **(meta or {}),
        },
    )
    write_tasks(cfg.out_dir, tasks)  # every shard: hosts may write to separate directories merged later
    mine = shard_episodes(tasks, cfg.runs, cfg.shard_index, cfg.num_shards, cfg.tree_tasks)
    counts = collections.Counter()
    todo = collections.deque()
    for task, run in mine:
        status = episode_status(cfg.out_dir, task.task_id, run, repair=True)
        if status in FINISHED or (status == "errored" and not cfg.retry_errored):
            counts["skipped"] += 1
        else:
            todo.append((task, run))
    env.start()
    bar = tqdm(
        total=len(mine),
        initial=counts["skipped"],
        desc=f"collect {env.name}",
        unit="ep",
        disable=not cfg.progress,
        dynamic_ncols=True,
    )
    streak = [0]

    async def worker(pool: BrowserPool) -> None:
        while todo:
            task, run = todo.popleft()
            summary = await run_episode(pool, env, task, run, policy, cfg.out_dir, cfg.harness, cfg.seed)
            counts[summary["status"]] += 1
            streak[0] = streak[0] + 1 if summary["status"] == "errored" else 0
            if summary["status"] == "errored":
                log.warning("episode %s/%d errored: %s", task.task_id, run, summary["error"]["message"][:200])
            if streak[0] >= cfg.max_consecutive_errors:
                raise CollectionAborted(
                    f"{streak[0]} episodes in a row errored; last: "
                    f"{summary['error']['type']}: {summary['error']['message'][:300]}"
                )
            bar.update(1)
            bar.set_postfix(ok=counts["success"], fail=counts["failure"], err=counts["errored"], refresh=False)

    try:
        async with BrowserPool(recycle_after=cfg.harness.recycle_after, viewport=cfg.harness.viewport) as pool:
            workers = [asyncio.create_task(worker(pool)) for _ in range(min(cfg.contexts, max(len(todo), 1)))]
            try:
                await asyncio.gather(*workers)
            finally:
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
            counts["launches"] = pool.launches
            counts["crashes"] = pool.crashes
    finally:
        bar.close()
    counts["total"] = len(mine)
    return dict(counts)


def collect(env: Environment, tasks: list[Task], policy: Policy, cfg: CollectConfig, meta: dict | None = None) -> dict:
    """Blocking ``collect_async``: collect the episodes and return the outcome counts."""
    return asyncio.run(collect_async(env, tasks, policy, cfg, meta))
