"""Dataset build time vs collection time: is building the trees + dataset a small cost next to collecting?

  python -m bench.build_dataset [--episodes=10000 --runs=8 --workdir=/tmp/x --collect_tasks=6]

1. Writes a synthetic collection (``trees.synthetic``: the real harness's recording format) of
   ``--episodes`` episodes, ``--runs`` runs per task, and times ``trees.dataset.build_dataset`` on it:
   episodes/s and steps/s.
2. In the same run, collects a small sample with the REAL harness on the embedded shop (clean oracle policy,
   ``--contexts`` browser contexts, screenshots on) after a warm-up, best of ``--collect_reps``, and
   extrapolates the time to collect as many steps as the synthetic collection holds.
Prints build time, estimated collect time and their ratio (goal < 5%). The oracle policy costs nothing, so the
estimate is a lower bound on a real (model) policy's collect time and the ratio an upper bound.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time

from absl import app, flags

_EPISODES = flags.DEFINE_integer("episodes", 10000, "synthetic episodes")
_RUNS = flags.DEFINE_integer("runs", 8, "runs per synthetic task (K)")
_WORKDIR = flags.DEFINE_string("workdir", None, "collection + dataset directory (default: a temp dir, removed)")
_SEED = flags.DEFINE_integer("seed", 0, "synthetic collection seed")
_BRANCHING = flags.DEFINE_float("branching", 0.3, "synthetic policy's probability of a non-optimal action")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 12, "synthetic episode step limit")
_COLLECT_TASKS = flags.DEFINE_integer("collect_tasks", 6, "shop tasks for the real-harness sample (0: skip)")
_CONTEXTS = flags.DEFINE_integer("contexts", 4, "browser contexts for the real-harness sample")
_COLLECT_REPS = flags.DEFINE_integer("collect_reps", 1, "timed real-harness repetitions after a warm-up (best)")


def _import_builder():
    try:
        from trees.dataset import BuildConfig, build_dataset
    except ImportError as e:
        sys.exit(
            f"bench.build_dataset: cannot import trees.dataset.build_dataset / BuildConfig ({e}); "
            "the dataset builder is needed for this benchmark"
        )
    return BuildConfig, build_dataset


async def _harness_rate(env, tasks, contexts: int, out: str) -> tuple[float, int, float]:
    from rollout.collect import CollectConfig, collect_async
    from rollout.harness.runner import HarnessConfig
    from rollout.policies.oracle import OraclePolicy
    from rollout.recording import iter_episodes

    shutil.rmtree(out, ignore_errors=True)
    cfg = CollectConfig(out_dir=out, runs=1, contexts=contexts, progress=False, harness=HarnessConfig(screenshots=True))
    t0 = time.perf_counter()
    counts = await collect_async(env, tasks, OraclePolicy(env), cfg)
    dt = time.perf_counter() - t0
    if counts.get("success", 0) != len(tasks):
        raise RuntimeError(f"oracle collection did not succeed on every task: {dict(counts)}")
    steps = sum(len(e.steps) for e in iter_episodes(out))
    return steps / dt, steps, dt


def collect_rate(work: str) -> tuple[float, int, float]:
    """(steps/s, steps, seconds) of the real harness on the shop, best timed repetition after a warm-up."""
    from rollout.envs.shop.env import ShopEnv

    env = ShopEnv(seed=0)
    env.start()
    try:
        tasks = [t for t in env.tasks("train") if t.family in ("webshop", "procedure")][: _COLLECT_TASKS.value]
        asyncio.run(_harness_rate(env, tasks, _CONTEXTS.value, os.path.join(work, "collect_warm")))
        best = (0.0, 0, 0.0)
        for i in range(max(1, _COLLECT_REPS.value)):
            r = asyncio.run(_harness_rate(env, tasks, _CONTEXTS.value, os.path.join(work, f"collect_{i}")))
            best = max(best, r)
        return best
    finally:
        env.stop()


def main(argv):
    del argv
    BuildConfig, build_dataset = _import_builder()  # fail before any work if the builder is missing
    from trees.synthetic import write_synthetic_collection

    num_tasks = max(1, _EPISODES.value // _RUNS.value)
    work = _WORKDIR.value or tempfile.mkdtemp(prefix="bench_build_")
    os.makedirs(work, exist_ok=True)
    coll = os.path.join(work, "collection")
    data = os.path.join(work, "dataset")
    try:
        shutil.rmtree(coll, ignore_errors=True)
        t0 = time.perf_counter()
        counts = write_synthetic_collection(
            coll,
            num_tasks=num_tasks,
            runs=_RUNS.value,
            seed=_SEED.value,
            branching=_BRANCHING.value,
            max_steps=_MAX_STEPS.value,
        )
        t_write = time.perf_counter() - t0
        print(
            f"synthetic collection: {counts['tasks']} tasks, {counts['episodes']} episodes, {counts['steps']} steps "
            f"written in {t_write:.1f}s",
            flush=True,
        )

        shutil.rmtree(data, ignore_errors=True)
        t0 = time.perf_counter()
        summary = build_dataset(coll, data, BuildConfig(), progress=False)
        t_build = time.perf_counter() - t0
        eps, steps = summary.get("episodes", counts["episodes"]), summary.get("steps", counts["steps"])
        if (eps, steps) != (counts["episodes"], counts["steps"]):
            print(
                f"WARNING: the builder used {eps} episodes / {steps} steps of {counts['episodes']} / "
                f"{counts['steps']} written (broken: {len(summary.get('broken_episodes', []))})"
            )
        extra = {
            k: summary[k]
            for k in (
                "records",
                "nodes",
                "states",
                "merged_by_phash",
                "guard_refusals",
                "merge_ratio",
                "label_conflict_rate",
                "success_rate",
            )
            if k in summary
        }
        print(
            "build summary: "
            + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items())
        )
        print(f"\n{'episodes':>9} {'steps':>8} {'build s':>8} {'episodes/s':>11} {'steps/s':>9}")
        print(f"{eps:>9} {steps:>8} {t_build:>8.1f} {eps / t_build:>11.1f} {steps / t_build:>9.1f}")

        if _COLLECT_TASKS.value <= 0:
            return
        rate, n, dt = collect_rate(work)
        est = steps / rate
        print(
            f"\nreal harness (shop, oracle policy, {_CONTEXTS.value} contexts, screenshots): {n} steps in {dt:.1f}s "
            f"= {rate:.2f} steps/s"
        )
        print(f"\n{'build s':>8} {'est. collect s':>15} {'build/collect':>14}   (goal < 5%; {steps} steps)")
        print(f"{t_build:>8.1f} {est:>15.0f} {100 * t_build / est:>13.2f}%")
    finally:
        if _WORKDIR.value is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
