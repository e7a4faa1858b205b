"""The command grammar of docs/method.md §1 and the agent output format (thought + command), parsed strictly.

    Thought: <free text, may span lines>
    Command: CLICK [12]

A bare command line (no ``Thought:``/``Command:`` labels) is accepted too. Anything else is a typed
error (``rollout.core.ActionError`` subclasses) that the harness feeds back in the next observation.
"""

from __future__ import annotations

import re

from rollout.core import COMMANDS, Command, MalformedCommand, MissingId, UnknownCommand

# "<NAME> rest"; argument groups are bracketed; the last group of a line runs to the line's last "]".
_HEAD = re.compile(r"^\s*([A-Za-z_]+)(.*)$", re.S)
_ID = re.compile(r"^\s*\[([^\[\]]*)\]")
_LABEL = re.compile(r"^\s*(command|action)\s*:\s*(.*)$", re.I)
_THOUGHT = re.compile(r"^\s*thought\s*:\s*", re.I)
_ARITY = {
    "CLICK": (1, 0),
    "CLEAR": (1, 0),
    "TYPE": (1, 1),
    "SELECT": (1, 1),
    "SCROLL": (0, 1),
    "GOTO": (0, 1),
    "GO_BACK": (0, 0),
    "STOP": (0, 1),
}


def parse_command(line: str) -> Command:
    """Parse one command line. Raises UnknownCommand / MissingId / MalformedCommand."""
    m = _HEAD.match(line.strip())
    if not m:
        raise MalformedCommand(f"no command in {line.strip()[:80]!r}; expected one of {', '.join(COMMANDS)}")
    name, rest = m.group(1).upper(), m.group(2).strip()
    if name not in COMMANDS:
        raise UnknownCommand(f"unknown command {m.group(1)!r}; expected one of {', '.join(COMMANDS)}")
    n_id, n_arg = _ARITY[name]
    element_id = None
    if n_id:
        im = _ID.match(rest)
        if not im or not im.group(1).strip():
            raise MissingId(f"{name} needs an element id: {name} [id]{' [text]' if n_arg else ''}")
        element_id = im.group(1).strip()
        if re.search(r"\s", element_id):
            raise MalformedCommand(f"element id {element_id!r} has spaces; ids are like [12]")
        rest = rest[im.end() :].strip()
    arg = None
    if n_arg:
        if name == "STOP" and not rest:
            return Command("STOP", arg="")
        if not (rest.startswith("[") and rest.endswith("]")):
            raise MalformedCommand(f"{name} needs a bracketed argument, e.g. {_example(name)}; got {rest[:60]!r}")
        arg = rest[1:-1]
        rest = ""
        if name == "SCROLL":
            arg = arg.strip().upper()
            if arg not in ("UP", "DOWN"):
                raise MalformedCommand(f"SCROLL takes [UP] or [DOWN], not [{arg}]")
        elif name == "GOTO":
            arg = arg.strip()
            if not arg:
                raise MalformedCommand("GOTO needs a url: GOTO [http://…]")
        elif name in ("TYPE", "SELECT") and arg == "" and name == "SELECT":
            raise MalformedCommand("SELECT needs an option: SELECT [id] [option]")
    if rest:
        raise MalformedCommand(f"unexpected text after {name}: {rest[:60]!r}; expected {_example(name)}")
    return Command(name, element_id, arg)


# commands whose bracket groups hold no free text (ids, UP/DOWN): name -> their number of groups
_NO_FREE_TEXT = {**{n: i for n, (i, a) in _ARITY.items() if not a}, "SCROLL": 1}
_VERB = re.compile(r"\s*([A-Za-z_]+)(?![\w\[])")  # a bare verb: GO_BACK, not GO_BACK2 or GO_BACK[3]
_GROUP = re.compile(r"[ \t]*\[[^\[\]\n]*\]")


def closed_length(body: str) -> int | None:
    """Characters a complete command without free text takes at the start of ``body`` (``CLICK [7]`` of ``CLICK
    [7] [11]``); None for a command with free text or one that ends before its last bracket group."""
    m = re.match(r"\s*([A-Za-z_]+)", body)
    if m is None or m.group(1) not in _NO_FREE_TEXT:
        return None
    groups = _NO_FREE_TEXT[m.group(1)]
    if not groups:
        return m.end() if _VERB.match(body) else None
    end = m.end()
    for _ in range(groups):
        g = _GROUP.match(body, end)
        if g is None:
            return None
        end = g.end()
    return end


def _example(name: str) -> str:
    return {
        "CLICK": "CLICK [12]",
        "CLEAR": "CLEAR [12]",
        "TYPE": "TYPE [12] [text]",
        "SELECT": "SELECT [12] [option]",
        "SCROLL": "SCROLL [DOWN]",
        "GOTO": "GOTO [http://127.0.0.1/]",
        "GO_BACK": "GO_BACK",
        "STOP": "STOP [answer]",
    }[name]


def parse_output(text: str) -> tuple[str, Command]:
    """Split a policy output into (thought, command). The command is the text after the last
    ``Command:``/``Action:`` label; without labels, the output must be exactly one command line."""
    lines = text.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _LABEL.match(lines[i])
        if m:
            body = m.group(2).strip()
            extra = [ln for ln in lines[i + 1 :] if ln.strip()]
            if extra:
                raise MalformedCommand(f"text after the command line: {extra[0][:60]!r}")
            if not body:
                raise MalformedCommand("empty Command: line")
            thought = _THOUGHT.sub("", "\n".join(lines[:i])).strip()
            return thought, parse_command(body)
    nonempty = [ln for ln in lines if ln.strip()]
    if len(nonempty) == 1 and not _THOUGHT.match(nonempty[0]):
        return "", parse_command(nonempty[0])
    raise MalformedCommand("no 'Command:' line in the output; answer with 'Thought: …' then 'Command: <COMMAND>'")


def format_output(thought: str, command: Command) -> str:
    """The agent output format, as the policies write it and the model is trained on."""
    return f"Thought: {thought}\nCommand: {command.render()}"
