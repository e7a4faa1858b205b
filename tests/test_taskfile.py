"""The task-file environment: a JSONL file of tasks on a site the test serves itself (static pages, an iframe, a form,
a JSON endpoint), checks evaluated on the live page in real Chromium, bad files named by line and field, and the
plan-following oracle through the real harness: success where the plan does the task, failure where it does not."""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import os
import random
import socket
import subprocess
import sys
import threading

import pytest

pytest.importorskip("playwright")

from rollout import browser_path  # noqa: E402
from rollout.collect import CollectConfig, collect  # noqa: E402
from rollout.core import Element, Observation  # noqa: E402
from rollout.envs import checks  # noqa: E402
from rollout.envs.taskfile import TaskFileEnv, TaskFileError, load_tasks, parse_task  # noqa: E402
from rollout.harness.runner import HarnessConfig  # noqa: E402
from rollout.policies.oracle import OracleNoise, OraclePolicy  # noqa: E402
from rollout.recording import iter_episodes  # noqa: E402

SITE = {
    "index.html": "<title>Mini docs</title><h1>Mini docs</h1><a href='alpha.html'>Alpha</a> "
    "<a href='beta.html'>Beta</a> <a href='form.html'>Order form</a>",
    "alpha.html": "<title>Alpha</title><h1>Alpha page</h1><p id='status' data-state='ready'>Alpha is the first "
    "letter.</p><iframe src='frame.html' title='inner'></iframe> <a href='index.html'>Home</a>",
    "frame.html": "<button>Inner button</button><span class='note'>framed text 42</span>",
    "beta.html": "<title>Beta</title><h1>Beta page</h1><a href='index.html'>Home</a>",
    "form.html": "<title>Order</title><form action='done.html' method='get'><input name='name' aria-label='Name'> "
    "<select name='size' aria-label='Size'><option>S</option><option>M</option><option>L</option>"
    "</select> <label><input type='checkbox' name='gift'> Gift wrap</label> "
    "<button type='submit'>Place order</button></form>",
    "done.html": "<title>Done</title><h1>Thank you</h1><p id='msg'></p><script>document.getElementById('msg')"
    ".textContent = 'Order for ' + new URLSearchParams(location.search).get('name');</script>",
    "data.json": json.dumps({"items": [{"name": "alpha"}, {"name": "beta"}], "count": 2}),
}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve_pages(root, pages: dict):
    """Write ``pages`` (name -> body; .json files as they are) into ``root`` and serve it on loopback: yields the
    origin, then stops the server (a fixture's body)."""
    for name, body in pages.items():
        (root / name).write_text(body if name.endswith(".json") else f"<!doctype html><html><body>{body}</body></html>")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    yield from serve_pages(tmp_path_factory.mktemp("site"), SITE)


def tasks_of(origin: str) -> list[dict]:
    start = origin + "/index.html"
    return [
        {
            "id": "alpha",
            "start_url": start,
            "instruction": "Open the Alpha page.",
            "family": "open",
            "check": {
                "all": [
                    {"url": r"/alpha\.html$"},
                    {"element": {"css": "#status"}, "attribute": "data-state", "value": "^ready$"},
                    {"element": {"role": "button", "name": "Inner button"}},
                ]
            },  # inside the iframe
            "plan": [{"do": "CLICK", "role": "link", "name": "Alpha"}, {"do": "STOP"}],
        },
        {
            "id": "beta",
            "start_url": start,
            "instruction": "Open the Beta page.",
            "family": "open",
            "split": "test",
            "check": {"element": {"role": "heading", "name": "Beta page"}},
            "plan": [{"do": "CLICK", "role": "link", "name": "Beta"}, {"do": "STOP"}],
        },
        {
            "id": "order",
            "start_url": start,
            "family": "form",
            "instruction": "Order size M for [Ada Lovelace] with gift wrap.",
            "check": {
                "all": [
                    {"url": r"/done\.html\?"},
                    {"element": {"css": "#msg"}, "text": "^Order for Ada Lovelace$"},
                    {"url": "size=M"},
                    {"url": "gift=on"},
                ]
            },
            "plan": [
                {"do": "CLICK", "role": "link", "name": "Order form"},
                {"do": "TYPE", "role": "textbox", "name": "Name", "text": "Ada Lovelace"},
                {"do": "SELECT", "role": "combobox", "name": "Size", "option": "M"},
                {"do": "CLICK", "role": "checkbox", "name": "Gift wrap"},
                {"do": "CLICK", "role": "button", "name": "Place order"},
                {"do": "STOP"},
            ],
        },
        # the plan opens the wrong page: the oracle follows it and the check fails
        {
            "id": "wrong",
            "start_url": start,
            "instruction": "Open the Alpha page.",
            "family": "open",
            "check": {"url": r"/alpha\.html$"},
            "plan": [{"do": "CLICK", "role": "link", "name": "Beta"}, {"do": "STOP"}],
        },
    ]


