"""The from-scratch copy model's thought wording (``thoughts=scratch_copy``): every thought the noisy oracle writes
for the model with the planted copy circuit (``circuit.py``), worded so that the circuit can copy the command's
argument from it.

The circuit copies a span by matching the one to three pieces before it (``model.circuit_bigram``,
``model.circuit_trigram``), and its previous-token heads carry the two tokens before a position to it; so each
thought repeats the page and the task token for token and puts the words that decide an id or a string right before
it (``explain``'s docstring says how, per command; ``task_context`` and ``done_context`` why). The valid-argument
decoding holds this wording's settings to their form (``Set combobox "size"[6] to size [M]``; registered with
``setting_form``, ``rollout/policies/constrain.py``).

``thought`` is the registered writer (``rollout/policies/thoughts.py``); what the task asks for (its sort, its item
rank) and whether a link is that sort or the result at that rank are the neutral helpers every writer uses.
"""

from __future__ import annotations

import re

from rollout.core import Command, Observation
from rollout.harness.observe import quote as _quote
from rollout.policies.thoughts import item_asked, sort_asked, task_sort

NAME = "scratch_copy"  # the thoughts value that selects this wording


def thought(cmd: Command, obs: Observation | None, instruction: str = "", page_ids: str = "after") -> str:
    """The registered writer: ``explain``, whose ids always follow the name (as ``page_ids="after"`` renders the page)
    whatever the run's ``page_ids`` (the tiny and miniwob presets show ids before names and keep this wording)."""
    return explain(cmd, obs, instruction)


def explain(cmd: Command, obs: Observation | None, instruction: str = "") -> str:
    """A short, plan-style explanation of a command (Agent Q's thought). Names are quoted as the page quotes them and
    followed by the element's id with no space between (``link "Sort: Rating"[7]``, as ``page_ids="after"`` writes the
    page: the id then follows the name's last word and its closing quote, the two tokens the copy circuit matches, and
    the command repeats the thought), typed text is written as the task and the command write it (``[text]``), led by
    the word(s) the task puts before it (``Type second item [text]``, or ``Type item 2 [text]`` in the older wording,
    see ``task_context``; into a form field whose label ends with that word, the field first: ``Fill textbox
    "Address"[6] with address [text].``), a chosen option as the task names it (``color [red]``), after the combobox it
    sets (``Set combobox "color"[6] to color [red].``: the element is decided first, by the page, and its name then
    leads the value as in the task; with the value first the model named the commonest option, "color", and copied that
    option's value into another combobox) and a sort link's id
    right after the task's own words for the sort (``Click to sort by price from high to low [7].``) and a result's id
    right after its rank word (``To add the third item, click the third result [11].``; on a task that sorts both start
    with the results page's title, whose end says whether the list is sorted), so a thought repeats the page and the
    task token for token, and the words that decide an id are the one or two tokens before it.

    Why the sort's words: the thought then copies the sort the task asks for (``sort by`` is the task's own two
    tokens, so the copy circuit starts there) and writes the link's id right after the copied words, so the word that
    decides the id (``low`` / ``high`` / ``rating``) is one of the two tokens before it, which the planted
    previous-token heads carry to the id's position (measured: with the link named in between, 54 % of the training
    episodes' sort clicks
    were right after 1,000 SFT steps, chance; with the id right after, 83 %). Why the rank word: which result to open is
    then a fixed link from the rank word to the result's id (results follow the same header on every results page), and
    the thought says the rank word again two tokens before the id (``click the third result [11]``), where the planted
    previous-token heads carry it (measured: rank word five
    tokens back, 30 % of training rank clicks right, chance; two tokens back, 89 %)."""
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
        # with the word first, one seed wrote `Type name [..] into textbox "Address"` on 7 of 16)
        return f"Fill {what} with {lead} [{cmd.arg}]."
    # the sort and rank thoughts only where the link is the task's sort or the result at the task's rank: a wrong
    # click (the noisy oracle's mistakes) gets the plain thought, so no thought says what its command does not do
    # (with "click the third result [15]" before a wrong product, the model went back from the right one)
    sorting = task_sort(instruction)
    goal = sort_asked(cmd, el, instruction)
    nth = item_asked(cmd, obs, el, instruction)
    rank = nth.split()[1] if nth else ""
    click = (
        f"Click to sort by {goal} [{el.id}]."
        if goal
        else f"To add {nth}, click the {rank} result [{el.id}]."
        if nth
        else f"Click {what}."
    )
    query = re.search(r"\[([^\]]+)\]", instruction)
    if sorting and (goal or nth) and query and query.group(1) in obs.title:
        # a task that sorts: the thought first copies the results page's title, whose end says whether the list is
        # sorted ("Search: <q> (sorted)"), so sort again or open a result is decided by the token just copied, not
        # by a mark far back in the prompt (a seed that had not fitted it clicked the sort link again to the step cap;
        # docs/method.md §1)
        click = f"{obs.title}. {click}"
    return {
        "CLICK": click,
        "TYPE": f"Type {lead + ' ' if lead else ''}[{cmd.arg}] into {what}.",
        "SELECT": f"Set {what} to {choose}.",
        "CLEAR": f"Clear {what}.",
        "SCROLL": f"Scroll {str(cmd.arg).lower()} to see more.",
        "GOTO": f"Open {cmd.arg}.",
        "GO_BACK": "Go back to the previous page.",
        "STOP": "The task is complete.",
    }[cmd.name]


def task_context(instruction: str, text: str) -> str:
    """The word the task writes just before ``[text]`` (two when it names an item: ``second item``), or "".

    Why: the planted copy circuit (``recipes/scratch_copy/circuit.py``) starts a copy by matching the two tokens before
    the text. ``Type [`` matches every ``[`` of the task alike, so the copy of a multi-item task's
    second title started at a random bracket; ``Type item 2 [`` matches only the second item's (measured with the
    planted weights alone on held-out steps: 4 -> 76 of 80
    multi_cart titles, 4 -> 20 of 20 webshop queries with ``model.circuit_bigram`` 0.7); the shop's tasks write
    ``second item [`` (the older wording, ``item_names="number"``, ``item 2 [``), matched alike."""
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
    33 held-out for every SFT seed): which item comes next is a decision
    some 300 tokens away. Written this way the thought starts as a copy of the heading (``"Added`` are the page's own
    two pieces, where the planted copy circuit starts), the name's last word is followed by the task's continuation, and
    whether another item follows is the task's next piece (``];`` or ``].``), a copy too. The copy crosses the option
    phrases and ``; second item [`` only with the circuit's three-piece match (``model.circuit_trigram``): with two
    pieces ``] with`` after every name sent it to the first item's options. Only tasks that name their items
    ``second item [..]`` (the shop's wording) get this thought: the ordinal is one piece, so the three-piece match
    crosses ``]; second item [`` to the right name, while ``item 2`` (the older wording, ``item_names="number"``) splits
    as ``▁item ▁ 2``, the same pieces after every name."""
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
            return f'"{word} {name}]{rest[: i + 1]}' if cmd.name == "CLICK" else ""
        nxt = re.match(r";\s*\w+ item \[([^\]]*)\]", rest[i:])
        if nxt and cmd.name == "TYPE" and cmd.arg == nxt.group(1):
            return f'"{word} {name}]{rest[:i]}{nxt.group(0)}'
        return ""
    return ""
