"""The noisy oracle: follows the task's optimal plan with configurable rates of realistic mistakes. Each command's
thought is worded by the run's thought writer (``thoughts``: ``rollout/policies/thoughts.py``); the mistakes, and so
the commands, do not depend on the wording.

Mistakes (each drawn per step from the episode's own RNG, so trajectories depend only on the
collection seed and the episode key — not on scheduling or the number of parallel contexts):
- ``wrong_choice``: at a choice point (a results list, an option select) take a wrong item / option
  and carry on with it (the environment's ``mistake`` commits the plan's memory), usually a failure;
- ``loop``: a redundant detour — follow an unrelated link, then ``GO_BACK`` (a correction loop);
- ``malformed``: output that breaks the grammar (missing brackets, unknown verb, no command line);
- ``premature_stop``: ``STOP`` before the task is done;
- ``recover``: the share of wrong choices that are noticed and undone: a wrong click (a wrong result, a wrong
  sort) is followed by ``GO_BACK`` and the plan goes on as if it had not been made (its memory is not committed).
  One run then holds the wrong and the right choice at the same state (the page it goes back to), so a single run
  gives a preference pair exactly at the decision, not only at detours (docs/method.md §5). Wrong choices that do not
  navigate (a wrong option) are never undone: the wrong SELECT would be the only branch of a successful run there;
- ``repeat``: the last command is issued again where it changes nothing (a SELECT / TYPE / CLICK repeated on the page
  it was made on, which stays the same state): the stutter a trained model falls into (the same SELECT until the step
  cap). The run goes on with the plan, so its node holds the repeat and the plan's next step (docs/method.md §5);
- ``wrong_button``: where the plan presses the button that settles the task (the shop's "Buy Now" / "Add to cart"),
  the other one (``Environment.wrong_button``). Undone like a wrong click (``recover``) where the task's check does
  not see the press: one run then holds both buttons at the product page's node. Otherwise committed: the run stops
  on the page the press leads to, a failure;
- ``wrong_sort``: where the plan clicks an item in a results list and the task asks for no order (the shop's webshop
  and multi_cart), a sort link instead (``Environment.wrong_sort``), always undone: the results page then holds the
  item and the sort as two branches (a trained model sorts there and loops).
So runs of one task succeed and fail on shared states, which is what the tree needs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random

from rollout.commands import format_output
from rollout.core import Command, Environment, Observation, PolicyOutput, PolicyRequest
from rollout.policies.prompt import PAGE_IDS
from rollout.policies.thoughts import DEFAULT, thought_writer


@dataclasses.dataclass(frozen=True)
class OracleNoise:
    """Per-step probabilities of the noisy oracle's mistakes (module docstring); ``ValueError`` outside [0, 1]."""

    wrong_choice: float = 0.0
    loop: float = 0.0
    malformed: float = 0.0
    premature_stop: float = 0.0
    recover: float = 0.0
    repeat: float = 0.0
    wrong_button: float = 0.0
    wrong_sort: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"oracle noise {f.name}={v} must be in [0, 1]")


REPEATABLE = ("SELECT", "TYPE", "CLICK")  # repeated on the same page, these change nothing (a self-loop)
MALFORMED = ("{verb} {id}", "{verb_lower} on element {id}", "PRESS [{id}]", "{verb} [{id}", "")


