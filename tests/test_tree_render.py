"""The tree picture: hand-built graphs rendered and opened in headless Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from trees.graph import BranchValue, Edge, Node, StateRef, TaskGraph
from trees.layout import layers
from trees.render import q_colour, render_html, write_html

ORIGIN = "http://127.0.0.1:8765"


def _png(path, colour, size=(320, 200)):
    from PIL import Image, ImageDraw

    im = Image.new("RGB", size, colour)
    ImageDraw.Draw(im).rectangle((10, 10, size[0] // 2, size[1] // 3), fill=(255, 255, 255))
    im.save(path)
    return str(path)


def tgpo_example(tmp_path, missing: tuple[str, ...] = ()) -> TaskGraph:
    """TGPO's example: search → results → sorted → right item (success) / wrong item (failure), a loop back from
    the wrong item, a self-loop (scroll that changed nothing) and END nodes reached by STOP."""
    R = StateRef
    urls = {
        "n0": "/",
        "n1": "/search?q=red+shoes",
        "n2": "/search?q=red+shoes&sort=price",
        "n3": "/item/42",
        "n4": "/cart?added=42",
        "n5": "/item/7",
        "n6": "/cart?added=7",
    }
    colours = {
        "n0": (200, 60, 60),
        "n1": (60, 200, 60),
        "n2": (60, 60, 200),
        "n3": (200, 200, 60),
        "n4": (60, 200, 200),
        "n5": (200, 60, 200),
        "n6": (120, 120, 120),
    }
    states = {
        "n0": [R(0, 0), R(1, 0), R(2, 0)],
        "n1": [R(0, 1), R(1, 1), R(1, 2), R(2, 1)],
        "n2": [R(0, 2), R(1, 3), R(1, 5), R(2, 2)],
        "n3": [R(0, 3), R(1, 6)],
        "n4": [R(0, 4), R(1, 7)],
        "n5": [R(1, 4), R(2, 3)],
        "n6": [R(2, 4)],
    }
    nodes = {}
    for nid, path in urls.items():
        shot = str(tmp_path / f"{nid}.png")
        if nid not in missing:
            _png(shot, colours[nid])
        nodes[nid] = Node(
            nid,
            ORIGIN + path,
            ORIGIN + path,
            states[nid],
            phash="ab" * 8,
            screenshot=shot,
            check={"success": nid == "n4", "score": 1.0 if nid == "n4" else 0.0, "progress": ""},
        )
    nodes["n4/end"] = Node(
        "n4/end", ORIGIN + urls["n4"], ORIGIN + urls["n4"], [R(0, 5), R(1, 8)], is_end=True, success_ends=2
    )
    nodes["n6/end"] = Node("n6/end", ORIGIN + urls["n6"], ORIGIN + urls["n6"], [R(2, 5)], is_end=True, failure_ends=1)
    edges = [
        Edge("n0", "TYPE [searchbox 'Search'] [red shoes]", "n1", [R(0, 0), R(1, 0), R(2, 0)]),
        Edge("n1", "SCROLL [DOWN]", "n1", [R(1, 1)]),  # self-loop
        Edge("n1", "CLICK [link 'Sort by price']", "n2", [R(0, 1), R(1, 2), R(2, 1)]),
        Edge("n2", "CLICK [link 'Red Running Shoe 42']", "n3", [R(0, 2), R(1, 5)]),
        Edge("n2", "CLICK [link 'Red Sandal 7']", "n5", [R(1, 3), R(2, 2)]),
        Edge("n5", "GO_BACK", "n2", [R(1, 4)]),  # back edge: the correction loop
        Edge("n5", "CLICK [button 'Add to cart']", "n6", [R(2, 3)]),
        Edge("n3", "CLICK [button 'Add to cart']", "n4", [R(0, 3), R(1, 6)]),
        Edge("n4", "STOP [done]", "n4/end", [R(0, 4), R(1, 7)]),
        Edge("n6", "STOP [done]", "n6/end", [R(2, 4)]),
    ]
    qs = {
        ("n0", edges[0].command): 1.42,
        ("n1", "SCROLL [DOWN]"): -0.25,
        ("n1", edges[2].command): 1.61,
        ("n2", edges[3].command): 2.37,
        ("n2", edges[4].command): 0.48,
        ("n5", "GO_BACK"): 1.05,
        ("n5", edges[6].command): -0.5,
        ("n3", edges[7].command): 2.8,
        ("n4", "STOP [done]"): 3.0,
        ("n6", "STOP [done]"): -1.0,
    }
    branches = {}
    for e in edges:
        n_s = sum(1 for s in e.steps if s.episode in (0, 1))
        branches[(e.src, e.command)] = BranchValue(
            e.src,
            e.command,
            qs[(e.src, e.command)],
            {"acc": 0.9, "format": 1.0, "red": -0.1, "subgoal": 0.7},
            n_total=len({s.episode for s in e.steps}),
            n_success=n_s,
            n_failed=len(e.steps) - n_s,
            on_success_path=n_s > 0,
            reaches_success=n_s > 0,
            occurrences=list(e.steps),
        )
    state_node = {s: nid for nid, n in nodes.items() for s in n.states}
    return TaskGraph("shop/train/0001", "n0", nodes, edges, state_node, branches, {"merged_by_phash": 1})


def open_page(browser, html_text):
    page = browser.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.route("**/*", lambda route: route.abort())  # nothing may leave the page
    page.set_content(html_text, wait_until="load")
    return page, requests, errors


def decoded_images(page):
    """naturalWidth of every embedded thumbnail, decoded by the browser."""
    return page.evaluate("""async () => {
        const out = [];
        for (const im of document.querySelectorAll('g.node image')) {
            const src = im.getAttribute('href');
            const img = new Image();
            img.src = src;
            try { await img.decode(); } catch (e) {}
            out.push({src: src.slice(0, 30), w: img.naturalWidth, bbox: im.getBBox().width,
                      node: im.closest('g.node').dataset.node});
        }
        return out;
    }""")


def test_tgpo_example_in_chromium(tmp_path, browser):
    g = tgpo_example(tmp_path)
    text = render_html(g, title="TGPO example", thumb_width=120)
    page, requests, errors = open_page(browser, text)
    try:
        assert page.locator("g.node").count() == len(g.nodes) == 9
        assert page.locator("g.edge").count() == len(g.edges) == 10
        drawn = {page.locator("g.node").nth(i).get_attribute("data-node") for i in range(len(g.nodes))}
        assert drawn == set(g.nodes)
        pairs = page.evaluate("() => [...document.querySelectorAll('g.edge')].map(e => [e.dataset.src, e.dataset.dst])")
        assert sorted(map(tuple, pairs)) == sorted((e.src, e.dst) for e in g.edges)
        labels = " ".join(page.locator("g.edge text.elabel").all_text_contents())
        for q in ("1.42", "-0.25", "1.61", "2.37", "0.48", "1.05", "-0.50", "2.80", "3.00", "-1.00"):
            assert f"Q={q}" in labels
        # The GO_BACK edge is a back edge (dashed arc), the scroll a self-loop.
        assert page.locator('g.edge.back[data-src="n5"][data-dst="n2"]').count() == 1
        assert page.locator('g.edge.self[data-src="n1"][data-dst="n1"]').count() == 1
        # End markers on the right nodes.
        assert page.evaluate("() => [...document.querySelectorAll('g.node.success-end')].map(n => n.dataset.node)") == [
            "n4/end"
        ]
        assert page.evaluate("() => [...document.querySelectorAll('g.node.failure-end')].map(n => n.dataset.node)") == [
            "n6/end"
        ]
        assert "✓2" in page.locator('g.node[data-node="n4/end"]').text_content()
        assert "✗1" in page.locator('g.node[data-node="n6/end"]').text_content()
        assert page.locator("g.node.root").get_attribute("data-node") == "n0"
        assert page.locator("g.node.end").count() == 2
        # Thumbnails: data URIs that the browser decodes.
        imgs = decoded_images(page)
        assert len(imgs) == 7 and all(i["src"].startswith("data:image/") for i in imgs)
        assert all(i["w"] == 120 and i["bbox"] > 0 for i in imgs), imgs
        # Tooltips carry the full command, Q and statistics.
        tip = page.locator('g.edge[data-src="n2"][data-dst="n5"] > title').text_content()
        assert (
            "CLICK [link 'Red Sandal 7']" in tip and "0.4800" in tip and "n_total=2" in tip and "subgoal=0.700" in tip
        )
        # Header: task, episodes, successes.
        header = page.locator("header").text_content()
        assert "task: shop/train/0001" in header
        assert "episodes: 3" in header and "successful: 2 / 3" in header and "nodes: 9 (2 END)" in header
        # Edge colours: highest Q green-ish, lowest red-ish.
        assert page.locator('g.edge[data-src="n6"] path.wire').get_attribute("stroke") == q_colour(-1.0, -1.0, 3.0)
        page.hover('g.node[data-node="n2"]')
        assert page.evaluate("() => document.querySelector('svg.tree').classList.contains('focus')")
        assert not errors, errors
        assert all(u.startswith(("data:", "about:")) for u in requests), requests
    finally:
        page.close()


def test_missing_screenshot_renders_placeholder(tmp_path, browser):
    g = tgpo_example(tmp_path, missing=("n3", "n6"))
    g.nodes["n0"].screenshot = None
    path = write_html(g, str(tmp_path / "out" / "tree.html"))
    assert os.path.exists(path) and not [f for f in os.listdir(tmp_path / "out") if f != "tree.html"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    page, requests, errors = open_page(browser, text)
    try:
        assert page.locator("g.node").count() == len(g.nodes)
        assert page.locator("g.edge").count() == len(g.edges)
        placeholders = page.evaluate(
            "() => [...document.querySelectorAll('g.node rect.placeholder')].map(r => r.closest('g.node').dataset.node)"
        )
        assert sorted(placeholders) == ["n0", "n3", "n6"]
        assert len(decoded_images(page)) == 4
        assert not errors and all(u.startswith(("data:", "about:")) for u in requests)
    finally:
        page.close()


def test_layout_and_colours(tmp_path):
    g = tgpo_example(tmp_path, missing=tuple(f"n{i}" for i in range(7)))
    assert layers(g) == {"n0": 0, "n1": 1, "n2": 2, "n3": 3, "n5": 3, "n4": 4, "n6": 4, "n4/end": 5, "n6/end": 5}
    assert q_colour(3.0, -1.0, 3.0) == "#1a9850" and q_colour(-1.0, -1.0, 3.0) == "#d73027"
    assert q_colour(1.0, -1.0, 3.0) == "#9a9a9a" == q_colour(0.5, 0.5, 0.5)
    # Unreachable node, edge to an unknown node, no branches: still renders every node.
    g.nodes["x"] = Node("x", ORIGIN + "/x", ORIGIN + "/x", [])
    g.branches = {}
    text = render_html(g)
    assert text.count('class="node') == len(g.nodes) and text.count('class="edge') == len(g.edges)
    assert "Q=n/a" in text and "<script>" in text and "http-equiv" in text


def test_show_tree_cli(tmp_path, monkeypatch):
    """launch.show_tree groups a collection's episodes by task and writes one page per task (+ index)."""
    from launch import show_tree
    from rollout.core import Task
    from episode_records import step_record, summary_record
    from rollout.recording import EpisodeWriter, write_tasks

    out_dir = str(tmp_path / "coll")
    tasks = [Task(f"shop/train/000{i}", "shop", "webshop", f"buy thing {i}", "/", 3, "train") for i in range(2)]
    os.makedirs(out_dir)
    write_tasks(out_dir, tasks)
    for t in tasks:
        for run in range(2):
            w = EpisodeWriter(out_dir, t.task_id, run, screenshots=False)
            w.step(step_record(0, command="STOP [x]"))
            w.finish(summary_record(t.task_id, run, "success" if run == 0 else "failure"))

    calls = []

    def build_task_graph(episodes, task, cfg):
        calls.append((task.task_id, len(episodes), cfg))
        return tgpo_example(tmp_path, missing=tuple(f"n{i}" for i in range(7)))

    fake = types.ModuleType("trees.build")
    fake.build_task_graph = build_task_graph
    fake.TreeConfig = lambda: "cfg"
    monkeypatch.setitem(sys.modules, "trees.build", fake)

    one = show_tree.write_trees(out_dir, task_ids=["shop/train/0001"], out=str(tmp_path / "one.html"))
    assert calls == [("shop/train/0001", 2, "cfg")]
    assert one[0]["path"] == str(tmp_path / "one.html") and one[0]["successful"] == 1
    assert "buy thing 1" in open(one[0]["path"], encoding="utf-8").read()
    every = show_tree.write_trees(out_dir, all_tasks=True, out=str(tmp_path / "trees"))
    assert sorted(os.listdir(tmp_path / "trees")) == [
        "index.html",
        "shop__train__0000.episodes.html",
        "shop__train__0000.html",
        "shop__train__0001.episodes.html",
        "shop__train__0001.html",
    ]
    assert json.loads(json.dumps(every))[0]["nodes"] == 9
    assert len(show_tree.write_trees(out_dir, all_tasks=True, max_tasks=1, out=str(tmp_path / "t1"))) == 1
    with pytest.raises(Exception, match="no episodes"):
        show_tree.write_trees(out_dir, task_ids=["nope"], out=str(tmp_path / "x.html"))