def write(path, rows) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


# ---------------------------------------------------------------- the file: every bad part named
GOOD = {"id": "t", "start_url": "http://127.0.0.1:9/", "instruction": "x", "check": {"url": "x"}}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"check": {"elemnt": {"css": "a"}}}, "unknown check kind(s) ['elemnt']"),
        ({"check": {"all": [{"url": "("}]}}, "check.all[0].url: bad regular expression"),
        ({"check": {"element": {"role": "buton", "name": "Go"}}}, "'buton' is not a WAI-ARIA role"),
        ({"check": {"element": {"css": "a"}, "text": "x", "checked": True}}, "one test per element leaf"),
        ({"check": {"element": {"css": "a"}, "value": "x"}}, "value goes with attribute"),
        ({"check": {"json": "data.json", "path": "a"}}, "exactly one of equals / matches"),
        ({"check": {"json": "http://example.com/x.json", "equals": 1}}, "outside allow_origins"),
        ({"check": {"not": {"url": "a"}, "any": []}}, "unexpected key(s)"),
        ({"check": {"any": []}}, "check.any: expected a non-empty list"),
        ({"chek": {}}, "unknown field(s) ['chek']"),
        ({"start_url": "file:///etc/passwd"}, "is not an http(s) URL"),
        ({"split": "dev"}, "split must be 'train' or 'test'"),
        ({"plan": [{"do": "CLICK", "name": "Go"}]}, "plan[0]: CLICK needs the element's role and name"),
        ({"plan": [{"do": "TYPE", "role": "textbox", "name": "q"}]}, "plan[0]: TYPE needs ['text']"),
        ({"plan": [{"do": "PRESS"}]}, 'plan[0]: expected {"do": one of'),
        ({"plan": [{"do": "GOTO", "url": "http://example.com/"}]}, "outside allow_origins"),
        ({"optimal_steps": -1}, "optimal_steps must be a non-negative integer"),
    ],
)
def test_bad_task_is_named_by_field(change, message):
    with pytest.raises(TaskFileError) as e:
        parse_task({**GOOD, **change}, "f.jsonl:3")
    assert "f.jsonl:3" in str(e.value) and message in str(e.value), str(e.value)


def test_file_errors_name_the_line(tmp_path):
    f = write(tmp_path / "t.jsonl", ["# comment", "", json.dumps(GOOD), json.dumps(GOOD)])
    with pytest.raises(TaskFileError, match=r"t.jsonl:4: duplicate id 't' \(first on line 3\)"):
        load_tasks(f)
    with pytest.raises(TaskFileError, match=r"t.jsonl:2: not valid JSON"):
        load_tasks(write(tmp_path / "t.jsonl", [json.dumps(GOOD), "{oops"]))
    with pytest.raises(TaskFileError, match="missing required field"):
        load_tasks(write(tmp_path / "t.jsonl", [json.dumps({"id": "a", "start_url": "http://h/"})]))
    with pytest.raises(TaskFileError, match="holds no tasks"):
        load_tasks(write(tmp_path / "t.jsonl", ["# only a comment"]))
    with pytest.raises(TaskFileError, match="does not exist"):
        load_tasks(str(tmp_path / "none.jsonl"))


