"""Declarative task checks evaluated on the live page (the task-file environment, docs/tasks.md).

A check is JSON: a leaf, or ``{"all": [...]}`` / ``{"any": [...]}`` / ``{"not": check}``. Leaves:

- ``{"element": SEL}``: an element matching ``SEL`` exists, in the main frame or any child frame;
- ``{"element": SEL, "text": RE}``: one of them has visible text matching ``RE`` (``re.search``);
- ``{"element": SEL, "attribute": NAME}`` (exists) or ``… "value": RE`` (its value matches);
- ``{"element": SEL, "form_value": RE}``: a form field's current value (what was typed or selected) matches;
- ``{"element": SEL, "checked": true|false}``: a checkbox or radio is (not) checked;
- ``{"url": RE}``: the page's URL matches;
- ``{"json": URL, "path": "a.b.0", "equals": V}`` or ``… "matches": RE``: a JSON endpoint of the site (fetched with
  the episode's cookies; a URL relative to the task's start URL) holds ``V`` at ``path``;
- ``{"answer": RE}``: the answer the agent gave with ``STOP [answer]`` matches (information-seeking tasks); an
  optional ``"expected": "text"`` is the reference answer that its token F1 is measured against;
- ``{"answer_from": SEL}``: that answer is the visible text of an element matching ``SEL`` on the final page
  (whitespace collapsed, case ignored). Before STOP there is no answer and both are false.

``SEL`` is ``{"css": "…"}`` or ``{"role": ARIA role, "name": "…"}`` (exact accessible name; ``"name_regex"`` for a
pattern; the role alone matches any name). Parsing checks every key, pattern and role, and names the task and the
path of a bad part; CSS syntax is checked by the browser before any episode runs (``css_selectors``).

Evaluation gives the root's truth and every leaf's, in document order: the leaves are the task's partial progress
(the tree builder never merges two states whose leaves differ, docs/method.md §2).

Element-level metrics (docs/tasks.md, "Element-level metrics") come from the same leaves: ``target_ids`` gives, for
each leaf that names an element whose state the task changes (form value, checked, attribute), the harness ids of
the matching elements on the page as observed, so a recording tells whether the agent acted on them; ``answer_f1``
compares a STOP answer with the reference text (the element's, or ``expected``) by token F1.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Sequence
from urllib.parse import urljoin, urlsplit

# WAI-ARIA 1.2 roles (Playwright's getByRole accepts these; an unknown one would silently match nothing).
ARIA_ROLES = frozenset(
    """
alert alertdialog application article banner blockquote button caption cell checkbox code columnheader combobox
complementary contentinfo definition deletion dialog directory document emphasis feed figure form generic grid
gridcell group heading img insertion link list listbox listitem log main marquee math meter menu menubar menuitem
menuitemcheckbox menuitemradio navigation none note option paragraph presentation progressbar radio radiogroup region
row rowgroup rowheader scrollbar search searchbox separator slider spinbutton status strong subscript superscript
switch tab table tablist tabpanel term textbox time timer toolbar tooltip tree treegrid treeitem
""".split()
)


class CheckError(ValueError):
    """A check that cannot be evaluated: names the task and where in its check the problem is."""


@dataclasses.dataclass(frozen=True)
class Selector:
    """An element selector: a CSS selector, or an ARIA role with an exact name or a name pattern."""

    css: str | None = None
    role: str | None = None
    name: str | None = None
    name_regex: str | None = None

    def describe(self) -> str:
        """The selector as error messages and logs show it."""
        if self.css is not None:
            return f"css {self.css!r}"
        named = f" {self.name!r}" if self.name is not None else f" ~{self.name_regex!r}" if self.name_regex else ""
        return f"{self.role}{named}"


@dataclasses.dataclass(frozen=True)
class ElementLeaf:
    """A check leaf on an element matching a selector: it exists, or its text, attribute, form value or checked state
    matches."""

    selector: Selector
    test: str = "exists"  # exists | text | attribute | form_value | checked
    pattern: str | None = None  # text / attribute value / form value regex
    attribute: str | None = None
    checked: bool | None = None


@dataclasses.dataclass(frozen=True)
class UrlLeaf:
    """A check leaf: the page's URL matches ``pattern``."""

    pattern: str


