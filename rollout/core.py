"""Shared types of the rollout side (docs/method.md §1): tasks, observations, commands, checks, policy I/O.

Every other rollout module speaks in these types; they hold plain, JSON-able values so that a step
can be recorded as it is and read back by the tree builder.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Mapping, Protocol, Sequence


# ---------------------------------------------------------------- commands and their errors
COMMANDS = ("CLICK", "TYPE", "SELECT", "CLEAR", "SCROLL", "GOTO", "GO_BACK", "STOP")


@dataclasses.dataclass(frozen=True)
class Command:
    """One parsed command. ``id`` is an injected element id; ``arg`` is text / option / UP|DOWN / url / answer."""

    name: str
    id: str | None = None
    arg: str | None = None

    def render(self) -> str:
        """The command as the grammar writes it (parse(render(c)) == c)."""
        if self.name in ("CLICK", "CLEAR"):
            return f"{self.name} [{self.id}]"
        if self.name in ("TYPE", "SELECT"):
            return f"{self.name} [{self.id}] [{self.arg}]"
        if self.name in ("SCROLL", "GOTO"):
            return f"{self.name} [{self.arg}]"
        if self.name == "STOP":
            return f"STOP [{self.arg or ''}]"
        return self.name  # GO_BACK


class ActionError(Exception):
    """A command that could not be parsed or executed. ``kind`` is the stable, typed name the agent sees."""

    kind = "action_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def info(self) -> "ErrorInfo":
        """The error as recorded and shown to the agent (kind and message)."""
        return ErrorInfo(self.kind, self.message)


class UnknownCommand(ActionError):
    """The output names a command the grammar does not have."""

    kind = "unknown_command"


class MalformedCommand(ActionError):
    """The output holds no command line, or the command's arguments do not parse."""

    kind = "malformed_command"


class MissingId(ActionError):
    """A command that acts on an element was given without an element id."""

    kind = "missing_id"


class NoSuchElement(ActionError):
    """No element with the given id is on the current page."""

    kind = "no_such_element"


class InvalidTarget(ActionError):
    """The element exists but the command cannot apply to it (SELECT on a link, an option it lacks)."""

    kind = "invalid_target"


class ActionTimeout(ActionError):
    """The action or the page load it started did not finish in time."""

    kind = "timeout"


class NavigationBlocked(ActionError):
    """Navigation to a URL whose scheme or origin the episode does not allow."""

    kind = "navigation_blocked"


ERROR_KINDS = tuple(
    c.kind
    for c in (
        UnknownCommand,
        MalformedCommand,
        MissingId,
        NoSuchElement,
        InvalidTarget,
        ActionTimeout,
        NavigationBlocked,
    )
)


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """An action error as recorded: its kind and message."""

    kind: str
    message: str


# ---------------------------------------------------------------- observations
@dataclasses.dataclass(frozen=True)
class Element:
    """An element the harness gave an id. ``role`` + ``name`` is its stable descriptor across runs."""

    id: str
    role: str
    name: str
    value: str | None = None  # text field value / selected option
    options: tuple[str, ...] = ()  # <select> options
    checked: bool | None = None
    disabled: bool = False
    current: bool = False  # aria-current: the page marks it as where the user is (the active sort, the page)
    href: str | None = None
    interactive: bool = True

    def descriptor(self) -> str:
        """``role 'name'``: the element's stable descriptor across runs."""
        return f"{self.role} {self.name!r}"


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the agent sees at one step: URL, title, the accessibility-tree text with element ids, the elements, and
    optionally a screenshot, its pHash and the last action's error."""

    url: str
    title: str
    text: str  # accessibility-tree text with element ids, within the token budget
    elements: tuple[Element, ...]
    screenshot: str | None = None  # PNG path: absolute in a policy's request, relative to the episode dir when recorded
    phash: str | None = None  # imagehash pHash, hex
    error: ErrorInfo | None = None  # the last action's error
    truncated: bool = False  # text was cut to the budget
    # the site's own origin (http://127.0.0.1:PORT): its URLs are shown and recorded site-relative, so the page
    # text, the trees' node keys and the training prompts do not depend on the port a run happened to get
    origin: str = ""
    marked: bool = False  # the screenshot has each element's id drawn on it (set-of-marks, observe(marks=True))

    @property
    def shown_url(self) -> str:
        """The URL as shown and recorded: relative to the site's origin."""
        from rollout.urls import site_relative

        return site_relative(self.url, self.origin)

    def by_id(self, element_id: str) -> Element | None:
        """The element with id ``element_id``, or None."""
        for e in self.elements:
            if e.id == element_id:
                return e
        return None

    def find(self, role: str | None = None, name: str | None = None, contains: str | None = None) -> list[Element]:
        """Elements matching role and exact name / name substring (case-insensitive), in page order."""
        out = []
        for e in self.elements:
            if role is not None and e.role != role:
                continue
            if name is not None and e.name.strip().lower() != name.strip().lower():
                continue
            if contains is not None and contains.lower() not in e.name.lower():
                continue
            out.append(e)
        return out


