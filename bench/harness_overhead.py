"""Harness overhead: steps/s of the rollout harness vs a bare Playwright loop doing the same page operations.

  python -m bench.harness_overhead [--tasks=8 --reps=2 --screenshots]

Both sides play the clean oracle's trajectories on the embedded shop, with 1 and 4 browser contexts,
a fresh context (and shop session) per episode:
- harness: ``rollout.collect`` end to end — id injection in every frame, accessibility text with ids,
  screenshot + pHash, the policy call, strict parsing, execution with event waits and the R_acc
  check, the task check, watchdogs and JSONL recording;
- bare: the same commands replayed with role + name locators; per step: the action, wait for the
  load, ``aria_snapshot()`` of the page, screenshot, pHash (and the same for the start state).
Prints steps/s of each and the ratio (harness / bare) per context count, measured alternately in one
run, best of ``--reps``. Goal: ratio >= 0.8.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time

from absl import app, flags

_TASKS = flags.DEFINE_integer("tasks", 8, "shop tasks (webshop + procedure families)")
_REPS = flags.DEFINE_integer("reps", 2, "timed repetitions per side (best is reported)")
_SCREENSHOTS = flags.DEFINE_bool("screenshots", True, "harness saves PNGs (both sides always take the screenshot)")
_STILL_MS = flags.DEFINE_integer("still_ms", None, "harness: quiet window before an element command (default: "
                                 "HarnessConfig's; 0 = none)")


async def harness_rate(env, tasks, contexts: int, out: str) -> tuple[float, int, list]:
    from rollout.collect import CollectConfig, collect_async
    from rollout.harness.runner import HarnessConfig
    from rollout.policies.oracle import OraclePolicy
    from rollout.recording import iter_episodes

    shutil.rmtree(out, ignore_errors=True)
    cfg = CollectConfig(out_dir=out, runs=1, contexts=contexts, progress=False,
                        harness=HarnessConfig(screenshots=_SCREENSHOTS.value,
                                              **({} if _STILL_MS.value is None else {"still_ms": _STILL_MS.value})))
    t0 = time.perf_counter()
    counts = await collect_async(env, tasks, OraclePolicy(env), cfg)
    dt = time.perf_counter() - t0
    assert counts.get("success", 0) == len(tasks), counts
    episodes = list(iter_episodes(out))
    steps = sum(len(e.steps) for e in episodes)
    return steps / dt, steps, episodes


async def bare_rate(env, tasks, episodes, contexts: int) -> tuple[float, int]:
    import imagehash
    import io

    from PIL import Image
    from playwright.async_api import async_playwright

    from rollout.browser_path import CHROMIUM_ARGS, chromium_executable

    by_task = {e.task_id: e.steps for e in episodes}
    todo = list(tasks)
    steps_done = [0]

    async def one(browser, task) -> None:
        context = await browser.new_context(viewport={"width": 1024, "height": 768})
        page = await context.new_page()
        await env.reset(context, page, task, f"{task.task_id}/bare")

        async def look() -> None:
            await page.locator("body").aria_snapshot()
            png = await page.screenshot(type="png")
            str(imagehash.phash(Image.open(io.BytesIO(png)), hash_size=32))  # as the harness

        await look()  # s_0, as the harness observes it
        for s in by_task[task.task_id]:
            name, target = s["command_name"], s["target"]
            if name not in ("STOP", "GO_BACK") and target is not None:
                loc = page.get_by_role(target["role"], name=target["name"], exact=True).first
                arg = s["command"].rsplit("[", 1)[1][:-1] if name in ("TYPE", "SELECT") else None
                if name == "CLICK":
                    await loc.click()
                elif name == "TYPE":
                    await loc.fill(arg)
                elif name == "SELECT":
                    await loc.select_option(label=arg)
                await page.wait_for_load_state("domcontentloaded")
            elif name == "GO_BACK":
                await page.go_back(wait_until="domcontentloaded")
            if name != "STOP":  # the harness observes every state after an action, none after STOP
                await look()
            steps_done[0] += 1
        await context.close()

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_executable(), args=list(CHROMIUM_ARGS))

        async def worker():
            while todo:
                await one(browser, todo.pop(0))

        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(contexts)])
        dt = time.perf_counter() - t0
        await browser.close()
    return steps_done[0] / dt, steps_done[0]


def main(argv):
    del argv
    from rollout.envs.shop.env import ShopEnv

    env = ShopEnv(seed=0)
    env.start()
    tasks = [t for t in env.tasks("train") if t.family in ("webshop", "procedure")][:_TASKS.value]
    tmp = tempfile.mkdtemp(prefix="bench_harness_")
    try:
        _, _, episodes = asyncio.run(harness_rate(env, tasks, 4, os.path.join(tmp, "warm")))  # warm-up + script
        results = {}
        for contexts in (1, 4):
            best_h = best_b = 0.0
            for _ in range(_REPS.value):
                h, n_h, _ = asyncio.run(harness_rate(env, tasks, contexts, os.path.join(tmp, f"h{contexts}")))
                b, n_b = asyncio.run(bare_rate(env, tasks, episodes, contexts))
                assert n_h == n_b, (n_h, n_b)
                best_h, best_b = max(best_h, h), max(best_b, b)
            results[contexts] = (best_h, best_b, n_h)
        print(f"{'contexts':>8} {'steps':>6} {'harness steps/s':>16} {'bare steps/s':>13} {'ratio':>6}")
        for contexts, (h, b, n) in results.items():
            print(f"{contexts:>8} {n:>6} {h:>16.2f} {b:>13.2f} {h / b:>6.2f}")
    finally:
        env.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
