"""MiniWoB++ as an Environment: the ``miniwob`` PyPI package's own task pages and reward code, served on loopback.

Only the package's ``html/`` directory is used (no Selenium / gymnasium). An episode starts the way the package's
``selenium_instance.py`` does it: load ``/miniwob/<task>.html`` (its ``onload`` shows the sync cover), then
``Math.seedrandom(seed)`` and ``core.startEpisodeReal()``, which generates the problem from the seeded RNG. We also set
``core.EPISODE_MAX_TIME`` to 10 minutes (LLM steps are slow) and stop the countdown display (``core.clearTimer()``;
the episode's own time-out timer still runs), so that the page has no periodic DOM mutations that would make every
action look like a change.

Instructions: the utterance depends on the seed and is only known once the page has generated the problem, so
``Task.instruction`` is a generic sentence and the real utterance is what the page shows in ``#query`` — always the
first ``text`` line of the observation. ``MiniWoBEnv.utterance(page)`` reads it (``core.getUtterance()``).

Check: ``WOB_DONE_GLOBAL`` / ``WOB_RAW_REWARD_GLOBAL`` (the task's reward without the time penalty, in [-1, 1]).
``success`` = done and raw reward ≥ ``success_threshold`` (default 1.0: fully correct; click-checkboxes gives
fractional rewards); ``score`` = (raw + 1) / 2 clipped to [0, 1] once done, 0 before; ``progress`` =
``"done=<0|1>,raw=<raw>"``. The time-penalised ``WOB_REWARD_GLOBAL`` is ignored.

``optimal_steps`` is the number of commands of the task's plan (MiniWoB episodes end by themselves: no STOP), or 0
where it depends on the seed's problem (click-checkboxes): 0 means "unknown, use the graph's shortest path".
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import threading

from rollout.core import CheckResult, Command, Environment, Observation, Task
from rollout.harness.observe import set_ignored_attributes

# task → commands of the optimal plan (0: seed-dependent)
SUPPORTED = {
    "click-button": 1, "click-link": 1, "enter-text": 2, "focus-text": 1, "click-checkboxes": 0,
    "click-dialog": 1, "click-test": 1, "click-test-2": 1, "click-button-sequence": 2, "click-option": 2,
    "enter-password": 3, "login-user": 3,
}
EPISODE_MAX_MS = 600_000
TEST_SEED_BASE = 10_000


def html_dir() -> str:
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the `miniwob` package is not installed (pip install miniwob)")
    return os.path.join(list(spec.submodule_search_locations)[0], "html")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class MiniWoBEnv(Environment):
    name = "miniwob"

    def __init__(self, task_names=None, train_seeds: int = 50, test_seeds: int = 20, success_threshold: float = 1.0,
                 host: str = "127.0.0.1"):
        names = list(task_names) if task_names else list(SUPPORTED)
        unknown = [n for n in names if n not in SUPPORTED]
        if unknown:
            raise ValueError(f"no oracle for MiniWoB task(s) {unknown}; supported: {', '.join(SUPPORTED)}")
        self.task_names = names
        self.train_seeds = int(train_seeds)
        self.test_seeds = int(test_seeds)
        self.success_threshold = float(success_threshold)
        self.host = host
        self._httpd = None
        self._thread = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ serving
    def start(self) -> str:
        with self._lock:
            if self._httpd is None:
                handler = functools.partial(_QuietHandler, directory=html_dir())
                httpd = http.server.ThreadingHTTPServer((self.host, 0), handler)
                httpd.daemon_threads = True
                self._thread = threading.Thread(target=httpd.serve_forever, name="miniwob-http", daemon=True)
                self._thread.start()
                self._httpd = httpd
        return self.origin

    def stop(self) -> None:
        with self._lock:
            if self._httpd is not None:
                self._httpd.shutdown()
                self._httpd.server_close()
                self._httpd = None
                self._thread = None

    @property
    def origin(self) -> str:
        if self._httpd is None:
            self.start()
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------ tasks
    def tasks(self, split: str) -> list[Task]:
        if split == "train":
            seeds = range(self.train_seeds)
        elif split == "test":
            seeds = range(TEST_SEED_BASE, TEST_SEED_BASE + self.test_seeds)
        else:
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        return [Task(task_id=f"miniwob/{name}/{seed}", env="miniwob", family=name,
                     instruction=f"MiniWoB++ task {name}: follow the instruction shown at the top of the page",
                     start_path=f"/miniwob/{name}.html", optimal_steps=SUPPORTED[name], split=split,
                     goal={"task": name, "seed": seed})
                for name in self.task_names for seed in seeds]

    # ------------------------------------------------------------ episodes
    async def reset(self, context, page, task: Task, episode_key: str) -> None:
        seed = int(task.goal["seed"])
        await page.goto(self.origin + task.start_path, wait_until="load")
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null", timeout=10_000)
        await page.evaluate(
            """([seed, maxMs]) => {
                 Math.seedrandom(seed);
                 core.EPISODE_MAX_TIME = maxMs;
                 core.startEpisodeReal();
               }""", [seed, EPISODE_MAX_MS])
        await page.wait_for_function("() => WOB_TASK_READY === true", timeout=10_000)
        await page.evaluate("() => core.clearTimer()")  # no countdown: the page is quiet between actions
        # core.js marks every clicked element with data-tampered: not an interface change.
        await set_ignored_attributes(page, ["data-tampered"])

    async def utterance(self, page) -> str:
        return await page.evaluate("() => core.getUtterance()")

    async def check(self, page, task: Task, episode_key: str) -> CheckResult:
        try:
            done, raw = await page.evaluate("() => [!!WOB_DONE_GLOBAL, Number(WOB_RAW_REWARD_GLOBAL)]")
        except Exception:  # navigated away from the task page
            return CheckResult(success=False, score=0.0, progress="off-task", done=False)
        raw = float(raw)
        success = bool(done) and raw >= self.success_threshold - 1e-9
        score = min(1.0, max(0.0, (raw + 1.0) / 2.0)) if done else 0.0
        return CheckResult(success=success, score=score, progress=f"done={int(bool(done))},raw={raw:g}",
                           done=bool(done))

    # ------------------------------------------------------------ oracle
    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        name = task.family
        q = query_text(obs)
        fn = getattr(self, "_plan_" + name.replace("-", "_"))
        cmd = fn(q, obs, memory)
        if cmd is None:
            return Command("STOP", arg="")
        return cmd

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A wrong target of the same kind: another button / link / radio, a wrong checkbox, a wrong text."""
        name, q = task.family, query_text(obs)
        if name == "click-button":
            want = _quoted(q)
            wrong = [e for e in obs.find(role="button") if e.name != want]
        elif name == "click-link":
            want = _quoted(q)
            wrong = [e for e in obs.elements if e.role == "clickable" and e.name != want]
        elif name == "click-test-2":
            wrong = obs.find(role="button", name="TWO")
        elif name == "click-option":
            want = _select_names(q)
            wrong = [e for e in obs.find(role="radio") if e.name not in want and not e.checked]
        elif name == "click-checkboxes":
            want = set(_select_names(q))
            wrong = [e for e in obs.find(role="checkbox") if (e.name in want) == bool(e.checked)]
        elif name in ("enter-text",):
            boxes = obs.find(role="textbox")
            want = _quoted(q)
            if not boxes or not want or memory.get("typed"):
                return None
            memory["typed"] = True
            memory["wrong_text"] = want[::-1] if want[::-1] != want else want + "x"
            return Command("TYPE", boxes[0].id, memory["wrong_text"])
        else:
            return None
        if not wrong:
            return None
        pick = rng.choice(wrong)
        memory.setdefault("mistakes", []).append(pick.id)
        return Command("CLICK", pick.id)

    # One method per task: the next command of the plan from the current observation.
    def _plan_click_button(self, q, obs, memory):
        return _click(obs, role="button", name=_quoted(q))

    def _plan_click_link(self, q, obs, memory):
        want = _quoted(q)
        hits = [e for e in obs.elements if e.interactive and e.name == want and e.role in ("clickable", "link")]
        return Command("CLICK", hits[0].id) if hits else None

    def _plan_enter_text(self, q, obs, memory):
        return _fill_then_submit(obs, memory, [(0, _quoted(q))], "Submit")

    def _plan_focus_text(self, q, obs, memory):
        boxes = obs.find(role="textbox")
        return Command("CLICK", boxes[0].id) if boxes else None

    def _plan_click_checkboxes(self, q, obs, memory):
        want = set(_select_names(q))
        for e in obs.find(role="checkbox"):
            if (e.name in want) != bool(e.checked):
                return Command("CLICK", e.id)
        return _click(obs, role="button", name="Submit")

    def _plan_click_dialog(self, q, obs, memory):
        hits = [e for e in obs.find(role="button") if e.name.strip().lower() in ("close", "x", "×")]
        return Command("CLICK", hits[0].id) if hits else None

    def _plan_click_test(self, q, obs, memory):
        return _click(obs, role="button", name="Click Me!")

    def _plan_click_test_2(self, q, obs, memory):
        return _click(obs, role="button", name="ONE")

    def _plan_click_button_sequence(self, q, obs, memory):
        # The page shows no trace of the first click: the plan keeps its place in memory.
        done = memory.setdefault("sequence_done", 0)
        target = ("ONE", "TWO")[min(done, 1)]
        cmd = _click(obs, role="button", name=target)
        if cmd is not None:
            memory["sequence_done"] = done + 1
        return cmd

    def _plan_click_option(self, q, obs, memory):
        want = _select_names(q)
        for e in obs.find(role="radio"):
            if e.name in want and not e.checked:
                return Command("CLICK", e.id)
        return _click(obs, role="button", name="Submit")

    def _plan_enter_password(self, q, obs, memory):
        pw = _quoted(q)
        return _fill_then_submit(obs, memory, [(0, pw), (1, pw)], "Submit")

    def _plan_login_user(self, q, obs, memory):
        m = re.search(r'username\s*"([^"]*)".*password\s*"([^"]*)"', q)
        if not m:
            return None
        return _fill_then_submit(obs, memory, [(0, m.group(1)), (1, m.group(2))], "Login")


