"""``TaskFileEnv``: your own site and tasks from a JSONL file, with no Python written (docs/tasks.md).

One task per line::

    {"id": "docs/json", "start_url": "http://127.0.0.1:8800/", "instruction": "Open the json module's page.",
     "check": {"all": [{"url": "json\\\\.html$"}, {"element": {"role": "heading", "name_regex": "json"}}]},
     "plan": [{"do": "CLICK", "role": "link", "name": "json"}, {"do": "STOP"}],
     "split": "train", "family": "docs", "allow_origins": ["http://127.0.0.1:8800"], "optimal_steps": 2}

``id``, ``start_url``, ``instruction`` and ``check`` (rollout/envs/checks.py) are required. ``plan`` (optional) is
the task's solution as commands on elements named by role and name, as the observation shows them; it makes the
noisy oracle (``--policy=oracle``) a behaviour policy for the site, and ``optimal_steps`` defaults to its length
(0 = unknown without one). ``allow_origins`` (default: the start URL's) is where GOTO and navigation may go. A
start URL may be relative (``/index.html``): the site's origin is then given when the file is loaded
(``--tasks_origin``), so one file serves a site on any port.

Every error in the file (a missing or unknown field, a bad check, a plan step without its target, a duplicate id) is
raised with the file, the line and the field before anything runs; ``start()`` then checks that every start URL
answers and that the browser accepts every CSS selector, still before any episode.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any

from rollout.core import CheckResult, Command, Environment, Observation, Task
from rollout.envs import checks
from rollout.harness.guards import origin_of

FIELDS = {"id", "start_url", "instruction", "check", "plan", "split", "family", "allow_origins", "optimal_steps"}
REQUIRED = ("id", "start_url", "instruction", "check")
TARGETED = ("CLICK", "TYPE", "SELECT", "CLEAR")
_STEP_ARGS = {
    "CLICK": set(),
    "CLEAR": set(),
    "TYPE": {"text"},
    "SELECT": {"option"},
    "GOTO": {"url"},
    "SCROLL": {"direction"},
    "GO_BACK": set(),
    "STOP": {"answer"},
}
LOST_LIMIT = 3  # plan steps whose target is missing in a row before the oracle gives up (GO_BACK each time)


class TaskFileError(ValueError):
    """A task file that cannot be used: names the file, the line and the field."""


@dataclasses.dataclass(frozen=True)
class PlanStep:
    """One step of a task's plan: the command, the target element's role and name, and its argument."""

    do: str
    role: str | None = None
    name: str | None = None
    arg: str | None = None  # text / option / url / direction / answer

    def command(self, element_id: str | None = None) -> Command:
        """The step as a ``Command`` on the element with id ``element_id``."""
        return Command(self.do, element_id, self.arg if self.do != "STOP" else (self.arg or ""))


def parse_plan(spec: Any, where: str) -> tuple[PlanStep, ...]:
    """A task's plan from its JSON list of steps; ``TaskFileError`` naming ``where`` and the step for a bad one."""
    if not isinstance(spec, list) or not spec:
        raise TaskFileError(f"{where}: expected a non-empty list of steps")
    out = []
    for i, step in enumerate(spec):
        at = f"{where}[{i}]"
        if not isinstance(step, dict) or step.get("do") not in _STEP_ARGS:
            raise TaskFileError(
                f'{at}: expected {{"do": one of {", ".join(_STEP_ARGS)}, …}}, got {json.dumps(step)[:80]}'
            )
        do = step["do"]
        allowed = {"do"} | _STEP_ARGS[do] | ({"role", "name"} if do in TARGETED else set())
        extra = sorted(set(step) - allowed)
        if extra:
            raise TaskFileError(f"{at}: unexpected key(s) {extra} for {do} (allowed: {sorted(allowed)})")
        if do in TARGETED and not (isinstance(step.get("role"), str) and isinstance(step.get("name"), str)):
            raise TaskFileError(f"{at}: {do} needs the element's role and name as the page shows them")
        need = _STEP_ARGS[do] - {"answer"}
        missing = sorted(k for k in need if not isinstance(step.get(k), str))
        if missing:
            raise TaskFileError(f"{at}: {do} needs {missing} (strings)")
        if do == "SCROLL" and step["direction"] not in ("UP", "DOWN"):
            raise TaskFileError(f"{at}: SCROLL direction must be UP or DOWN")
        arg = next((step[k] for k in ("text", "option", "url", "direction", "answer") if k in step), None)
        out.append(PlanStep(do, step.get("role"), step.get("name"), arg))
    return tuple(out)