def test_task_fields_defaults_and_round_trip(tmp_path):
    rows = [
        GOOD | {"plan": [{"do": "CLICK", "role": "link", "name": "a"}, {"do": "STOP", "answer": "42"}]},
        GOOD
        | {"id": "u", "split": "test", "family": "f", "optimal_steps": 5, "allow_origins": ["http://127.0.0.1:10"]},
    ]
    env = TaskFileEnv(write(tmp_path / "t.jsonl", rows))
    (t,), (u,) = env.tasks("train"), env.tasks("test")
    assert (t.env, t.family, t.optimal_steps, t.split) == ("tasks", "tasks", 2, "train")  # the plan's length
    assert (u.family, u.optimal_steps) == ("f", 5)
    assert env.allowed_origins(t) == ("http://127.0.0.1:9",)
    assert env.allowed_origins(u) == ("http://127.0.0.1:10", "http://127.0.0.1:9")
    assert env.origin == "http://127.0.0.1:9"
    assert type(t).from_json(json.loads(json.dumps(t.to_json()))) == t


def test_combine_and_json_path():
    c = checks.parse_check({"all": [{"url": "a"}, {"any": [{"url": "b"}, {"not": {"url": "c"}}]}, {"url": "d"}]})
    assert [leaf.pattern for leaf in checks.leaves(c)] == ["a", "b", "c", "d"]
    # a and (b or not c) and d, every combination against a direct reading (a leaf that a short-circuit would skip
    # is still consumed, so d's value lands on d)
    for bits in range(16):
        v = [bool(bits >> i & 1) for i in range(4)]
        assert checks.combine(c, v) == (v[0] and (v[1] or not v[2]) and v[3]), v
    data = {"items": [{"name": "alpha"}, {"name": "beta"}], "count": 2}
    assert checks.json_at(data, ("items", "1", "name")) == (True, "beta")
    assert checks.json_at(data, ("items", "-1", "name")) == (True, "beta")
    assert checks.json_at(data, ("items", "2")) == (False, None)
    assert checks.json_at(data, ("count", "x")) == (False, None)


def test_plan_oracle_goes_back_when_lost_and_mistakes_pick_another():
    env_rows = [
        GOOD
        | {
            "plan": [
                {"do": "CLICK", "role": "link", "name": "Alpha"},
                {"do": "SELECT", "role": "combobox", "name": "Size", "option": "M"},
                {"do": "STOP"},
            ]
        }
    ]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        env = TaskFileEnv(write(os.path.join(d, "t.jsonl"), env_rows))
    task = env.tasks("train")[0]
    home = Observation("u", "t", "", (Element("1", "link", "Alpha"), Element("2", "link", "Beta")))
    form = Observation("u", "t", "", (Element("5", "combobox", "Size", value="S", options=("S", "M", "L")),))
    memory: dict = {}
    rng = random.Random(0)
    assert env.mistake(task, home, memory, rng).render() == "CLICK [2]"  # the other link; the plan stays put
    assert env.oracle(task, form, memory).render() == "GO_BACK"  # the plan's link is not on this page
    assert env.oracle(task, home, memory).render() == "CLICK [1]"
    wrong = env.mistake(task, form, memory, rng)
    assert wrong.name == "SELECT" and wrong.id == "5" and wrong.arg in ("S", "L")  # kept: the plan moves on
    assert env.oracle(task, form, memory).render() == "STOP []"
    lost: dict = {}
    assert [env.oracle(task, form, lost).render() for _ in range(5)] == ["GO_BACK"] * 3 + ["STOP []"] * 2


def test_plan_oracle_resumes_from_the_steps_this_page_offers(tmp_path):
    plan = [
        {"do": "TYPE", "role": "textbox", "name": "q", "text": "json"},
        {"do": "CLICK", "role": "button", "name": "Go"},
        {"do": "CLICK", "role": "link", "name": "json docs"},
        {"do": "STOP"},
    ]
    env = TaskFileEnv(write(tmp_path / "t.jsonl", [GOOD | {"plan": plan}]))
    task = env.tasks("train")[0]
    form = Observation("u", "t", "", (Element("3", "textbox", "q"), Element("4", "button", "Go")))
    other = Observation("u", "t", "", (Element("9", "link", "About"),))
    memory = {"at": 2, "best": 2}  # typed and searched, then went back to the form: the results link is not here
    assert [env.oracle(task, form, memory).render() for _ in range(2)] == ["TYPE [3] [json]", "CLICK [4]"]
    assert env.oracle(task, other, memory).render() == "GO_BACK"  # nothing of the plan on this page
    # a search that never shows the link: type, search, miss, ... until the misses since the furthest step run out
    lost = {"at": 2, "best": 2}
    assert [env.oracle(task, form, lost).render() for _ in range(8)] == ["TYPE [3] [json]", "CLICK [4]"] * 3 + [
        "STOP []"
    ] * 2