@dataclasses.dataclass(frozen=True)
class JsonLeaf:
    """A check leaf: a JSON endpoint of the site holds a value at ``path`` (equal to ``equals``, or matching
    ``matches``)."""

    url: str  # absolute (resolved against the task's start URL when parsed)
    path: tuple[str, ...]
    equals: Any = None
    matches: str | None = None
    has_equals: bool = False


@dataclasses.dataclass(frozen=True)
class AnswerLeaf:
    """A check leaf on the agent's STOP answer: it matches ``pattern``, or is the text of an element matching
    ``selector``; ``expected`` is the reference for token F1."""

    pattern: str | None = None  # {"answer": RE}
    selector: Selector | None = None  # {"answer_from": SEL}
    expected: str | None = None  # {"answer": RE, "expected": "text"}: the reference for token F1


@dataclasses.dataclass(frozen=True)
class Node:
    """An inner check node: ``all``, ``any`` or ``not`` of its parts."""

    kind: str  # all | any | not
    parts: tuple["Check", ...]


Check = Node | ElementLeaf | UrlLeaf | JsonLeaf | AnswerLeaf
_LEAF_KEYS = {
    "element": {"element", "text", "attribute", "value", "form_value", "checked"},
    "url": {"url"},
    "json": {"json", "path", "equals", "matches"},
    "answer": {"answer", "expected"},
    "answer_from": {"answer_from"},
}


def parse_check(spec: Any, base_url: str = "", where: str = "check") -> Check:
    """A check from its JSON form; ``CheckError`` naming ``where`` (the path inside the check) on any bad part."""
    if not isinstance(spec, dict) or not spec:
        raise CheckError(
            f"{where}: expected an object with one of all / any / not / element / url / json, got "
            f"{json.dumps(spec)[:80]}"
        )
    for kind in ("all", "any"):
        if kind in spec:
            _only(spec, {kind}, where)
            parts = spec[kind]
            if not isinstance(parts, list) or not parts:
                raise CheckError(f"{where}.{kind}: expected a non-empty list of checks")
            return Node(kind, tuple(parse_check(p, base_url, f"{where}.{kind}[{i}]") for i, p in enumerate(parts)))
    if "not" in spec:
        _only(spec, {"not"}, where)
        return Node("not", (parse_check(spec["not"], base_url, f"{where}.not"),))
    for kind, keys in _LEAF_KEYS.items():
        if kind in spec:
            _only(spec, keys, where)
            return {"element": _element, "url": _url, "json": _json, "answer": _answer, "answer_from": _answer_from}[
                kind
            ](spec, base_url, where)
    raise CheckError(
        f"{where}: unknown check kind(s) {sorted(spec)}; expected one of all, any, not, element, url, "
        "json, answer, answer_from"
    )


def _only(spec: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(spec) - allowed)
    if extra:
        raise CheckError(f"{where}: unexpected key(s) {extra} (allowed here: {sorted(allowed)})")


def _regex(p: Any, where: str) -> str:
    if not isinstance(p, str):
        raise CheckError(f"{where}: expected a regular expression string, got {json.dumps(p)[:60]}")
    try:
        re.compile(p)
    except re.error as e:
        raise CheckError(f"{where}: bad regular expression {p!r}: {e}") from None
    return p