# ---------------------------------------------------------------- tasks and checks
@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its id, environment, family, instruction, start path, optimal number of commands, split and the goal
    its check compares against."""

    task_id: str  # unique across envs and splits
    env: str  # environment name ("shop", "miniwob")
    family: str  # task family ("webshop", "procedure", "multi_cart", "click-button", ...)
    instruction: str
    start_path: str  # path (with query) under the environment's origin
    optimal_steps: int  # the known optimal number of commands, STOP included when the task needs one
    split: str  # "train" | "test"
    goal: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # JSON-able; what the check compares against

    def to_json(self) -> dict:
        """The task as a JSON-safe dict."""
        return dataclasses.asdict(self) | {"goal": dict(self.goal)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        """A task from its ``to_json`` dict."""
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The environment's task check on the current state (the merge guard of docs/method.md §2 reads ``progress``)."""

    success: bool
    score: float  # task reward in [0, 1] (WebShop's score formula, MiniWoB's own reward mapped to [0, 1], ...)
    progress: str = ""  # canonical partial-progress key: two states with different keys are never merged
    done: bool = False  # the environment ended the episode by itself (order placed, MiniWoB episode over)
    # element-level facts for the metrics (the task-file environment's: target element ids, answer F1); recorded,
    # never part of the state's identity
    elements: dict | None = dataclasses.field(default=None, compare=False)


# ---------------------------------------------------------------- policies
@dataclasses.dataclass(frozen=True)
class HistoryItem:
    """One earlier step as a prompt shows it: the command, the thought and the error kind, if any."""

    command: str  # the raw command line the policy gave (or its parsed rendering)
    thought: str
    error: str | None = None  # error kind of that step, if any


@dataclasses.dataclass(frozen=True)
class PolicyRequest:
    """What a policy is asked at one step: the task, the observation, the history, the step index, the episode key and
    the collection seed."""

    task: Task
    observation: Observation
    history: tuple[HistoryItem, ...]
    step: int
    episode_key: str  # "<task_id>/<run>": unique per episode; seeds the episode's randomness
    seed: int  # collection seed


@dataclasses.dataclass(frozen=True)
class PolicyOutput:
    """A policy's answer: the whole output text (thought and command), its behaviour log-prob and token count when
    known, and free-form info."""

    text: str  # the whole output: thought + command (docs/method.md §1)
    logprob: float | None = None  # behaviour log-prob of the text (summed over its tokens), when known
    num_tokens: int | None = None
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Policy(Protocol):
    """Anything that answers a ``PolicyRequest`` with a ``PolicyOutput`` (asynchronously) and can be closed."""

    name: str

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        """The output for one step."""

    async def close(self) -> None:
        """Release the policy's resources (servers, clients)."""


# ---------------------------------------------------------------- environments
class Environment(abc.ABC):
    """A website family: serves its pages on loopback, lists tasks, checks them, and knows their optimal plans."""

    name: str = "env"

    @abc.abstractmethod
    def start(self) -> str:
        """Start serving (idempotent); returns the origin, e.g. ``http://127.0.0.1:PORT``."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop serving."""

    @property
    @abc.abstractmethod
    def origin(self) -> str:
        """The origin the pages are served at (``http://127.0.0.1:PORT``)."""

    def allowed_origins(self, task: Task | None = None) -> tuple[str, ...]:
        """Origins ``GOTO`` may reach in an episode of ``task`` (default: the environment's own)."""
        return (self.origin,)

    @abc.abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """The tasks of ``split`` (``train`` or ``test``)."""

    @abc.abstractmethod
    async def reset(self, context, page, task: Task, episode_key: str) -> None:
        """Fresh state for one episode in ``context`` (cookies / session), then navigate ``page`` to the task start."""

    @abc.abstractmethod
    async def check(self, page, task: Task, episode_key: str) -> CheckResult:
        """The task check on the current state of the episode ``episode_key``."""

    # The check once the agent stopped with ``answer`` (information-seeking tasks); None (the default): the check of
    # the state STOP was given at stands, as STOP does not touch the page.
    check_answer = None  # async (page, task, episode_key, answer) -> CheckResult

    @abc.abstractmethod
    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        """The next command of the task's optimal plan from the current observation (closed loop).
        ``memory`` is a per-episode dict the plan may keep notes in (and ``mistake`` may alter)."""

    def require_oracle(self, tasks: Sequence[Task]) -> None:
        """A ValueError naming the tasks of ``tasks`` that ``oracle`` cannot play (before any episode runs).
        Default: it plays every task."""

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A realistic wrong choice at this state (wrong item / option), committing ``memory`` to it; None if
        this state offers no such choice. ``rng`` is a ``random.Random``."""
        return None

    def wrong_button(self, task: Task, obs: Observation, memory: dict, undo: bool) -> Command | None:
        """Where the plan's next step presses a button that settles the task (the shop's "Buy Now" / "Add to cart"),
        a press of the other such button; None where this state offers none. ``undo``: the caller goes back at once
        and then follows the plan, so the press must be one the task's check does not see (None otherwise), and
        ``memory`` is left ready for the page to load again; else the plan commits to the press (the episode ends
        on the page it leads to). Default: none."""
        return None

    def wrong_sort(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """Where the plan picks an item from a results list and the task asks for no order, a click on one of the
        list's sort links (the mix-up a trained model makes: it sorts where only another family's task sorts). The
        caller goes back at once and then follows the plan, so the plan is not advanced by it. None where this state
        offers none. Default: none."""
        return None

    def typed_strings(self, task: Task) -> dict[str, str]:
        """The strings of ``task``'s instruction that its solution types (or names, as the shop's option names),
        each with its kind ("query", "name", "option", ...): what copy-swap augmentation may replace by another string
        of the same kind. Default: none known."""
        return {}

    def essential_query_params(self) -> Mapping[str, Sequence[str]] | None:
        """Per-path query parameters that identify a page, for URL normalisation (docs/method.md §2); None = keep all
        but tracking / session parameters."""
        return None
