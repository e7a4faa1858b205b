"""Node records from Agent Q's search trees (docs/method.md §9.1): one record per search node where at least two
edges were run, each edge a branch whose value is the search's blend Q = α·Q̃ + (1 − α)·Q̂ (``value_source`` =
``mcts``). Training derives the pairs from the branches as for any record (``tgpo_jax.data.examples``); Agent Q's θ
is the pair margin there. The prompt is the one the policy saw at the node (rebuilt from an episode of the search
that reached it, as ``trees.dataset.step_prompt`` does for tree records).

No behaviour log-prob is stored: a forced step's output was not sampled under that episode's prompt.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from rollout.core import Task
from rollout.recording import EpisodeRecord
from tgpo_jax.data.schema import Branch, NodeRecord
from trees.dataset import BuildConfig, step_prompt


def load_tree(path: str) -> dict:
    """A search tree saved as JSON; ``ValueError`` when the file is not one (no nodes or config)."""
    with open(path, encoding="utf-8") as f:
        tree = json.load(f)
    if not isinstance(tree, dict) or not isinstance(tree.get("nodes"), list) or "config" not in tree:
        raise ValueError(f"{path}: not a search tree (no nodes / config)")
    return tree


def _reaching(episodes: Sequence[EpisodeRecord], prefix: Sequence[str]) -> tuple[EpisodeRecord, int] | None:
    """An episode whose first commands are ``prefix`` and that has a step after them."""
    t = len(prefix)
    for ep in episodes:
        if len(ep.steps) > t and [s.get("command") for s in ep.steps[:t]] == list(prefix):
            return ep, t
    return None


def search_records(
    tree: dict,
    episodes: Sequence[EpisodeRecord],
    task: Task | None,
    cfg: BuildConfig,
    alpha: float | None = None,
    min_visits: int = 1,
) -> list[NodeRecord]:
    """The records of one task's search tree. ``alpha`` defaults to the search's own."""
    alpha = tree["config"]["alpha"] if alpha is None else alpha
    records = []
    for node in tree["nodes"]:
        edges = [e for e in node["edges"] if e["visits"] >= min_visits]
        if len(edges) < 2:
            continue
        found = _reaching(episodes, node["prefix"])
        if found is None:  # every episode through it diverged or errored: no prompt to train on
            continue
        ep, t = found
        branches = []
        for e in edges:
            n_success = round(e["q_search"] * e["visits"])
            branches.append(
                Branch(
                    action=e["action"],
                    command=e["command"],
                    q=alpha * e["q_search"] + (1 - alpha) * e["critic"],
                    rewards={},
                    n_total=e["visits"],
                    n_success=n_success,
                    n_failed=e["visits"] - n_success,
                    on_success_path=n_success > 0,
                    reaches_success=n_success > 0,
                )
            )
        records.append(
            NodeRecord(
                task_id=tree["task_id"],
                node_id=f"s{node['id']}",
                prompt=step_prompt(task, ep, t, cfg),
                branches=branches,
                value_source="mcts",
                meta={
                    "depth": len(node["prefix"]),
                    "url": ep.steps[t].get("norm_url"),
                    "alpha": alpha,
                    "visits": sum(e["visits"] for e in node["edges"]),
                },
            )
        )
    return records


def task_search_records(
    dirs: Sequence[str],
    task_id: str,
    episodes: Sequence[EpisodeRecord],
    task: Task | None,
    cfg: BuildConfig,
    alpha: float | None = None,
) -> list[NodeRecord]:
    """The records of ``task_id``'s search tree, from the first of ``dirs`` (collection directories) holding one;
    none when the task was not searched."""
    from rollout.search.driver import tree_path

    for d in dirs:
        path = tree_path(d, task_id)
        if os.path.exists(path):
            return search_records(load_tree(path), episodes, task, cfg, alpha)
    return []
