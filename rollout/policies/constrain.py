"""Valid-argument decoding: the agent's output grammar as a token constraint for ``Sampler.generate``.

A small model that has learned *which* string to copy often writes it wrong: a hop to another span of the prompt
mid-copy (``TYPE [2] [o lowm Moisturizer…]``), an option the combobox does not have, an id that is not on the page,
``CLICK 1`` without brackets. Each such step is wasted and often starts a loop. With a constraint, every bracketed
group the model writes must be a string the step offers, as it writes it:

- in the thought, any ``[...]``: an element id of the page, a string the task quotes (``[...]`` or ``"..."``), or an
  option of one of the page's comboboxes;
- after ``Command:``, a known verb in upper case, its groups (one space before each), and then the end:
  the element id of CLICK / CLEAR / TYPE is one of the page's, SELECT's one with options; TYPE's text is one the
  task quotes (free when the task quotes none); SELECT's value is an option of that element; SCROLL's is UP or DOWN;
  STOP's and GOTO's are free. EOS is allowed only once the command is complete;
- the command acts on the element its own thought names: when the thought holds element ids (``Click button
  "Buy Now"[9].`` or ``Click [9] button "Buy Now".``, as the page shows ids), the command's element is one of them.
  Why: a trained model may decide right in the thought and then write another element's id in the command (a
  combobox's ``[8]`` after ``"Buy Now"[9]``, from the many SELECTs on product pages), and the step then does
  something the model did not decide;
- each ``combobox "…"`` a thought names is one of the page's comboboxes, not one the trailing SELECT steps already
  set on this page. Why: the oracle sets each once per visit, and a model that set them again looped over them to
  the step limit;
- a SELECT sets the value its own thought set (``… combobox "size"[6] to [M]``, ``… [6] combobox "size" to [M]``);
- where the wording lets names decide (``name_ids``, registered with it), an element the thought names by role and
  name, its id after the name (``link "Sort: Price low to high"[6]``, as a page with ``page_ids="after"`` shows
  it), gets the id of a page element of that role and name. Why: a model that chose the right element by its name
  still wrote a neighbour's id after it (the sort link beside the one it named), and the command then acted on that
  id. Not for the copy wording: there the id is the decision, and a name before it may be another element's;
- where the wording opens each thought with the page's lead (``page_lead``, registered with it: ``page_first``,
  ``page_counted``), the thought opens with this page's (``Page "Search: mugs (sorted)".``). Why: on a page whose
  title ended in a colon (a search for nothing: ``Search:``) a trained model wrote ``Page "Search: Page "Search:``
  on to the token limit, a step without a command, again and again.

A wording that names its settings in a form of its own (registered with ``setting_form``,
``rollout/policies/thoughts.py``: the from-scratch copy model's, ``thoughts=scratch_copy``) is held to that form
too (``OutputGrammar(setting_form=True)``; ``constraints_for`` reads the switch from the run's ``thoughts``):

- after a combobox's id and ``to`` come its own name and one of its options (``Set combobox "size"[6] to size
  [M]``). Why: the from-scratch model wrote another option's name there, so the value's copy started at that
  option's place in the task (with the rule above, held-out SFT +10 points over two seeds' models);
- a thought that starts with ``Set`` is one of those settings (``Set <role> "<name>"``), so it starts so only
  while the page has a combobox left to set, and its command is a SELECT. Why: with every combobox set, a model
  that had not fitted the product page's last decision still began ``Set combobox`` and, with no name left to
  write, went on in free text (``Set combobox lookflavor keyboard] into …``) to a command the thought never
  decided.

Which string, which element and which verb remain the model's choice (the likeliest allowed token at each step,
the same as WebShop's baselines choosing among the page's available actions). Used only at decoding (evaluation,
collection with a model): training data and log-probs are the model's own (docs/method.md §1).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Callable, Iterable

from rollout.commands import parse_command
from rollout.core import COMMANDS, ActionError, PolicyRequest
from rollout.policies.prompt import element_refs
from rollout.policies.thoughts import DEFAULT, page_lead, thoughts as registered_thoughts

# element id groups and free-text groups per verb ("id", then the argument's kind)
_GROUPS = {
    "CLICK": ("id",),
    "CLEAR": ("id",),
    "TYPE": ("id", "typed"),
    "SELECT": ("select", "option"),
    "SCROLL": ("scroll",),
    "GOTO": ("free",),
    "GO_BACK": (),
    "STOP": ("free",),
}
_OPTIONAL_LAST = {"STOP"}  # ``STOP`` alone is a complete command too
_LABEL = "Command:"


@dataclasses.dataclass(frozen=True)
class StepStrings:
    """What a step offers: the page's element ids, each combobox's options, the strings the task quotes."""

    ids: frozenset[str]
    options: dict[str, tuple[str, ...]]  # element id -> options
    typed: frozenset[str]  # the task's quoted strings
    names: dict[str, str] = dataclasses.field(default_factory=dict)  # element id -> name, for those with options
    set_here: frozenset[str] = frozenset()  # the comboboxes the last steps' SELECTs set on this page (their names)
    refs: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # 'role "name"' -> its elements' ids
    lead: str = ""  # the page's lead (thoughts.page_lead: 'Page "<title>".'), for a wording that opens with it


class _Pool:
    """A set of strings, all their prefixes (an open bracket group must stay a prefix of one of them) and the
    prefixes that end where the string's own tokens end (``ends``: where an output may stop, token by token)."""

    def __init__(self, strings: Iterable[str], split=None):
        self.strings = frozenset(strings)
        self.prefixes = frozenset(s[:k] for s in self.strings for k in range(len(s) + 1))
        self.ends = self.prefixes if split is None else frozenset(s[:k] for s in self.strings for k in split(s))


