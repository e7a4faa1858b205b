"""Agent Q's search on one task in the browser (docs/method.md §9.1): each simulation selects a path by UCB1,
replays it, expands the node it ends at (K proposals, ranked by the critic), executes the selected edge, rolls out
with the policy to the episode's end and backs the episode's reward up the path.

Every simulation is an ordinary recorded episode (``run_episode``: watchdogs, crash handling, the same step
records), so the tree builder merges search episodes like any other runs. The path is replayed inside the episode
by ``_SimulationPolicy``, which checks each state against the node's key before forcing the node's edge: a
replay that reaches another page ends that episode as errored (``ReplayDiverged``), and its reward is not backed up.

Proposals: the policy's ``act`` is asked K times at the node with distinct episode keys (``<key>/propose<j>``),
so a sampling policy whose output depends only on the request (our model, an HTTP endpoint) gives K samples. A
policy that keeps per-episode memory (the oracle) is not a proposal policy: it would propose without its memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from typing import Protocol, Sequence

from rollout.commands import parse_output
from rollout.core import ActionError, Environment, PolicyOutput, PolicyRequest, Task
from rollout.harness.runner import HarnessConfig, run_episode
from rollout.recording import episode_dir, read_steps, set_aside, task_dir_name
from rollout.search.mcts import Edge, SearchNode, backup, best_edge, rank_values, select, walk
from rollout.search.replay import ReplayDiverged, key_of, state_key

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """The search's budget and constants: simulations per task, proposals per expanded node, the UCB1 constant and the
    blend weight alpha; ``ValueError`` for out-of-range values."""

    simulations: int = 8  # episodes per task
    k: int = 3  # proposals per expanded node (distinct commands kept)
    c: float = 1.0  # UCB1 exploration constant
    alpha: float = 0.5  # Q = α·Q̃ + (1 − α)·Q̂

    def __post_init__(self):
        if self.simulations < 1 or self.k < 1 or self.c < 0 or not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"invalid search config: {self}")


class Critic(Protocol):
    """Ranks a node's proposed outputs for the search's critic value Q-hat."""

    def rank(
        self, task: str, page: str, candidates: Sequence[str], logprobs: Sequence[float | None] = ()
    ) -> tuple[list[int], int]:
        """(candidate indices best first, number of malformed critic answers) for the proposals at a page; ``logprobs``
        are the proposer's."""


class LogprobCritic:
    """Ranks the proposals by the proposing policy's own log-prob (no second model; unknown log-probs last, then
    proposal order)."""

    def rank(
        self, task: str, page: str, candidates: Sequence[str], logprobs: Sequence[float | None] = ()
    ) -> tuple[list[int], int]:
        """Candidate indices by descending log-prob (unknown last, then proposal order), and no malformed answers."""
        lp = [x if x is not None else float("-inf") for x in logprobs] or [0.0] * len(candidates)
        return sorted(range(len(candidates)), key=lambda i: (-lp[i], i)), 0


def command_of(text: str) -> str:
    """The canonical command of an output, or the stripped text when it holds no valid command."""
    try:
        return parse_output(text)[1].render()
    except ActionError:
        return text.strip()


class _SimulationPolicy:
    """One simulation's policy: the path's edges forced (each after checking the state), the leaf expanded, then
    the inner policy."""

    def __init__(self, inner, path: list[tuple[SearchNode, int]], leaf: SearchNode | None, search: "TaskSearch"):
        self.inner, self.path, self.leaf, self.search = inner, path, leaf, search
        self.name = getattr(inner, "name", "policy")

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        t = request.step
        key = state_key(request.observation, self.search.essential)
        if t == 0 and self.search.root is None:  # the first simulation: the start page is the root
            self.search.root = self.leaf = SearchNode(key=key)
        if t < len(self.path):
            node, i = self.path[t]
            if key != node.key:
                raise ReplayDiverged(t, node.key, key, request.observation.shown_url)
            e = node.edges[i]
            return PolicyOutput(e.action, logprob=e.logprob, info={"search": "forced"})
        if t == len(self.path) and self.leaf is not None:
            if key != self.leaf.key:
                raise ReplayDiverged(t, self.leaf.key, key, request.observation.shown_url)
            await self.search.expand(self.leaf, request)
            i = best_edge(self.leaf, self.search.cfg.c, self.search.cfg.alpha)
            self.path.append((self.leaf, i))
            e = self.leaf.edges[i]
            self.leaf = None  # expanded: the steps after this edge are the rollout
            return PolicyOutput(e.action, logprob=e.logprob, info={"search": "expanded"})
        return await self.inner.act(request)

    async def close(self) -> None:
        pass


