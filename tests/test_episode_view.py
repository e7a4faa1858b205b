"""The episode viewer: a synthetic collection through the real tree builder, written beside its tree picture, opened
in headless Chromium from disk: one row per step with its node, command or typed error, effect and the process reward
the builder computed; screenshots decoded; the two pages link to each other."""

from __future__ import annotations

import dataclasses
import os

import pytest

pytest.importorskip("playwright")

from rollout.recording import iter_episodes, read_tasks  # noqa: E402
from trees.build import build_task_graph  # noqa: E402
from trees.episode_view import episodes_page, render_episodes, write_task_pages  # noqa: E402
from trees.graph import StateRef  # noqa: E402
from trees.synthetic import write_synthetic_collection  # noqa: E402


def collection(tmp_path):
    """One task's episodes of a synthetic collection (several runs, some failing), with real PNG screenshots put
    under the first episode's steps (the synthetic recorder writes none)."""
    from PIL import Image

    coll = str(tmp_path / "coll")
    write_synthetic_collection(coll, num_tasks=1, runs=4, seed=8, branching=0.5)  # both outcomes, errors
    eps = list(iter_episodes(coll))
    task = read_tasks(coll)[0]
    first = eps[0]
    os.makedirs(os.path.join(first.path, "screens"), exist_ok=True)
    steps = []
    for t, step in enumerate(first.steps):
        Image.new("RGB", (200, 150), (40 * t % 256, 90, 160)).save(os.path.join(first.path, "screens", f"{t}.png"))
        steps.append(dict(step, screenshot=f"screens/{t}.png"))
    eps[0] = dataclasses.replace(first, steps=steps)
    return eps, task


def test_rows_carry_the_builders_rewards_nodes_and_commands(tmp_path, browser):
    eps, task = collection(tmp_path)
    graph = build_task_graph(eps, task)
    tree, view = write_task_pages(graph, eps, task, str(tmp_path / "out" / "t.html"), title="Task t")
    assert view == str(tmp_path / "out" / "t.episodes.html") == episodes_page(tree)
    page = browser.new_page()
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto("file://" + view)
    rows = page.evaluate("""() => [...document.querySelectorAll('tr.step')].map(r => ({
        e: +r.dataset.episode, t: +r.dataset.step, node: r.dataset.node,
        cells: [...r.children].map(c => c.innerText),
        imgs: [...r.querySelectorAll('img')].map(i => i.naturalWidth)}))""")
    assert len(rows) == sum(len(ep.steps) for ep in eps)
    assert len(page.locator("h2.ep").all()) == len(eps)
    for row in rows:
        ref = StateRef(row["e"], row["t"])
        step = eps[ref.episode].steps[ref.step]
        assert row["node"] == graph.state_node[ref]
        r = graph.rewards[ref]
        assert row["cells"][7].startswith(f"{r['r']:+.2f}") and f"subgoal={r['r_subgoal']:+.2f}" in row["cells"][7]
        if step.get("command"):
            assert step["command"] in row["cells"][5]
        if step.get("error"):
            assert step["error"]["kind"] in row["cells"][5]
        # the first episode's PNGs are decoded by the browser at the viewer's width; the rest say there is none
        assert row["imgs"] == ([360] if ref.episode == 0 else []), row
    assert {ep.summary["success"] for ep in eps} == {True, False}  # both outcomes shown
    assert any(step.get("error") for ep in eps for step in ep.steps)  # and typed errors
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []  # nothing leaves the page
    page.click("a.tree")  # the viewer links to the tree picture, and the tree picture back to the viewer
    assert page.url.endswith("/t.html") and page.locator("g.node").count() == len(graph.nodes)
    page.click("a.link")
    assert page.url.endswith("/t.episodes.html")
    page.close()


def test_errored_episode_and_missing_rewards_render():
    from rollout.recording import EpisodeRecord
    from trees.graph import TaskGraph

    ep = EpisodeRecord(
        "/nowhere",
        {
            "task_id": "t",
            "run": 0,
            "status": "errored",
            "success": False,
            "steps": 1,
            "error": {"type": "BrowserCrashed", "message": "page crashed"},
        },
        [
            {
                "output": "Thought: x\nCommand: CLICK [9]",
                "command": None,
                "error": {"kind": "malformed_command", "message": "no brackets"},
                "screenshot": "gone.png",
            }
        ],
    )
    text = render_episodes(TaskGraph("t", "n0", {}, [], {}), [ep])
    assert "BrowserCrashed: page crashed" in text and "malformed_command: no brackets" in text
    assert "no valid command" in text and "no screenshot" in text