def _selector(spec: Any, where: str) -> Selector:
    if not isinstance(spec, dict):
        raise CheckError(f'{where}: expected {{"css": …}} or {{"role": …, "name": …}}')
    if "css" in spec:
        _only(spec, {"css"}, where)
        if not isinstance(spec["css"], str) or not spec["css"].strip():
            raise CheckError(f"{where}.css: expected a non-empty CSS selector")
        return Selector(css=spec["css"])
    if "role" not in spec:
        raise CheckError(f"{where}: a selector needs css or role, got keys {sorted(spec)}")
    _only(spec, {"role", "name", "name_regex"}, where)
    role = spec["role"]
    if role not in ARIA_ROLES:
        raise CheckError(
            f"{where}.role: {role!r} is not a WAI-ARIA role (e.g. button, link, textbox, heading, "
            "combobox, checkbox, cell)"
        )
    if "name" in spec and "name_regex" in spec:
        raise CheckError(f"{where}: give name or name_regex, not both")
    if "name" in spec and not isinstance(spec["name"], str):
        raise CheckError(f"{where}.name: expected a string")
    regex = _regex(spec["name_regex"], f"{where}.name_regex") if "name_regex" in spec else None
    return Selector(role=role, name=spec.get("name"), name_regex=regex)


def _element(spec: dict, base_url: str, where: str) -> ElementLeaf:
    sel = _selector(spec["element"], f"{where}.element")
    tests = [k for k in ("text", "attribute", "form_value", "checked") if k in spec]
    if len(tests) > 1:
        raise CheckError(f"{where}: one test per element leaf, got {tests} (combine leaves with all)")
    if "value" in spec and tests != ["attribute"]:
        raise CheckError(f"{where}: value goes with attribute")
    if not tests:
        return ElementLeaf(sel)
    test = tests[0]
    if test == "attribute":
        if not isinstance(spec["attribute"], str) or not spec["attribute"]:
            raise CheckError(f"{where}.attribute: expected an attribute name")
        pattern = _regex(spec["value"], f"{where}.value") if "value" in spec else None
        return ElementLeaf(sel, "attribute", pattern, attribute=spec["attribute"])
    if test == "checked":
        if not isinstance(spec["checked"], bool):
            raise CheckError(f"{where}.checked: expected true or false")
        return ElementLeaf(sel, "checked", checked=spec["checked"])
    return ElementLeaf(sel, test, _regex(spec[test], f"{where}.{test}"))


def _url(spec: dict, base_url: str, where: str) -> UrlLeaf:
    return UrlLeaf(_regex(spec["url"], f"{where}.url"))


def _answer(spec: dict, base_url: str, where: str) -> AnswerLeaf:
    expected = spec.get("expected")
    if expected is not None and (not isinstance(expected, str) or not expected.strip()):
        raise CheckError(f"{where}.expected: expected the reference answer as a non-empty string")
    pattern = _regex(spec["answer"], f"{where}.answer")
    if expected is not None and re.search(pattern, expected) is None:
        raise CheckError(f"{where}: the expected answer {expected!r} does not match the answer pattern {pattern!r}")
    return AnswerLeaf(pattern=pattern, expected=expected)


def _answer_from(spec: dict, base_url: str, where: str) -> AnswerLeaf:
    return AnswerLeaf(selector=_selector(spec["answer_from"], f"{where}.answer_from"))


def _json(spec: dict, base_url: str, where: str) -> JsonLeaf:
    url = spec["json"]
    if not isinstance(url, str) or not url:
        raise CheckError(f"{where}.json: expected the endpoint's URL")
    url = urljoin(base_url, url)
    if urlsplit(url).scheme not in ("http", "https"):
        raise CheckError(f"{where}.json: {url!r} is not an http(s) URL")
    path = spec.get("path", "")
    if not isinstance(path, str):
        raise CheckError(f'{where}.path: expected a dotted path such as "items.0.name"')
    if ("equals" in spec) == ("matches" in spec):
        raise CheckError(f"{where}: a json leaf needs exactly one of equals / matches")
    matches = _regex(spec["matches"], f"{where}.matches") if "matches" in spec else None
    return JsonLeaf(url, tuple(p for p in path.split(".") if p), spec.get("equals"), matches, "equals" in spec)


# ---------------------------------------------------------------- walking a parsed check
def leaves(check: Check) -> list[Check]:
    """The leaves in document order (the order of ``evaluate``'s leaf values)."""
    if isinstance(check, Node):
        return [leaf for part in check.parts for leaf in leaves(part)]
    return [check]