class TaskSearch:
    """The search tree of one task and the simulations that grow it."""

    def __init__(
        self,
        env: Environment,
        task: Task,
        policy,
        critic: Critic,
        cfg: SearchConfig,
        harness: HarnessConfig,
        out_dir: str,
        seed: int = 0,
    ):
        self.env, self.task, self.policy, self.critic, self.cfg = env, task, policy, critic, cfg
        self.harness, self.out_dir, self.seed = harness, out_dir, seed
        self.essential = env.essential_query_params()
        self.root: SearchNode | None = None
        self.stats = {
            "simulations": 0,
            "episodes": 0,
            "success": 0,
            "diverged": 0,
            "errored": 0,
            "terminal_reuse": 0,
            "critic_malformed": 0,
        }

    async def expand(self, node: SearchNode, request: PolicyRequest) -> None:
        """K proposals at ``node`` (distinct commands), ranked by the critic into Q̂."""
        outs: list[PolicyOutput] = []
        seen: set[str] = set()
        for j in range(self.cfg.k):
            out = await self.policy.act(dataclasses.replace(request, episode_key=f"{request.episode_key}/propose{j}"))
            cmd = command_of(out.text)
            if cmd not in seen:
                seen.add(cmd)
                outs.append(out)
        ranking, bad = await asyncio.to_thread(
            self.critic.rank,
            self.task.instruction,
            request.observation.text,
            [o.text for o in outs],
            [o.logprob for o in outs],
        )
        self.stats["critic_malformed"] += bad
        q_hat = rank_values(ranking)
        node.edges = [
            Edge(action=o.text, command=command_of(o.text), critic=q_hat[i], logprob=o.logprob)
            for i, o in enumerate(outs)
        ]

    async def simulate(self, pool, sim: int) -> dict | None:
        """One simulation; -> its episode summary (None when it ended at a terminal node without a browser)."""
        self.stats["simulations"] += 1
        if self.root is None or not self.root.expanded:
            path, leaf = [], self.root  # None: the first episode learns the root's key at its first step
        else:
            path = select(self.root, self.cfg.c, self.cfg.alpha)
            node, i = path[-1]
            leaf = node.edges[i].child  # None: the last edge was never executed, it is forced too
            if leaf is not None and leaf.terminal:
                backup(path, leaf.reward)
                self.stats["terminal_reuse"] += 1
                return None
        policy = _SimulationPolicy(self.policy, list(path), leaf, self)
        summary = await run_episode(pool, self.env, self.task, sim, policy, self.out_dir, self.harness, self.seed)
        self.stats["episodes"] += 1
        if summary["status"] == "errored":
            err = summary["error"] or {}
            self.stats["diverged" if err.get("type") == "ReplayDiverged" else "errored"] += 1
            log.warning("search %s simulation %d: %s", self.task.task_id, sim, err.get("message"))
            return summary
        steps = read_steps(episode_dir(self.out_dir, self.task.task_id, sim))
        reward = 1.0 if summary["success"] else 0.0
        self.stats["success"] += int(reward)
        self._attach_children(policy.path, steps, summary, reward)
        backup(policy.path, reward)
        return summary

    def _attach_children(self, path, steps, summary, reward) -> None:
        """Each executed edge of the path gets its child node: the next recorded state, or a terminal node when
        the episode ended right after it."""
        for depth, (node, i) in enumerate(path):
            e = node.edges[i]
            if e.child is not None:
                continue
            prefix = tuple(n.edges[j].command for n, j in path[: depth + 1])
            if depth + 1 < len(steps):
                s = steps[depth + 1]
                e.child = SearchNode(key=key_of(s["norm_url"], s["observation"]), prefix=prefix)
            else:  # the episode ended with this edge (STOP, the task done, the step cap)
                final = summary["final"] or {}
                key = key_of(final.get("norm_url", ""), final.get("observation", "")) + "/end"
                e.child = SearchNode(key=key, prefix=prefix, terminal=True, reward=reward)

    def tree_json(self) -> dict:
        """The tree as JSON: nodes in depth-first order, each with an ``id``; an edge names its child's id."""
        nodes = list(walk(self.root)) if self.root is not None else []
        ids = {id(n): k for k, n in enumerate(nodes)}
        return {
            "task_id": self.task.task_id,
            "config": dataclasses.asdict(self.cfg),
            "stats": self.stats,
            "nodes": [
                {
                    "id": ids[id(n)],
                    "key": n.key,
                    "prefix": list(n.prefix),
                    "terminal": n.terminal,
                    "reward": n.reward,
                    "edges": [
                        {
                            "action": e.action,
                            "command": e.command,
                            "critic": e.critic,
                            "q_search": e.q_search,
                            "visits": e.visits,
                            "logprob": e.logprob,
                            "child": None if e.child is None else ids[id(e.child)],
                        }
                        for e in n.edges
                    ],
                }
                for n in nodes
            ],
        }