def test_show_tree_on_synthetic_collection(tmp_path):
    """End to end with the real builder on a synthetic collection (no browser)."""
    from launch import show_tree
    from trees.synthetic import write_synthetic_collection

    coll = str(tmp_path / "coll")
    write_synthetic_collection(coll, num_tasks=2, runs=4, seed=3)
    written = show_tree.write_trees(coll, all_tasks=True, max_tasks=2, out=str(tmp_path / "trees"), thumb_width=96)
    # the command line: same pages, printed as JSON; a missing --task_id is a usage error naming the flag
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cli = [sys.executable, "-m", "launch.show_tree", f"--episodes={coll}", "--thumb_width=96"]
    proc = subprocess.run(
        cli + ["--all", "--max_tasks=2", f"--out={tmp_path / 'cli'}"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [(w["nodes"], w["edges"]) for w in json.loads(proc.stdout)] == [(w["nodes"], w["edges"]) for w in written]
    proc = subprocess.run(cli, cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--task_id is required" in proc.stderr
    assert len(written) == 2 and os.path.exists(tmp_path / "trees" / "index.html")
    for w in written:
        text = open(w["path"], encoding="utf-8").read()
        assert text.count('<g class="node') == w["nodes"] and text.count('<g class="edge') == w["edges"]
        assert f"episodes: <b>{w['episodes']}</b>" in text


def test_empty_graph():
    g = TaskGraph("t", "n0", {}, [], {})
    assert "<svg" in render_html(g)
