"""Synthetic episode collections, byte-for-byte in the recording format the real harness writes.

For tests and benchmarks of the tree / dataset builder at scale (10k+ episodes in seconds) without a browser.
Each synthetic task is a small random site:

- a path of pages ``0 → 1 → … → m-1 → cart`` (the goal: the cart holding the task's item, progress
  ``cart=item<X>``); every page but the start links back ``Home``; path pages have wrong links to dead
  ends, loops back to earlier path pages, a wrong item whose ``Add to cart`` reaches the *same* cart URL
  with another progress key (and a pHash one bit away from the goal's: the merge guard must keep them
  apart), and a no-op ``Help`` button;
- sometimes a path page opens with a promo popup that two different buttons dismiss (same URL, same pHash,
  different action sequences: pHash merging matters);
- URLs carry tracking / session parameters and fragments that vary per visit (URL normalisation matters).

A run walks from the start with a seeded policy: the optimal action with probability ``1 - branching``,
otherwise a wrong one (wrong link, Home = revisit, no-op click, premature STOP, a missing element id);
occasionally an unparseable output. Episodes end with ``STOP []`` or at ``max_steps``; the summary's status
is the final state's check, as in ``rollout.harness.runner.run_episode``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil

from rollout.commands import parse_output
from rollout.core import ActionError, Task
from rollout.recording import (
    FORMAT as EPISODE_FORMAT,
    EpisodeWriter,
    check_collection,
    episode_dir,
    task_dir_name,
    write_tasks,
)
from rollout.urls import normalize_url

ORIGIN = "http://127.0.0.1:1"
POLICY_NAME = "synthetic"

_WORDS = (
    "red",
    "blue",
    "wool",
    "cotton",
    "lamp",
    "desk",
    "shoe",
    "mug",
    "tea",
    "soap",
    "pen",
    "bag",
    "case",
    "chair",
    "rug",
    "clock",
    "kettle",
    "towel",
    "scarf",
    "bottle",
)
_CATS = ("Kitchen", "Garden", "Books", "Toys", "Office", "Sports", "Beauty", "Audio", "Pets", "Travel")
_MALFORMED = (
    "Thought: {t}\nI think I should click the {n} link.",
    "Thought: {t}\nCommand: CLICK [{i}]\nThen I will check the result.",
    "Thought: {t}\nCommand:",
    "Thought: {t}",
)


@dataclasses.dataclass
class _El:
    id: str
    role: str
    name: str
    to: str | None  # target state key; None: a no-op click


@dataclasses.dataclass
class _State:
    key: str
    path: str  # path + essential query (no tracking)
    title: str
    elements: list[_El]
    texts: list[tuple[str, str]]  # non-interactive (role, text) lines
    phash: str
    check: dict
    body: str = ""  # rendered element lines
    norm_url: str = ""  # normalize_url of any visit's URL (the visit noise is all dropped by normalisation)
    by_id: dict = dataclasses.field(default_factory=dict)


def _phash(*parts) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _flip_bit(h: str, bit: int) -> str:
    return f"{int(h, 16) ^ (1 << bit):016x}"


def _check(progress: str, success: bool = False, score: float = 0.0) -> dict:
    return {"success": success, "score": float(score), "progress": progress, "done": False}


class _Site:
    """One task's site graph, its optimal distances, and the URL maker."""

    def __init__(self, task_index: int, rng: random.Random):
        self.ti = task_index
        t = task_index
        m = rng.randint(2, 5)  # path pages 0..m-1, then the cart
        item, wrong_item = rng.sample(range(1, 100), 2)
        self.item = item
        self.query = rng.choice(_WORDS)
        states: dict[str, _State] = {}
        base = f"/p/{t}"
        cart = _check(f"cart=item{item}", True, 1.0)
        empty = _check("cart=")

        def add(key, path, title, elements, texts, phash, check):
            states[key] = _State(key, path, title, elements, texts, phash, check)

        popup_at = rng.randint(1, m - 1) if rng.random() < 0.4 else None
        path_names = []
        for j in range(m):
            if j == 0:
                path_names.append(("link", "Shop"))
            elif j == m - 1:
                path_names.append(("link", f"Item {item}"))
            else:
                path_names.append(("link", f"{rng.choice(_CATS)} {j}"))
        # path pages
        for j in range(m):
            els: list[_El] = []
            if j > 0:
                els.append(_El("", "link", "Home", "0"))
            if j == m - 1:
                els.append(_El("", "button", "Add to cart", "cart"))
            else:
                nxt = f"{j + 1}pop" if popup_at == j + 1 else str(j + 1)
                role, name = path_names[j + 1]
                els.append(_El("", role, name, nxt))
            # wrong links
            for w in range(rng.randint(1, 3)):
                kind = rng.random()
                if kind < 0.45:
                    dk = f"d{j}_{w}"
                    els.append(_El("", "link", f"{rng.choice(_CATS)} deals {w}", dk))
                    add(
                        dk,
                        f"{base}/d{j}{w}?q={self.query}",
                        f"Deals {j}.{w}",
                        [_El("", "link", "Home", "0")],
                        [("text", "Nothing matches your search.")],
                        _phash(t, dk),
                        empty,
                    )
                elif kind < 0.7 and j > 0:
                    back = rng.randrange(0, j)
                    els.append(_El("", "link", f"Back to step {back}", str(back)))
                else:
                    dk = f"x{j}_{w}"
                    els.append(_El("", "link", f"Sponsored {rng.choice(_WORDS)}", dk))
                    add(
                        dk,
                        f"{base}/x{j}{w}?ref=ad&item={rng.randint(100, 999)}",
                        "Sponsored",
                        [_El("", "link", "Home", "0"), _El("", "button", "Back to shop", str(j))],
                        [("heading", "Sponsored"), ("text", "An offer you did not ask for.")],
                        _phash(t, dk),
                        empty,
                    )
            if j == max(0, m - 2):  # the wrong item, one level above the right one
                els.append(_El("", "link", f"Item {wrong_item}", "wi"))
            if rng.random() < 0.5:
                els.append(_El("", "button", "Help", None))
            rng.shuffle(els)
            q = f"?q={self.query}&page={j}" if j else ""
            add(
                str(j),
                f"{base}/{j}{q}",
                "Home" if j == 0 else f"Results {j}",
                els,
                [("heading", f"Step {j}"), ("text", f"Find item {item}.")],
                _phash(t, j),
                empty,
            )
            if popup_at == j:
                add(
                    f"{j}pop",
                    f"{base}/{j}{q}",
                    f"Results {j}",
                    [
                        _El("", "link", "Home", "0"),
                        _El("", "button", "No thanks", str(j)),
                        _El("", "button", "Close", str(j)),
                    ],
                    [("dialog", "Subscribe to our newsletter?")],
                    _phash(t, j, "pop"),
                    empty,
                )
        add(
            "wi",
            f"{base}/item?item={wrong_item}",
            f"Item {wrong_item}",
            [_El("", "link", "Home", "0"), _El("", "button", "Add to cart", "wcart")],
            [("heading", f"Item {wrong_item}"), ("text", "In stock.")],
            _phash(t, "wi"),
            empty,
        )
        goal_phash = _phash(t, "cart")
        add(
            "cart",
            f"{base}/cart",
            "Cart",
            [
                _El("", "link", "Home", "0"),
                _El("", "link", "Continue shopping", "0"),
                _El("", "button", "Update cart", None),
            ],
            [("heading", "Your cart"), ("text", f"Item {item} x 1")],
            goal_phash,
            cart,
        )
        add(
            "wcart",
            f"{base}/cart",
            "Cart",
            [_El("", "button", "Empty cart", "0"), _El("", "button", "Update cart", None)],
            [("heading", "Your cart"), ("text", f"Item {wrong_item} x 1")],
            _flip_bit(goal_phash, rng.randrange(64)),
            _check(f"cart=item{wrong_item}", False, 0.0),
        )
        for s in states.values():
            lines = []
            for k, e in enumerate(s.elements, start=1):
                e.id = str(k)
                lines.append(f"[{e.id}] {e.role} {json.dumps(e.name, ensure_ascii=False)}")
                s.by_id[e.id] = e
            lines += [f"{r} {json.dumps(x, ensure_ascii=False)}" for r, x in s.texts]
            s.body = "\n".join(lines)
            s.norm_url = normalize_url(ORIGIN + s.path)
        self.states = states
        self.start = "0"
        self.goal = "cart"
        # distances to the goal in commands, STOP included
        dist = {self.goal: 1}
        changed = True
        while changed:
            changed = False
            for s in states.values():
                ds = [dist[e.to] + 1 for e in s.elements if e.to in dist]
                if ds and min(ds) < dist.get(s.key, 1 << 30):
                    dist[s.key] = min(ds)
                    changed = True
        self.dist = dist
        self.optimal_steps = dist[self.start]

    def url(self, key: str, rng: random.Random) -> str:
        """A visit's URL: the state's path plus tracking / session noise and sometimes a fragment."""
        path = self.states[key].path
        extra = []
        r = rng.random()
        if r < 0.5:
            extra.append(f"utm_source=x{rng.randint(0, 9)}")
        if r < 0.2:
            extra.append(f"sid={rng.getrandbits(32):08x}")
        if extra:
            if "?" in path:
                head, q = path.split("?", 1)
                params = q.split("&") + extra
                rng.shuffle(params)
                path = f"{head}?{'&'.join(params)}"
            else:
                path = f"{path}?{'&'.join(extra)}"
        if rng.random() < 0.15:
            path += f"#sec{rng.randint(1, 3)}"
        return ORIGIN + path


