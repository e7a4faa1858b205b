"""Survey of every MiniWoB++ task the package registers, through the project's harness in real Chromium.

  python -m bench.miniwob_survey [--episodes=3 --max_steps=8 --contexts=2 --out=data/miniwob_survey]
  python -m bench.miniwob_survey --tasks=click-tab,drag-box --episodes=2      # a few tasks

Per task, ``--episodes`` episodes (seeds 0, 1, …) run through ``rollout.collect`` with a random policy: at each step
it picks one interactive element of the observation at random and CLICKs it, TYPEs a random word of the utterance
into it (text boxes) or SELECTs a random option (a ``<select>``), up to ``--max_steps`` steps. Recorded per episode:
whether the page started (``reset`` reached ``WOB_TASK_READY``), the interactive elements of the first observation
and their roles, whether the episode ended (``done``), the raw reward reached, the action errors by kind and any
harness error. Writes ``<out>/survey.json`` and ``<out>/survey.md`` (one table row per task), which docs/miniwob.md
is written from. A random policy is a floor, not an estimate of what a model can do: a task it never solves may be
perfectly workable, and "done" only says the page ended the episode (often with reward -1).
"""

from __future__ import annotations

import ast
import asyncio
import collections
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import time

from absl import app, flags

_TASKS = flags.DEFINE_list("tasks", ["all"], "task names, or 'all' (every registered task)")
_EPISODES = flags.DEFINE_integer("episodes", 3, "episodes (seeds 0..N-1) per task")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 8, "random-policy steps per episode")
_CONTEXTS = flags.DEFINE_integer("contexts", 2, "parallel browser contexts")
_ACTION_MS = flags.DEFINE_integer(
    "action_ms",
    2000,
    "cap on one click / fill (a random click often hits an element "
    "another covers: Playwright waits for it up to this long)",
)
_OUT = flags.DEFINE_string("out", "data/miniwob_survey", "output directory (survey.json, survey.md, episodes/)")
_RENDER = flags.DEFINE_bool(
    "render",
    False,
    "only write survey.md again from <out>/survey.json (after a change of "
    "rollout.envs.miniwob.LIMITS), running nothing",
)


class RandomPolicy:
    """A random command on a random interactive element: CLICK, TYPE a word of the utterance, SELECT an option.
    Its randomness comes from the episode key and step only; it notes each episode's first observation."""

    name = "random"

    def __init__(self):
        self.first: dict[str, dict] = {}

    async def act(self, request):
        from rollout.commands import format_output
        from rollout.core import Command, PolicyOutput
        from rollout.envs.miniwob import query_text

        obs = request.observation
        if request.step == 0:
            self.first[request.episode_key] = first_observation(obs)
        rng = random.Random(hashlib.sha256(f"{request.episode_key}/{request.step}".encode()).digest())
        targets = [e for e in obs.elements if e.interactive and not e.disabled]
        if not targets:
            return PolicyOutput(format_output("Nothing to act on.", Command("STOP", arg="")))
        el = rng.choice(targets)
        words = re.findall(r"[\w'-]+", query_text(obs)) or ["x"]
        if el.role in ("textbox", "searchbox", "spinbutton"):
            cmd = Command("TYPE", el.id, rng.choice(words))
        elif el.role == "combobox" and el.options:
            cmd = Command("SELECT", el.id, rng.choice(el.options))
        else:
            cmd = Command("CLICK", el.id)
        return PolicyOutput(format_output("A random action.", cmd))

    async def close(self):
        pass


def first_observation(obs) -> dict:
    from rollout.envs.miniwob import query_text

    roles = collections.Counter(e.role for e in obs.elements if e.interactive)
    return {
        "interactive": sum(roles.values()),
        "roles": dict(roles),
        "utterance": query_text(obs),
        "text_lines": len(obs.text.splitlines()),
        "truncated": obs.truncated,
    }