def token_bounds(tokenizer, pieces) -> Callable[[str], frozenset[int]]:
    """``split(s)``: the character offsets in ``s`` where its tokens end as the model writes it after ``" ["``.

    Why: a copy that the constraint lets the model spell letter by letter (``a``, ``i``, ``r`` where the tokenizer
    writes ``air``) is text it never saw tokenised so, and what follows goes astray (measured: ``Command: STOP``
    after such a thought); allowing only the string's own token boundaries keeps a constrained copy in the tokens
    of the training data."""

    def split(s: str) -> frozenset[int]:
        head = "x ["
        text, out = "", set()
        for t in tokenizer.encode(head + s + "]", add_special_tokens=False):
            text += pieces[t] if t < len(pieces) else ""
            k = len(text.lstrip(" ")) - len(head)  # the piece table keeps a leading space the encoder adds
            if 0 <= k <= len(s):
                out.add(k)
        return frozenset(out | {0, len(s)}) if len(out) > 1 else frozenset(range(len(s) + 1))

    return split


def quoted_strings(instruction: str) -> frozenset[str]:
    """The strings a task quotes: ``[...]`` groups and ``"..."`` spans."""
    return frozenset(
        s for s in re.findall(r"\[([^\[\]\n]+)\]", instruction) + re.findall(r'"([^"\n]+)"', instruction) if s.strip()
    )


def _set_here(history, elements) -> frozenset[str]:
    """The names of the comboboxes that the trailing run of SELECT steps set (those that raised no error): a SELECT
    does not leave the page, so they were all set on the page the agent is on."""
    names = {e.id: e.name for e in elements if e.options}
    out = set()
    for item in reversed(history):
        try:
            cmd = parse_command(item.command)
        except ActionError:
            break
        if cmd.name != "SELECT":
            break
        if not item.error and cmd.id in names:
            out.add(names[cmd.id])
    return frozenset(out)


def step_strings(request: PolicyRequest) -> StepStrings:
    """What the request's step offers: the page's element ids, each combobox's options and name, the comboboxes just set
    here, and the strings the task quotes."""
    els = request.observation.elements
    return StepStrings(
        ids=frozenset(e.id for e in els),
        options={e.id: tuple(e.options) for e in els if e.options},
        names={e.id: e.name for e in els if e.options and e.name},
        set_here=_set_here(request.history, els),
        typed=quoted_strings(request.task.instruction),
        refs=element_refs(request.observation.text),
        lead=page_lead(request.observation),
    )


