"""A policy that replays fixed outputs (scripted command sequences, replays of recorded episodes)."""
from __future__ import annotations

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
        script = self.script[request.task.task_id] if isinstance(self.script, dict) else self.script
        if request.step >= len(script):
            return PolicyOutput("Thought: the script is over.\nCommand: STOP []")
        item = script[request.step]
        return PolicyOutput(item(request.observation) if callable(item) else item)

    async def close(self) -> None:
        pass