def parse_task(d: Any, where: str, origin: str | None = None) -> Task:
    """One line's task; ``TaskFileError`` naming ``where`` and the field. A relative ``start_url`` (``/index.html``)
    is resolved against ``origin`` (where the site is served this time), so one file serves any port or host."""
    if not isinstance(d, dict):
        raise TaskFileError(f"{where}: expected a JSON object per line")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise TaskFileError(f"{where}: missing required field(s) {missing}")
    extra = sorted(set(d) - FIELDS)
    if extra:
        raise TaskFileError(f"{where}: unknown field(s) {extra} (fields: {sorted(FIELDS)})")
    for k in ("id", "instruction", "start_url"):
        if not isinstance(d[k], str) or not d[k].strip():
            raise TaskFileError(f"{where}: {k} must be a non-empty string")
    where = f"{where} (task {d['id']!r})"
    start = d["start_url"]
    if origin is not None and origin_of(start) is None and start.startswith("/"):
        start = origin.rstrip("/") + start
    if origin_of(start) is None:
        hint = " (a relative one needs the site's origin: --tasks_origin / env.origin)" if start.startswith("/") else ""
        raise TaskFileError(f"{where}: start_url {d['start_url']!r} is not an http(s) URL{hint}")
    allow = d.get("allow_origins", [])
    if not isinstance(allow, list) or not all(isinstance(o, str) and origin_of(o) for o in allow):
        raise TaskFileError(f"{where}: allow_origins must be a list of http(s) origins")
    origins = sorted({origin_of(start), *(origin_of(o) for o in allow)})
    try:
        check = checks.parse_check(d["check"], start)
    except checks.CheckError as e:
        raise TaskFileError(f"{where}: {e}") from None
    outside = [u for u in checks.json_urls(check) if origin_of(u) not in origins]
    if outside:
        raise TaskFileError(f"{where}: check's json endpoint(s) {outside} are outside allow_origins {origins}")
    plan = parse_plan(d["plan"], f"{where}: plan") if "plan" in d else None
    if plan is not None:
        for step in plan:
            if step.do == "GOTO" and origin_of(step.arg or "") not in origins:
                raise TaskFileError(f"{where}: plan's GOTO {step.arg!r} is outside allow_origins {origins}")
    split = d.get("split", "train")
    if split not in ("train", "test"):
        raise TaskFileError(f"{where}: split must be 'train' or 'test', not {split!r}")
    optimal = d.get("optimal_steps", len(plan) if plan else 0)
    if not isinstance(optimal, int) or isinstance(optimal, bool) or optimal < 0:
        raise TaskFileError(f"{where}: optimal_steps must be a non-negative integer")
    family = d.get("family", "tasks")
    if not isinstance(family, str) or not family:
        raise TaskFileError(f"{where}: family must be a non-empty string")
    goal = {"start_url": start, "allow_origins": origins, "check": d["check"]}
    if "plan" in d:
        goal["plan"] = d["plan"]
    return Task(
        task_id=d["id"],
        env="tasks",
        family=family,
        instruction=d["instruction"],
        start_path=start,
        optimal_steps=optimal,
        split=split,
        goal=goal,
    )


def load_tasks(path: str, origin: str | None = None) -> list[Task]:
    """Every task of a JSONL task file (blank lines and lines starting with ``#`` are skipped); relative start URLs
    are resolved against ``origin``."""
    if origin is not None and origin_of(origin) is None:
        raise TaskFileError(f"the site's origin {origin!r} is not an http(s) origin such as http://127.0.0.1:8765")
    if not os.path.isfile(path):
        raise TaskFileError(f"task file {path!r} does not exist")
    tasks, seen = [], {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}:{n}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskFileError(f"{where}: not valid JSON ({e})") from None
            task = parse_task(d, where, origin)
            if task.task_id in seen:
                raise TaskFileError(f"{where}: duplicate id {task.task_id!r} (first on line {seen[task.task_id]})")
            seen[task.task_id] = n
            tasks.append(task)
    if not tasks:
        raise TaskFileError(f"task file {path!r} holds no tasks")
    return tasks


