"""Harness speed: steps/s of the rollout harness against its earlier settings, and against a bare Playwright
loop doing the same page operations.

  python -m bench.harness_overhead [--tasks=8 --reps=2 --screenshots --before]

Both sides play the clean oracle's trajectories on the embedded shop, with 1 and 4 browser contexts,
a fresh context (and shop session) per episode:
- harness: ``rollout.collect`` end to end — id injection in every frame, accessibility text with ids,
  screenshot + pHash, the policy call, strict parsing, execution with event waits and the R_acc
  check, the task check, watchdogs and JSONL recording;
- bare: the same commands replayed with role + name locators; per step: the action, wait for the
  load, ``aria_snapshot()`` of the page, screenshot, pHash (and the same for the start state).
``--before`` (default) also runs the harness with its earlier settings: Debian's full ``chromium``
(not its headless shell) and Playwright's ``page.screenshot`` (not the CDP capture, ``HarnessConfig.fast_capture``),
plus the shell with ``page.screenshot`` to separate the two changes; every side must record the same commands,
URLs and observation texts, and the two shell sides the same pHashes (the full browser renders a few pixels
differently). Prints steps/s of each, now / before (goal >= 2 with 4 contexts) and now / bare (goal >= 0.8), per
context count, the sides measured in turn in one run, best of ``--reps``, with the CPU's flags.
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
_BEFORE = flags.DEFINE_bool(
    "before",
    True,
    "also run the harness with its earlier settings (full chromium, "
    "page.screenshot) and the shell with page.screenshot",
)
_STILL_MS = flags.DEFINE_integer(
    "still_ms", None, "harness: quiet window before an element command (default: HarnessConfig's; 0 = none)"
)


FULL_CHROMIUM = "/usr/bin/chromium"
# side: (TGPO_CHROMIUM, HarnessConfig.fast_capture); '' = the default executable (the headless shell where installed)
SIDES = {"now": ("", True), "shell, page.screenshot": ("", False), "before": (FULL_CHROMIUM, False)}


async def harness_rate(env, tasks, contexts: int, out: str, fast_capture: bool = True) -> tuple[float, int, list]:
    from rollout.collect import CollectConfig, collect_async
    from rollout.harness.runner import HarnessConfig
    from rollout.policies.oracle import OraclePolicy
    from rollout.recording import iter_episodes

    shutil.rmtree(out, ignore_errors=True)
    cfg = CollectConfig(
        out_dir=out,
        runs=1,
        contexts=contexts,
        progress=False,
        harness=HarnessConfig(
            screenshots=_SCREENSHOTS.value,
            fast_capture=fast_capture,
            **({} if _STILL_MS.value is None else {"still_ms": _STILL_MS.value}),
        ),
    )
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


def recorded(episodes) -> tuple[list, list]:
    """(commands, URLs and observation texts; pHashes) of every step, in task order."""
    steps = [st for e in sorted(episodes, key=lambda e: e.task_id) for st in e.steps]
    return ([(st["command"], st.get("url"), st.get("observation")) for st in steps], [st.get("phash") for st in steps])


def side_rate(env, tasks, contexts: int, out: str, side: str) -> tuple[float, int, list]:
    exe, fast = SIDES[side]
    old = os.environ.get("TGPO_CHROMIUM")
    os.environ["TGPO_CHROMIUM"] = exe
    try:
        return asyncio.run(harness_rate(env, tasks, contexts, out, fast))
    finally:
        if old is None:
            os.environ.pop("TGPO_CHROMIUM", None)
        else:
            os.environ["TGPO_CHROMIUM"] = old


def main(argv):
    del argv
    from bench.sides import cpu_flags
    from rollout.browser_path import chromium_executable
    from rollout.envs.shop.env import ShopEnv

    sides = list(SIDES) if _BEFORE.value else ["now"]
    if _BEFORE.value and not os.path.exists(FULL_CHROMIUM):
        raise SystemExit(f"--before needs Debian's full browser at {FULL_CHROMIUM} (or --nobefore)")
    print(f"CPU flags: {cpu_flags()}; now: {chromium_executable()}", flush=True)
    env = ShopEnv(seed=0)
    env.start()
    tasks = [t for t in env.tasks("train") if t.family in ("webshop", "procedure")][: _TASKS.value]
    tmp = tempfile.mkdtemp(prefix="bench_harness_")
    try:
        _, _, episodes = side_rate(env, tasks, 4, os.path.join(tmp, "warm"), "now")  # warm-up + the bare script
        ref_text, ref_phash = recorded(episodes)
        results, phash_diff = {}, {}
        for contexts in (1, 4):
            best = dict.fromkeys(sides + ["bare"], 0.0)
            for _ in range(_REPS.value):
                for side in sides:
                    r, n, eps = side_rate(env, tasks, contexts, os.path.join(tmp, f"h{contexts}"), side)
                    text, phash = recorded(eps)
                    assert text == ref_text, f"{side}: the recorded commands, URLs or observations differ"
                    if SIDES[side][0] == "":  # the shell: the same pixels, the same pHashes
                        assert phash == ref_phash, f"{side}: pHashes differ from the fast capture's"
                    else:
                        phash_diff[side] = sum(a != b for a, b in zip(phash, ref_phash))
                    best[side] = max(best[side], r)
                b, n_b = asyncio.run(bare_rate(env, tasks, episodes, contexts))
                assert n == n_b, (n, n_b)
                best["bare"] = max(best["bare"], b)
            results[contexts] = (best, n)
        head = "".join(f"{s:>24}" for s in sides + ["bare"])
        print(
            f"{'contexts':>8} {'steps':>6}{head} {'now/before':>11} {'now/bare':>9}  (steps/s, best of {_REPS.value})"
        )
        for contexts, (best, n) in results.items():
            cells = "".join(f"{best[s]:>24.2f}" for s in sides + ["bare"])
            before = f"{best['now'] / best['before']:>11.2f}" if "before" in best else f"{'-':>11}"
            print(f"{contexts:>8} {n:>6}{cells} {before} {best['now'] / best['bare']:>9.2f}")
        for side, d in phash_diff.items():
            print(
                f"{side}: {d} of {len(ref_phash)} pHashes differ from now's (another browser's rendering); "
                "commands, URLs and observations equal"
            )
    finally:
        env.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
