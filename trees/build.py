"""Merge a task's K episodes into a graph (docs/method.md §2), score every step (§3) and value every branch (§4).

Pure functions over recorded episodes (``rollout.recording.EpisodeRecord``): no browser, no I/O.

Choices the method leaves open (docs/method.md §2–§4; all ``TreeConfig`` fields, recorded in the dataset manifest):
- A state's *effective action sequence* is the list of canonical commands since the last URL change that changed
  something (URL, DOM, or — for SCROLL — the scroll position); canonical = command name + the target's role and
  accessible name + argument, so volatile element ids never matter.
- ``STOP`` leads to an END node of the node it was given at: it is not a revisit, and the distance to a goal
  counts it, as the environments' optimal lengths do. Goals are the nodes where successful episodes ended
  (END nodes for STOP endings, the final state for episodes the environment ended).
- Q of a branch: per trajectory taking it, the aggregate (mean by default; sum / discounted) of R over the rest of
  that trajectory from its first occurrence, then the mean over those trajectories (the per-trajectory values are
  kept as the branch's ``returns``, for the pair weight's per-occurrence sigma).
- ``L_min``: the task's known optimal length when the environment provides one (> 0), else the graph's shortest
  path from the root to a goal.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict, deque
from typing import Callable, Sequence

from rollout.commands import parse_command
from rollout.core import ActionError, Task
from rollout.episode_format import StepRecord
from trees.graph import BranchValue, Edge, Node, StateRef, TaskGraph
from trees.verify import builtin_verifier

Q_AGGREGATES = ("mean", "sum", "discounted")
MERGE_RULES = ("either", "strict")
REWARD_KEYS = ("r_acc", "r_format", "r_red", "r_subgoal", "r")


@dataclasses.dataclass(frozen=True)
class TreeConfig:
    """How episodes become a merged tree and its values: the state merge rule and guards, the reward weight ``alpha``,
    the Q aggregate and the optimal length used by R_red; ``ValueError`` for out-of-range settings."""

    merge: str = "either"  # "either": URL and (action sequence or pHash); "strict": URL and sequence and pHash
    phash_threshold: int = 0  # pHashes within this Hamming distance are equal
    guard: bool = True  # never merge states whose task check (success, progress) differs
    form_guard: bool = True  # never merge states whose form fields hold different values (typed text, selections)
    alpha: float = 3.0  # R = R_acc + R_format + R_red + alpha * R_subgoal
    q_aggregate: str = "mean"
    gamma: float = 0.9  # for q_aggregate="discounted"
    l_min: str = "env"  # "env": the task's optimal length when known, else the graph; "graph": always the graph

    def __post_init__(self):
        if self.merge not in MERGE_RULES:
            raise ValueError(f"merge={self.merge!r}; expected one of {MERGE_RULES}")
        if self.q_aggregate not in Q_AGGREGATES:
            raise ValueError(f"q_aggregate={self.q_aggregate!r}; expected one of {Q_AGGREGATES}")
        if self.l_min not in ("env", "graph"):
            raise ValueError(f"l_min={self.l_min!r}; expected 'env' or 'graph'")
        if not 0 <= self.phash_threshold <= 64:
            raise ValueError(f"phash_threshold={self.phash_threshold} must be in [0, 64]")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma={self.gamma} must be in (0, 1]")
        if not math.isfinite(self.alpha):
            raise ValueError(f"alpha={self.alpha} must be finite")


# A verifier decides R_acc for one executed step: (step, state before, state after, episode dir) -> bool.
Verifier = Callable[[dict, dict, dict, str], bool]


# ---------------------------------------------------------------- canonical commands and sequences
def canonical(step: StepRecord) -> str:
    """The step's command with the element id replaced by its stable descriptor (role + accessible name)."""
    if not step["format_ok"] or not step["command"]:
        lines = [ln.strip() for ln in step["output"].strip().splitlines() if ln.strip()]
        return "INVALID " + (lines[-1][:120] if lines else "(empty)")
    try:
        cmd = parse_command(step["command"])
    except ActionError:
        return "INVALID " + step["command"][:120]
    target = step["target"]
    where = f'{target["role"]} "{target["name"]}"' if target else (f"#{cmd.id}" if cmd.id else "")
    parts = [cmd.name] + ([where] if where else []) + ([f"[{cmd.arg}]"] if cmd.arg is not None else [])
    return " ".join(parts)