def check_reachable(urls, timeout_s: float = 10.0) -> None:
    """Every URL answers with a status below 400, or ``TaskFileError`` naming each that does not."""
    bad = []
    for url in sorted(set(urls)):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s) as r:
                r.read(1)
        except urllib.error.HTTPError as e:
            bad.append(f"{url} (HTTP {e.code})")
        except (urllib.error.URLError, OSError, ValueError) as e:
            bad.append(f"{url} ({getattr(e, 'reason', e)})")
    if bad:
        raise TaskFileError("start URL(s) not reachable, no episode was run: " + "; ".join(bad))


def check_css(selectors) -> None:
    """The browser accepts every CSS selector (run once, in a thread of its own: the caller may be inside an
    asyncio loop, where Playwright's sync API refuses to run)."""
    selectors = sorted(set(selectors))
    if not selectors:
        return
    result: dict[str, Any] = {}

    def work():
        try:
            from playwright.sync_api import sync_playwright

            from rollout.browser_path import CHROMIUM_ARGS, chromium_executable

            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium_executable(), args=list(CHROMIUM_ARGS))
                page = browser.new_page()
                bad = []
                for css in selectors:
                    try:
                        page.locator("css=" + css).count()
                    except Exception as e:  # noqa: BLE001 — Playwright's message names the parse error
                        bad.append(f"{css!r}: {str(e).splitlines()[0]}")
                browser.close()
            result["bad"] = bad
        except Exception as e:  # noqa: BLE001 — re-raised in the caller's thread
            result["error"] = e

    t = threading.Thread(target=work, name="css-check")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    if result["bad"]:
        raise TaskFileError("bad CSS selector(s) in the task checks, no episode was run: " + "; ".join(result["bad"]))