# ---------------------------------------------------------------- helpers
def query_text(obs: Observation) -> str:
    """The task's utterance: the text of ``#query``, the first text line of a MiniWoB page's tree."""
    for line in obs.text.splitlines():
        s = line.strip()
        if s.startswith('text "'):
            try:
                return json.loads(s[len("text "):])
            except ValueError:
                return s[len('text "'):-1]
    return ""


def _quoted(q: str) -> str:
    m = re.search(r'"(.*)"', q)
    return m.group(1) if m else ""


def _select_names(q: str) -> list[str]:
    m = re.match(r"^Select (.*) and click Submit\.?$", q.strip())
    if not m or m.group(1).strip() == "nothing":
        return []
    return [s.strip() for s in m.group(1).split(",") if s.strip()]


def _click(obs: Observation, role: str, name: str) -> Command | None:
    hits = [e for e in obs.find(role=role) if e.name == name] or obs.find(role=role, name=name)
    return Command("CLICK", hits[0].id) if hits else None


def _fill_then_submit(obs: Observation, memory: dict, fills, button: str) -> Command | None:
    """TYPE each (textbox index, text) whose field does not hold it yet, then CLICK ``button``. Password fields
    show masked values, so a field counts as filled when memory says we typed it and the mask length matches."""
    boxes = obs.find(role="textbox")
    typed = memory.setdefault("typed_fields", {})
    for idx, text in fills:
        if idx >= len(boxes):
            return None
        box = boxes[idx]
        holds = box.value == text or (typed.get(box.id) == text and box.value == "*" * len(text))
        if not holds:
            typed[box.id] = text
            return Command("TYPE", box.id, text)
    return _click(obs, role="button", name=button)