class OraclePolicy:
    """``thoughts``: the wording of its thoughts (a name registered with ``rollout/policies/thoughts.py``: ``plain``,
    or a recipe's); ``page_ids``: where the run's prompt puts element ids (``prompt.PAGE_IDS``), so that a thought
    names an element as the page the model reads does."""

    def __init__(
        self,
        env: Environment,
        noise: OracleNoise = OracleNoise(),
        seed: int = 0,
        name: str = "oracle",
        thoughts: str = DEFAULT,
        page_ids: str = "before",
    ):
        self.env = env
        self.noise = noise
        self.seed = seed
        self.name = name
        if page_ids not in PAGE_IDS:
            raise ValueError(f"page_ids={page_ids!r}; expected one of {PAGE_IDS}")
        self.thoughts, self.page_ids = thoughts, page_ids
        self._write = thought_writer(thoughts)
        self._episodes: dict[str, dict] = {}

    def with_seed(self, seed: int) -> "OraclePolicy":
        """The same oracle (noise, name, wording) drawing its mistakes from ``seed``."""
        return OraclePolicy(
            self.env, self.noise, seed=seed, name=self.name, thoughts=self.thoughts, page_ids=self.page_ids
        )

    def _thought(self, cmd: Command, obs: Observation | None, instruction: str = "") -> str:
        return self._write(cmd, obs, instruction, page_ids=self.page_ids)

    def _state(self, key: str, step: int) -> dict:
        st = self._episodes.get(key)
        if st is None or step == 0:  # step 0: a new (or re-run) episode starts from scratch
            digest = hashlib.sha256(f"{self.seed}/{key}".encode()).digest()
            st = {"memory": {}, "rng": random.Random(int.from_bytes(digest[:8], "little")), "pending": []}
            self._episodes[key] = st
        return st

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        """The plan's next command, or one of the configured mistakes, with a thought in the configured wording."""
        st = self._state(request.episode_key, request.step)
        rng, obs, n = st["rng"], request.observation, self.noise
        # always the same number of draws: the stream never depends on the branch (a fifth only with recover > 0,
        # repeat > 0, wrong_button > 0 or wrong_sort > 0, a sixth only with one of the last three, a seventh only
        # with one of the last two, an eighth only with wrong_sort > 0, so runs collected without them keep their
        # trajectories)
        draws = [
            rng.random()
            for _ in range(8 if n.wrong_sort else 7 if n.wrong_button else 6 if n.repeat else 5 if n.recover else 4)
        ]
        last, st["last"] = st.get("last"), None
        if st["pending"]:
            cmd = st["pending"].pop(0)
            return self._out(cmd, obs, "Going back: that page was not what I needed.")
        if n.repeat and draws[5] < n.repeat and last is not None and last[0] == obs.url:
            return self._out(last[1], obs, None, mistake="repeat", task=request.task)  # not remembered: no repeat of it
        if request.step > 0 and draws[0] < n.premature_stop:
            return self._out(Command("STOP", arg=""), obs, "I think the task is done.", mistake="premature_stop")
        if draws[1] < n.malformed:
            good = self.env.oracle(request.task, obs, dict(st["memory"]))  # a copy: a malformed step changes nothing
            return PolicyOutput(self._garble(good, rng), info={"mistake": "malformed"})
        if draws[2] < n.loop:
            detour = self._detour(obs, rng)
            if detour is not None:
                st["pending"].append(Command("GO_BACK"))
                return self._out(detour, obs, "Let me look at this page first.", mistake="loop")
        if draws[3] < n.wrong_choice:
            undo = n.recover > 0 and draws[4] < n.recover
            memory = copy.deepcopy(st["memory"]) if undo else st["memory"]
            cmd = self.env.mistake(request.task, obs, memory, rng)
            if cmd is not None and undo and cmd.name == "CLICK":
                st["pending"].append(Command("GO_BACK"))
                return self._out(cmd, obs, None, mistake="wrong_choice_undone", task=request.task)
            if cmd is not None and not undo:
                return self._out(self._remember(st, obs, cmd), obs, None, mistake="wrong_choice", task=request.task)
        if n.wrong_sort and draws[7] < n.wrong_sort and st.get("sorted_at") != obs.url:
            cmd = self.env.wrong_sort(request.task, obs, st["memory"], rng)
            if cmd is not None:  # once per results page: back on it, the plan goes on
                st["pending"].append(Command("GO_BACK"))
                st["sorted_at"] = obs.url
                return self._out(cmd, obs, None, mistake="wrong_sort_undone", task=request.task)
        if n.wrong_button and draws[6] < n.wrong_button:
            undo = n.recover > 0 and draws[4] < n.recover
            cmd = self.env.wrong_button(request.task, obs, st["memory"], undo)
            if cmd is not None:
                if undo:
                    st["pending"].append(Command("GO_BACK"))
                return self._out(
                    cmd, obs, None, mistake="wrong_button_undone" if undo else "wrong_button", task=request.task
                )
        cmd = self.env.oracle(request.task, obs, st["memory"])
        return self._out(self._remember(st, obs, cmd), obs, None, task=request.task)

    @staticmethod
    def _remember(st: dict, obs: Observation, cmd: Command) -> Command:
        """Keep a command that may be repeated on the next step (``repeat``): one that can leave the page as it was."""
        if cmd.name in REPEATABLE:
            st["last"] = (obs.url, cmd)
        return cmd

    def _out(
        self, cmd: Command, obs: Observation, thought: str | None, mistake: str | None = None, task=None
    ) -> PolicyOutput:
        instruction = task.instruction if task is not None else ""
        return PolicyOutput(
            format_output(thought or self._thought(cmd, obs, instruction), cmd),
            info={"mistake": mistake} if mistake else {},
        )

    def _garble(self, cmd: Command, rng: random.Random) -> str:
        form = MALFORMED[rng.randrange(len(MALFORMED))]
        text = form.format(verb=cmd.name, verb_lower=cmd.name.lower(), id=cmd.id or "1")
        return f"Thought: {self._thought(cmd, None)}\n" + (f"Command: {text}" if text else "")

    @staticmethod
    def _detour(obs: Observation, rng: random.Random) -> Command | None:
        """A same-site link to another page: following it and coming back is a redundant loop."""
        here = obs.url.split("#")[0]
        links = [
            e
            for e in obs.elements
            if e.role == "link"
            and e.href
            and not e.href.startswith("#")
            and e.href.split("#")[0] != here
            and e.href.split("/")[2:3] == here.split("/")[2:3]
        ]
        if not links:
            return None
        return Command("CLICK", links[rng.randrange(len(links))].id)

    async def close(self) -> None:
        """Forget every episode's state."""
        self._episodes.clear()

    def forget(self, episode_key: str) -> None:
        """Forget the state of episode ``episode_key``."""
        self._episodes.pop(episode_key, None)