def changed_something(step: StepRecord) -> bool:
    """Whether a recorded step changed the page: the URL or the DOM changed, or a scroll moved as expected."""
    eff = step["effect"]
    if not eff:
        return False
    scrolled = step["command_name"] == "SCROLL" and eff.get("expected_change")
    return bool(eff.get("url_changed") or eff.get("dom_changed") or scrolled)


def episode_states(ep) -> list[dict]:
    """s_0 … s_T of an episode; the final state is dropped when the last step is a STOP (it is s_{T-1} again)."""
    states = [s for s in ep.steps]
    final = ep.summary["final"]
    if final is not None and not (ep.steps and ep.steps[-1]["command_name"] == "STOP"):
        states.append(final)
    return states


def action_sequences(ep, states: Sequence[dict]) -> list[tuple[str, ...]]:
    """For each state, the effective action sequence since the last URL change (docs/method.md §2, rule 2a)."""
    seqs, seq = [()], []
    for t in range(1, len(states)):
        step = ep.steps[t - 1]
        if states[t]["norm_url"] != states[t - 1]["norm_url"]:
            seq = []
        elif changed_something(step):
            seq = seq + [canonical(step)]
        seqs.append(tuple(seq))
    return seqs


def hamming(a: str, b: str) -> int:
    """Hamming distance between two hex-encoded hashes (pHashes)."""
    return bin(int(a, 16) ^ int(b, 16)).count("1")


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)  # the earliest state stays the representative
        return True


# ---------------------------------------------------------------- merging
def merge_states(episodes, cfg: TreeConfig):
    """Union-find over every state of every episode. Returns (refs, states, root index per state, stats)."""
    refs: list[StateRef] = []
    states: list[dict] = []
    seqs: list[tuple] = []
    for e, ep in enumerate(episodes):
        st = episode_states(ep)
        for t, (s, q) in enumerate(zip(st, action_sequences(ep, st))):
            refs.append(StateRef(e, t))
            states.append(s)
            seqs.append(q)
    uf = _UnionFind(len(states))
    stats = {"states": len(states), "merged_by_sequence": 0, "merged_by_phash": 0, "guard_refusals": 0}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, s in enumerate(states):
        c = s["check"]
        guard = (c["success"], c["progress"]) if cfg.guard else None
        if cfg.form_guard:
            guard = (guard, form_values(s["observation"]))
        groups[(s["norm_url"], guard)].append(i)
    if cfg.guard:  # how many merges the guard refused: same URL (and sequence or pHash), other check result
        by_url: dict[tuple, set] = defaultdict(set)
        for (url, guard), members in groups.items():
            for i in members:
                by_url[(url, seqs[i])].add(guard)
        stats["guard_refusals"] = sum(len(g) - 1 for g in by_url.values())
    for members in groups.values():
        if cfg.merge == "either":
            first: dict[tuple, int] = {}
            for i in members:
                if seqs[i] in first:
                    stats["merged_by_sequence"] += uf.union(first[seqs[i]], i)
                else:
                    first[seqs[i]] = i
            _merge_phash(members, states, uf, cfg.phash_threshold, stats)
        else:  # strict: URL and sequence and pHash
            by_seq: dict[tuple, list[int]] = defaultdict(list)
            for i in members:
                by_seq[seqs[i]].append(i)
            for sub in by_seq.values():
                _merge_phash(sub, states, uf, cfg.phash_threshold, stats, strict=True)
    return refs, states, [uf.find(i) for i in range(len(states))], stats


_FORM_FIELD = re.compile(
    r'^\s*\[[^\]]+\]\s+(\S+)\s+("(?:[^"\\]|\\.)*")\s+'
    r'(?:value=("(?:[^"\\]|\\.)*")|.*?checked=(true|false))',
    re.M,
)


def form_values(observation: str) -> tuple[tuple[str, str, str], ...]:
    """(role, name, value or checked) of every field the observation shows a value or check state for. Typing into a
    field can leave the screenshot's pHash unchanged (a few characters in a box), yet the state differs: the form
    guard keeps such states apart, so a node's prompt matches every branch taken at it."""
    return tuple(
        sorted((role, name, value or checked) for role, name, value, checked in _FORM_FIELD.findall(observation))
    )