def tree_path(out_dir: str, task_id: str) -> str:
    """The JSON file of task ``task_id``'s search tree in a collection."""
    return os.path.join(out_dir, "search", task_dir_name(task_id) + ".json")


async def search_task(
    pool,
    env: Environment,
    task: Task,
    policy,
    critic: Critic,
    cfg: SearchConfig,
    harness: HarnessConfig,
    out_dir: str,
    seed: int = 0,
) -> TaskSearch:
    """``cfg.simulations`` simulations of ``task``, one episode each under ``out_dir``; the tree is written to
    ``tree_path(out_dir, task_id)`` when the last one is done (the mark of a finished task). A task's search is
    not resumed midway: episodes left by an interrupted search are set aside and the task searched again."""
    for run in range(cfg.simulations):
        path = episode_dir(out_dir, task.task_id, run)
        if os.path.exists(path):
            set_aside(out_dir, path, f"left by an interrupted search of {task.task_id}")
    s = TaskSearch(env, task, policy, critic, cfg, harness, out_dir, seed)
    for sim in range(cfg.simulations):
        await s.simulate(pool, sim)
    path = tree_path(out_dir, task.task_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(s.tree_json(), f, indent=1)
    os.replace(path + ".tmp", path)
    return s


async def search_collect(
    env: Environment,
    tasks: Sequence[Task],
    policy,
    critic: Critic,
    cfg: SearchConfig,
    harness: HarnessConfig,
    out_dir: str,
    seed: int = 0,
    contexts: int = 1,
    progress: bool = True,
) -> dict:
    """Search every task whose tree is not written yet, ``contexts`` tasks at a time (each in its own browser
    context per simulation); resumable by task. -> counts over the tasks searched now."""
    from tqdm import tqdm

    from rollout.harness.pool import BrowserPool
    from rollout.recording import write_tasks

    os.makedirs(os.path.join(out_dir, "search"), exist_ok=True)
    settings = {
        "env": env.name,
        "policy": getattr(policy, "name", type(policy).__name__),
        "critic": type(critic).__name__,
        "seed": seed,
        "max_steps": harness.max_steps,
        **dataclasses.asdict(cfg),
    }
    saved_path = os.path.join(out_dir, "search", "settings.json")
    if os.path.exists(saved_path):  # a resumed search must be the same search
        with open(saved_path, encoding="utf-8") as f:
            saved = json.load(f)
        changed = {k: (saved.get(k), v) for k, v in settings.items() if saved.get(k) != v}
        if changed:
            raise ValueError(
                f"{out_dir} holds a search with other settings {changed} (saved, now): use another "
                "--out or the same settings"
            )
    else:
        with open(saved_path, "w", encoding="utf-8") as f:
            json.dump(settings, f, indent=1)
    write_tasks(out_dir, list(tasks))
    todo = [t for t in tasks if not os.path.exists(tree_path(out_dir, t.task_id))]
    counts = {"tasks": len(tasks), "skipped": len(tasks) - len(todo), "searched": 0}
    bar = tqdm(
        total=len(tasks),
        initial=counts["skipped"],
        desc=f"search {env.name}",
        unit="task",
        disable=not progress,
        dynamic_ncols=True,
    )
    queue = list(reversed(todo))
    env.start()
    try:
        async with BrowserPool(recycle_after=harness.recycle_after, viewport=harness.viewport) as pool:

            async def worker():
                while queue:
                    s = await search_task(pool, env, queue.pop(), policy, critic, cfg, harness, out_dir, seed)
                    counts["searched"] += 1
                    for k, v in s.stats.items():
                        counts[k] = counts.get(k, 0) + v
                    bar.update(1)

            await asyncio.gather(*[worker() for _ in range(max(1, min(contexts, len(todo))))])
    finally:
        bar.close()
    return counts