def css_selectors(check: Check) -> list[str]:
    """The CSS selectors of a check's element and answer leaves (for the browser to validate)."""
    return [
        leaf.selector.css
        for leaf in leaves(check)
        if isinstance(leaf, (ElementLeaf, AnswerLeaf)) and leaf.selector is not None and leaf.selector.css
    ]


def asks_answer(check: Check) -> bool:
    """Whether the check reads the agent's STOP answer."""
    return any(isinstance(leaf, AnswerLeaf) for leaf in leaves(check))


TARGET_TESTS = ("form_value", "checked", "attribute")  # element leaves whose element the agent must act on


def is_target(leaf: Check) -> bool:
    """A leaf naming the element whose state the task changes (typed, selected, ticked, toggled): the element the
    agent must act on. ``exists`` / ``text`` leaves name outcomes (a banner, a heading), not targets."""
    return isinstance(leaf, ElementLeaf) and leaf.test in TARGET_TESTS


def _answer_tokens(text: str) -> list[str]:
    """SQuAD's answer normalisation (case folded, the articles a / an / the dropped), except that punctuation splits
    tokens rather than vanishing: ``heapq.heappush`` is two tokens, not ``heapqheappush``."""
    text = re.sub(r"[^\w\s]", " ", str(text).casefold())
    return [t for t in text.split() if t not in ("a", "an", "the")]


def token_f1(answer: str, reference: str) -> float:
    """Token F1 of an answer against a reference (SQuAD's: bags of normalised tokens); 1.0 when both are empty."""
    a, r = _answer_tokens(answer), _answer_tokens(reference)
    if not a or not r:
        return float(a == r)
    common = sum(min(a.count(t), r.count(t)) for t in set(a))
    if not common:
        return 0.0
    precision, recall = common / len(a), common / len(r)
    return 2 * precision * recall / (precision + recall)


def normalise(text: str) -> str:
    """Whitespace collapsed, case folded: how an answer is compared with an element's text."""
    return " ".join(str(text).split()).casefold()


def json_urls(check: Check) -> list[str]:
    """The URLs of a check's JSON leaves."""
    return [leaf.url for leaf in leaves(check) if isinstance(leaf, JsonLeaf)]


def combine(check: Check, values: Sequence[bool]) -> bool:
    """The root's truth from the leaves' values (in ``leaves`` order)."""
    it = iter(values)

    def walk(c: Check) -> bool:
        if not isinstance(c, Node):
            return bool(next(it))
        parts = [walk(p) for p in c.parts]  # every leaf is consumed, whatever the short-circuit would skip
        return all(parts) if c.kind == "all" else any(parts) if c.kind == "any" else not parts[0]

    return walk(check)