def _merge_phash(members, states, uf, threshold, stats, strict=False) -> None:
    hashed = [i for i in members if states[i].get("phash")]
    if threshold == 0:
        first: dict[str, int] = {}
        for i in hashed:
            h = states[i]["phash"]
            if h in first:
                stats["merged_by_sequence" if strict else "merged_by_phash"] += uf.union(first[h], i)
            else:
                first[h] = i
        return
    uniq: dict[str, int] = {}
    for i in hashed:
        h = states[i]["phash"]
        if h in uniq:
            stats["merged_by_sequence" if strict else "merged_by_phash"] += uf.union(uniq[h], i)
        else:
            uniq[h] = i
    keys = list(uniq)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            if hamming(keys[a], keys[b]) <= threshold:
                stats["merged_by_sequence" if strict else "merged_by_phash"] += uf.union(uniq[keys[a]], uniq[keys[b]])


# ---------------------------------------------------------------- the graph
def build_task_graph(
    episodes, task: Task | None = None, cfg: TreeConfig = TreeConfig(), verifier: Verifier = builtin_verifier
) -> TaskGraph:
    """The merged graph of one task's sealed episodes, with per-step rewards and branch values."""
    if not episodes:
        raise ValueError("no episodes to build a graph from")
    task_ids = {ep.summary["task_id"] for ep in episodes}
    if len(task_ids) != 1:
        raise ValueError(f"episodes of several tasks given to one graph: {sorted(task_ids)[:3]}")
    refs, states, roots, stats = merge_states(episodes, cfg)
    node_of_root: dict[int, str] = {}
    nodes: dict[str, Node] = {}
    state_node: dict[StateRef, str] = {}
    for ref, s, r in zip(refs, states, roots):
        if r not in node_of_root:
            nid = f"n{len(node_of_root)}"
            node_of_root[r] = nid
            rep = states[r]
            shot = rep.get("screenshot")
            nodes[nid] = Node(
                nid,
                rep["norm_url"],
                rep["url"],
                [],
                rep.get("phash"),
                _abs_shot(episodes[refs[r].episode].path, shot),
                rep.get("check"),
            )
        nid = node_of_root[r]
        nodes[nid].states.append(ref)
        state_node[ref] = nid
    root = state_node[StateRef(0, 0)]

    # edges (one per (src, command, dst)) and where each episode ended
    edge_index: dict[tuple, Edge] = {}
    next_node: dict[StateRef, str] = {}
    for e, ep in enumerate(episodes):
        for t, step in enumerate(ep.steps):
            src = state_node[StateRef(e, t)]
            if step["command_name"] == "STOP":
                dst = f"{src}/end"
                if dst not in nodes:
                    n = nodes[src]
                    nodes[dst] = Node(dst, n.norm_url, n.url, [], n.phash, n.screenshot, n.check, is_end=True)
            else:
                dst = state_node.get(StateRef(e, t + 1))
                if dst is None:
                    raise ValueError(f"{ep.path}: step {t} has no next state (truncated recording?)")
            next_node[StateRef(e, t)] = dst
            key = (src, canonical(step), dst)
            if key not in edge_index:
                edge_index[key] = Edge(src, key[1], dst, [])
            edge_index[key].steps.append(StateRef(e, t))
        end = next_node[StateRef(e, len(ep.steps) - 1)] if ep.steps else state_node[StateRef(e, 0)]
        if ep.summary["success"]:
            nodes[end].success_ends += 1
        else:
            nodes[end].failure_ends += 1
    edges = list(edge_index.values())
    graph = TaskGraph(ep.summary["task_id"], root, nodes, edges, state_node, stats=stats)
    stats["nodes"] = sum(1 for n in nodes.values() if not n.is_end)
    stats["edges"] = len(edges)

    dist = distances_to_goal(graph)
    l_min = _l_min(graph, dist, task, cfg)
    rewards = step_rewards(episodes, graph, next_node, dist, l_min, cfg, verifier)
    graph.branches = branch_values(episodes, graph, rewards, dist, cfg)
    stats["l_min"] = l_min
    graph.rewards = rewards  # per (episode, step): dict of reward components
    return graph


def _abs_shot(episode_path: str, rel: str | None) -> str | None:
    import os

    return None if not rel else os.path.join(episode_path, rel)


def distances_to_goal(graph: TaskGraph) -> dict[str, float]:
    """Shortest number of edges from each node to any goal (inf when none is reachable)."""
    rev: dict[str, set] = defaultdict(set)
    for e in graph.edges:
        rev[e.dst].add(e.src)
    dist = {n: math.inf for n in graph.nodes}
    queue = deque()
    for n, node in graph.nodes.items():
        if node.is_goal:
            dist[n] = 0
            queue.append(n)
    while queue:
        n = queue.popleft()
        for p in rev[n]:
            if dist[p] == math.inf:
                dist[p] = dist[n] + 1
                queue.append(p)
    return dist


