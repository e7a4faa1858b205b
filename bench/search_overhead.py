"""Search overhead: seconds per executed browser step of Agent Q's search (``rollout/search/``) against plain episode
collection with the same policy, on the embedded shop, with 1 and 4 browser contexts.

  python -m bench.search_overhead [--tasks=4 --simulations=6 --k=3]

Both sides use one stateless policy (``rollout.policies.scripted.GoldOrRandom``:
the clean oracle's recorded command at a state on its path
with probability 0.5, else a random link or button), so they execute the same kind of steps. The search side's
steps include every replayed (forced) prefix step: they are browser steps it executes. What the ratio shows is the
search's own cost per step (K proposals and the critic's ranking at each expansion, state keys, the tree) over the
harness's. Goal: ratio <= 1.5. Measured side by side in one run, plain first.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time

from absl import app, flags

_TASKS = flags.DEFINE_integer("tasks", 4, "webshop training tasks")
_SIMS = flags.DEFINE_integer("simulations", 6, "search simulations per task = plain runs per task")
_K = flags.DEFINE_integer("k", 3, "search proposals per expanded node")


def _steps(out: str) -> int:
    from rollout.recording import iter_episodes

    return sum(len(e.steps) for e in iter_episodes(out))


def main(argv):
    del argv
    from bench.sides import cpu_flags
    from rollout.collect import CollectConfig, collect_async
    from rollout.envs.shop.env import ShopEnv
    from rollout.harness.runner import HarnessConfig
    from rollout.policies.oracle import OraclePolicy
    from rollout.recording import iter_episodes
    from rollout.policies.scripted import GoldOrRandom, gold_map
    from rollout.search.driver import LogprobCritic, SearchConfig, search_collect

    env = ShopEnv(seed=0)
    env.start()
    tasks = [t for t in env.tasks("train") if t.family == "webshop"][: _TASKS.value]
    tmp = tempfile.mkdtemp(prefix="search-bench-")
    harness = HarnessConfig(screenshots=False, max_steps=10)
    try:
        gold_dir = os.path.join(tmp, "gold")
        asyncio.run(
            collect_async(
                env,
                tasks,
                OraclePolicy(env),
                CollectConfig(out_dir=gold_dir, runs=1, contexts=2, progress=False, harness=harness),
            )
        )
        policy = GoldOrRandom(gold_map(iter_episodes(gold_dir)), env.essential_query_params())
        print(
            f"CPU: {os.cpu_count()} cores, flags: {cpu_flags()}; {len(tasks)} webshop tasks, "
            f"{_SIMS.value} runs / simulations each, K={_K.value}"
        )
        print("| contexts | plain s/step | search s/step | search / plain | plain steps | search steps |")
        print("|---:|---:|---:|---:|---:|---:|")
        for contexts in (1, 4):
            plain = os.path.join(tmp, f"plain{contexts}")
            t0 = time.perf_counter()
            asyncio.run(
                collect_async(
                    env,
                    tasks,
                    policy,
                    CollectConfig(out_dir=plain, runs=_SIMS.value, contexts=contexts, progress=False, harness=harness),
                )
            )
            tp, sp = time.perf_counter() - t0, _steps(plain)
            search = os.path.join(tmp, f"search{contexts}")
            t0 = time.perf_counter()
            asyncio.run(
                search_collect(
                    env,
                    tasks,
                    policy,
                    LogprobCritic(),
                    SearchConfig(_SIMS.value, _K.value),
                    harness,
                    search,
                    contexts=contexts,
                    progress=False,
                )
            )
            ts, ss = time.perf_counter() - t0, _steps(search)
            print(
                f"| {contexts} | {tp / sp:.3f} | {ts / ss:.3f} | {(ts / ss) / (tp / sp):.2f} | {sp} | {ss} |",
                flush=True,
            )
    finally:
        env.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
