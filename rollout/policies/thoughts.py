"""How the noisy oracle words its thoughts: named thought writers, one of which a run selects (``thoughts``).

A writer is ``fn(cmd, obs, instruction="", page_ids="before") -> str``: the thought line before the command
``cmd`` on the page ``obs`` (None for a malformed output's thought, which names no page) of the task
``instruction``, with ``page_ids`` the run's setting for where a page line puts its element's id
(``prompt.PAGE_IDS``). Whatever the wording, a thought says what its command does and nothing it does not: a sort
or rank thought only where the command clicks the task's sort or the result at the task's rank, so a wrong click
(the noisy oracle's mistakes) gets the plain ``Click <element>.``.

Built in: ``plain``, plain English for any model, pretrained ones first: an element as the prompt's page shows it
under ``page_ids`` (``[7] link "Sort: Rating"`` or ``link "Sort: Rating"[7]``), typed text and a chosen option in
brackets as the command writes them (``[red]``), and where the command is one of the task's decisions, the
decision and its reason (``Sort by price from low to high, as the task asks: click [6] link "Sort: Price low to
high".``; ``The task asks for the second item, and [10] link "Mug 1" is the second result: click it.``). Text typed
or an option set that the task quotes says so, with the task's own words for it (``task_phrase``): ``The task asks
for the second item [Oak Tea]: type it into [2] textbox "Search".``, ``The task asks for the size [M]: set [6]
combobox "size" to [M].`` — which item comes next, which option and which checkout field the task gives are then in
the thought, where a model reads them back (without them a pretrained model lost track of multi_cart's items).
``page_first``: the same thought after the page's title and, where it says more, its first heading
(``page_lead``), so the page's state is written before the decision that depends on it. ``page_counted``: as
``page_first``, with the results counted out up to the rank the task asks for (``counted_rank``) and an item
the page reports done placed in the task's list (``item_done``).

A model that needs its own wording registers it from its recipe (``recipes/``) with ``register_thoughts``, and with
it whether the valid-argument decoding holds that wording's settings to their form (``setting_form``,
``rollout/policies/constrain.py``); this module never imports a recipe. The task-reading helpers below (the sort
the task asks for, the item rank it asks for, whether a link is that sort or the result at that rank) serve every
writer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

from rollout.core import Command, Observation
from rollout.envs.shop.tasks import ORDINALS_EN
from rollout.harness.observe import format_node
from rollout.policies.prompt import page_form

DEFAULT = "plain"
HINT = "a recipe registers more: recipes.register_all(), or recipes.get(name).register() (recipes/)"


@dataclasses.dataclass(frozen=True)
class Thoughts:
    """A registered wording: its writer, whether the valid-argument decoding holds a thought that sets a combobox to
    that wording's own form (``constrain.OutputGrammar``'s ``setting_form``), whether an element's role and name
    in a thought decide the id after them (``name_ids``; off where the id is the decision and the name may be
    another element's), and whether each thought opens with the page's lead (``page_lead``)."""

    write: Callable[..., str]
    setting_form: bool = False
    name_ids: bool = True
    page_lead: bool = False  # every thought opens with ``page_lead(obs)``: the decoding holds it to the page's


# ---------------------------------------------------------------- what the task asks for
def task_sort(instruction: str) -> str:
    """The task's words for the order it asks for, after ``sort by`` up to the next comma or full stop
    (``price from high to low``), or ""."""
    m = re.search(r"\bsort by ([^,.;]+)", instruction)
    return m.group(1).strip() if m else ""


def task_item(instruction: str) -> str:
    """The task's words for the rank of the item to add (``the third item``), or ""."""
    m = re.search(r"\badd (the \w+ item)\b", instruction)
    return m.group(1) if m else ""


def sort_words(text: str) -> list[str]:
    """A sort's words without the filler (``price from low to high`` and the link's ``Price low to high`` agree)."""
    return [w for w in text.lower().split() if w != "from"]


def is_result(el) -> bool:
    """A product link of a results list (the shop's item pages)."""
    return el.role == "link" and "/item/" in (el.href or "")


def is_at_rank(obs: Observation, el, rank: str) -> bool:
    """Whether ``el`` is the page's ``rank``-th product link (``third``: the shop's task words for a rank)."""
    results = [e.id for e in obs.elements if is_result(e)]
    k = ORDINALS_EN.index(rank) if rank in ORDINALS_EN else len(results)
    return k < len(results) and results[k] == el.id


def sort_asked(cmd: Command, el, instruction: str) -> str:
    """The task's sort words (``task_sort``) when ``cmd`` clicks the sort link ``el`` that is that sort, else ""."""
    goal = task_sort(instruction) if cmd.name == "CLICK" and el is not None and el.name.startswith("Sort:") else ""
    return goal if goal and sort_words(goal) == sort_words(el.name[len("Sort:") :]) else ""


def item_asked(cmd: Command, obs: Observation | None, el, instruction: str) -> str:
    """The task's words for the item to add (``task_item``: ``the third item``) when ``cmd`` clicks the result
    ``el`` at that rank, else ""."""
    nth = task_item(instruction) if cmd.name == "CLICK" and el is not None and is_result(el) else ""
    return nth if nth and is_at_rank(obs, el, nth.split()[1]) else ""


_CLAUSE_ENDS = (": ", "; ", ", ", ". ", " with ", " and ", "]")
_VERB_ENDS = {"for", "to", "in", "into", "of", "on", "at", "by", "as"}


def _clause(instruction: str, at: int) -> tuple[int, int]:
    """(start, end) of the clause of ``instruction`` around position ``at``: from after the last ``;`` / ``:`` before it
    to the next ``;`` or sentence end after it."""
    start = max(instruction.rfind(";", 0, at), instruction.rfind(":", 0, at)) + 1
    ends = [i for i in (instruction.find(";", at), instruction.find(". ", at)) if i >= 0]
    return start, min(ends) if ends else len(instruction)


def task_phrase(arg: str, instruction: str, near: str = "") -> str | None:
    """The task's words for the string ``[arg]`` it quotes: None where it does not quote it; else the one to three
    words just before it in its clause (``second item``, ``size``, ``full name``), or "" where those are a verb's
    (``Search for``, ``i am looking for``). ``near``: another string the page shows (its title); where the task quotes
    it, ``[arg]`` counts only in that string's clause (an item's own option, when items ask for the same option)."""
    target = f"[{arg}]"
    span = (0, len(instruction))
    k = instruction.find(f"[{near}]") if near else -1
    if k >= 0:
        span = _clause(instruction, k)
    i = instruction.find(target, *span)
    if i < 0:
        return None
    head = instruction[span[0] : i]
    cut = max((head.rfind(d) + len(d) for d in _CLAUSE_ENDS if d in head), default=0)
    words = head[cut:].split()
    if not words or len(words) > 3 or words[-1].lower() in _VERB_ENDS:
        return ""
    return " ".join(words)


def _asked(phrase: str | None, arg: str) -> str:
    """``The task asks for the <phrase> [arg]: `` (or without the phrase), "" where the task does not quote ``arg``."""
    if phrase is None:
        return ""
    return f"The task asks for the {phrase} [{arg}]: " if phrase else f"The task asks for [{arg}]: "


# ---------------------------------------------------------------- the plain wording
def element_ref(el, page_ids: str = "before") -> str:
    """An element as the prompt's page line names it under ``page_ids`` (``[7] link "Sort: Rating"`` or ``link
    "Sort: Rating"[7]``): the harness's line head, moved by the prompt's own ``page_form``."""
    return page_form(format_node({"id": el.id, "role": el.role, "name": el.name}), page_ids)


def plain(cmd: Command, obs: Observation | None, instruction: str = "", page_ids: str = "before") -> str:
    """The ``plain`` writer (see the module's docstring)."""
    el = obs.by_id(cmd.id) if (obs is not None and cmd.id) else None
    what = element_ref(el, page_ids) if el is not None else (f"element {cmd.id}" if cmd.id else "")
    if cmd.name == "CLICK":
        sort, nth = sort_asked(cmd, el, instruction), item_asked(cmd, obs, el, instruction)
        if sort:
            return f"Sort by {sort}, as the task asks: click {what}."
        if nth:
            return f"The task asks for {nth}, and {what} is the {nth.split()[1]} result: click it."
        return f"Click {what}."
    if cmd.name in ("TYPE", "SELECT") and cmd.arg and instruction:
        why = _asked(task_phrase(cmd.arg, instruction, obs.title if (cmd.name == "SELECT" and obs) else ""), cmd.arg)
        if why:
            return why + (f"type it into {what}." if cmd.name == "TYPE" else f"set {what} to [{cmd.arg}].")
    return {
        "TYPE": f"Type [{cmd.arg}] into {what}.",
        "SELECT": f"Set {what} to [{cmd.arg}].",
        "CLEAR": f"Clear {what}.",
        "SCROLL": f"Scroll {str(cmd.arg).lower()} to see more.",
        "GOTO": f"Open {cmd.arg}.",
        "GO_BACK": "Go back to the previous page.",
        "STOP": "The task is complete.",
    }[cmd.name]


# ---------------------------------------------------------------- the page-first wording
HEADING_LINE = re.compile(r'^heading "((?:[^"\\]|\\.)*)"', re.M)


def first_heading(obs: Observation | None) -> str:
    """The text of the page's first ``heading "…"`` line (its escaped quotes read back), or ""."""
    m = HEADING_LINE.search(obs.text) if obs is not None else None
    return m.group(1).replace('\\"', '"').strip() if m else ""


def page_lead(obs: Observation | None) -> str:
    """``Page "<title>".``, with the page's first heading where it says what the title does not (``Page "Your
    cart", heading "Added Oak Tea to your cart".``); "" without a page or a title.

    Why: the title and the main heading are where a page says its state (``Search: mugs (sorted)``, ``Added Oak Tea
    to your cart``), and a decision that depends on the state (sort again or open a result, which item comes next)
    is then made right after the model wrote it out, not read from a line hundreds of tokens back."""
    if obs is None or not obs.title.strip():
        return ""
    title, heading = obs.title.strip(), first_heading(obs)
    if heading and heading.lower() not in title.lower():
        return f'Page "{title}", heading "{heading}".'
    return f'Page "{title}".'


def page_first(cmd: Command, obs: Observation | None, instruction: str = "", page_ids: str = "before") -> str:
    """The ``page_first`` writer: ``page_lead`` then the ``plain`` thought (``Page "Search: mugs (sorted)". The
    task asks for the first item, and [9] link "Oak Mug" is the first result: click it.``)."""
    return " ".join(p for p in (page_lead(obs), plain(cmd, obs, instruction, page_ids)) if p)


def counted_rank(obs: Observation, nth: str, page_ids: str = "before") -> str:
    """The results counted up to the rank the task asks for (``task_item``'s ``the third item``): ``The task asks
    for the third item; the results are first link "A"[9], second link "B"[10], third link "C"[11]: click it.``

    Why: a model that names the asked rank's result straight away picked the first result for the second and
    third (procedure's held-out failures with ``page_first``, results/smollm2-sft-pagefirst-top10-seed0.json);
    counted, each result is the next page line copied with the next ordinal, and the last one written is the one to
    click."""
    rank = ORDINALS_EN.index(nth.split()[1]) + 1
    results = [e for e in obs.elements if is_result(e)][:rank]
    listed = ", ".join(f"{ORDINALS_EN[i]} {element_ref(e, page_ids)}" for i, e in enumerate(results))
    return f"The task asks for {nth}; the results are {listed}: click it."


_TASK_ITEM = re.compile(r"\b(\w+) item \[([^\]]+)\]")


def item_done(obs: Observation | None, instruction: str) -> str:
    """Where the page's first heading mentions one of the items the task lists (``second item [Oak Tea]``) without
    being that item's own page (``Added Oak Tea to your cart``, not ``Oak Tea``): ``[Oak Tea] was the second item.``
    (``the third item, the last.`` for the task's last one), else "".

    Why: which item comes next was the multi_cart decision a model missed most (it typed the item it had just added,
    or called the third item the second): the item just done, its place in the task and whether it was the last
    are then written down before the next step is chosen."""
    heading, items = first_heading(obs), _TASK_ITEM.findall(instruction)
    if not heading or not items:
        return ""
    if any(name == heading for _, name in items):
        return ""  # an item's own page
    found = [(i, r, n) for i, (r, n) in enumerate(items) if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", heading)]
    if not found:
        return ""
    i, rank, name = max(found, key=lambda f: len(f[2]))
    return f"[{name}] was the {rank} item{', the last' if i == len(items) - 1 else ''}."


def page_counted(cmd: Command, obs: Observation | None, instruction: str = "", page_ids: str = "before") -> str:
    """The ``page_counted`` writer: ``page_first``, with a click on the result at the task's rank counted out
    (``counted_rank``) and, on a page that reports one of the task's items done, that item's place in the task
    first (``item_done``)."""
    el = obs.by_id(cmd.id) if (obs is not None and cmd.id) else None
    nth = item_asked(cmd, obs, el, instruction) if cmd.name == "CLICK" else ""
    body = counted_rank(obs, nth, page_ids) if nth else plain(cmd, obs, instruction, page_ids)
    return " ".join(p for p in (page_lead(obs), item_done(obs, instruction), body) if p)


# ---------------------------------------------------------------- the registry
THOUGHTS: dict[str, Thoughts] = {
    "plain": Thoughts(plain),
    "page_first": Thoughts(page_first, page_lead=True),
    "page_counted": Thoughts(page_counted, page_lead=True),
}


def register_thoughts(
    name: str, fn: Callable[..., str], *, setting_form: bool = False, name_ids: bool = True, page_lead: bool = False
) -> None:
    """``thoughts=name`` words the oracle's thoughts with ``fn``; ``setting_form``: the valid-argument decoding holds
    a setting thought to ``fn``'s form; ``name_ids``: it holds an id written after an element's role and name to
    that element's; ``page_lead``: it holds each thought's opening to the page's lead (``page_lead``). Registering
    the same again is a no-op, another one under a taken name an error."""
    entry = Thoughts(fn, setting_form, name_ids, page_lead)
    if THOUGHTS.get(name, entry) != entry:
        raise ValueError(
            f"thoughts={name!r} is registered already (by {THOUGHTS[name].write.__module__}); pick another name"
        )
    THOUGHTS[name] = entry


def thoughts(name: str) -> Thoughts:
    """The wording registered as ``name``; ValueError naming the known ones otherwise."""
    if name not in THOUGHTS:
        raise ValueError(f"thoughts={name!r}: expected one of {sorted(THOUGHTS)}; {HINT}")
    return THOUGHTS[name]


def thought_writer(name: str) -> Callable[..., str]:
    """The writer registered as ``name``: ``fn(cmd, obs, instruction="", page_ids="before") -> str``."""
    return thoughts(name).write
