"""Episodes directory → tree-merged, reward-annotated node records (ArrayRecord shards + manifest).

Per task: merge its sealed episodes into a graph (``build.py``), then write one ``NodeRecord`` per node with at
least one action. The node's prompt is its representative state's prompt (the policy's own recorded messages when
the collecting policy logged them, else rebuilt exactly as the policy builds it); each branch's action is one
recorded output of that branch, with its element id re-mapped to the representative page when the occurrence
saw a different page (ids are per page; role + name is not). The behaviour log-prob is kept only when the
chosen output was produced under exactly the node's prompt — otherwise it would be a log-prob of another prompt.

Broken episodes (unreadable or truncated files, a step count that disagrees with the summary) are reported by
path and skipped; test-split tasks are refused unless asked for, so held-out tasks never reach training data.

Copy spans (for copy-swap augmentation, ``tgpo_jax.data.augment``): a node whose successful branch types a string
of the task's instruction, or sets a combobox the instruction names, records the string or the name in
``meta["copy"]`` as ``{"text", "kind"}`` (kinds from the environment's ``typed_strings``, else "text" / "option"),
and the manifest's ``copy_pools`` lists, per kind, the training strings a swap may put in its place (the caller's
pools, e.g. every training task of the environment, else the collected tasks').
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
from collections import defaultdict
from typing import Sequence

from tqdm.auto import tqdm

from rollout.core import HistoryItem, Task
from rollout.policies.prompt import PromptConfig, messages_for
from rollout.recording import (
    EpisodeRecord,
    EpisodeSummary,
    RecordingError,
    StepRecord,
    read_steps,
    read_summary,
    read_tasks,
)
from trees.build import TreeConfig, build_task_graph, label_conflict_rate, redundant_steps
from trees.graph import StateRef, TaskGraph
from tgpo_jax.data.augment import whole_token
from tgpo_jax.data.schema import Branch, NodeRecord

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """How a node dataset is built: the tree config, admitted splits, shards, how prompts are rebuilt, which verifier
    gives R_acc and where the branch values come from."""

    tree: TreeConfig = TreeConfig()
    splits: tuple[str, ...] = ("train",)  # task splits admitted; test tasks never reach training data
    num_shards: int = 4
    prompt: PromptConfig = PromptConfig()  # rebuilt prompts: as the policy builds them
    tokenizer: str = ""  # count the budget with this tokenizer (the policy's, as ModelPolicy does); '' = 4 chars/token
    include_invalid: bool = True  # keep branches whose output did not parse (they are useful rejected actions)
    overwrite: bool = False
    verifier: str = "builtin"  # R_acc: "builtin" checks, or "judge": a vision model over before/after screenshots
    judge_url: str | None = None  # OpenAI-compatible endpoint of the judge
    judge_model: str | None = None
    # where the branch values come from: "tree" (the merged tree, docs/method.md §4), "mcts" (the collection's
    # Agent Q search trees, §9.1: one record per searched node, only tasks that were searched) or "trajectory"
    # (successful vs failed episodes of a task, a record per step, for the trajectory-level DPO baseline, §9.3)
    values: str = "tree"
    traj_max_pairs: int = 4  # values=trajectory: pairs per task (trees/trajectory_records.py)
    traj_max_steps: int = 16  # values=trajectory: a pair's steps after the shared ones, both sides together

    def __post_init__(self):
        if self.num_shards < 1 or self.prompt.budget_tokens < 64:
            raise ValueError(f"invalid build config: {self}")
        bad = set(self.splits) - {"train", "test"}
        if bad or not self.splits:
            raise ValueError(f"splits must be a non-empty subset of ('train', 'test'), got {self.splits}")
        if self.values not in ("tree", "mcts", "trajectory"):
            raise ValueError(f"values={self.values!r}; expected 'tree', 'mcts' or 'trajectory'")
        if self.verifier not in ("builtin", "judge"):
            raise ValueError(f"verifier={self.verifier!r}; expected 'builtin' or 'judge'")
        if self.verifier == "judge" and not (self.judge_url and self.judge_model):
            raise ValueError("verifier='judge' needs judge_url and judge_model")

    def make_verifier(self):
        """The step verifier the config names: the vision judge, or the built-in checks."""
        from trees.verify import JudgeVerifier, builtin_verifier

        if self.verifier == "judge":
            return JudgeVerifier(self.judge_url, self.judge_model)
        return builtin_verifier

    def to_json(self) -> dict:
        """The config as a JSON-safe dict."""
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- reading, with broken episodes skipped
def load_episodes(episodes_dir: str) -> tuple[dict[str, list[EpisodeRecord]], list[dict]]:
    """Sealed success/failure episodes grouped by task, and the broken ones as [{path, error}]."""
    root = os.path.join(episodes_dir, "episodes")
    if not os.path.isdir(root):
        raise RecordingError(f"{episodes_dir} is not a collection directory (no episodes/)")
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    broken: list[dict] = []
    for task in sorted(os.listdir(root)):
        for run in sorted(os.listdir(os.path.join(root, task))):
            path = os.path.join(root, task, run)
            try:
                summary = read_summary(path)
                if summary is None or summary["status"] == "errored":
                    continue  # interrupted or errored: not an episode to learn from
                steps = read_steps(path, summary)  # checked against the summary's seal
                _check_episode(path, summary, steps)
            except (RecordingError, OSError) as e:
                log.warning("skipping broken episode %s: %s", path, e)
                broken.append({"path": path, "error": str(e)[:500]})
                continue
            by_task[summary["task_id"]].append(EpisodeRecord(path, summary, steps))
    return dict(by_task), broken


def _check_episode(path: str, summary: EpisodeSummary, steps: list[StepRecord]) -> None:
    """What a tree needs beyond the recording format: every step line, in order, and the state after the last."""
    if len(steps) != summary["steps"]:
        raise RecordingError(
            f"{path}: {len(steps)} step lines but the summary says {summary['steps']} (truncated steps.jsonl?)"
        )
    for i, s in enumerate(steps):
        if s["step"] != i:
            raise RecordingError(f"{path}: step line {i} is numbered {s['step']}")
    last_stop = bool(steps) and steps[-1]["command_name"] == "STOP"
    if not last_stop and not summary["final"]:
        raise RecordingError(f"{path}: no final state in the summary")


# ---------------------------------------------------------------- node records
_LINE = re.compile(r'^\s*\[([^\]]+)\]\s+(\S+)\s+("(?:[^"\\]|\\.)*")')


def page_ids(observation: str) -> dict[tuple[str, str], str]:
    """(role, name) -> element id on a rendered page (the first element with that descriptor)."""
    out: dict[tuple[str, str], str] = {}
    for line in observation.splitlines():
        m = _LINE.match(line)
        if m:
            try:
                name = json.loads(m.group(3))
            except json.JSONDecodeError:
                continue
            out.setdefault((m.group(2), name), m.group(1))
    return out


def remap_output(step: StepRecord, page: str) -> str | None:
    """The step's output with its element id replaced by the id the same element has on ``page``; None if the
    element is not on that page."""
    out, target, cmd = step["output"], step["target"], step["command"]
    if step["observation"] == page or not target or not cmd:
        return out
    new_id = page_ids(page).get((target["role"], target["name"]))
    if new_id is None:
        return None
    old = re.match(r"^\s*[A-Z_]+\s*\[([^\]]*)\]", cmd)
    if old is None:
        return out
    new_cmd = cmd.replace(f"[{old.group(1)}]", f"[{new_id}]", 1)
    i = out.rfind(cmd)
    return out[:i] + new_cmd + out[i + len(cmd) :] if i >= 0 else None


def history_of(ep: EpisodeRecord, t: int) -> list[HistoryItem]:
    """The history the policy saw at step t (as the runner builds it)."""
    items = []
    for s in ep.steps[:t]:
        if s["command"]:
            command = s["command"]
        else:
            lines = [ln.strip() for ln in s["output"].strip().splitlines() if ln.strip()]
            command = (lines[-1] if lines else "(empty output)")[:120]
        items.append(HistoryItem(command, s["thought"], (s["error"] or {}).get("kind")))
    return items


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    if not path:
        return None
    from tgpo_jax.models.tokenizer import load_tokenizer

    return load_tokenizer(path)


def step_prompt(task: Task | None, ep: EpisodeRecord, t: int, cfg: BuildConfig) -> list[dict]:
    """The chat messages the policy saw before step ``t`` of ``ep``: the recorded ones, else rebuilt from the task,
    history and observation as the config says."""
    step = ep.steps[t]
    recorded = (step.get("policy_info") or {}).get("messages")
    if recorded:
        return [dict(m) for m in recorded]
    instruction = task.instruction if task is not None else ep.summary.get("instruction", "")
    return messages_for(
        instruction, history_of(ep, t), step["observation"], cfg.prompt, tokenizer=_tokenizer(cfg.tokenizer)
    )


def copy_spans(branches: Sequence[Branch], task: Task | None, kinds: dict[str, str], page: str = "") -> list[dict]:
    """``{"text", "kind"}`` of each string a successful branch types that the instruction holds, and of the name of
    each combobox a successful branch sets when the instruction names it too (first seen first).

    Why the combobox's name: a thought that sets an option repeats it (``Set combobox "size"[6] to size [20 oz]``,
    docs/method.md §1), and with a dozen names in the data a small model wrote the commonest one, "color", whatever
    the combobox; swapped names (copy-swap, ``tgpo_jax.data.augment``) make copying the only rule that fits them.
    (Measured: the from-scratch default still writes "color" about as often.)"""
    from rollout.commands import parse_output
    from rollout.core import ActionError

    names = {i: name for (role, name), i in page_ids(page).items() if role == "combobox"} if page else {}
    out: dict[str, str] = {}
    for b in branches:
        if task is None or b.n_success <= 0:
            continue
        try:
            cmd = parse_output(b.action)[1]
        except ActionError:
            continue
        if cmd.name == "TYPE" and cmd.arg and cmd.arg in task.instruction:
            out.setdefault(cmd.arg, kinds.get(cmd.arg, "text"))
        name = names.get(cmd.id) if cmd.name == "SELECT" else None
        if name and whole_token([name]).search(task.instruction):
            out.setdefault(name, kinds.get(name, "option"))
    return [{"text": t, "kind": k} for t, k in out.items()]


def node_records(
    graph: TaskGraph,
    episodes: list[EpisodeRecord],
    task: Task | None,
    cfg: BuildConfig,
    kinds: dict[str, str] | None = None,
) -> list[NodeRecord]:
    """The node records of a merged task graph: per node that has branches, the prompt at its representative state and a
    ``Branch`` per action taken there."""
    by_node = defaultdict(list)
    for key, b in graph.branches.items():
        if cfg.include_invalid or not b.command.startswith("INVALID "):
            by_node[key[0]].append(b)
    depth = _depths(graph)
    records = []
    for nid, node in graph.nodes.items():
        branches = by_node.get(nid)
        if not branches:
            continue
        # The representative: the node's first state at which an action was taken.
        acted = {r for b in branches for r in b.occurrences}
        rep = next(r for r in node.states if r in acted)
        rep_step = episodes[rep.episode].steps[rep.step]
        prompt = step_prompt(task, episodes[rep.episode], rep.step, cfg)
        out = []
        for b in sorted(branches, key=lambda b: b.occurrences[0]):
            action, logprob = _branch_action(b, rep, rep_step["observation"], prompt, episodes, task, cfg)
            if action is None:
                continue
            out.append(
                Branch(
                    action=action,
                    command=b.command,
                    q=float(b.q),
                    rewards={k: float(v) for k, v in b.rewards.items()},
                    n_total=b.n_total,
                    n_success=b.n_success,
                    n_failed=b.n_failed,
                    on_success_path=b.on_success_path,
                    reaches_success=b.reaches_success,
                    behaviour_logprob=logprob,
                    steps_success=b.steps_success,
                    steps_failed=b.steps_failed,
                    goal_distance=None if b.goal_distance == math.inf else int(b.goal_distance),
                    returns=tuple(float(v) for v in b.returns) or None,
                )
            )
        if not out:
            continue
        first = episodes[rep.episode].summary
        meta = {
            "url": node.url,
            "norm_url": node.norm_url,
            "depth": depth.get(nid),
            "n_states": len(node.states),
            "is_root": nid == graph.root,
            "split": first.get("split"),
            "env": first.get("env"),
            "family": first.get("family"),
            "phash": node.phash,
        }
        copies = copy_spans(out, task, kinds or {}, rep_step["observation"])
        if copies:
            meta["copy"] = copies
        records.append(NodeRecord(task_id=graph.task_id, node_id=nid, prompt=prompt, branches=out, meta=meta))
    return records


def _branch_action(b, rep: StateRef, page: str, prompt, episodes, task, cfg) -> tuple[str | None, float | None]:
    """One output of the branch, valid on the representative page, and its behaviour log-prob when it was
    produced under exactly ``prompt``."""
    occ = sorted(b.occurrences, key=lambda r: (r != rep, r))  # the representative's own step first
    for r in occ:
        step = episodes[r.episode].steps[r.step]
        action = remap_output(step, page)
        if action is None or not action.strip():
            continue
        logprob = step.get("logprob")
        same_prompt = action == step["output"] and (
            r == rep or step_prompt(task, episodes[r.episode], r.step, cfg) == prompt
        )
        ok = same_prompt and isinstance(logprob, (int, float)) and math.isfinite(logprob) and logprob <= 0
        return action, (float(logprob) if ok else None)
    return None, None


def _depths(graph: TaskGraph) -> dict[str, int]:
    adj = defaultdict(set)
    for e in graph.edges:
        adj[e.src].add(e.dst)
    depth, frontier = {graph.root: 0}, [graph.root]
    while frontier:
        nxt = []
        for n in frontier:
            for m in sorted(adj[n]):
                if m not in depth:
                    depth[m] = depth[n] + 1
                    nxt.append(m)
        frontier = nxt
    return depth


def label_counts(records: list[NodeRecord]) -> dict:
    """What each method would train on with the default PairConfig (the trainer derives them itself)."""
    from tgpo_jax.data.examples import class_counts, kto_items, kto_tree_items, preference_pairs, sft_items

    pairs = sft = 0
    kto, tree = [], []
    for r in records:
        pairs += len(preference_pairs(r))
        sft += len(sft_items(r))
        kto += kto_items(r)
        tree += kto_tree_items(r)
    (kd, ku), (td, tu) = class_counts(kto), class_counts(tree)
    return {
        "pairs": pairs,
        "sft_items": sft,
        "kto_desirable": kd,
        "kto_undesirable": ku,
        "kto_tree_desirable": td,
        "kto_tree_undesirable": tu,
    }


def _collection_of(path: str, dirs: list[str]) -> str:
    """The collection directory (of ``dirs``) an episode path lies in."""
    path = os.path.abspath(path)
    for d in dirs:
        if path.startswith(os.path.abspath(d) + os.sep):
            return d
    return dirs[0]


# ---------------------------------------------------------------- the whole build
def build_dataset(
    episodes_dir: str | Sequence[str],
    out_dir: str,
    cfg: BuildConfig = BuildConfig(),
    *,
    progress: bool = True,
    typed_strings=None,
    copy_pools: dict[str, list[str]] | None = None,
) -> dict:
    """Build and write the dataset; returns the summary that also goes into the manifest's ``extra``.
    Several collection directories (e.g. Agent Q rounds, a replay buffer) merge into one tree per task.
    ``typed_strings`` (task -> {text: kind}, e.g. ``Environment.typed_strings``) names the kinds of copied
    strings; ``copy_pools`` ({kind: strings}) the training strings a copy-swap may use (default: the copies found)."""
    from tgpo_jax.data.io import write_dataset

    dirs = [episodes_dir] if isinstance(episodes_dir, str) else list(episodes_dir)
    if not dirs:
        raise ValueError("no episodes directory given")
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    broken: list[dict] = []
    tasks = {}
    for d in dirs:
        found, bad = load_episodes(d)
        for task_id, eps in found.items():
            by_task[task_id].extend(eps)
        broken += bad
        try:
            tasks.update({t.task_id: t for t in read_tasks(d)})
        except FileNotFoundError:
            pass
    episodes_dir = dirs[0] if len(dirs) == 1 else dirs
    records: list[NodeRecord] = []
    stats = defaultdict(int)
    conflicted = occurrences = 0
    family_conflicts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # family -> [conflicted, occurrences]
    redundant: list[int] = []
    refused_splits = set()
    traj_counts = defaultdict(int)  # values=trajectory: pairs kept and left out, by reason
    verifier = cfg.make_verifier()
    for task_id in tqdm(sorted(by_task), desc="build trees", unit="task", disable=not progress):
        episodes = sorted(by_task[task_id], key=lambda e: (dirs.index(_collection_of(e.path, dirs)), e.summary["run"]))
        split = episodes[0].summary["split"]
        if split not in cfg.splits:
            refused_splits.add(split)
            stats["episodes_refused_split"] += len(episodes)
            continue
        graph = build_task_graph(episodes, tasks.get(task_id), cfg.tree, verifier)
        for k in ("states", "nodes", "edges", "merged_by_sequence", "merged_by_phash", "guard_refusals"):
            stats[k] += graph.stats[k]
        c, o = label_conflict_rate(graph)
        conflicted, occurrences = conflicted + c, occurrences + o
        family = episodes[0].summary["family"]
        family_conflicts[family][0] += c
        family_conflicts[family][1] += o
        redundant += redundant_steps(graph, episodes)
        stats["tasks"] += 1
        stats["episodes"] += len(episodes)
        stats["successful_episodes"] += sum(bool(e.summary["success"]) for e in episodes)
        stats["steps"] += sum(len(e.steps) for e in episodes)
        task = tasks.get(task_id)
        kinds = typed_strings(task) if typed_strings is not None and task is not None else {}
        if cfg.values == "mcts":
            from trees.search_records import task_search_records

            records.extend(task_search_records(dirs, task_id, episodes, task, cfg))
        elif cfg.values == "trajectory":
            from trees.trajectory_records import TrajectoryConfig, trajectory_records

            found, counts = trajectory_records(
                task_id, episodes, task, cfg, TrajectoryConfig(cfg.traj_max_pairs, cfg.traj_max_steps)
            )
            records.extend(found)
            for k, v in counts.items():
                traj_counts[k] += v
        else:
            records.extend(node_records(graph, episodes, task, cfg, kinds))
    if not records and cfg.values == "trajectory":
        raise RecordingError(
            f"{episodes_dir}: no trajectory pair: a pair is a successful and a failed episode of one "
            f"task, so collect several runs per task (collect.runs > 1); {stats['tasks']} tasks, "
            f"{stats['episodes']} episodes ({stats['successful_episodes']} successful), pairs left "
            f"out: {dict(traj_counts) or 'none'}"
        )
    if not records:
        raise RecordingError(
            f"{episodes_dir}: no node records (episodes of splits {cfg.splits}: none usable; "
            f"refused splits {sorted(map(str, refused_splits))}, broken episodes {len(broken)})"
        )
    summary = {
        **dict(stats),
        "records": len(records),
        "broken_episodes": broken,
        **label_counts(records),
        "label_conflict_rate": conflicted / occurrences if occurrences else 0.0,
        # per task family (the episodes' "family"; "" where they name none): where KTO's episode-level labels and the
        # tree's disagree most
        "label_conflict_by_family": {f: c / o for f, (c, o) in sorted(family_conflicts.items()) if o},
        "redundant_steps_per_episode": sum(redundant) / len(redundant) if redundant else 0.0,
        "success_rate": stats["successful_episodes"] / max(stats["episodes"], 1),
        "merge_ratio": stats["nodes"] / max(stats["states"], 1),
        "episodes_dir": os.path.abspath(episodes_dir)
        if isinstance(episodes_dir, str)
        else [os.path.abspath(d) for d in episodes_dir],
    }
    if cfg.values == "trajectory":
        summary["trajectory_pairs"] = dict(traj_counts)
    found: dict[str, set] = defaultdict(set)
    for r in records:
        for c in r.meta.get("copy", ()):
            found[c["kind"]].add(c["text"])
    if found:
        summary["copy_nodes"] = sum(bool(r.meta.get("copy")) for r in records)
        pools = copy_pools if copy_pools is not None else found
        summary["copy_pools"] = {k: sorted(set(pools.get(k, ())) | found[k]) for k in sorted(found)}
    write_dataset(
        records, out_dir, num_shards=cfg.num_shards, config=cfg.to_json(), extra=summary, overwrite=cfg.overwrite
    )
    return summary
