"""The episode viewer: one task's episodes step by step as one self-contained HTML page.

Per episode (run), in order: its outcome, then per step the screenshot of the page the step saw (a JPEG data URI),
the observation text (folded), the model's output, the parsed command or the typed error, the effect the harness
measured, the node of the merged tree the step left from, and the step's process reward with its parts
(docs/method.md §3, from ``build_task_graph``'s rewards); then the final state. It links to the task's tree picture
(``trees.render``), whose nodes it names. Like the tree picture it loads nothing from outside the page.
Every step is ``<tr class="step" data-episode=E data-step=T>``.
"""

from __future__ import annotations

import html
import json
import os

from trees.graph import StateRef, TaskGraph
from trees.render import thumbnail_data_uri, write_html
from tgpo_jax.files import write_text_atomic

REWARD_PARTS = ("r_acc", "r_format", "r_red", "r_subgoal")

CSS = """
body{font:13px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 4px}
.instr{margin:4px 0 10px;color:#333}.ep{margin:18px 0 6px;font-size:15px}
.ok{color:#1a9850;font-weight:600}.bad{color:#d73027;font-weight:600}
table{border-collapse:collapse;width:100%}td,th{border-top:1px solid #ddd;padding:4px 6px;vertical-align:top;
text-align:left}th{background:#f4f4f4}pre{white-space:pre-wrap;margin:0;font:12px ui-monospace,monospace;
max-width:520px}img{border:1px solid #ccc;display:block}.none{color:#999;font-style:italic}
.err{color:#d73027}.num{text-align:right;font-variant-numeric:tabular-nums}details summary{cursor:pointer;color:#2b6cd4}
"""


def _esc(s) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def _shot(path: str | None, width: int, cache: dict) -> str:
    t = thumbnail_data_uri(path, width, cache)
    if t is None:
        return '<span class="none">no screenshot</span>'
    uri, w, h = t
    return f'<img src="{uri}" width="{w}" height="{h}" alt="screenshot">'


def _command(step: dict) -> str:
    if step.get("command"):
        cmd = f"<code>{_esc(step['command'])}</code>"
    else:
        cmd = '<span class="err">no valid command</span>'
    err = step.get("error")
    if err:
        cmd += f'<div class="err">{_esc(err.get("kind"))}: {_esc(err.get("message"))}</div>'
    return cmd


def _effect(step: dict) -> str:
    eff = step.get("effect")
    if not eff:
        return '<span class="none">—</span>'
    flags = [k for k in ("url_changed", "dom_changed", "navigated") if eff.get(k)]
    ok = "as expected" if eff.get("expected_change") else "not as expected"
    return _esc(", ".join(flags + [ok])) + (f"<div>{_esc(eff.get('detail'))}</div>" if eff.get("detail") else "")


def _reward(r: dict | None) -> str:
    if r is None:
        return '<span class="none">—</span>'
    parts = " ".join(f"{k[2:]}={r[k]:+.2f}" for k in REWARD_PARTS if k in r)
    return f'<b class="r">{r["r"]:+.2f}</b><div>{_esc(parts)}</div>'


def render_episodes(
    graph: TaskGraph,
    episodes,
    *,
    title: str | None = None,
    instruction: str | None = None,
    tree_href: str | None = None,
    shot_width: int = 360,
) -> str:
    """The page for ``episodes`` (the list ``graph`` was built from, in the same order)."""
    cache: dict = {}
    title = title or f"Episodes of {graph.task_id}"
    rewards = graph.rewards
    blocks = []
    for e, ep in enumerate(episodes):
        s = ep.summary
        outcome = (
            '<span class="ok">success</span>'
            if s.get("success")
            else f'<span class="bad">{_esc(s.get("status", "failure"))}</span>'
        )
        head = (
            f'<h2 class="ep" id="run-{_esc(s.get("run", e))}">Run {_esc(s.get("run", e))}: {outcome}, '
            f"{_esc(s.get('steps', len(ep.steps)))} steps, score {float(s.get('score', 0.0)):.2f}, "
            f"ended by {_esc(s.get('end_reason'))}, policy {_esc(s.get('policy'))}</h2>"
        )
        if s.get("error"):
            head += f'<div class="err">{_esc(s["error"].get("type"))}: {_esc(s["error"].get("message"))}</div>'
        rows = []
        for t, step in enumerate(ep.steps):
            ref = StateRef(e, t)
            node = graph.state_node.get(ref, "")
            shot = step.get("screenshot")
            path = None if not shot else f"{ep.path}/{shot}"
            rows.append(
                f'<tr class="step" data-episode="{e}" data-step="{t}" data-node="{_esc(node)}">'
                f'<td class="num">{t}</td><td>{_esc(node)}<div>{_esc(step.get("url"))}</div></td>'
                f"<td>{_shot(path, shot_width, cache)}</td>"
                f"<td><details><summary>{_esc(step.get('title') or 'observation')}</summary>"
                f"<pre>{_esc(step.get('observation'))}</pre></details></td>"
                f"<td><pre>{_esc(step.get('output'))}</pre></td><td>{_command(step)}</td>"
                f"<td>{_effect(step)}</td><td>{_reward(rewards.get(ref))}</td></tr>"
            )
        final = s.get("final") or {}
        if final:
            shot = final.get("screenshot")
            rows.append(
                f'<tr class="final"><td>end</td><td>{_esc(final.get("url"))}</td>'
                f"<td>{_shot(None if not shot else f'{ep.path}/{shot}', shot_width, cache)}</td>"
                f"<td colspan=5>check: <code>{_esc(json.dumps(final.get('check')))}</code></td></tr>"
            )
        blocks.append(
            head + "<table><tr><th>step</th><th>node, URL</th><th>screenshot</th><th>observation</th>"
            "<th>model output</th><th>command / error</th><th>effect</th><th>process reward</th></tr>"
            + "".join(rows)
            + "</table>"
        )
    link = f'<div><a class="tree" href="{_esc(tree_href)}">the merged tree of these runs</a></div>' if tree_href else ""
    instr = f'<div class="instr">{_esc(instruction)}</div>' if instruction else ""
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{_esc(title)}</title>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'\">"
        f"<style>{CSS}</style></head><body><h1>{_esc(title)}</h1>{instr}{link}{''.join(blocks)}</body></html>\n"
    )


def write_episodes_html(graph: TaskGraph, episodes, path: str, **kw) -> str:
    """Render and write atomically; returns ``path``."""
    write_text_atomic(path, render_episodes(graph, episodes, **kw))
    return path


def episodes_page(tree_path: str) -> str:
    """The episode viewer's file beside a tree page: ``t.html`` -> ``t.episodes.html``."""
    root, ext = os.path.splitext(tree_path)
    return root + ".episodes" + (ext or ".html")


def write_task_pages(
    graph: TaskGraph, episodes, task, tree_path: str, *, title: str, thumb_width: int = 160
) -> tuple[str, str]:
    """The tree picture at ``tree_path`` and the episode viewer beside it, each linking to the other; -> both
    paths."""
    view = episodes_page(tree_path)
    instruction = task.instruction if task is not None else None
    write_html(
        graph,
        tree_path,
        title=title,
        thumb_width=thumb_width,
        instruction=instruction,
        links=(("the episodes step by step", os.path.basename(view)),),
    )
    write_episodes_html(
        graph,
        episodes,
        view,
        title=f"Episodes of {graph.task_id}",
        instruction=instruction,
        tree_href=os.path.basename(tree_path),
    )
    return tree_path, view