def json_at(data: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """(found, value) at a dotted path: object keys, list indices."""
    for p in path:
        if isinstance(data, dict) and p in data:
            data = data[p]
        elif isinstance(data, list) and re.fullmatch(r"-?\d+", p) and -len(data) <= int(p) < len(data):
            data = data[int(p)]
        else:
            return False, None
    return True, data


# ---------------------------------------------------------------- evaluation on a live page
_VALUES = {
    "attribute": "(els, a) => els.map(e => e.getAttribute(a))",
    "form_value": "els => els.map(e => ('value' in e) ? String(e.value) : null)",
    "checked": "els => els.map(e => ('checked' in e) ? !!e.checked : null)",
}


def _locator(frame, sel: Selector):
    if sel.css is not None:
        return frame.locator("css=" + sel.css)
    if sel.name is not None:
        return frame.get_by_role(sel.role, name=sel.name, exact=True)
    if sel.name_regex is not None:
        return frame.get_by_role(sel.role, name=re.compile(sel.name_regex))
    return frame.get_by_role(sel.role)


async def _element_value(page, leaf: ElementLeaf) -> bool:
    for frame in page.frames:
        try:
            loc = _locator(frame, leaf.selector)
            if leaf.test == "exists":
                found = await loc.count() > 0
            elif leaf.test == "text":
                found = any(re.search(leaf.pattern, t) for t in await loc.all_inner_texts())
            else:
                arg = leaf.attribute if leaf.test == "attribute" else None
                vals = await loc.evaluate_all(_VALUES[leaf.test], arg)
                if leaf.test == "checked":
                    found = any(v is not None and v == leaf.checked for v in vals)
                else:
                    found = any(v is not None and (leaf.pattern is None or re.search(leaf.pattern, v)) for v in vals)
        except Exception:  # noqa: BLE001 — a frame detached or navigated while it was read: not a match
            found = False
        if found:
            return True
    return False


async def _answer_value(page, leaf: AnswerLeaf, answer: str | None) -> bool:
    if answer is None:
        return False
    if leaf.pattern is not None:
        return re.search(leaf.pattern, answer) is not None
    want = normalise(answer)
    for frame in page.frames:
        try:
            texts = await _locator(frame, leaf.selector).all_inner_texts()
        except Exception:  # noqa: BLE001 — a frame detached meanwhile: not a match
            continue
        if any(normalise(t) == want for t in texts):
            return True
    return False


async def _json_value(context, leaf: JsonLeaf) -> bool:
    try:
        resp = await context.request.get(leaf.url, timeout=5000)
        if not resp.ok:
            return False
        found, value = json_at(await resp.json(), leaf.path)
    except Exception:  # noqa: BLE001 — unreachable or not JSON: the check is not met (the task file is not at fault)
        return False
    if not found:
        return False
    return value == leaf.equals if leaf.has_equals else re.search(leaf.matches, str(value)) is not None


_IDS = "els => els.map(e => e.getAttribute('data-tgpo-id')).filter(x => x)"


async def target_ids(check: Check, page) -> dict[int, list[str]]:
    """leaf index -> the harness ids (``data-tgpo-id``, as the observation shows them) of the elements that each
    target leaf names, in every frame; leaves whose element is absent or carries no id are left out."""
    out: dict[int, list[str]] = {}
    for i, leaf in enumerate(leaves(check)):
        if not is_target(leaf):
            continue
        ids: list[str] = []
        for frame in page.frames:
            try:
                ids += await _locator(frame, leaf.selector).evaluate_all(_IDS)
            except Exception:  # noqa: BLE001 — a frame detached meanwhile: nothing there
                continue
        if ids:
            out[i] = ids
    return out


async def answer_f1(check: Check, page, answer: str) -> dict[int, float]:
    """leaf index -> token F1 of ``answer`` for each answer leaf with a reference: the best over the texts of the
    elements an ``answer_from`` leaf names on the page as it is, or the ``expected`` text of an ``answer`` leaf."""
    out: dict[int, float] = {}
    for i, leaf in enumerate(leaves(check)):
        if not isinstance(leaf, AnswerLeaf):
            continue
        if leaf.selector is None:
            if leaf.expected is not None:
                out[i] = token_f1(answer, leaf.expected)
            continue
        texts: list[str] = []
        for frame in page.frames:
            try:
                texts += await _locator(frame, leaf.selector).all_inner_texts()
            except Exception:  # noqa: BLE001 — a frame detached meanwhile: nothing there
                continue
        out[i] = max((token_f1(answer, t) for t in texts), default=0.0)
    return out


async def evaluate(check: Check, page, answer: str | None = None) -> tuple[bool, list[bool]]:
    """(the root's truth, every leaf's truth in ``leaves`` order) on ``page`` as it is now; ``answer``: the STOP
    answer, once the agent has given one."""
    values = []
    for leaf in leaves(check):
        if isinstance(leaf, AnswerLeaf):
            values.append(await _answer_value(page, leaf, answer))
        elif isinstance(leaf, UrlLeaf):
            values.append(re.search(leaf.pattern, page.url) is not None)
        elif isinstance(leaf, JsonLeaf):
            values.append(await _json_value(page.context, leaf))
        else:
            values.append(await _element_value(page, leaf))
    return combine(check, values), values