def _l_min(graph: TaskGraph, dist, task: Task | None, cfg: TreeConfig) -> float | None:
    if cfg.l_min == "env" and task is not None and task.optimal_steps > 0:
        return float(task.optimal_steps)
    d = dist[graph.root]
    return None if d == math.inf else float(max(d, 1))


def step_rewards(
    episodes, graph: TaskGraph, next_node, dist, l_min, cfg: TreeConfig, verifier: Verifier
) -> dict[StateRef, dict[str, float]]:
    """docs/method.md §3 for every step of every episode."""
    out = {}
    for e, ep in enumerate(episodes):
        states = episode_states(ep)
        visited = set()
        for t, step in enumerate(ep.steps):
            ref = StateRef(e, t)
            visited.add(graph.state_node[ref])
            nxt = next_node[ref]
            is_stop = step["command_name"] == "STOP"
            r_format = 1.0 if step["format_ok"] else 0.0
            if not r_format or step["error"]:
                r_acc = 0.0
            elif is_stop:
                r_acc = 1.0
            else:
                after = states[t + 1] if t + 1 < len(states) else step
                r_acc = 1.0 if verifier(step, states[t], after, ep.path) else 0.0
            revisit = nxt in visited
            r_red = -1.0 if (revisit or (not is_stop and not changed_something(step))) else 0.0
            d = dist[nxt]
            r_sub = 0.0 if (l_min is None or d == math.inf) else l_min / ((t + 1) + d)
            out[ref] = {
                "r_acc": r_acc,
                "r_format": r_format,
                "r_red": r_red,
                "r_subgoal": r_sub,
                "r": r_acc + r_format + r_red + cfg.alpha * r_sub,
            }
    return out


def _aggregate(rs: Sequence[float], cfg: TreeConfig) -> float:
    if cfg.q_aggregate == "mean":
        return sum(rs) / len(rs)
    if cfg.q_aggregate == "sum":
        return float(sum(rs))
    return float(sum(r * cfg.gamma**k for k, r in enumerate(rs)))


def branch_values(episodes, graph: TaskGraph, rewards, dist, cfg: TreeConfig) -> dict[tuple, BranchValue]:
    """Q(s, a) and the statistics of every branch (node, canonical command)."""
    occ: dict[tuple, list[StateRef]] = defaultdict(list)
    dsts: dict[tuple, set] = defaultdict(set)
    for edge in graph.edges:
        occ[(edge.src, edge.command)].extend(edge.steps)
        dsts[(edge.src, edge.command)].add(edge.dst)
    out = {}
    for key, refs in occ.items():
        refs = sorted(refs)
        first: dict[int, int] = {}
        for r in refs:
            first.setdefault(r.episode, r.step)
        values = []
        for e, t in first.items():
            n = len(episodes[e].steps)
            values.append(_aggregate([rewards[StateRef(e, k)]["r"] for k in range(t, n)], cfg))
        succ = [e for e in first if episodes[e].summary["success"]]
        steps_success = sum(1 for r in refs if episodes[r.episode].summary["success"])
        means = {k: sum(rewards[r][k] for r in refs) / len(refs) for k in REWARD_KEYS}
        out[key] = BranchValue(
            node=key[0],
            command=key[1],
            q=sum(values) / len(values),
            rewards=means,
            n_total=len(first),
            n_success=len(succ),
            n_failed=len(first) - len(succ),
            on_success_path=bool(succ),
            reaches_success=any(dist[d] < math.inf for d in dsts[key]),
            occurrences=refs,
            steps_success=steps_success,
            steps_failed=len(refs) - steps_success,
            goal_distance=min(dist[d] for d in dsts[key]),
            returns=tuple(values),
        )
    return out


def label_conflict_rate(graph: TaskGraph) -> tuple[int, int]:
    """(step occurrences whose branch is taken by >= 1 successful and >= 1 failed trajectory, all occurrences)."""
    conflicted = total = 0
    for b in graph.branches.values():
        total += len(b.occurrences)
        if b.n_success and b.n_failed:
            conflicted += len(b.occurrences)
    return conflicted, total


def redundant_steps(graph: TaskGraph, episodes) -> list[int]:
    """Steps with R_red = -1 per episode (TGPO Table 1's redundant steps)."""
    counts = [0] * len(episodes)
    for ref, r in graph.rewards.items():
        counts[ref.episode] += r["r_red"] < 0
    return counts
