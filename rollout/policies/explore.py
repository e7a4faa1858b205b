"""A random explorer for task synthesis (docs/tasks.md, "Tasks the site writes itself"): a walk over the page's own
interactive elements, seeded by the episode, that a task can later be written from.

Each step picks, with the page's own words: after typing, the button that follows the field (submitting it) with
probability ``submit``; otherwise, with probability ``type``, a random word of the page's link texts into a random
text field; else a random link, button, checkbox or radio (or a random option of a select). It stops once it has
moved ``min_steps`` times with probability ``stop`` per step. No model: it only needs the observation.
"""

from __future__ import annotations

import dataclasses
import random
import re

from rollout.commands import parse_command
from rollout.core import ActionError, Command, Element, Observation, PolicyOutput, PolicyRequest

_CLICKABLE = ("link", "button", "checkbox", "radio", "tab", "menuitem", "option", "switch")
_TEXT = ("textbox", "searchbox")


@dataclasses.dataclass(frozen=True)
class ExploreConfig:
    """The explorer's probabilities (type, submit, stop) and limits; ``ValueError`` for out-of-range values."""

    type: float = 0.3  # type a word into a text field (when the page has one)
    submit: float = 0.8  # after typing, click the button that follows the field
    stop: float = 0.35  # stop after min_steps, per step
    min_steps: int = 1
    min_word: int = 3  # shortest word typed

    def __post_init__(self):
        for f in ("type", "submit", "stop"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"explore {f}={getattr(self, f)} must be in [0, 1]")
        if self.min_steps < 0 or self.min_word < 1:
            raise ValueError(f"invalid explore config: {self}")


def page_words(obs: Observation, min_len: int) -> list[str]:
    """The distinct words of the page's link texts, in page order (what a visitor could search for)."""
    words: dict[str, None] = {}
    for e in obs.elements:
        if e.role == "link":
            for w in re.findall(r"[A-Za-z][A-Za-z0-9_]+", e.name):
                if len(w) >= min_len:
                    words.setdefault(w.lower(), None)
    return list(words)


class ExplorePolicy:
    """The random explorer (see the module docstring): seeded by its seed, the collection seed, the episode and the
    step."""

    name = "explore"

    def __init__(self, cfg: ExploreConfig = ExploreConfig(), seed: int = 0):
        self.cfg = cfg
        self.seed = seed

    def _rng(self, request: PolicyRequest) -> random.Random:
        return random.Random(f"{self.seed}/{request.seed}/{request.episode_key}/{request.step}")

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        """One random step: stop, submit what was typed, type a page word into a field, or click or select something."""
        obs, rng, cfg = request.observation, self._rng(request), self.cfg
        usable = [e for e in obs.elements if e.interactive and not e.disabled]
        last = _parsed(request.history[-1].command) if request.history else None
        if request.step >= cfg.min_steps and rng.random() < cfg.stop:
            return _out("enough explored", "STOP []")
        if last is not None and last.name == "TYPE" and rng.random() < cfg.submit:
            button = _button_after(usable, last.id)
            if button is not None:
                return _out("submit what I typed", f"CLICK [{button.id}]")
        fields = [e for e in usable if e.role in _TEXT]
        words = page_words(obs, cfg.min_word)
        if fields and words and rng.random() < cfg.type:
            field, word = rng.choice(fields), rng.choice(words)
            return _out(f"search for {word}", f"TYPE [{field.id}] [{word}]")
        selects = [e for e in usable if e.options]
        clicks = [e for e in usable if e.role in _CLICKABLE and e.name.strip()]
        if selects and (not clicks or rng.random() < len(selects) / (len(selects) + len(clicks))):
            sel = rng.choice(selects)
            return _out("try an option", f"SELECT [{sel.id}] [{rng.choice(sel.options)}]")
        if clicks:
            return _out("look around", f"CLICK [{rng.choice(clicks).id}]")
        return _out("nothing to do here", "STOP []")

    async def close(self) -> None:
        """Nothing to release."""
        pass


def _out(thought: str, command: str) -> PolicyOutput:
    return PolicyOutput(f"Thought: {thought}.\nCommand: {command}")


def _parsed(command: str) -> Command | None:
    try:
        return parse_command(command)
    except ActionError:  # the explorer's own outputs always parse; a history from elsewhere may not
        return None


def _button_after(elements: list[Element], field_id: str | None) -> Element | None:
    """The first button after the field in page order (a search box's Go, a form's submit)."""
    ids = [e.id for e in elements]
    if field_id not in ids:
        return None
    return next((e for e in elements[ids.index(field_id) + 1 :] if e.role == "button"), None)
