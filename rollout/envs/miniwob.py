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
where it depends on the seed's problem (click-checkboxes) or where no plan is scripted: 0 means "unknown, use the
graph's shortest path".

Which tasks: every task the installed package registers (``registered_tasks()``: the ``id="miniwob/<name>-v1"``
entries of its ``registration.py``, read as text, so gymnasium's global registry is neither imported nor changed).
That is the list ``gymnasium.make`` accepts and results on the benchmark are reported on; the package's ``html/``
holds five more pages it does not register (button-delay, chase-circle, hover-shape, moving-items, simon-says), which
are left out. The ``flight.*`` tasks are served from ``/flight/<site>/wrapper.html`` (the airline site runs in an
iframe), as the package serves them. Only the tasks in ``SUPPORTED`` have a scripted plan (``oracle``/``mistake``);
the default task set (``task_names=None``) is those, so oracle-driven collection works as it did; ``task_names="all"``
or a list of names opens every other task to model / http / scripted policies. ``LIMITS`` names the tasks that
cannot (fully) work through this harness's commands and text observation, and why (docs/miniwob.md). Every episode
runs in the package's default data mode, "train" (``data_mode``), as ``gymnasium.make`` runs it.
"""

from __future__ import annotations

import difflib
import functools
import http.server
import importlib.util
import json
import os
import re
import threading

from rollout.core import CheckResult, Command, Environment, Observation, Task
from rollout.harness.observe import set_ignored_attributes

# tasks with a scripted oracle → commands of the optimal plan (0: seed-dependent)
SUPPORTED = {
    "click-button": 1,
    "click-link": 1,
    "enter-text": 2,
    "focus-text": 1,
    "click-checkboxes": 0,
    "click-dialog": 1,
    "click-test": 1,
    "click-test-2": 1,
    "click-button-sequence": 2,
    "click-option": 2,
    "enter-password": 3,
    "login-user": 3,
}
# Tasks this harness cannot run as intended, and why (docs/miniwob.md: from bench/miniwob_survey.py and each page's
# source). kind "cannot": the task needs an action the command grammar lacks (rollout/commands.py: no drag, hover, key
# press, text selection or click at a point); "partly": some problems only; "text-blind": the commands suffice, but
# what decides the answer is only in pixels (colours, shapes, positions, icons), so the text observation lists the
# elements without it (a policy that reads the screenshot, or learns a fixed element order, can still solve them).
# Every other registered task is expected to work (its problems are solvable with the commands on the text page).
_COORDS = "a click at a point of an SVG drawing, which is one element to the harness (CLICK hits its centre)"
_DRAG = "a mouse drag (press, move, release), which no command does"
_SLIDER = "setting a jQuery UI slider: a drag or arrow keys (a CLICK on the track only sets its middle value)"
_SELECT = "selecting text with the mouse, which no command does"
_ICONS = (
    "icon-only controls (trash, star, send, reply/retweet/like/more) are listed as unnamed clickables; "
    "only their fixed order tells them apart"
)
LIMITS: dict[str, tuple[str, str]] = {
    **{n: ("cannot", _COORDS) for n in ("bisect-angle", "circle-center", "find-midpoint", "right-angle")},
    "hot-cold": (
        "cannot",
        "finding a hidden point: the hint follows mouse moves, and the click is graded by its "
        "position in one area element",
    ),
    **{
        n: ("cannot", _DRAG)
        for n in (
            "drag-box",
            "drag-circle",
            "drag-cube",
            "drag-items",
            "drag-items-grid",
            "drag-shapes",
            "drag-shapes-2",
            "drag-single-shape",
            "drag-sort-numbers",
        )
    },
    **{n: ("cannot", "drawing with the mouse (press, move, release)") for n in ("draw-circle", "draw-line")},
    "daily-calendar": ("cannot", "creating an event by dragging across half-hour slots"),
    "resize-textarea": ("cannot", "dragging the textarea's resize handle"),
    **{n: ("cannot", _SLIDER) for n in ("use-slider", "use-slider-2", "form-sequence")},
    **{n: ("cannot", _SELECT) for n in ("highlight-text", "highlight-text-2")},
    "text-editor": ("cannot", "selecting words in a rich-text editor with the mouse before styling them"),
    "terminal": (
        "cannot",
        "key presses: the terminal reads keydown events and runs a command on Enter; TYPE sets "
        "the field's value without key events",
    ),
    "click-menu": (
        "partly",
        "targets in a submenu need a hover on their parent (a CLICK on it selects the parent, "
        "reward -1); top-level targets work",
    ),
    "click-menu-2": ("partly", "half the problems name the item by an icon, which the text page shows as nothing"),
    "click-scroll-list": (
        "partly",
        "about half the problems ask for two items of a multi-select list (ctrl-click); "
        "SELECT selects one, so one-item problems work",
    ),
    "click-widget": ("partly", "a text input and a textarea are both a textbox in the observation"),
    "stock-market": (
        "partly",
        "timing: the price changes every 100 ms and after 10 s the page shows no price; "
        "a Buy succeeds only if the price at that moment is below the threshold",
    ),
    "click-color": (
        "text-blind",
        "the colours are only in the pixels: the boxes are unnamed, and the query shows a "
        "colour swatch instead of a name in about 60 % of problems",
    ),
    "click-shades": ("text-blind", "the shades are only in the pixels: the boxes are unnamed"),
    "use-colorwheel-2": ("text-blind", "the target colour is only a swatch; TYPE of a hex into the picker works"),
    **{
        n: (
            "text-blind",
            "the figure is drawn (SVG or canvas): shapes, colours and sizes are not in the text "
            "page (letters and digits are)",
        )
        for n in ("click-shape", "count-shape", "count-sides", "identify-shape")
    },
    "grid-coordinate": ("text-blind", "25 unnamed grid points: the coordinate is only their position"),
    "number-checkboxes": ("text-blind", "the digit to draw is an image; the checkboxes are an unnamed grid"),
    "tic-tac-toe": ("text-blind", "the board's X and O marks are CSS classes: the cells are unnamed"),
    "visual-addition": ("text-blind", "the blocks to count are empty boxes: nothing of them is in the text page"),
    **{
        n: ("text-blind", _ICONS)
        for n in (
            "email-inbox",
            "email-inbox-delete",
            "email-inbox-forward",
            "email-inbox-forward-nl",
            "email-inbox-forward-nl-turk",
            "email-inbox-important",
            "email-inbox-nl-turk",
            "email-inbox-noscroll",
            "email-inbox-reply",
            "email-inbox-star-reply",
            "social-media",
            "social-media-all",
            "social-media-some",
        )
    },
}
EPISODE_MAX_MS = 600_000
TEST_SEED_BASE = 10_000


def package_dir() -> str:
    """The installed ``miniwob`` package's directory; ``ImportError`` when it is not installed."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the `miniwob` package is not installed (pip install miniwob)")
    return list(spec.submodule_search_locations)[0]


def html_dir() -> str:
    """The ``html/`` directory of the installed ``miniwob`` package (the served task pages)."""
    return os.path.join(package_dir(), "html")


def start_path(name: str) -> str:
    """The task page under the served ``html/``: flight tasks run their airline site inside a wrapper page."""
    if name.startswith("flight."):
        return f"/flight/{name[len('flight.') :]}/wrapper.html"
    return f"/miniwob/{name}.html"


@functools.cache
def registered_tasks() -> tuple[str, ...]:
    """Every task the installed package registers, in its order (see the module docstring)."""
    with open(os.path.join(package_dir(), "registration.py"), encoding="utf-8") as f:
        names = re.findall(r'id="miniwob/([^"]+)-v1"', f.read())
    if not names:
        raise ImportError(f"no MiniWoB++ task ids in {package_dir()}/registration.py: an unknown package layout")
    # a registered id whose page is missing would only fail later, at its first reset
    return tuple(n for n in names if os.path.exists(html_dir() + start_path(n)))


def resolve_task_names(task_names=None) -> list[str]:
    """None → the oracle tasks; ``"all"`` → every registered task; else the names given (each registered)."""
    names = [task_names] if isinstance(task_names, str) else list(task_names or ())
    if not names:
        return list(SUPPORTED)
    if names == ["all"]:
        return list(registered_tasks())
    names, known = list(dict.fromkeys(names)), set(registered_tasks())
    unknown = [n for n in names if n not in known]
    if unknown:
        hints = {n: difflib.get_close_matches(n, registered_tasks(), n=3, cutoff=0.6) for n in unknown}
        said = "; ".join(f"{n!r}" + (f" (did you mean {', '.join(h)}?)" if h else "") for n, h in hints.items())
        raise ValueError(
            f"unknown task families (MiniWoB++ tasks): {said}. The miniwob package registers "
            f"{len(known)} tasks (rollout.envs.miniwob.registered_tasks(); 'all' selects every one)"
        )
    return names


class NoOracleError(ValueError):
    """A task without a scripted plan was asked for one (the noisy-oracle policy on a non-oracle task)."""


def no_oracle_message(names) -> str:
    """The error message naming MiniWoB++ tasks that have no scripted oracle, and which policies can run them."""
    names = sorted(set(names))
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (
        f"MiniWoB++ task(s) {shown} have no scripted oracle (only {', '.join(SUPPORTED)} have one): "
        "run them with a model, http or scripted policy (launch.collect --policy=model|http, "
        "launch.evaluate --model=<model>), not the oracle"
    )


def require_oracle(tasks) -> None:
    """Raise NoOracleError naming every task of ``tasks`` that has no scripted oracle (before episodes run)."""
    missing = [t.family for t in tasks if t.family not in SUPPORTED]
    if missing:
        raise NoOracleError(no_oracle_message(missing))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class MiniWoBEnv(Environment):
    """The MiniWoB++ tasks served from the installed package: a task per (task name, seed), the package's own reward as
    the check, and scripted oracles for some tasks."""

    name = "miniwob"

    def __init__(
        self,
        task_names=None,
        train_seeds: int = 50,
        test_seeds: int = 20,
        success_threshold: float = 1.0,
        host: str = "127.0.0.1",
        data_mode: str = "train",
    ):
        """``task_names``: None (the tasks with a scripted oracle), ``"all"`` (every registered task) or names.
        ``data_mode``: the package's ``set_data_mode`` (its default, "train"; "test" switches the *-transfer,
        *-nl(-turk) and flight tasks to their held-out problem sets)."""
        self.task_names = resolve_task_names(task_names)
        if data_mode not in ("train", "test"):
            raise ValueError(f"data_mode must be 'train' or 'test', not {data_mode!r}")
        self.data_mode = data_mode
        self.train_seeds = int(train_seeds)
        self.test_seeds = int(test_seeds)
        self.success_threshold = float(success_threshold)
        self.host = host
        self._httpd = None
        self._thread = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ serving
    def start(self) -> str:
        """Serve the package's pages on loopback (idempotent); the origin."""
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
        """Stop serving."""
        with self._lock:
            if self._httpd is not None:
                self._httpd.shutdown()
                self._httpd.server_close()
                self._httpd = None
                self._thread = None

    @property
    def origin(self) -> str:
        """The origin the pages are served at (starting the server if needed)."""
        if self._httpd is None:
            self.start()
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------ tasks
    def tasks(self, split: str) -> list[Task]:
        """The tasks of ``split``: every task name with the split's seeds; ``ValueError`` for another split."""
        if split == "train":
            seeds = range(self.train_seeds)
        elif split == "test":
            seeds = range(TEST_SEED_BASE, TEST_SEED_BASE + self.test_seeds)
        else:
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        return [
            Task(
                task_id=f"miniwob/{name}/{seed}",
                env="miniwob",
                family=name,
                instruction=f"MiniWoB++ task {name}: follow the instruction shown at the top of the page",
                start_path=start_path(name),
                optimal_steps=SUPPORTED.get(name, 0),
                split=split,
                goal={"task": name, "seed": seed},
            )
            for name in self.task_names
            for seed in seeds
        ]

    # ------------------------------------------------------------ episodes
    async def reset(self, context, page, task: Task, episode_key: str) -> None:
        """Load the task page, seed it with the task's seed and start its episode without a time limit."""
        seed = int(task.goal["seed"])
        await page.goto(self.origin + task.start_path, wait_until="load")
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null", timeout=10_000)
        await page.evaluate(
            """([seed, maxMs, mode]) => {
                 Math.seedrandom(seed);
                 core.setDataMode(mode);
                 core.EPISODE_MAX_TIME = maxMs;
                 core.startEpisodeReal();
               }""",
            [seed, EPISODE_MAX_MS, self.data_mode],
        )
        await page.wait_for_function("() => WOB_TASK_READY === true", timeout=10_000)
        await page.evaluate("() => core.clearTimer()")  # no countdown: the page is quiet between actions
        # core.js marks every clicked element with data-tampered: not an interface change.
        await set_ignored_attributes(page, ["data-tampered"])

    async def utterance(self, page) -> str:
        """The task's instruction as the page shows it."""
        return await page.evaluate("() => core.getUtterance()")

    async def check(self, page, task: Task, episode_key: str) -> CheckResult:
        """Success (raw reward at least the threshold once done), the reward mapped to [0, 1], and a progress key; off
        the task page, a failure."""
        try:
            done, raw = await page.evaluate("() => [!!WOB_DONE_GLOBAL, Number(WOB_RAW_REWARD_GLOBAL)]")
        except Exception:  # navigated away from the task page
            return CheckResult(success=False, score=0.0, progress="off-task", done=False)
        raw = float(raw)
        success = bool(done) and raw >= self.success_threshold - 1e-9
        score = min(1.0, max(0.0, (raw + 1.0) / 2.0)) if done else 0.0
        return CheckResult(
            success=success, score=score, progress=f"done={int(bool(done))},raw={raw:g}", done=bool(done)
        )

    # ------------------------------------------------------------ oracle
    def require_oracle(self, tasks) -> None:
        """Raise ``NoOracleError`` naming the tasks without a scripted oracle."""
        require_oracle(tasks)

    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        """The next command of the task's scripted plan (STOP when the plan is done)."""
        name = task.family
        _require_plan(name)
        q = query_text(obs)
        fn = getattr(self, "_plan_" + name.replace("-", "_"))
        cmd = fn(q, obs, memory)
        if cmd is None:
            return Command("STOP", arg="")
        return cmd

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A wrong target of the same kind: another button / link / radio, a wrong checkbox, a wrong text."""
        name, q = task.family, query_text(obs)
        _require_plan(name)
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
def _require_plan(name: str) -> None:
    if name not in SUPPORTED:
        raise NoOracleError(no_oracle_message([name]))


def query_text(obs: Observation) -> str:
    """The task's utterance: the text of ``#query``, the first text line of a MiniWoB page's tree."""
    for line in obs.text.splitlines():
        s = line.strip()
        if s.startswith('text "'):
            try:
                return json.loads(s[len("text ") :])
            except ValueError:
                return s[len('text "') : -1]
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
