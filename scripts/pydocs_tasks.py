"""Write module-search tasks for the worked example (docs/tasks.md, docs/pydocs_tasks.jsonl) from the real pages.

For each standard-library module named, it reads ``data/sites/pydocs/library/<module>.html`` (scripts/setup.sh
unpacks it), takes the text of the page's first ``h1`` (without Sphinx's ``¶`` anchor) and the page's title as the
search results show it (``searchindex.js``; the two must agree), and prints one task per module in the file's style:
type the module's name into "Quick search", press "Go", click the result titled like the page, STOP; the check is the
page's URL and its ``h1``. It refuses a module without a page, an id the file already has, and a page or query
that the other split of the file already uses (held-out tasks stay disjoint from training ones).

    .venv/bin/python scripts/pydocs_tasks.py --split=train os time copy >> docs/pydocs_tasks.jsonl

Then run the clean oracle on the file (docs/tasks.md): every task must succeed in the browser.
"""

from __future__ import annotations

import argparse
import html
import html.parser
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(REPO, "data", "sites", "pydocs")
TASKS = os.path.join(REPO, "docs", "pydocs_tasks.jsonl")


class _H1(html.parser.HTMLParser):
    """The visible text of the first <h1>, without its header link (``¶``)."""

    def __init__(self):
        super().__init__()
        self.depth, self.skip, self.done, self.text = 0, 0, False, []

    def handle_starttag(self, tag, attrs):
        if self.done:
            return
        if tag == "h1":
            self.depth += 1
        elif self.depth and tag == "a" and "headerlink" in (dict(attrs).get("class") or ""):
            self.skip += 1

    def handle_endtag(self, tag):
        if self.done:
            return
        if tag == "h1" and self.depth:
            self.depth -= 1
            self.done = not self.depth
        elif tag == "a" and self.skip:
            self.skip -= 1

    def handle_data(self, data):
        if self.depth and not self.skip and not self.done:
            self.text.append(data)


def _squash(text: str) -> str:
    return " ".join(text.replace("¶", " ").split())


def h1_text(path: str) -> str:
    p = _H1()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return _squash("".join(p.text))


def search_titles() -> dict[str, str]:
    """docname → the title a search result shows (its HTML as text)."""
    with open(os.path.join(SITE, "searchindex.js"), encoding="utf-8") as f:
        s = f.read()
    index = json.loads(s[s.index("(") + 1 : s.rindex(")")])
    return {d: _squash(html.unescape(re.sub(r"<[^>]+>", "", t))) for d, t in zip(index["docnames"], index["titles"])}


def rx(text: str) -> str:
    """``text`` as a regular expression: only the characters that mean something there are escaped."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


def task(module: str, split: str, titles: dict[str, str]) -> dict:
    page = os.path.join(SITE, "library", module + ".html")
    if not os.path.isfile(page):
        raise SystemExit(f"{module}: no page {page}")
    h1, title = h1_text(page), titles.get(f"library/{module}")
    if h1 != title:
        raise SystemExit(f"{module}: the page's h1 {h1!r} is not the search result's title {title!r}")
    return {
        "id": f"pydocs/search/{module}",
        "family": "search",
        "split": split,
        "start_url": "/index.html",
        "instruction": f"Search the Python documentation for [{module}] and open the page of the {module} module.",
        "check": {
            "all": [{"url": f"/library/{rx(module)}\\.html(#.*)?$"}, {"element": {"css": "h1"}, "text": "^" + rx(h1)}]
        },
        "plan": [
            {"do": "TYPE", "role": "textbox", "name": "Quick search", "text": module},
            {"do": "CLICK", "role": "button", "name": "Go"},
            {"do": "CLICK", "role": "link", "name": h1},
            {"do": "STOP"},
        ],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="+", help="module names, as their pages are named (library/<name>.html)")
    ap.add_argument("--split", choices=["train", "test"], required=True)
    ap.add_argument("--tasks", default=TASKS, help="the task file the new tasks must not collide with")
    args = ap.parse_args(argv)
    rows = []
    if os.path.isfile(args.tasks):
        with open(args.tasks, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip() and not line.lstrip().startswith("#")]
    ids = {r["id"] for r in rows}
    other = {r["plan"][0]["text"] for r in rows if r.get("split", "train") != args.split and r.get("plan")}
    other |= {r["check"]["all"][0]["url"] for r in rows if r.get("split", "train") != args.split}
    titles = search_titles()
    for m in dict.fromkeys(args.modules):
        t = task(m, args.split, titles)
        if t["id"] in ids:
            raise SystemExit(f"{m}: {t['id']} is already in {args.tasks}")
        if m in other or t["check"]["all"][0]["url"] in other:
            raise SystemExit(f"{m}: the other split of {args.tasks} already searches for it or opens its page")
        sys.stdout.write(json.dumps(t, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