def _timings(rng: random.Random) -> dict:
    return {
        "observe_s": 0.2 + rng.random() * 0.5,
        "check_s": rng.random() * 1e-3,
        "policy_s": 0.5 + rng.random() * 3,
        "execute_s": 0.1 + rng.random() * 0.6,
    }


def _episode(
    site: _Site, task: Task, run: int, seed: int, rng: random.Random, branching: float, max_steps: int
) -> tuple[list[dict], dict]:
    st = site.states
    key = site.start
    url = site.url(key, rng)
    err = None  # the last action's error {kind, message}
    steps: list[dict] = []
    end_reason = "max_steps"
    p_malformed = 0.1 * branching
    total_s = 0.0

    def state_json(k, u, e) -> dict:
        s = st[k]
        head = f"URL: {u}\nTitle: {s.title}\n"
        if e is not None:
            head += f"Last action error ({e['kind']}): {e['message']}\n"
        return {
            "url": u,
            "norm_url": s.norm_url,
            "title": s.title,
            "observation": head + s.body,
            "truncated": False,
            "screenshot": None,
            "phash": s.phash,
            "obs_error": e,
            "check": dict(s.check),
        }

    cur = state_json(key, url, err)
    for t in range(max_steps):
        s = st[key]
        d = site.dist.get(key, 1 << 30)
        r = rng.random()
        el = None
        stop = False
        missing = None
        if r < p_malformed:
            tmpl = rng.choice(_MALFORMED)
            e0 = rng.choice(s.elements)
            text = tmpl.format(t="Let me look at the page.", n=e0.name, i=e0.id)
        else:
            if rng.random() >= branching:  # optimal
                if key == site.goal:
                    stop = True
                else:
                    best = [e for e in s.elements if site.dist.get(e.to, 1 << 30) == d - 1]
                    el = rng.choice(best)
            else:  # wrong
                wrong = [e for e in s.elements if site.dist.get(e.to, 1 << 30) != d - 1]
                x = rng.random()
                if key != site.goal and x < 0.12:
                    stop = True  # premature STOP
                elif x < 0.15 or not wrong:  # a command on an element id the page does not have
                    missing = str(len(s.elements) + rng.randint(1, 20))
                else:
                    el = rng.choice(wrong)
            if stop:
                text = "Thought: The task is complete.\nCommand: STOP []"
            elif missing is not None:
                text = f"Thought: Click element [{missing}].\nCommand: CLICK [{missing}]"
            else:
                text = f"Thought: Click {el.role} '{el.name}'.\nCommand: CLICK [{el.id}]"
        timings = _timings(rng)
        total_s += sum(timings.values())
        n_tok = len(text) // 4 + 1
        record = {
            "step": t,
            **cur,
            "output": text,
            "logprob": -round(n_tok * (0.05 + rng.random() * 0.6), 4),
            "num_tokens": n_tok,
            "policy_info": {},
            "timings": timings,
        }
        next_key, next_url, next_err = key, url, None
        if r < p_malformed:
            try:
                parse_output(text)
                raise AssertionError(f"synthetic malformed output parsed: {text!r}")
            except ActionError as e:
                error = {"kind": e.kind, "message": e.message}
            record.update(
                thought="", command=None, command_name=None, target=None, format_ok=False, error=error, effect=None
            )
            next_err = error
        else:
            thought = text.split("\n", 1)[0][len("Thought: ") :]
            record.update(thought=thought, format_ok=True)
            if stop:
                record.update(command="STOP []", command_name="STOP", target=None, error=None, effect=None)
            elif missing is not None:
                error = {"kind": "no_such_element", "message": f"no element with id [{missing}] on this page"}
                record.update(command=f"CLICK [{missing}]", command_name="CLICK", target=None, error=error, effect=None)
                next_err = error
            else:
                record.update(
                    command=f"CLICK [{el.id}]",
                    command_name="CLICK",
                    target={"role": el.role, "name": el.name},
                    error=None,
                )
                if el.to is None:
                    effect = {
                        "url_changed": False,
                        "dom_changed": False,
                        "navigated": False,
                        "expected_change": False,
                        "detail": "no visible change",
                    }
                elif st[el.to].path == s.path and el.to != key:
                    effect = {
                        "url_changed": False,
                        "dom_changed": True,
                        "navigated": False,
                        "expected_change": True,
                        "detail": "dom changed",
                    }
                    next_key = el.to
                else:
                    next_key = el.to
                    next_url = site.url(next_key, rng)
                    changed = next_url != url
                    effect = {
                        "url_changed": changed,
                        "dom_changed": True,
                        "navigated": True,
                        "expected_change": True,
                        "detail": "url changed" if changed else "dom changed",
                    }
                record["effect"] = effect
        steps.append(record)
        if stop:
            end_reason = "stop"
            break
        key, url, err = next_key, next_url, next_err
        cur = state_json(key, url, err)
    check = cur["check"]
    started = 1.7e9 + (_hash_int(task.task_id) % 10_000_000) + run * 100.0
    summary = {
        "task_id": task.task_id,
        "run": run,
        "episode_key": f"{task.task_id}/{run}",
        "env": task.env,
        "family": task.family,
        "split": task.split,
        "policy": POLICY_NAME,
        "seed": seed,
        "optimal_steps": task.optimal_steps,
        "status": "success" if check["success"] else "failure",
        "success": bool(check["success"]),
        "score": float(check["score"]),
        "steps": len(steps),
        "end_reason": end_reason,
        "final": cur,
        "error": None,
        "duration_s": total_s,
        "started_at": started,
    }
    return steps, summary


