"""The noisy oracle: follows the task's optimal plan with configurable rates of realistic mistakes.

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
  item and the sort as two branches (a trained model sorts there and loops, BUILD_NOTES.md).
So runs of one task succeed and fail on shared states, which is what the tree needs.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
import re

from rollout.commands import format_output
from rollout.core import Command, Environment, Observation, PolicyOutput, PolicyRequest
from rollout.envs.shop.tasks import ORDINALS_EN
from rollout.harness.observe import quote as _quote


@dataclasses.dataclass(frozen=True)
class OracleNoise:
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
    def __init__(self, env: Environment, noise: OracleNoise = OracleNoise(), seed: int = 0, name: str = "oracle"):
        self.env = env
        self.noise = noise
        self.seed = seed
        self.name = name
        self._episodes: dict[str, dict] = {}

    def _state(self, key: str, step: int) -> dict:
        st = self._episodes.get(key)
        if st is None or step == 0:  # step 0: a new (or re-run) episode starts from scratch
            digest = hashlib.sha256(f"{self.seed}/{key}".encode()).digest()
            st = {"memory": {}, "rng": random.Random(int.from_bytes(digest[:8], "little")), "pending": []}
            self._episodes[key] = st
        return st

    async def act(self, request: PolicyRequest) -> PolicyOutput:
        st = self._state(request.episode_key, request.step)
        rng, obs, n = st["rng"], request.observation, self.noise
        # always the same number of draws: the stream never depends on the branch (a fifth only with recover > 0,
        # repeat > 0, wrong_button > 0 or wrong_sort > 0, a sixth only with one of the last three, a seventh only
        # with one of the last two, an eighth only with wrong_sort > 0, so runs collected without them keep their
        # trajectories)
        draws = [rng.random() for _ in range(8 if n.wrong_sort else 7 if n.wrong_button else 6 if n.repeat
                                             else 5 if n.recover else 4)]
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
                return self._out(cmd, obs, None, mistake="wrong_button_undone" if undo else "wrong_button",
                                 task=request.task)
        cmd = self.env.oracle(request.task, obs, st["memory"])
        return self._out(self._remember(st, obs, cmd), obs, None, task=request.task)

    @staticmethod
    def _remember(st: dict, obs: Observation, cmd: Command) -> Command:
        """Keep a command that may be repeated on the next step (``repeat``): one that can leave the page as it was."""
        if cmd.name in REPEATABLE:
            st["last"] = (obs.url, cmd)
        return cmd

    def _out(self, cmd: Command, obs: Observation, thought: str | None, mistake: str | None = None,
             task=None) -> PolicyOutput:
        instruction = task.instruction if task is not None else ""
        return PolicyOutput(format_output(thought or _explain(cmd, obs, instruction), cmd),
                            info={"mistake": mistake} if mistake else {})

    @staticmethod
    def _garble(cmd: Command, rng: random.Random) -> str:
        form = MALFORMED[rng.randrange(len(MALFORMED))]
        text = form.format(verb=cmd.name, verb_lower=cmd.name.lower(), id=cmd.id or "1")
        return f"Thought: {_explain(cmd, None)}\n" + (f"Command: {text}" if text else "")

    @staticmethod
    def _detour(obs: Observation, rng: random.Random) -> Command | None:
        """A same-site link to another page: following it and coming back is a redundant loop."""
        here = obs.url.split("#")[0]
        links = [e for e in obs.elements if e.role == "link" and e.href and not e.href.startswith("#")
                 and e.href.split("#")[0] != here and e.href.split("/")[2:3] == here.split("/")[2:3]]
        if not links:
            return None
        return Command("CLICK", links[rng.randrange(len(links))].id)

    async def close(self) -> None:
        self._episodes.clear()

    def forget(self, episode_key: str) -> None:
        self._episodes.pop(episode_key, None)


def _explain(cmd: Command, obs: Observation | None, instruction: str = "") -> str:
    """A short, plan-style explanation of a command (Agent Q's thought). Names are quoted as the page quotes them
    and followed by the element's id with no space between (``link "Sort: Rating"[7]``, as ``page_ids="after"`` writes
    the page: the id then follows the name's last word and its closing quote, the two tokens the copy circuit
    matches, and the command repeats the thought), typed text is
    written as the task and the command write it (``[text]``), led by the word(s) the task puts before it
    (``Type item 2 [text]``, ``Type second item [text]``, see ``task_context``; into a form field whose label ends
    with that word, the field first: ``Fill textbox "Address"[6] with address [text].``), a chosen option as the task
    names it (``color [red]``), after the combobox it sets (``Set combobox "color"[6] to color [red].``: the element
    is decided first, by the page, and its name then leads the value as in the task; with the value first the model
    named the commonest option, "color", and copied that option's value into another combobox, BUILD_NOTES.md) and a
    sort
    link's id right after the task's own words for the sort (``Click to sort by price from high to low [7].``, see
    ``sort_context``) and a result's id right after its rank word (``To add the third item, click the third result
    [11].``, see ``item_context``; on a task that sorts both start with the results page's title, whose end says
    whether the list is sorted), so a thought repeats the page and the task token for token, and the words that
    decide an id are the one or two tokens before it."""
    el = obs.by_id(cmd.id) if (obs is not None and cmd.id) else None
    what = f"{el.role} {_quote(el.name)}[{el.id}]" if el is not None else (f"element {cmd.id}" if cmd.id else "")
    done = done_context(instruction, obs, cmd)
    if done:
        return f"{done} into {what}." if cmd.name == "TYPE" else f"{done} Click {what}."
    choose = f"{el.name} [{cmd.arg}]" if el is not None and el.name else f"[{cmd.arg}]"
    lead = task_context(instruction, str(cmd.arg)) if cmd.name == "TYPE" else ""
    if lead and el is not None and el.name and el.name.lower().split()[-1] == lead.lower():
        # a form field whose label ends with the task's word for the value (checkout's "Full name" / "Address"):
        # the field first, decided by the page, then its word leads the value, as a combobox's name does (typed
        # with the word first, one seed wrote `Type name [..] into textbox "Address"` on 7 of 16; BUILD_NOTES.md)
        return f"Fill {what} with {lead} [{cmd.arg}]."
    # the sort and rank thoughts only where the link is the task's sort or the result at the task's rank: a wrong
    # click (the noisy oracle's mistakes) gets the plain thought, so no thought says what its command does not do
    # (with "click the third result [15]" before a wrong product, the model went back from the right one: BUILD_NOTES.md)
    sorting = sort_context(instruction)
    goal = sorting if cmd.name == "CLICK" and el is not None and el.name.startswith("Sort:") else ""
    if goal and _sort_words(goal) != _sort_words(el.name[len("Sort:"):]):
        goal = ""
    nth = item_context(instruction) if cmd.name == "CLICK" and el is not None and _is_result(el) else ""
    rank = nth.split()[1] if nth else ""
    if rank and not _is_at_rank(obs, el, rank):
        nth = rank = ""
    click = (f"Click to sort by {goal} [{el.id}]." if goal else
             f"To add {nth}, click the {rank} result [{el.id}]." if nth else f"Click {what}.")
    query = re.search(r"\[([^\]]+)\]", instruction)
    if sorting and (goal or nth) and query and query.group(1) in obs.title:
        # a task that sorts: the thought first copies the results page's title, whose end says whether the list is
        # sorted ("Search: <q> (sorted)"), so sort again or open a result is decided by the token just copied, not
        # by a mark far back in the prompt (a seed that had not fitted it clicked the sort link again to the step cap;
        # docs/method.md §1)
        click = f"{obs.title}. {click}"
    return {"CLICK": click,
            "TYPE": f"Type {lead + ' ' if lead else ''}[{cmd.arg}] into {what}.",
            "SELECT": f"Set {what} to {choose}.", "CLEAR": f"Clear {what}.",
            "SCROLL": f"Scroll {str(cmd.arg).lower()} to see more.", "GOTO": f"Open {cmd.arg}.",
            "GO_BACK": "Go back to the previous page.", "STOP": "The task is complete."}[cmd.name]


def task_context(instruction: str, text: str) -> str:
    """The word the task writes just before ``[text]`` (two when it names an item: ``second item``), or "".

    Why: the planted copy circuit (``recipes/scratch_copy/circuit.py``) starts a copy by matching the two tokens before
    the text. ``Type [`` matches every ``[`` of the task alike, so the copy of a multi-item task's
    second title started at a random bracket; ``Type item 2 [`` matches only the second item's (measured with the
    planted weights alone on held-out steps, BUILD_NOTES.md: 4 -> 76 of 80 multi_cart titles, 4 -> 20 of 20 webshop
    queries with ``model.circuit_bigram`` 0.7); with ``item_names="ordinal"`` the task writes ``second item [``,
    matched alike."""
    i = instruction.find(f"[{text}]")
    words = instruction[:i].split() if i > 0 else []
    if not words:
        return ""
    two = words[-1].isdigit() or words[-1] == "item"
    return " ".join(words[-2:]) if two and len(words) > 1 else words[-1]


_HEADING = re.compile(r'^heading "(\w+) ([^"\n]*)"$', re.M)
_ITEM = re.compile(r"\bitem \[([^\]\n]+)\]")


def done_context(instruction: str, obs: Observation | None, cmd: Command) -> str:
    """On a page whose heading reports one of the task's items by name (``heading "Added <item> to your cart"``:
    a word, then the name the task writes as ``<nth> item [<item>]``), that word and name, then the task's own text
    after the name up to the item after it (``"Added Sierra Lite Plug Charger] with count [3 pack]; third item
    [Lumen Nova Boots]``) or to the end of the list (``… count [4 pack].``), when the command is the one that text
    leads to: TYPE of that next item, or a CLICK where the list has ended. Otherwise "".

    Why: after adding an item the model typed the item it had just added again, to the step limit (multi_cart 0 of
    33 held-out for every SFT seed, BUILD_NOTES.md): which item comes next is a decision some 300 tokens
    away. Written this way the thought starts as a copy of the heading (``"Added`` are the page's own two pieces,
    where the planted copy circuit starts), the name's last word is followed by the task's continuation, and
    whether another item follows is the task's next piece (``];`` or ``].``), a copy too. The copy crosses the
    option phrases and ``; second item [`` only with the circuit's three-piece match (``model.circuit_trigram``):
    with two pieces ``] with`` after every name sent it to the first item's options. Only tasks that name their items
    ``second item [..]`` (the shop's ``item_names="ordinal"``, the default and large presets' setting) get this
    thought (BUILD_NOTES.md, "multi_cart's first successes")."""
    if obs is None or cmd.name not in ("TYPE", "CLICK"):
        return ""
    items = [(m.group(1), m.end()) for m in _ITEM.finditer(instruction)]
    for h in _HEADING.finditer(obs.text):
        word, said = h.group(1), h.group(2)
        found = [(name, end) for name, end in items if said == name or said.startswith(name + " ")]
        if not found:
            continue
        name, end = max(found, key=lambda f: len(f[0]))
        rest, depth = instruction[end:], 0  # the task after the name's closing bracket
        for i, ch in enumerate(rest):
            depth += (ch == "[") - (ch == "]")
            if depth == 0 and ch in ";.":
                break
        else:
            return ""
        if ch == ".":
            return f'"{word} {name}]{rest[:i + 1]}' if cmd.name == "CLICK" else ""
        nxt = re.match(r";\s*\w+ item \[([^\]]*)\]", rest[i:])
        if nxt and cmd.name == "TYPE" and cmd.arg == nxt.group(1):
            return f'"{word} {name}]{rest[:i]}{nxt.group(0)}'
        return ""
    return ""


def sort_context(instruction: str) -> str:
    """The task's words after ``sort by`` up to the next comma or full stop (``price from high to low``), or "".

    Why: the thought then copies the sort the task asks for (``sort by`` is the task's own two tokens, so the copy
    circuit starts there) and writes the link's id right after the copied words, so the word that decides the id
    (``low`` / ``high`` / ``rating``) is one of the two tokens before it, which the planted previous-token heads
    carry to the id's position (measured in BUILD_NOTES.md: with the link named in between, 54 % of the
    training episodes' sort clicks were right after 1,000 SFT steps, chance; with the id right after, 83 %)."""
    m = re.search(r"\bsort by ([^,.;]+)", instruction)
    return m.group(1).strip() if m else ""


def item_context(instruction: str) -> str:
    """The task's words for the rank of the item to add (``the third item``), or "".

    Why: which result to open is then a fixed link from the rank word to the result's id (results follow the same
    header on every results page), and the thought says the rank word again two tokens before the id (``click the
    third result [11]``), where the planted previous-token heads carry it (measured in BUILD_NOTES.md: rank
    word five tokens back, 30 % of training rank clicks right, chance; two tokens back, 89 %)."""
    m = re.search(r"\badd (the \w+ item)\b", instruction)
    return m.group(1) if m else ""


def _is_at_rank(obs: Observation, el, rank: str) -> bool:
    """Whether ``el`` is the page's ``rank``-th product link (``third``: the shop's task words for a rank)."""
    results = [e.id for e in obs.elements if _is_result(e)]
    k = ORDINALS_EN.index(rank) if rank in ORDINALS_EN else len(results)
    return k < len(results) and results[k] == el.id


def _sort_words(text: str) -> list[str]:
    """A sort's words without the filler (``price from low to high`` and the link's ``Price low to high`` agree)."""
    return [w for w in text.lower().split() if w != "from"]


def _is_result(el) -> bool:
    """A product link of a results list (the shop's item pages)."""
    return el.role == "link" and "/item/" in (el.href or "")