def descriptions() -> dict[str, str]:
    """Task → the package's one-line description (its environment classes' docstrings)."""
    from rollout.envs.miniwob import package_dir

    out = {}
    for fname in ("miniwob_envs.py", "flightwob_envs.py"):
        with open(os.path.join(package_dir(), "envs", fname), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            sub = [
                s.value.value
                for s in node.body
                if isinstance(s, ast.Assign)
                and isinstance(s.value, ast.Constant)
                and any(getattr(t, "id", "") == "subdomain" for t in s.targets)
            ]
            doc = ast.get_docstring(node) or ""
            m = re.search(r"## Description\s*\n\s*\n?(.+)", doc)
            if sub and m:
                out[sub[0]] = m.group(1).strip()
    return out


def episode_row(ep, first: dict | None) -> dict:
    """One episode's facts from its recording (summary + steps) and the policy's note of its first observation."""
    s = ep.summary
    final = (s.get("final") or {}).get("check") or {}
    m = re.search(r"raw=(-?[\d.e+-]+)", final.get("progress", ""))
    errors = collections.Counter(st["error"]["kind"] for st in ep.steps if st.get("error"))
    started = not (s["status"] == "errored" and s.get("steps", 0) == 0)
    return {
        "seed": int(ep.summary["task_id"].rsplit("/", 1)[1]),
        "started": started,
        "first": first,
        "steps": s.get("steps", 0),
        "done": bool(final.get("done")),
        "raw": float(m.group(1)) if m else None,
        "success": bool(s.get("success")),
        "end_reason": s.get("end_reason"),
        "action_errors": dict(errors),
        "harness_error": None if not s.get("error") else f"{s['error']['type']}: {s['error']['message'][:300]}",
    }


def task_row(name: str, episodes: list[dict], oracle: bool, description: str) -> dict:
    firsts = [e["first"] for e in episodes if e["first"]]
    roles = collections.Counter()
    for f in firsts:
        roles.update(f["roles"])
    raws = [e["raw"] for e in episodes if e["done"] and e["raw"] is not None]
    errs = collections.Counter()
    for e in episodes:
        errs.update(e["action_errors"])
    return {
        "task": name,
        "oracle": oracle,
        "description": description,
        "episodes": len(episodes),
        "started": sum(e["started"] for e in episodes),
        "interactive_median": statistics.median([f["interactive"] for f in firsts]) if firsts else None,
        "roles": {r: round(n / max(1, len(firsts)), 1) for r, n in roles.most_common()},
        "utterance": firsts[0]["utterance"] if firsts else "",
        "done": sum(e["done"] for e in episodes),
        "solved": sum(e["success"] for e in episodes),
        "max_raw": max(raws) if raws else None,
        "action_errors": dict(errs),
        "harness_errors": sorted({e["harness_error"] for e in episodes if e["harness_error"]}),
        "per_episode": episodes,
    }


def limits_section() -> str:
    """The tasks of ``LIMITS``, grouped by kind, each with its reason."""
    from rollout.envs.miniwob import LIMITS

    out = []
    for kind in ("cannot", "partly", "text-blind"):
        names = [n for n, (k, _) in LIMITS.items() if k == kind]
        out.append(f"\n**{kind}** ({len(names)}):\n")
        out += [f"- {n}: {LIMITS[n][1]}" for n in names]
    return "\n".join(out) + "\n"


def markdown(rows: list[dict], meta: dict) -> str:
    from rollout.envs.miniwob import LIMITS

    head = (
        f"MiniWoB++ survey: {meta['tasks']} tasks × {meta['episodes']} episodes, random policy, ≤ "
        f"{meta['max_steps']} steps, {meta['seconds']:.0f} s\n\n"
        "| task | oracle | starts | interactive (median) | roles at start | random: done | random: solved | "
        "max raw | action errors | harness errors | in this harness |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        roles = ", ".join(f"{k} {v:g}" for k, v in r["roles"].items()) or "—"
        errs = ", ".join(f"{k} {v}" for k, v in sorted(r["action_errors"].items())) or "—"
        harness = "; ".join(h[:80] for h in r["harness_errors"]) or "—"
        raw = "—" if r["max_raw"] is None else f"{r['max_raw']:g}"
        lines.append(
            f"| {r['task']} | {'yes' if r['oracle'] else 'no'} | {r['started']}/{r['episodes']} | "
            f"{r['interactive_median'] if r['interactive_median'] is not None else '—'} | {roles} | "
            f"{r['done']}/{r['episodes']} | {r['solved']}/{r['episodes']} | {raw} | {errs} | {harness} | "
            f"{LIMITS.get(r['task'], ('works',))[0]} |"
        )
    return head + "\n".join(lines) + "\n" + limits_section()


async def survey(names, episodes: int, max_steps: int, contexts: int, action_ms: int, out: str) -> dict:
    from rollout.collect import CollectConfig, collect_async
    from rollout.envs.miniwob import SUPPORTED, MiniWoBEnv
    from rollout.harness.runner import HarnessConfig
    from rollout.recording import iter_episodes

    env = MiniWoBEnv(task_names=names, train_seeds=episodes, test_seeds=0)
    tasks = env.tasks("train")
    policy = RandomPolicy()
    shutil.rmtree(os.path.join(out, "episodes"), ignore_errors=True)
    harness = HarnessConfig(
        max_steps=max_steps, screenshots=False, step_timeout_s=60, episode_timeout_s=300, action_ms=action_ms
    )
    cfg = CollectConfig(out_dir=out, runs=1, contexts=contexts, max_consecutive_errors=10**6, harness=harness)
    t0 = time.time()
    try:
        await collect_async(env, tasks, policy, cfg)
    finally:
        env.stop()
    seconds = time.time() - t0
    by_task = collections.defaultdict(list)
    for ep in iter_episodes(out, include_errored=True):
        by_task[ep.summary["family"]].append(episode_row(ep, policy.first.get(ep.summary["episode_key"])))
    desc = descriptions()
    rows = [
        task_row(n, sorted(by_task[n], key=lambda e: e["seed"]), n in SUPPORTED, desc.get(n, ""))
        for n in env.task_names
    ]
    meta = {
        "tasks": len(rows),
        "episodes": episodes,
        "max_steps": max_steps,
        "contexts": contexts,
        "action_ms": action_ms,
        "seconds": seconds,
    }
    return {"meta": meta, "tasks": rows}


def main(argv):
    del argv
    path = os.path.join(_OUT.value, "survey.json")
    if _RENDER.value:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    else:
        names = "all" if _TASKS.value == ["all"] else _TASKS.value
        result = asyncio.run(
            survey(names, _EPISODES.value, _MAX_STEPS.value, _CONTEXTS.value, _ACTION_MS.value, _OUT.value)
        )
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, ensure_ascii=False)
    with open(os.path.join(_OUT.value, "survey.md"), "w", encoding="utf-8") as f:
        f.write(markdown(result["tasks"], result["meta"]))
    rows = result["tasks"]
    print(
        json.dumps(
            {
                "tasks": len(rows),
                "all_started": sum(r["started"] == r["episodes"] for r in rows),
                "never_started": sum(r["started"] == 0 for r in rows),
                "random_solved_any": sum(r["solved"] > 0 for r in rows),
                "seconds": round(result["meta"]["seconds"]),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    app.run(main)