def _hash_int(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")


def _write_fast(out_dir: str, task_id: str, run: int, steps: list[dict], summary: dict) -> None:
    """The bytes EpisodeWriter writes, without its per-step flush and per-episode fsync."""
    d = episode_dir(out_dir, task_id, run)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in steps)
    with open(os.path.join(d, "steps.jsonl"), "w", encoding="utf-8") as f:
        f.write(text)
    # as EpisodeWriter seals
    summary = {**summary, "format": EPISODE_FORMAT, "steps_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    with open(os.path.join(d, "summary.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(summary, ensure_ascii=False, indent=1, sort_keys=True))


def synthetic_tasks(num_tasks: int, seed: int = 0) -> tuple[list[Task], list[_Site]]:
    """``num_tasks`` synthetic training tasks and their random sites, seeded by ``seed``."""
    tasks, sites = [], []
    for i in range(num_tasks):
        site = _Site(i, random.Random(f"site:{seed}:{i}"))
        tid = f"synthetic-train-{i:05d}"
        tasks.append(
            Task(
                task_id=tid,
                env="synthetic",
                family="synthetic",
                instruction=f"Search for {site.query} and add item {site.item} to the cart.",
                start_path=site.states[site.start].path,
                optimal_steps=site.optimal_steps,
                split="train",
                goal={"item": site.item, "cart": f"cart=item{site.item}"},
            )
        )
        sites.append(site)
    return tasks, sites