class TaskFileEnv(Environment):
    """The tasks of a JSONL file on a site someone else serves (its start URLs must answer when ``start()`` runs)."""

    name = "tasks"

    def __init__(self, path: str, origin: str | None = None):
        self.path = path
        self._tasks = load_tasks(path, origin or None)
        self._checks = {t.task_id: checks.parse_check(t.goal["check"], t.goal["start_url"]) for t in self._tasks}
        self._plans = {t.task_id: parse_plan(t.goal["plan"], "plan") for t in self._tasks if "plan" in t.goal}
        self._has_targets = {k: any(map(checks.is_target, checks.leaves(c))) for k, c in self._checks.items()}
        self._origin = origin_of(self._tasks[0].goal["start_url"])
        self._started = False

    # ------------------------------------------------------------ serving (the user's site: only checked)
    def start(self) -> str:
        """Check once that every start URL is reachable and every CSS selector valid; the origin."""
        if not self._started:
            check_reachable(t.goal["start_url"] for t in self._tasks)
            check_css(css for c in self._checks.values() for css in checks.css_selectors(c))
            self._started = True
        return self._origin

    def stop(self) -> None:
        """Nothing to stop: the site is served elsewhere."""
        pass

    @property
    def origin(self) -> str:
        """The first task's origin: URLs there are shown site-relative, others whole."""
        return self._origin

    def allowed_origins(self, task: Task | None = None) -> tuple[str, ...]:
        """The origins ``task`` may navigate to (every task's, without a task)."""
        if task is not None:
            return tuple(task.goal["allow_origins"])
        return tuple(sorted({o for t in self._tasks for o in t.goal["allow_origins"]}))

    def tasks(self, split: str) -> list[Task]:
        """The file's tasks of ``split``; ``ValueError`` for another split."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        return [t for t in self._tasks if t.split == split]

    # ------------------------------------------------------------ episodes
    def _check(self, task: Task) -> checks.Check:
        return self._checks[task.task_id]

    async def reset(self, context, page, task: Task, episode_key: str) -> None:
        """Open the task's start URL (the harness's fresh context is the site's fresh state)."""
        # A fresh context per episode (the harness's) is the site's fresh state: no cookies, no storage.
        await page.goto(task.goal["start_url"], wait_until="domcontentloaded")

    async def check(self, page, task: Task, episode_key: str, answer: str | None = None) -> CheckResult:
        """The task's check on the live page (with the STOP ``answer`` when given): success, the share of a top-level
        ``all``'s parts that hold as score, the leaves' values as progress, and the target elements' ids."""
        check = self._check(task)
        ok, values = await checks.evaluate(check, page, answer)
        # partial credit: the share of a top-level "all"'s parts that hold (0 for any other root)
        if ok:
            score = 1.0
        elif isinstance(check, checks.Node) and check.kind == "all":
            n = [len(checks.leaves(p)) for p in check.parts]
            bounds = [sum(n[:i]) for i in range(len(n) + 1)]
            held = sum(checks.combine(p, values[bounds[i] : bounds[i + 1]]) for i, p in enumerate(check.parts))
            score = held / len(check.parts)
        else:
            score = 0.0
        progress = "".join("1" if v else "0" for v in values)
        # for the element-level metrics: which observed elements the check's target leaves name (ids as shown)
        targets = await checks.target_ids(check, page) if self._has_targets[task.task_id] else {}
        elements = {"targets": {str(i): ids for i, ids in targets.items()}} if targets else None
        return CheckResult(success=ok, score=float(score), progress=progress, elements=elements)

    async def check_answer(self, page, task: Task, episode_key: str, answer: str) -> CheckResult:
        """The check with the STOP answer (the ``answer`` / ``answer_from`` leaves), and the answer's token F1
        against each reference the check has."""
        result = await self.check(page, task, episode_key, answer)
        f1 = await checks.answer_f1(self._check(task), page, answer)
        if not f1:
            return result
        elements = dict(result.elements or {}, answer=answer, f1={str(i): v for i, v in f1.items()})
        return dataclasses.replace(result, elements=elements)

    # ------------------------------------------------------------ the plan as an oracle
    def require_oracle(self, tasks) -> None:
        """Raise ``TaskFileError`` naming the tasks that have no plan."""
        ids = [t.task_id for t in tasks if t.task_id not in self._plans]
        if ids:
            raise TaskFileError(
                f"task(s) {', '.join(ids[:8])}{' …' if len(ids) > 8 else ''} have no plan: the oracle "
                "policy follows a task's plan; add one to the task file (docs/tasks.md) or use a "
                "model policy (--policy=model / http)"
            )

    def _plan(self, task: Task) -> tuple[PlanStep, ...]:
        self.require_oracle([task])
        return self._plans[task.task_id]

    @staticmethod
    def _target(obs: Observation, step: PlanStep):
        hits = obs.find(role=step.role, name=step.name)
        return hits[0] if hits else None

    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        """The plan's next step on this page. When its element is not here (a wrong click, a detour or a GO_BACK
        left the page), the plan resumes from the first of the latest run of its earlier steps that this page
        offers (back on the search form after going back: type the query again); when the page offers none of
        them, go back. After ``LOST_LIMIT`` such misses without getting further, give up with STOP."""
        plan, at = self._plan(task), memory.get("at", 0)
        if at >= len(plan):
            return Command("STOP", arg="")
        step = plan[at]
        element = self._target(obs, step) if step.do in TARGETED else None
        if step.do in TARGETED and element is None:
            memory["lost"] = memory.get("lost", 0) + 1
            if memory["lost"] > LOST_LIMIT:
                return Command("STOP", arg="")
            here = [j for j in range(at) if plan[j].do in TARGETED and self._target(obs, plan[j]) is not None]
            if not here:
                return Command("GO_BACK")
            k = here[-1]
            while k - 1 in here:
                k -= 1
            step, at = plan[k], k
            element = self._target(obs, step)
        if at + 1 > memory.get("best", 0):  # further than ever: the misses so far are forgiven
            memory["best"], memory["lost"] = at + 1, 0
        memory["at"] = at + 1
        return step.command(element.id if element is not None else None)

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """Another element of the role the plan's click wants (the plan goes back and on), or another option of the
        select (kept: the plan carries on with it)."""
        plan, at = self._plan(task), memory.get("at", 0)
        if at >= len(plan) or plan[at].do not in ("CLICK", "SELECT"):
            return None
        step = plan[at]
        target = self._target(obs, step)
        if step.do == "CLICK":
            wrong = [
                e for e in obs.elements if e.role == step.role and e.interactive and e is not target and not e.disabled
            ]
            return Command("CLICK", wrong[rng.randrange(len(wrong))].id) if wrong else None
        if target is None:
            return None
        options = [o for o in target.options if o != step.arg]
        if not options:
            return None
        memory["at"] = at + 1
        return Command("SELECT", target.id, options[rng.randrange(len(options))])

    def typed_strings(self, task: Task) -> dict[str, str]:
        """The plan's typed texts that the instruction writes out (what copy-swap may replace)."""
        plan = self._plans.get(task.task_id) or ()
        return {s.arg: "text" for s in plan if s.do == "TYPE" and s.arg and s.arg in task.instruction}
