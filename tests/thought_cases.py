"""The noisy oracle's thoughts on the shop's own pages, recorded once as golden data (tests/data/oracle_thoughts.json).

The shop serves its pages over HTTP; a small HTML reader (``PageReader``, no browser) turns each into an
``Observation`` as the harness would see it: element ids in document order from 1, links with their absolute
href, text boxes and comboboxes named by their labels, the document title, and page text in the harness's line
format (``[7] link "Sort: Rating"``, ``heading "Added … to your cart"``). The noisy oracle (every kind of mistake
on, so wrong clicks, wrong sorts, wrong buttons, detours, repeats, malformed outputs and early stops all occur)
plays tasks of the three families on them, in both wordings of multi_cart's items (``item_names``) and in Chinese.

Recorded:
- ``episodes``: each step's observation and the policy's whole output, so a test replays the observations through a
  fresh oracle and compares the outputs;
- ``cases``: (command, observation, instruction) -> the thought, for every command the runs made and, on every page
  they saw, a CLICK of each element and a SELECT of each option, and where a run typed, a TYPE of each string the
  task quotes into each text box (wrong clicks and wrong values included), so every branch of the wording meets real
  pages.

Observations are stored once each (``pages``), their URLs under ``ORIGIN`` rather than the server's port.

    python -m tests.thought_cases   # writes tests/data/oracle_thoughts.json with the scratch_copy wording
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin

from rollout.core import Command, Element, Observation, PolicyRequest
from rollout.harness.observe import format_node

ORIGIN = "http://shop"
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "oracle_thoughts.json")
# (item_names, locale, family, the first task, how many, noisy, oracle seed)
RUNS = (
    ("number", "en", "webshop", 0, 3, True, 0),
    ("number", "en", "procedure", 0, 4, True, 1),
    ("number", "en", "multi_cart", 0, 2, True, 2),
    ("ordinal", "en", "multi_cart", 0, 2, True, 3),
    ("number", "en", "multi_cart", 2, 1, False, 0),
    ("ordinal", "en", "multi_cart", 3, 1, False, 0),
    ("ordinal", "en", "procedure", 4, 2, True, 4),
    ("number", "zh", "procedure", 0, 1, True, 5),
    ("number", "zh", "multi_cart", 0, 1, False, 0),
)
NOISE = dict(
    wrong_choice=0.25,
    loop=0.1,
    malformed=0.08,
    premature_stop=0.02,
    recover=0.5,
    repeat=0.15,
    wrong_button=0.2,
    wrong_sort=0.3,
)  # the noisy runs' rates; the others run the clean oracle
MAX_STEPS = 40


class PageReader(HTMLParser):
    """Nodes of a shop page in document order: links, buttons, text inputs, selects, headings and paragraphs."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.nodes, self.labels, self.title = [], {}, ""
        self._form = self._open = self._select = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "form":
            self._form = {"action": a.get("action", ""), "fields": []}
        elif tag == "a" and "href" in a:
            self._open = {"kind": "link", "href": a["href"], "text": "", "current": "aria-current" in a}
            self.nodes.append(self._open)
        elif tag == "button":
            self._open = {"kind": "button", "text": "", "form": self._form, "formaction": a.get("formaction")}
            self.nodes.append(self._open)
        elif tag in ("h1", "h2", "p") or (tag == "div" and a.get("id") == "order-confirmation"):
            if self._open is None:
                self._open = {"kind": "heading" if tag != "p" else "text", "text": ""}
                self.nodes.append(self._open)
        elif tag == "label":
            self._open = {"kind": "label", "for": a.get("for"), "text": ""}
        elif tag == "input":
            node = {
                "kind": "input",
                "type": a.get("type", "text"),
                "name": a.get("name"),
                "id": a.get("id"),
                "value": a.get("value", ""),
                "aria": a.get("aria-label"),
                "ph": a.get("placeholder"),
            }
            if self._form is not None:
                self._form["fields"].append(node)
            if node["type"] == "text":
                self.nodes.append(node)
        elif tag == "select":
            node = {
                "kind": "select",
                "name": a.get("name"),
                "id": a.get("id"),
                "aria": a.get("aria-label"),
                "options": [],
                "value": None,
            }
            self._select = node
            if self._form is not None:
                self._form["fields"].append(node)
            self.nodes.append(node)
        elif tag == "option":
            self._open = {"kind": "option", "text": "", "selected": "selected" in a}

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag == "form":
            self._form = None
        elif tag == "label" and self._open and self._open["kind"] == "label":
            self.labels[self._open["for"]] = self._open["text"].strip()
            self._open = None
        elif tag == "option" and self._open and self._open["kind"] == "option":
            text = self._open["text"].strip()
            self._select["options"].append(text)
            if self._open["selected"] or self._select["value"] is None:
                self._select["value"] = text
            self._open = None
        elif tag in ("a", "button") and self._open and self._open["kind"] in ("link", "button"):
            self._open = None
        elif tag in ("h1", "h2", "p", "div") and self._open and self._open["kind"] in ("heading", "text"):
            self._open = None


