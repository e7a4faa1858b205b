"""Policies that replay fixed outputs (scripted command sequences, replays of recorded episodes), and a stateless
sampling stand-in built from recorded gold episodes (search tests and benchmarks)."""

from __future__ import annotations

import hashlib
import random
from typing import Callable, Sequence

from rollout.core import Observation, PolicyOutput, PolicyRequest

Script = Sequence[str | Callable[[Observation], str]]


class ScriptedPolicy:
    """Step t outputs ``script[t]`` (a string, or a function of the observation that returns one);
    past the end it outputs ``STOP``. One script for every episode, or a dict keyed by task id."""

    def __init__(self, script: Script | dict[str, Script], name: str = "scripted"):
        self.script = script
        self.name = name

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        """The script's output for this step, or STOP past its end."""
        script = self.script[request.task.task_id] if isinstance(self.script, dict) else self.script
        if request.step >= len(script):
            return PolicyOutput("Thought: the script is over.\nCommand: STOP []")
        item = script[request.step]
        return PolicyOutput(item(request.observation) if callable(item) else item)

    async def close(self) -> None:
        """Nothing to release."""
        pass


class GoldOrRandom:
    """A stateless sampling policy: at a state on a recorded gold path it outputs the gold command with probability
    ``p_gold``, else (and off the path always) a click on a random link or button. Its randomness comes from the
    request's episode key and step only, as a sampling model's does, so the search can ask it for K proposals."""

    name = "gold-or-random"

    def __init__(self, gold: dict, essential, p_gold: float = 0.5):
        self.gold, self.essential, self.p_gold = gold, essential, p_gold

    async def act(self, request):
        """The gold command at a gold state with probability ``p_gold``, else a click on a random link or button."""
        from rollout.search.replay import state_key

        rng = random.Random(hashlib.sha256(f"{request.episode_key}/{request.step}".encode()).digest())
        gold = self.gold.get(state_key(request.observation, self.essential))
        if gold is not None and rng.random() < self.p_gold:
            return PolicyOutput(gold)
        ids = [e.id for e in request.observation.elements if e.role in ("link", "button") and e.id]
        return PolicyOutput(
            f"Thought: try something.\nCommand: CLICK [{rng.choice(ids)}]"
            if ids
            else "Thought: nothing to click.\nCommand: STOP []"
        )

    async def close(self):
        """Nothing to release."""
        pass


def gold_map(episodes) -> dict:
    """State key -> the recorded output there, over ``episodes`` (e.g. the clean oracle's): ``GoldOrRandom``'s gold."""
    from rollout.search.replay import key_of

    return {key_of(s["norm_url"], s["observation"]): s["output"] for e in episodes for s in e.steps}