# ---------------------------------------------------------------- checks on the live page
def _evaluate_all(origin):
    from playwright.async_api import async_playwright

    async def go():
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path=browser_path.chromium_executable(), args=list(browser_path.CHROMIUM_ARGS)
            )
            page = await browser.new_page()
            got = {}

            async def ev(name, spec):
                got[name] = await checks.evaluate(checks.parse_check(spec, origin + "/index.html"), page)

            await page.goto(origin + "/alpha.html")
            await page.wait_for_load_state("load")
            await ev("iframe", {"element": {"role": "button", "name": "Inner button"}})
            await ev("iframe_css_text", {"element": {"css": ".note"}, "text": r"text \d+"})
            await ev(
                "attr",
                {
                    "all": [
                        {"element": {"css": "#status"}, "attribute": "data-state", "value": "^ready$"},
                        {"element": {"css": "#status"}, "attribute": "data-x"},
                    ]
                },
            )
            await ev("heading_regex", {"element": {"role": "heading", "name_regex": "^Alpha"}})
            await ev("url_not", {"any": [{"url": "beta"}, {"not": {"url": "alpha"}}]})
            await ev(
                "json",
                {
                    "all": [
                        {"json": "data.json", "path": "items.1.name", "equals": "beta"},
                        {"json": "data.json", "path": "count", "matches": "^3$"},
                        {"json": "missing.json", "path": "", "equals": None},
                    ]
                },
            )
            await page.goto(origin + "/form.html")
            await ev(
                "form_before",
                {
                    "all": [
                        {"element": {"role": "textbox", "name": "Name"}, "form_value": "Ada"},
                        {"element": {"role": "checkbox", "name": "Gift wrap"}, "checked": True},
                    ]
                },
            )
            await page.get_by_role("textbox", name="Name").fill("Ada")
            await page.get_by_role("checkbox", name="Gift wrap").check()
            await page.get_by_role("combobox", name="Size").select_option("L")
            await ev(
                "form_after",
                {
                    "all": [
                        {"element": {"role": "textbox", "name": "Name"}, "form_value": "^Ada$"},
                        {"element": {"role": "checkbox", "name": "Gift wrap"}, "checked": True},
                        {"element": {"css": "select"}, "form_value": "^L$"},
                    ]
                },
            )
            await browser.close()
            return got

    return asyncio.run(go())


def test_checks_on_the_live_page(site):
    got = _evaluate_all(site)
    assert got["iframe"] == (True, [True])  # found in the child frame only
    assert got["iframe_css_text"] == (True, [True])
    assert got["attr"] == (False, [True, False])
    assert got["heading_regex"] == (True, [True])
    assert got["url_not"] == (False, [False, True])
    assert got["json"] == (False, [True, False, False])  # count is 2; a 404 is not met, not an error
    assert got["form_before"] == (False, [False, False])
    assert got["form_after"] == (True, [True, True, True])