def write_synthetic_collection(
    out_dir: str,
    *,
    num_tasks: int,
    runs: int,
    seed: int = 0,
    branching: float = 0.3,
    max_steps: int = 12,
    use_writer: bool = False,
) -> dict:
    """Write ``num_tasks × runs`` synthetic episodes as a collection directory; returns {episodes, steps, tasks}.

    ``use_writer`` writes through ``EpisodeWriter`` (slow: a flush per step and an fsync per episode); the
    default writes the same bytes directly.
    """
    if num_tasks < 1 or runs < 1 or max_steps < 1 or not 0.0 <= branching <= 1.0:
        raise ValueError(f"bad synthetic collection settings: {num_tasks=} {runs=} {max_steps=} {branching=}")
    check_collection(
        out_dir,
        {
            "env": "synthetic",
            "runs": runs,
            "seed": seed,
            "policy": POLICY_NAME,
            "num_tasks": num_tasks,
            "max_steps": max_steps,
            "branching": branching,
        },
    )
    tasks, sites = synthetic_tasks(num_tasks, seed)
    write_tasks(out_dir, tasks)
    os.makedirs(os.path.join(out_dir, "episodes"), exist_ok=True)
    n_steps = n_eps = 0
    for task, site in zip(tasks, sites):
        tdir = os.path.join(out_dir, "episodes", task_dir_name(task.task_id))
        os.makedirs(tdir, exist_ok=True)
        for run in range(runs):
            rng = random.Random(f"run:{seed}:{task.task_id}:{run}")
            steps, summary = _episode(site, task, run, seed, rng, branching, max_steps)
            if use_writer:
                w = EpisodeWriter(out_dir, task.task_id, run, screenshots=False)
                for r in steps:
                    w.step(r)
                w.finish(summary)
            else:
                _write_fast(out_dir, task.task_id, run, steps, summary)
            n_steps += len(steps)
            n_eps += 1
    return {"episodes": n_eps, "steps": n_steps, "tasks": num_tasks}
