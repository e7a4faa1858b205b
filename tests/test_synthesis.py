"""Tasks the site writes itself (rollout/synthesis.py): plans, instructions and checks from hand-made trajectories,
and verification by execution in real Chromium on a site the test serves (a random page's task is dropped, an
unrelated plan and doing nothing must fail a kept task's check)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rollout import synthesis
from rollout.envs.taskfile import load_tasks


# ---------------------------------------------------------------- pure parts
def test_common_suffix_is_the_tail_most_titles_share():
    titles = [
        "json — JSON encoder — Python 3.11 docs",
        "re — Regular expressions — Python 3.11 docs",
        "3.11 Documentation",
        "Glossary — Python 3.11 docs",
        "Glossary — Python 3.11 docs",
    ]
    assert synthesis.common_suffix(titles) == " — Python 3.11 docs"
    assert synthesis.page_name(titles[0], " — Python 3.11 docs") == "json — JSON encoder"
    assert synthesis.common_suffix(["Alpha", "Beta"]) == ""
    assert synthesis.common_suffix(["a — x", "b — y", "c — y"]) == " — y"  # 2 of 3
    assert synthesis.common_suffix(["a — x", "b — y", "c — z"]) == ""


def st(command, target=None, url="/index.html", error=None):
    return {"command": command, "command_name": command.split()[0], "target": target, "url": url, "error": error}


def test_plan_leaves_out_errors_and_text_typed_to_no_effect():
    box, go = {"role": "textbox", "name": "Quick search"}, {"role": "button", "name": "Go"}
    steps = [
        st("TYPE [6] [faqs]", box),  # typed, then a link clicked: no effect
        st("CLICK [9]", {"role": "link", "name": "Search"}),
        st("CLICK [99]", None, error={"kind": "NoSuchElement"}),
        st("TYPE [6] [json]", box, url="/search.html"),
        st("CLICK [7]", go, url="/search.html"),
        st("SELECT [3] [M]", {"role": "combobox", "name": "Size"}, url="/search.html?q=json"),
        st("STOP"),
    ]
    final = {"url": "/search.html?q=json", "observation": 'textbox "Quick search" value=""'}
    assert synthesis.plan_of(steps, final) == [
        {"do": "CLICK", "role": "link", "name": "Search"},
        {"do": "TYPE", "role": "textbox", "name": "Quick search", "text": "json"},  # the URL carries it
        {"do": "CLICK", "role": "button", "name": "Go"},
        {"do": "SELECT", "role": "combobox", "name": "Size", "option": "M"},
    ]
    assert synthesis.plan_of([st("CLICK [3]", {"role": "link", "name": " "})]) is None  # nothing to find it by


def test_instruction_and_check_from_the_final_page():
    plan = [
        {"do": "TYPE", "role": "textbox", "name": "Name", "text": "Ada"},
        {"do": "SELECT", "role": "combobox", "name": "Size", "option": "M"},
        {"do": "CLICK", "role": "checkbox", "name": "Gift wrap"},
        {"do": "CLICK", "role": "button", "name": "Place order"},
    ]
    assert synthesis.describe(plan, "/form.html", "/done.html?name=Ada", ("title", "Done")) == (
        "Enter [Ada] in “Name”, choose “M” in “Size”, tick “Gift wrap” and open the page “Done”."
    )
    assert synthesis.describe(plan[3:], "/form.html", "/form.html#top", ("title", "Order")) is None  # stayed put
    held = synthesis.held_values(plan[:1], '[4] textbox "Name" value="Ada"\n[5] button "Go"')
    assert held == [{"element": {"role": "textbox", "name": "Name"}, "form_value": "^Ada$"}]
    assert synthesis.describe(plan[:1], "/a.html", "/b.html", ("title", "B"), held) == (
        "Open the page “B” and enter [Ada] in “Name” there."
    )
    check = synthesis.derive_check("/done.html?name=Ada+L", "  Done\n", held)
    assert check == {
        "all": [
            {"url": r"^https?://[^/?#]+/done\.html\?name=Ada\+L(#.*)?$"},
            {"element": {"css": "title"}, "text": r"^\s*Done\s*$"},
            held[0],
        ]
    }
    assert synthesis.derive_check("http://h:1/x", "")["url"] == r"^http://h:1/x(#.*)?$"


def ep(task_id, steps, final, status="success"):
    return SimpleNamespace(task_id=task_id, steps=steps, summary={"status": status, "final": final})


def test_candidates_dedupe_name_the_drops_and_keep_out_held_out_pages(tmp_path):
    link = lambda n: st("CLICK [1]", {"role": "link", "name": n})  # noqa: E731
    eps = [
        ep("e", [link("Alpha"), st("STOP")], {"url": "/alpha.html", "title": "Alpha — Site"}),
        ep("e", [link("Home"), link("Alpha"), st("STOP")], {"url": "/alpha.html", "title": "Alpha — Site"}),
        ep("e", [link("Beta"), st("STOP")], {"url": "/beta.html", "title": "Beta — Site"}),
        ep("e", [st("STOP")], {"url": "/index.html", "title": "Home — Site"}),
        ep("e", [link("Home")], {"url": "/index.html", "title": "Home — Site"}),
        ep("e", [link("Alpha")], None, status="errored"),
    ]
    held = tmp_path / "held.jsonl"
    held.write_text(
        json.dumps(
            {
                "id": "h",
                "start_url": "http://127.0.0.1:9/",
                "instruction": "Open [beta].",
                "split": "test",
                "check": {"url": r"/beta\.html$"},
            }
        )
        + "\n"
    )
    tasks, why = synthesis.candidates(eps, {"e": "/index.html"}, held_out=load_tasks(str(held)))
    assert [(t["id"], t["instruction"], len(t["plan"])) for t in tasks] == [
        ("synth/0000", "Open the page “Alpha”.", 2)
    ]  # the shorter of the two ways there
    assert why == {"duplicate": 1, "overlaps a held-out task": 1, "no action": 1, "nothing achieved": 1, "errored": 1}
    pairs = synthesis.unrelated_pairs([{"id": "a", "check": 1}, {"id": "b", "check": 1}, {"id": "c", "check": 2}])
    assert [(a["id"], b["id"]) for a, b in pairs] == [("a", "c"), ("b", "c"), ("c", "a")]


def wiki_page(url, *lines, title="start [Wiki]"):
    """A recorded state of a wiki whose pages all share one title and a banner heading (DokuWiki's default)."""
    obs = "\n".join(
        [
            'heading "My Wiki"',
            '  [1] link "Recent Changes"',
            '  [2] link "Sitemap"',
            '  [3] textbox "Search" value=""',
            '  [4] button "Search"',
            *lines,
        ]
    )
    return {"url": url, "title": title, "observation": obs}


def wiki_ep(steps, final):
    return ep("w", [dict(steps[0], **wiki_page("/doku.php?id=start", 'heading "Welcome"'))] + steps[1:], final)


def test_a_page_is_named_by_what_sets_it_apart_not_the_title_the_site_shares():
    """Five pages titled "start [Wiki]" (the site's start page's title): each is named by its first heading that
    no other page shows, else its first such text line's first words, else its URL less session parameters; a
    title of its own still names a page. A heading that names the page is in its check."""
    link = lambda n: st("CLICK [5]", {"role": "link", "name": n}, url="/doku.php?id=start")  # noqa: E731
    eps = [
        wiki_ep(
            [link("Recent Changes"), st("STOP")],
            wiki_page("/doku.php?id=start&do=recent", 'heading "Recent Changes"', 'text "Last edits"'),
        ),
        wiki_ep([link("Sitemap"), st("STOP")], wiki_page("/doku.php?id=start&do=index", 'heading "Sitemap"')),
        wiki_ep(
            [link("Media"), st("STOP")],
            wiki_page(
                "/doku.php?id=start&do=media&sectok=",
                'text "Media Manager: choose a namespace on the left, then a file to see it"',
            ),
        ),
        wiki_ep([link("Login"), st("STOP")], wiki_page("/doku.php?id=start&do=login&sectok=")),
        wiki_ep(
            [link("Syntax"), st("STOP")],
            wiki_page("/doku.php?id=wiki:syntax", 'heading "Formatting Syntax"', title="wiki:syntax [Wiki]"),
        ),
    ]
    tasks, why = synthesis.candidates(eps, {"w": "/doku.php?id=start"})
    assert why == {}
    by_url = {t["final_url"]: t for t in tasks}
    assert {u: t["instruction"] for u, t in by_url.items()} == {
        "/doku.php?id=start&do=recent": "Open the page “Recent Changes”.",
        "/doku.php?id=start&do=index": "Open the page “Sitemap”.",
        "/doku.php?id=start&do=media&sectok=": "Open the page that shows “Media Manager: choose a namespace on the "
        "left …”.",
        "/doku.php?id=start&do=login&sectok=": "Open the page at “/doku.php?id=start&do=login”.",
        "/doku.php?id=wiki:syntax": "Open the page “wiki:syntax [Wiki]”.",
    }
    assert by_url["/doku.php?id=start&do=index"]["check"] == {
        "all": [
            {"url": r"^https?://[^/?#]+/doku\.php\?id=start\&do=index(#.*)?$"},
            {"element": {"css": "title"}, "text": r"^\s*start\ \[Wiki\]\s*$"},
            {"element": {"role": "heading", "name": "Sitemap"}},
        ]
    }
    assert len(by_url["/doku.php?id=wiki:syntax"]["check"]["all"]) == 2  # named by its title: no heading leaf
    site = synthesis.site_text([e.summary["final"] for e in eps] + [e.steps[0] for e in eps])
    assert site.titles == {"start [Wiki]"} and "My Wiki" in site.lines and "Sitemap" not in site.lines
    # a heading clipped by the observation's name cap is matched by its start
    assert synthesis.derive_check("/x", "", heading="A long heading…")["all"][1] == {
        "element": {"role": "heading", "name_regex": r"^A\ long\ heading"}
    }


def test_text_typed_that_the_check_does_not_depend_on_is_left_out():
    """The explorer types a word of the page's links into the search box, then clicks a link: the final page shows
    the word (its links), but the check tests neither the URL's nor a field's text with it, so the TYPE is in
    neither the plan nor the instruction. A search that the URL carries, and a value that a field holds, stay."""
    box = {"role": "textbox", "name": "Search"}
    start = "/doku.php?id=start"
    typed_then_link = wiki_ep(
        [
            st("TYPE [3] [Sitemap]", box, url=start),
            st("CLICK [1]", {"role": "link", "name": "Recent Changes"}, url=start),
            st("STOP"),
        ],
        wiki_page("/doku.php?id=start&do=recent", 'heading "Recent Changes"'),
    )
    search = wiki_ep(
        [
            st("TYPE [3] [syntax]", box, url=start),
            st("CLICK [4]", {"role": "button", "name": "Search"}, url=start),
            st("STOP"),
        ],
        wiki_page("/doku.php?id=start&do=search&q=syntax&sectok=f00d", 'heading "Search"'),
    )
    tasks, why = synthesis.candidates([typed_then_link, search], {"w": start})
    assert why == {}
    assert [(t["instruction"], t["plan"]) for t in tasks] == [
        (
            "Enter [syntax] in “Search” and open the page “Search”.",
            [
                {"do": "TYPE", "role": "textbox", "name": "Search", "text": "syntax"},
                {"do": "CLICK", "role": "button", "name": "Search"},
                {"do": "STOP"},
            ],
        ),
        (
            "Open the page “Recent Changes”.",
            [{"do": "CLICK", "role": "link", "name": "Recent Changes"}, {"do": "STOP"}],
        ),
    ]
    plan = [
        {"do": "TYPE", "role": "textbox", "name": "Name", "text": "Ada Lovelace"},
        {"do": "TYPE", "role": "textbox", "name": "Note", "text": "gift"},
        {"do": "TYPE", "role": "textbox", "name": "City", "text": "Paris"},
        {"do": "CLICK", "role": "button", "name": "Send"},
    ]
    held = [{"element": {"role": "textbox", "name": "City"}, "form_value": "^Paris$"}]
    assert synthesis.checked_typing(plan, ["/done.html?name=ada lovelace", "Done"], held) == plan[:1] + plan[2:]
    # typed to no effect on a page it did not leave: nothing achieved
    stay = wiki_ep([st("TYPE [3] [Sitemap]", box, url=start), st("STOP")], wiki_page(start, 'heading "Welcome"'))
    assert synthesis.candidates([stay], {"w": start})[1] == {"nothing achieved": 1}


def test_checks_keep_no_session_or_csrf_parameters():
    """The URL check leaves session, CSRF and tracking parameters out (rollout/urls.py's list, which state identity
    drops too) and accepts them with any value anywhere among the kept parameters; without them the pattern is the
    plain URL."""
    import re

    from rollout.urls import normalize_url

    check = synthesis.derive_check("http://h:1/doku.php?id=start&sectok=f00d&do=search&q=a+b&utm_source=x", "")
    pattern = check["url"]
    assert "f00d" not in json.dumps(check) and "utm_source=x" not in pattern
    for url in (
        "http://h:1/doku.php?id=start&do=search&q=a+b",
        "http://h:1/doku.php?id=start&sectok=9&do=search&q=a+b",
        "http://h:1/doku.php?SECTOK=&id=start&do=search&csrf_token=z&q=a+b#top",
        "http://h:1/doku.php?id=start&do=search&q=a+b&sid=1&nonce=2",
    ):
        assert re.search(pattern, url), url
    for url in (
        "http://h:1/doku.php?id=start&do=search&q=other",
        "http://h:1/doku.php?id=start&do=search&q=a+b&rev=3",
        "http://h:1/doku.php?id=start&q=a+b&do=search",
        "http://h:2/doku.php?id=start&do=search&q=a+b",
    ):
        assert not re.search(pattern, url), url
    only = synthesis.derive_check("/logout?token=abc&_csrf=d", "")["url"]
    assert all(re.search(only, "http://s" + u) for u in ("/logout", "/logout?token=zz", "/logout?_csrf=1&token=2"))
    assert not re.search(only, "http://s/logout?next=/")
    jsession = synthesis.derive_check("http://h/shop;jsessionid=A1B2/item?id=3", "")["url"]
    assert "A1B2" not in jsession and re.search(jsession, "http://h/shop;jsessionid=Z9/item?id=3")
    assert re.search(jsession, "http://h/shop/item?id=3") and not re.search(jsession, "http://h/shop/item?id=4")
    assert synthesis.derive_check("/a.html?q=x", "")["url"] == r"^https?://[^/?#]+/a\.html\?q=x(#.*)?$"
    assert normalize_url("http://h/doku.php?sectok=1&id=start&authenticity_token=2") == "http://h/doku.php?id=start"
    # a page that differs from the start only by its session is where it started
    plan = [{"do": "CLICK", "role": "link", "name": "Home"}]
    assert synthesis.describe(plan, "/doku.php?id=start", "/doku.php?id=start&sectok=ab", ("title", "x")) is None


# ---------------------------------------------------------------- verification in the browser
# the start page's title and banner heading: the page is named by its own heading, which its check then asks for
NEWS = "<title>Mini docs</title><h1>Mini docs</h1><h2>Latest news</h2><a href='index.html'>Home</a>"
RANDOM = (
    "<title>x</title><h1>Lucky</h1><a href='index.html'>Home</a>"
    "<script>document.title = 'Lucky ' + Math.random()</script>"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("playwright")
    from test_taskfile import SITE, serve_pages

    pages = dict(SITE, **{"random.html": RANDOM, "news.html": NEWS})
    pages["index.html"] += " <a href='random.html'>Lucky</a> <a href='news.html'>News</a>"
    yield from serve_pages(tmp_path_factory.mktemp("site"), pages)


@pytest.mark.slow  # four collections in real Chromium
def test_synthesized_tasks_are_verified_by_execution(site, tmp_path):
    """Scripted trajectories → tasks; the random page's task fails its replay, a loose check passes an unrelated
    plan and doing nothing; the kept task file loads and its tasks' oracle succeeds; a page with the start page's
    title is named by its own heading, and its check's heading leaf holds in Chromium."""
    from rollout.collect import CollectConfig, collect
    from rollout.envs.taskfile import TaskFileEnv
    from rollout.harness.runner import HarnessConfig
    from rollout.policies.scripted import ScriptedPolicy
    from test_taskfile import write

    def by(role, name):
        return lambda o: o.find(role=role, name=name)[0].id

    def click(role, name):
        return lambda o: f"CLICK [{by(role, name)(o)}]"

    starts = {
        "index": "/index.html",
        "form": "/form.html",
        "fill": "/form.html",
        "lucky": "/index.html",
        "news": "/index.html",
    }
    rows = [{"id": k, "start_url": u, "instruction": "Explore.", "check": {"url": "."}} for k, u in starts.items()]
    env = TaskFileEnv(write(tmp_path / "explore.jsonl", rows), site)
    script = {
        "index": [click("link", "Alpha"), "STOP"],
        "form": [
            lambda o: f"TYPE [{by('textbox', 'Name')(o)}] [Ada Lovelace]",
            lambda o: f"SELECT [{by('combobox', 'Size')(o)}] [M]",
            click("checkbox", "Gift wrap"),
            click("button", "Place order"),
            "STOP",
        ],
        "fill": [lambda o: f"TYPE [{by('textbox', 'Name')(o)}] [Bob]", "STOP"],
        "lucky": [click("link", "Lucky"), "STOP"],
        "news": [click("link", "News"), "STOP"],
    }
    eps_dir = str(tmp_path / "eps")
    collect(
        env,
        env.tasks("train"),
        ScriptedPolicy(script),
        CollectConfig(
            out_dir=eps_dir, runs=1, progress=False, contexts=2, harness=HarnessConfig(screenshots=False, max_steps=6)
        ),
    )
    cfg = synthesis.SynthConfig(work_dir=str(tmp_path / "work"), contexts=2, progress=False)
    out = str(tmp_path / "synth.jsonl")
    counts = synthesis.synthesize([], site, out, cfg, episodes_dir=eps_dir, start_of=starts)
    assert counts | {"out": None} == {
        "episodes": 5,
        "dropped": {},
        "candidates": 5,
        "replay_passed": 4,
        "unrelated_failed": 5,
        "nothing_failed": 5,
        "kept": 4,
        "out": None,
    }
    kept = load_tasks(out, site)
    assert sorted(t.instruction for t in kept) == [
        "Enter [Ada Lovelace] in “Name”, choose “M” in “Size”, tick “Gift wrap” and open the page “Done”.",
        "Enter [Bob] in “Name”.",  # the field holds it: the check asks for its value
        "Open the page “Alpha”.",
        "Open the page “Latest news”.",
    ]
    news = next(t for t in kept if "news" in t.instruction)
    assert {"element": {"role": "heading", "name": "Latest news"}} in news.goal["check"]["all"]
    assert all(t.family == "synth" and t.split == "train" and t.optimal_steps == len(t.goal["plan"]) for t in kept)
    # a loose check: an unrelated plan and doing nothing both pass it, so it is not a task
    loose = [dict(t, check={"url": "."}, id="loose/" + t["id"]) for t in (json.loads(line) for line in open(out))]
    kept2, counts2 = synthesis.verify(
        loose[:2], site, synthesis.SynthConfig(work_dir=str(tmp_path / "w2"), contexts=2, progress=False)
    )
    assert kept2 == [] and counts2["replay_passed"] == 2 and counts2["unrelated_failed"] == 0
    assert counts2["nothing_failed"] == 0


@pytest.mark.slow  # two exploration runs of the test site in real Chromium
def test_explorer_is_seeded_and_stays_in_the_grammar(site, tmp_path):
    eps = []
    for k in range(2):
        cfg = synthesis.SynthConfig(
            work_dir=str(tmp_path / f"x{k}"), runs=4, max_steps=5, contexts=2, progress=False, seed=3
        )
        got, start_of = synthesis.explore(["/index.html", "/form.html"], site, cfg)
        eps.append({(e.task_id, e.summary["run"]): [s["command"] for s in e.steps] for e in got})
    assert eps[0] == eps[1] and len(eps[0]) == 8
    steps = [c for cmds in eps[0].values() for c in cmds]
    assert all(c is not None for c in steps) and any(c.startswith("CLICK") for c in steps)
    assert start_of == {"explore/0": "/index.html", "explore/1": "/form.html"}


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "nothing to explore from"),
        (["--episodes=/nonexistent"], "--episodes needs the --tasks file"),
    ],
)
def test_cli_refuses_what_it_cannot_do(tmp_path, args, message):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [sys.executable, "-m", "launch.synthesize_tasks", f"--out={tmp_path}/t.jsonl", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and message in r.stderr, r.stderr[-2000:]
    assert not os.path.exists(tmp_path / "t.jsonl")