def test_start_checks_the_site_and_the_selectors_before_any_episode(site, tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    env = TaskFileEnv(write(tmp_path / "a.jsonl", [GOOD | {"start_url": f"http://127.0.0.1:{port}/"}]))
    with pytest.raises(TaskFileError, match=f"not reachable.*127.0.0.1:{port}"):
        env.start()
    env = TaskFileEnv(write(tmp_path / "b.jsonl", [GOOD | {"start_url": site + "/nope.html"}]))
    with pytest.raises(TaskFileError, match="HTTP 404"):
        env.start()
    env = TaskFileEnv(
        write(tmp_path / "c.jsonl", [GOOD | {"start_url": site + "/index.html", "check": {"element": {"css": "div["}}}])
    )
    with pytest.raises(TaskFileError, match=r"bad CSS selector.*'div\['"):
        env.start()
    env = TaskFileEnv(write(tmp_path / "d.jsonl", tasks_of(site)))
    assert env.start() == site


# ---------------------------------------------------------------- through the harness
def test_oracle_follows_plans_through_the_harness(site, tmp_path):
    env = TaskFileEnv(write(tmp_path / "t.jsonl", tasks_of(site)))
    env.start()
    tasks = env.tasks("train") + env.tasks("test")
    cfg = CollectConfig(
        out_dir=str(tmp_path / "eps"),
        runs=1,
        progress=False,
        contexts=2,
        harness=HarnessConfig(screenshots=False, max_steps=10),
    )
    counts = collect(env, tasks, OraclePolicy(env, OracleNoise()), cfg)
    assert counts["total"] == 4 and counts["success"] == 3, counts
    eps = {e.summary["task_id"]: e for e in iter_episodes(str(tmp_path / "eps"))}
    assert {k for k, e in eps.items() if e.summary["success"]} == {"alpha", "beta", "order"}
    assert eps["wrong"].summary["score"] == 0.0 and eps["wrong"].summary["end_reason"] == "stop"
    order = eps["order"]
    assert [s["command_name"] for s in order.steps] == ["CLICK", "TYPE", "SELECT", "CLICK", "CLICK", "STOP"]
    # partial progress: the leaves that held before the order was placed, then all four
    assert [s["check"]["progress"] for s in order.steps] == ["0000"] * 5 + ["1111"]
    assert order.summary["final"]["url"].startswith("/done.html?")  # site-relative, as the shop's are


def test_pipeline_reads_the_task_file(site, tmp_path):
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline

    c = get_config("tiny")
    c.env.update(name="tasks", tasks=write(tmp_path / "mine.jsonl", tasks_of(site)))
    c.tasks.families = ()
    p = Pipeline(c, progress=False)
    try:
        assert [t.task_id for t in p.tasks("train")] == ["alpha", "order", "wrong"][: c.tasks.num_train]
        assert [t.task_id for t in p.tasks("test")] == ["beta"]
        assert p.cfg.title == "tgpo-jax: TGPO on mine.jsonl"
    finally:
        p.close()
    c.env.tasks = ""
    with pytest.raises(ValueError, match="env.name='tasks' needs env.tasks"):
        Pipeline(c, progress=False)


def test_stop_answers_are_checked_against_the_page(site, tmp_path):
    start = site + "/alpha.html"
    rows = [
        {
            "id": f"ask-{i}",
            "start_url": start,
            "instruction": "What does the framed note say?",
            "check": check,
            "plan": [{"do": "STOP", "answer": answer}],
        }
        for i, (answer, check) in enumerate(
            [
                ("Framed  text 42", {"answer_from": {"css": ".note"}}),  # in the iframe; spaces and case ignored
                ("framed text 41", {"answer_from": {"css": ".note"}}),
                ("42", {"all": [{"answer": "^42$"}, {"element": {"css": "#status"}}]}),
                ("", {"answer": "^42$"}),
            ]
        )
    ]
    env = TaskFileEnv(write(tmp_path / "t.jsonl", rows))
    env.start()
    cfg = CollectConfig(
        out_dir=str(tmp_path / "eps"), runs=1, progress=False, harness=HarnessConfig(screenshots=False, max_steps=3)
    )
    collect(env, env.tasks("train"), OraclePolicy(env, OracleNoise()), cfg)
    eps = {e.summary["task_id"]: e for e in iter_episodes(str(tmp_path / "eps"))}
    assert {k: (e.summary["success"], e.summary["final"]["check"]["progress"]) for k, e in eps.items()} == {
        "ask-0": (True, "1"),
        "ask-1": (False, "0"),
        "ask-2": (True, "11"),
        "ask-3": (False, "0"),
    }
    # the state STOP was given at, checked before the answer existed: the answer leaves were false there
    assert [eps[k].steps[0]["check"]["progress"] for k in ("ask-0", "ask-2")] == ["0", "01"]
    with pytest.raises(TaskFileError, match="answer_from.role"):
        parse_task(GOOD | {"check": {"answer_from": {"role": "nope"}}}, "f:1")


@pytest.mark.slow  # subprocess with JAX imports and a browser: the slow tier
def test_collect_cli_on_a_task_file(site, tmp_path):
    f = write(tmp_path / "t.jsonl", tasks_of(site))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cli = [
        sys.executable,
        "-m",
        "launch.collect",
        "--env=tasks",
        f"--tasks={f}",
        "--runs=3",
        "--noscreenshots",
        "--wrong_choice=0.3",
        "--loop=0",
        "--malformed=0",
        "--premature_stop=0",
        f"--out={tmp_path / 'eps'}",
    ]
    r = subprocess.run(cli, capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = json.loads(r.stdout[r.stdout.index("{") :])
    assert counts["total"] == 9, counts  # the three training tasks × 3 runs
    bad = subprocess.run(
        cli[:4] + [f"--tasks={write(tmp_path / 'b.jsonl', ['{oops'])}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    assert bad.returncode != 0 and "b.jsonl:1: not valid JSON" in bad.stderr


# ---------------------------------------------------------------- the worked example (docs/tasks.md)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDOCS = os.path.join(REPO, "data", "sites", "pydocs")  # scripts/setup.sh unpacks Debian's python3.11-doc here
PYDOCS_TASKS = os.path.join(REPO, "docs", "pydocs_tasks.jsonl")


def test_worked_example_file_is_html_checks_in_both_splits():
    env = TaskFileEnv(PYDOCS_TASKS, origin="http://127.0.0.1:1")
    train, test = env.tasks("train"), env.tasks("test")
    assert len(train) == 45 and len(test) == 20
    # held-out tasks share neither a query nor a target page with the training ones
    query = lambda t: t.goal["plan"][0]["text"]  # noqa: E731
    page = lambda t: t.goal["check"]["all"][0]["url"]  # noqa: E731
    assert not {query(t) for t in train} & {query(t) for t in test}
    assert not {page(t) for t in train} & {page(t) for t in test}
    for t in train + test:
        kinds = {type(leaf) for leaf in checks.leaves(env._check(t))}
        assert checks.ElementLeaf in kinds and kinds <= {checks.ElementLeaf, checks.UrlLeaf}, t.task_id
        assert t.start_path == "http://127.0.0.1:1/index.html" and t.optimal_steps == 4


@pytest.mark.slow  # real Chromium on a 70 MB documentation site: the slow tier
def test_worked_example_oracle_succeeds_and_a_wrong_plan_fails(tmp_path):
    if not os.path.isfile(os.path.join(PYDOCS, "index.html")):
        pytest.skip("the worked example's site is not unpacked (scripts/setup.sh fetches python3.11-doc on Debian)")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=PYDOCS))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        rows = [json.loads(line) for line in open(PYDOCS_TASKS)]
        picked = [r for r in rows if r["id"].rsplit("/", 1)[1] in ("json", "csv", "heapq")]
        # the same search, then a result that is not the module's page (the tutorial's "Input and Output")
        wrong = dict(
            picked[0],
            id="pydocs/wrong",
            plan=picked[0]["plan"][:2]
            + [{"do": "CLICK", "role": "link", "name": "7. Input and Output"}, {"do": "STOP"}],
        )
        env = TaskFileEnv(write(tmp_path / "t.jsonl", picked + [wrong]), origin=origin)
        env.start()
        cfg = CollectConfig(
            out_dir=str(tmp_path / "eps"),
            runs=1,
            progress=False,
            contexts=2,
            harness=HarnessConfig(screenshots=False, max_steps=8),
        )
        counts = collect(env, env.tasks("train") + env.tasks("test"), OraclePolicy(env, OracleNoise()), cfg)
    finally:
        httpd.shutdown()
        httpd.server_close()
    eps = {e.summary["task_id"]: e for e in iter_episodes(str(tmp_path / "eps"))}
    assert counts["total"] == 4 and {k for k, e in eps.items() if e.summary["success"]} == {
        "pydocs/search/json",
        "pydocs/search/csv",
        "pydocs/search/heapq",
    }, counts
    json_ep, bad = eps["pydocs/search/json"], eps["pydocs/wrong"]
    first = json_ep.steps[0]  # ids depend on the page; the element is the plan's
    assert first["command"].endswith(" [json]") and first["target"] == {"role": "textbox", "name": "Quick search"}
    assert json_ep.summary["final"]["url"].startswith("/library/json.html")
    assert bad.summary["final"]["url"].startswith("/tutorial/inputoutput.html")
    assert bad.summary["final"]["check"]["progress"] == "00" and bad.summary["score"] == 0.0


# ---------------------------------------------------------------- element-level metrics on the live page
def _id(obs, role, name):
    return obs.find(role=role, name=name)[0].id


def test_element_metrics_from_recorded_episodes(site, tmp_path):
    """Localisation, value match, answer exact and token F1 of scripted episodes, worked by hand."""
    from experiment.evaluate import seed_metrics
    from rollout.policies.scripted import ScriptedPolicy

    form, alpha = site + "/form.html", site + "/alpha.html"
    fill = {
        "all": [
            {"element": {"role": "textbox", "name": "Name"}, "form_value": "^Ada Lovelace$"},
            {"element": {"css": "input[name=gift]"}, "checked": True},
            {"element": {"role": "button", "name": "Place order"}},
        ]
    }  # an outcome leaf: not a target
    rows = [
        {"id": f"fill-{k}", "start_url": form, "instruction": "Fill in [Ada Lovelace] with gift wrap.", "check": fill}
        for k in "abc"
    ]
    rows += [
        {
            "id": "note",
            "start_url": alpha,
            "instruction": "What does the note say?",
            "check": {"answer_from": {"css": ".note"}},
        },
        {
            "id": "num",
            "start_url": alpha,
            "instruction": "Which number?",
            "check": {"answer": "^42$", "expected": "42"},
        },
    ]
    env = TaskFileEnv(write(tmp_path / "t.jsonl", rows))
    env.start()
    name = lambda o: f"TYPE [{_id(o, 'textbox', 'Name')}] [Ada Lovelace]"  # noqa: E731
    script = {
        "fill-a": [name, lambda o: f"CLICK [{_id(o, 'checkbox', 'Gift wrap')}]", "STOP"],
        "fill-b": [lambda o: f"TYPE [{_id(o, 'textbox', 'Name')}] [Ada]", "STOP"],
        "fill-c": [lambda o: f"CLICK [{_id(o, 'button', 'Place order')}]", "STOP"],
        "note": ["STOP [framed text]"],
        "num": ["STOP [the 42]"],
    }
    cfg = CollectConfig(
        out_dir=str(tmp_path / "eps"),
        runs=1,
        progress=False,
        contexts=2,
        harness=HarnessConfig(screenshots=False, max_steps=4),
    )
    tasks = env.tasks("train")
    collect(env, tasks, ScriptedPolicy(script), cfg)
    m = seed_metrics(str(tmp_path / "eps"), tasks, runs=1)
    got = {
        r["task_id"]: (r["localisation"], r["value_match"], r["answer_exact"], r["answer_f1"])
        for r in m["episodes_table"]
    }
    assert got == {
        "fill-a": (1.0, 1.0, None, None),  # typed the name and ticked the box: both targets acted on and held
        "fill-b": (0.5, 0.0, None, None),  # typed into the Name box (a wrong value), never touched the box
        # clicked submit: the form left for done.html, so neither target holds; neither was acted on
        "fill-c": (0.0, 0.0, None, None),
        "note": (None, None, 0.0, 0.8),  # "framed text" vs "framed text 42": P 1, R 2/3
        "num": (None, None, 0.0, 1.0),  # the regex wants exactly 42; F1 drops the article
    }
    e = m["elements"]
    assert (e["localisation"], e["localisation_n"], e["answer_f1_n"]) == (0.5, 3, 2)
    assert e["value_match"] == pytest.approx(1 / 3) and e["answer_f1"] == pytest.approx(0.9)
    # the ids the metric used are the observation's: the state before the TYPE names the Name box's id
    fa = {ep.summary["task_id"]: ep for ep in iter_episodes(str(tmp_path / "eps"))}["fill-a"]
    first = fa.steps[0]
    assert first["command"].split()[1].strip("[]") in first["check"]["elements"]["targets"]["0"]
    assert sorted(first["check"]["elements"]["targets"]) == ["0", "1"]  # the button names an outcome, not a target