class OutputGrammar:
    """Character-level check of an output prefix: ``viable(text)`` is True while ``text`` can still become a
    valid thought + command for this step; ``complete(text)`` when it is one (EOS may follow). ``setting_form``:
    the thoughts' wording names its settings as ``Set <role> "<name>"[id] to <name> [<option>]`` (the module's
    docstring)."""

    def __init__(
        self,
        strings: StepStrings,
        split=None,
        setting_form: bool = False,
        name_ids: bool = True,
        page_lead: bool = False,
    ):
        self.setting_form, self.name_ids = setting_form, name_ids
        self.lead = strings.lead if page_lead else ""
        all_options = [o for opts in strings.options.values() for o in opts]
        self.ids, self.scroll = _Pool(strings.ids), _Pool(("UP", "DOWN"))
        self.selects = _Pool(strings.options)  # SELECT acts on an element with options
        self.typed = _Pool(strings.typed, split) if strings.typed else None
        self.options = {i: _Pool(o, split) for i, o in strings.options.items()}
        self.names, self.split, self.refs = strings.names, split, strings.refs
        # the comboboxes a thought may name: the page's, less those set on this page already (the oracle sets each
        # once per visit; a model that set one again looped over them to the step limit)
        self.boxes = _Pool(n for n in set(strings.names.values()) if n not in strings.set_here)
        # a combobox left to set: a named one not set here, or one with no name (the name check cannot apply)
        self.settable = bool(self.boxes.strings) or any(i not in strings.names for i in strings.options)
        self.all_options = _Pool(all_options, split)
        text = _Pool(strings.typed | set(all_options), split)
        self.any = _Pool(strings.ids | text.strings)
        self.any.ends = self.ids.prefixes | text.ends

    def _pool(self, kind: str, groups: list[str]) -> _Pool | None:
        """The strings group ``kind`` may hold (None: free text)."""
        return {
            "id": self.ids,
            "select": self.selects,
            "typed": self.typed,
            "scroll": self.scroll,
            "option": self.options.get(groups[0] if groups else "", self.all_options),
        }.get(kind)

    def _usable(self, verb: str) -> bool:
        """A verb this page can take (SELECT needs an element with options)."""
        kinds = _GROUPS[verb]
        pool = self._pool(kinds[0], []) if kinds else None
        return pool is None or bool(pool.strings) or verb in _OPTIONAL_LAST

    def _thought(self, text: str) -> bool:
        """Every bracket group of the thought (closed or open) holds a string the step offers, on one line."""
        group = None
        for ch in text:
            if ch == "[":
                if group is not None:
                    return False
                group = ""
            elif ch == "]":
                if group is not None and group not in self.any.strings:
                    return False
                group = None
            elif group is not None:
                group += ch
                if ch == "\n" or group not in self.any.prefixes:
                    return False
        return (
            (group is None or group in self.any.ends)
            and self._boxes(text)
            and (not self.name_ids or self._refs(text))
            and self._leads(text)
            and (not self.setting_form or (self._setting(text) and self._set_lead(text)))
        )

    @staticmethod
    def _body(thought: str) -> str:
        """The thought's own words, after its ``Thought:`` label (decoded text may start with a space)."""
        text = thought.lstrip(" ")
        return text[len("Thought:") :].lstrip(" ") if text.startswith("Thought:") else text

    def _leads(self, thought: str) -> bool:
        """With ``page_lead``: the thought opens with the page's lead, as written (``Page "Your cart", heading
        "Added Oak Tea to your cart".``), or a prefix of it while it is being written."""
        if not self.lead:
            return True
        text = thought.lstrip(" ")
        if "Thought:".startswith(text):
            return True  # the label so far
        if not text.startswith("Thought:"):
            return True  # no label: the output's form is the command parser's concern
        body = text[len("Thought:") :].lstrip(" ")
        return self.lead.startswith(body) if len(body) <= len(self.lead) else body.startswith(self.lead)

    _LEAD = re.compile(r' \w*(?: (?:"([^"\n]*)(")?)?)?')  # `` <role> "<name>"`` after ``Set``, or a prefix of it

    def _set_lead(self, thought: str) -> bool:
        """``setting_form``: a thought that starts with ``Set`` names a combobox left to set, as ``Set <role>
        "<name>"``."""
        body = self._body(thought)
        if not body.startswith("Set"):
            return True
        if not self.settable:
            return False
        m = self._LEAD.match(body, 3)
        if m is None:
            return len(body) == 3  # ``Set`` so far
        name, closed = m.group(1), m.group(2)
        if name is None:
            return m.end() == len(body)  # the role word goes on to the quoted name and nothing else
        return not self.names or name in (self.boxes.strings if closed else self.boxes.prefixes)

    def _sets(self, thought: str) -> bool:
        """Whether the thought is a setting in ``setting_form``'s wording (``Set …``): its command is then a SELECT."""
        return self.setting_form and self._body(thought).startswith("Set ")

    def _boxes(self, text: str) -> bool:
        """Each ``combobox "…"`` of the thought names one of the page's comboboxes, not one set on this page."""
        if not self.names:
            return True
        for m in re.finditer(r'combobox "([^"\n]*)("?)', text):
            if m.group(1) not in (self.boxes.strings if m.group(2) else self.boxes.prefixes):
                return False
        return True

    # an element named by role and quoted name, then its id (closed or still open): ``link "Next >"[19]``
    _REF = re.compile(r'(?<!\S)(\w+ "(?:[^"\\\n]|\\.)*")\[([^\[\]\n]*)(\]?)')

    def _refs(self, text: str) -> bool:
        """Each id written right after an element's role and name (``link "Next >"[19]``) is the id of a page element
        of that role and name, or a prefix of one while the group is open. A role and name the page does not show
        leave the id to the other rules."""
        for m in self._REF.finditer(text):
            ids = self.refs.get(m.group(1))
            if ids is None:
                continue
            group, closed = m.group(2), bool(m.group(3))
            if not (group in ids if closed else any(i.startswith(group) for i in ids)):
                return False
        return True

    _SET = re.compile(r'"[^"\n]*"\[([^\[\]\n]+)\] to ')

    def _setting(self, text: str) -> bool:
        """After a combobox's id and ``to`` (``Set combobox "size"[6] to ``), the thought names that combobox again
        and one of its options (``size [M]``), as the ``setting_form`` wording does. Why: the from-scratch model wrote
        another option's name there (``"count"[8] to color [``), and the value's copy then starts at that option's
        place in the task."""
        for m in self._SET.finditer(text):
            name = self.names.get(m.group(1))
            if not name:
                continue
            lead, rest = name + " [", text[m.end() :]
            if len(rest) <= len(lead):
                if not lead.startswith(rest):
                    return False
                continue
            if not rest.startswith(lead):
                return False
            value = rest[len(lead) :]
            end = value.find("]")
            pool = self.options[m.group(1)]
            if (value if end < 0 else value[:end]) not in (pool.ends if end < 0 else pool.strings):
                return False
        return True

    def _named(self, thought: str) -> frozenset[str]:
        """The page's element ids the thought names (its closed ``[...]`` groups that are ids)."""
        return frozenset(g for g in re.findall(r"\[([^\[\]\n]*)\]", thought) if g in self.ids.strings)

    def _decided(self, thought: str) -> tuple[frozenset[str], dict[str, str], bool]:
        return self._named(thought), self._settings(thought), self._sets(thought)

    # a combobox's id and the value its thought sets it to, the id after the name or before the role
    _SETTINGS = (
        re.compile(r'"[^"\n]*"\[([^\[\]\n]+)\] to [^\[\n]*\[([^\[\]\n]+)\]'),
        re.compile(r'\[([^\[\]\n]+)\] \w+ "[^"\n]*" to [^\[\n]*\[([^\[\]\n]+)\]'),
    )

    def _settings(self, thought: str) -> dict[str, str]:
        """The values the thought sets its comboboxes to (``"size"[6] to size [M]``, ``"size"[6] to [M]`` or
        ``[6] combobox "size" to [M]`` -> {"6": "M"})."""
        return {
            m.group(1): m.group(2) for rx in self._SETTINGS for m in rx.finditer(thought) if m.group(1) in self.names
        }

    def _command(
        self, body: str, named: frozenset[str] = frozenset(), settings: dict[str, str] | None = None, sets: bool = False
    ) -> tuple[bool, bool]:
        """(viable, complete) of the text after ``Command:``; ``named``: the element ids the thought names;
        ``settings``: the values it sets comboboxes to; ``sets``: the thought is a setting (the verb is SELECT)."""
        s = body[1:] if body.startswith(" ") else body
        m = re.match(r"[A-Za-z_]*", s)
        verb, rest = m.group(0), s[m.end() :]
        verbs = ("SELECT",) if sets else COMMANDS
        if not rest:
            if not any(c.startswith(verb) and self._usable(c) for c in verbs):
                return False, False
            return True, verb in verbs and (not _GROUPS[verb] or verb in _OPTIONAL_LAST)
        if verb not in verbs or not self._usable(verb):
            return False, False
        kinds, groups, i = _GROUPS[verb], [], 0

        def done() -> bool:
            return len(groups) == len(kinds) or (verb in _OPTIONAL_LAST and len(groups) == len(kinds) - 1)

        while i < len(rest):
            if rest[i] == "\n":  # the command line ends here, and the output with it (the parser's rule)
                return done() and not rest[i + 1 :].strip(), done() and not rest[i + 1 :].strip()
            if len(groups) == len(kinds):
                return False, False  # nothing but the line's end may follow the last group
            if rest[i] == " ":
                i += 1
                if i == len(rest):
                    return True, False
            if rest[i] != "[":
                return False, False
            end = rest.find("]", i + 1)
            content = rest[i + 1 :] if end < 0 else rest[i + 1 : end]
            if "\n" in content or "[" in content:
                return False, False
            pool = self._pool(kinds[len(groups)], groups)
            if kinds[len(groups)] in ("id", "select") and named & pool.strings:
                pool = _Pool(named & pool.strings)  # the element the thought decided on
            if kinds[len(groups)] == "option" and groups and (settings or {}).get(groups[0]) in pool.strings:
                pool = _Pool((settings[groups[0]],), self.split)  # the thought's value (``[8]`` came: an id piece)
            if end < 0:
                return pool is None or content in pool.ends, False
            if pool is not None and content not in pool.strings:
                return False, False
            groups.append(content)
            i = end + 1
        return True, done()

    @staticmethod
    def _split(text: str) -> tuple[str, str | None]:
        """(thought part, command body or None while no line has started with ``Command:``)."""
        at = 0
        for line in text.split("\n"):
            if line.startswith(_LABEL):
                return text[:at], text[at + len(_LABEL) :]
            at += len(line) + 1
        return text, None

    def viable(self, text: str) -> bool:
        """Whether ``text`` can still become a valid thought and command for this step."""
        thought, body = self._split(text)
        return self._thought(thought) and (body is None or self._command(body, *self._decided(thought))[0])

    def complete(self, text: str) -> bool:
        """Whether ``text`` is a complete valid thought and command (EOS may follow)."""
        thought, body = self._split(text)
        return body is not None and self._thought(thought) and all(self._command(body, *self._decided(thought)))