class Browser:
    """Just enough of a browser for the shop: GET links and forms, a session cookie, a history, Observations."""

    def __init__(self, origin: str, sid: str):
        self.origin, self.sid, self.history = origin, sid, []
        self.url, self.nodes, self.title = None, [], ""

    def goto(self, url: str) -> None:
        req = urllib.request.Request(urljoin(self.origin, url), headers={"Cookie": f"sid={self.sid}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            final, body = r.geturl(), r.read().decode()
        if self.url is not None:
            self.history.append(self.url)
        p = PageReader()
        p.feed(body)
        self.url, self.nodes, self.title = final, p.nodes, p.title.strip()
        for n in p.nodes:
            if n["kind"] in ("input", "select"):
                n["label"] = n.get("aria") or p.labels.get(n.get("id")) or n.get("ph") or ""

    def _interactive(self) -> list[dict]:
        return [n for n in self.nodes if n["kind"] in ("link", "button", "input", "select")]

    def observe(self) -> Observation:
        def local(url: str) -> str:
            return ORIGIN + url[len(self.origin) :] if url.startswith(self.origin) else url

        els, lines = [], []
        ids = {id(n): str(i + 1) for i, n in enumerate(self._interactive())}
        for n in self.nodes:
            i = ids.get(id(n))
            if n["kind"] == "link":
                el = Element(
                    i, "link", n["text"].strip(), href=local(urljoin(self.url, n["href"])), current=n["current"]
                )
            elif n["kind"] == "button":
                el = Element(i, "button", n["text"].strip())
            elif n["kind"] == "input":
                el = Element(i, "textbox", n["label"], value=n["value"])
            elif n["kind"] == "select":
                el = Element(i, "combobox", n["label"], value=n["value"], options=tuple(n["options"]))
            else:
                text = " ".join(n["text"].split())
                if text:
                    lines.append(format_node({"role": n["kind"], "name": text}))
                continue
            els.append(el)
            lines.append(_line(el))
        return Observation(url=local(self.url), title=self.title, text="\n".join(lines), elements=tuple(els))

    def do(self, cmd: Command) -> None:
        if cmd.name == "GO_BACK":
            if self.history:
                self.goto(self.history.pop())
                self.history.pop()
            return
        nodes = self._interactive()
        if cmd.name not in ("CLICK", "TYPE", "SELECT") or not cmd.id.isdigit() or not 0 < int(cmd.id) <= len(nodes):
            return
        n = nodes[int(cmd.id) - 1]
        if cmd.name == "TYPE" and n["kind"] == "input":
            n["value"] = cmd.arg
        elif cmd.name == "SELECT" and n["kind"] == "select" and cmd.arg in n["options"]:
            n["value"] = cmd.arg
        elif cmd.name == "CLICK" and n["kind"] == "link":
            self.goto(urljoin(self.url, n["href"]))
        elif cmd.name == "CLICK" and n["kind"] == "button" and n["form"] is not None:
            form = n["form"]
            fields = [(f["name"], f["value"]) for f in form["fields"] if f.get("name")]
            self.goto((n["formaction"] or form["action"]) + "?" + urlencode(fields))


def _line(e: Element) -> str:
    return format_node(
        {"id": e.id, "role": e.role, "name": e.name, "value": e.value, "options": list(e.options), "current": e.current}
    )


def observation_json(obs: Observation) -> dict:
    """The observation as JSON; its text's element lines as their element's index (they are ``_line`` of it)."""
    lines = {_line(e): k for k, e in enumerate(obs.elements)}
    return {
        "url": obs.url,
        "title": obs.title,
        "text": [lines.get(t, t) for t in obs.text.split("\n")],
        "elements": [[e.id, e.role, e.name, e.value, list(e.options), e.href, e.current] for e in obs.elements],
    }


def observation_of(d: dict) -> Observation:
    els = tuple(
        Element(id=i, role=r, name=n, value=v, options=tuple(o), href=h, current=c)
        for i, r, n, v, o, h, c in d["elements"]
    )
    text = "\n".join(_line(els[t]) if isinstance(t, int) else t for t in d["text"])
    return Observation(url=d["url"], title=d["title"], text=text, elements=els)


def command_json(cmd: Command) -> list:
    return [cmd.name, cmd.id, cmd.arg]


def command_of(c: list) -> Command:
    return Command(c[0], c[1], c[2])


def shop(item_names: str, locale: str):
    from rollout.envs.shop.env import ShopEnv

    return ShopEnv(n_train=40, n_test=2, item_names=item_names, locale=locale)


def noise(noisy: bool):
    from rollout.policies.oracle import OracleNoise

    return OracleNoise(**NOISE) if noisy else OracleNoise()


def _probes(obs: Observation, instruction: str, typed: bool) -> list[Command]:
    """The commands a step could make on this page: each element clicked, each option set and, where the run typed
    (``typed``), each string the task quotes typed into each text box."""
    from rollout.policies.constrain import quoted_strings

    out = [Command("CLICK", e.id) for e in obs.elements]
    out += [Command("SELECT", e.id, o) for e in obs.elements for o in e.options]
    out += [
        Command("TYPE", e.id, s)
        for e in obs.elements
        if e.role == "textbox" and typed
        for s in sorted(quoted_strings(instruction))
    ]
    return out


def record(explain, thoughts: str = "scratch_copy") -> dict:
    """Run the oracle (its thoughts worded by ``thoughts``) on the shop's pages and record what
    ``explain(cmd, obs, instruction)`` writes."""
    from rollout.commands import parse_output
    from rollout.core import HistoryItem
    from rollout.policies.oracle import OraclePolicy

    pages, page_index, episodes, cases, seen, instructions = [], {}, [], [], set(), {}

    def page(obs: Observation) -> int:
        key = json.dumps(observation_json(obs), sort_keys=True)
        if key not in page_index:
            page_index[key] = len(pages)
            pages.append(observation_json(obs))
        return page_index[key]

    def case(cmd: Command, obs: Observation | None, instruction: str) -> None:
        p = page(obs) if obs is not None else None
        key = (p, instruction, tuple(command_json(cmd)))
        if key not in seen:
            seen.add(key)
            cases.append(
                [
                    p,
                    instructions.setdefault(instruction, len(instructions)),
                    *command_json(cmd),
                    explain(cmd, obs, instruction),
                ]
            )

    for item_names, locale, family, first, count, noisy, seed in RUNS:
        env = shop(item_names, locale)
        origin = env.start()
        try:
            policy = OraclePolicy(env, noise(noisy), seed=seed, thoughts=thoughts)
            tasks = [t for t in env.tasks("train") if t.family == family][first : first + count]
            for task in tasks:
                key = f"{task.task_id}/0"
                browser = Browser(origin, env.new_session(key))
                browser.goto(task.start_path)
                steps, history = [], []
                for step in range(MAX_STEPS):
                    obs = browser.observe()
                    out = asyncio.run(policy.act(PolicyRequest(task, obs, tuple(history), step, key, seed)))
                    steps.append({"page": page(obs), "output": out.text})
                    try:
                        thought, cmd = parse_output(out.text)
                    except Exception:  # a malformed output: nothing happens
                        history.append(HistoryItem(command="", thought="", error="format"))
                        continue
                    case(cmd, obs, task.instruction)
                    history.append(HistoryItem(command=cmd.render(), thought=thought))
                    if cmd.name == "STOP":
                        break
                    browser.do(cmd)
                    if env.check_session(task, browser.sid).done:
                        break
                episodes.append(
                    {
                        "item_names": item_names,
                        "locale": locale,
                        "task_id": task.task_id,
                        "noisy": noisy,
                        "seed": seed,
                        "key": key,
                        "steps": steps,
                    }
                )
            for ep in episodes[-len(tasks) :]:  # every command a step could make on the pages this task saw
                instruction = next(t for t in tasks if t.task_id == ep["task_id"]).instruction
                for s in ep["steps"]:
                    obs = observation_of(pages[s["page"]])
                    for cmd in _probes(obs, instruction, "\nCommand: TYPE" in s["output"]):
                        case(cmd, obs, instruction)
        finally:
            env.stop()
    for cmd in (
        Command("CLICK", "7"),
        Command("TYPE", "9", "x"),
        Command("SELECT", "6", "red"),
        Command("GO_BACK"),
        Command("STOP", arg=""),
        Command("SCROLL", arg="DOWN"),
        Command("GOTO", arg="http://shop/cart"),
        Command("CLEAR", "3"),
    ):  # a malformed output's thought: no page
        case(cmd, None, "")
    return {
        "noise": NOISE,
        "max_steps": MAX_STEPS,
        "pages": pages,
        "episodes": episodes,
        "instructions": list(instructions),
        "cases": cases,
    }


def main() -> None:
    import recipes
    from rollout.policies.thoughts import thought_writer

    recipes.get("scratch_copy").register()
    data = record(thought_writer("scratch_copy"))
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    with open(PATH, "w") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(
        f"{PATH}: {len(data['pages'])} pages, {len(data['episodes'])} episodes, {len(data['cases'])} cases, "
        f"{os.path.getsize(PATH)} bytes"
    )


if __name__ == "__main__":
    main()