@functools.lru_cache(maxsize=4)
def _piece_table(tokenizer) -> tuple[str, ...]:
    """The text each token adds after other text (a leading space kept: decoded after an anchor token)."""
    anchor = tokenizer.encode("a", add_special_tokens=False)[-1]
    base = tokenizer.decode([anchor], skip_special_tokens=False)
    out = []
    for t in range(len(tokenizer)):
        s = tokenizer.decode([anchor, t], skip_special_tokens=False)
        out.append(s[len(base) :] if s.startswith(base) else s)
    return tuple(out)


class GrammarConstraint:
    """``TokenConstraint`` for one output: a token is allowed when the text with it stays ``viable``; EOS when the
    text is ``complete``."""

    def __init__(self, grammar: OutputGrammar, pieces: tuple[str, ...], eos_ids: Iterable[int], special: Iterable[int]):
        self.grammar, self.pieces = grammar, pieces
        self.eos, self.special = frozenset(eos_ids), frozenset(special) - frozenset(eos_ids)
        self.text = ""

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next: EOS when the text is complete, other tokens when the text stays viable."""
        if token in self.eos:
            return self.grammar.complete(self.text)
        if token in self.special or token >= len(self.pieces):
            return False
        return self.grammar.viable(self.text + self.pieces[token])

    def advance(self, token: int) -> None:
        """Append ``token``'s text to the output so far."""
        if token < len(self.pieces) and token not in self.eos:
            self.text += self.pieces[token]


def constraints_for(requests, tokenizer, eos_ids: Iterable[int], thoughts: str = DEFAULT) -> list[GrammarConstraint]:
    """One grammar constraint per request, for ``Sampler.generate(..., constraints=...)``; ``thoughts``: the wording
    the model's thoughts were trained on (a name registered with ``rollout/policies/thoughts.py``), whose
    ``setting_form``, ``name_ids`` and ``page_lead`` switch their rules on."""
    wording = registered_thoughts(thoughts)
    pieces = _piece_table(tokenizer)
    # control tokens (BOS, chat markers) never appear in an output; special tokens that are text (element id
    # pieces such as ``[7]``) do
    special = {t for t in getattr(tokenizer, "all_special_ids", ()) or () if not re.fullmatch(r"\[\d+\]", pieces[t])}
    split = token_bounds(tokenizer, pieces)
    return [
        GrammarConstraint(
            OutputGrammar(
                step_strings(r),
                split,
                setting_form=wording.setting_form,
                name_ids=wording.name_ids,
                page_lead=wording.page_lead,
            ),
            pieces,
            eos_ids,
            special,
        )
        for r in requests
    ]
