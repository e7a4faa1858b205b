"""Draw the merged tree of a task's episodes (TGPO Figure 2 for real data) as a self-contained HTML page, and beside
it the episode viewer: the same episodes step by step (screenshot, observation, output, command or error, effect,
process reward), ``<tree page>.episodes.html``, each page linking to the other.

  python -m launch.show_tree --episodes=data/episodes/train --task_id=shop/train/0003 --out=runs/trees/t3.html
  python -m launch.show_tree --episodes=data/episodes/train --all --max_tasks=20 --out=runs/trees/
One task: ``--out`` is the HTML file (or a directory: the file is named after the task). ``--all``: ``--out`` is a
directory with one page per task and an ``index.html`` linking them. Default ``--out``: ``<episodes>/trees``.
"""

from __future__ import annotations

import collections
import html
import json
import os

from absl import app, flags

from launch.entry import prepare
from tgpo_jax.files import write_text_atomic

F = flags.FLAGS
flags.DEFINE_string("episodes", None, "collection directory (launch.collect --out)")
flags.DEFINE_string("task_id", None, "the task to draw (required unless --all)")
flags.DEFINE_bool("all", False, "draw every task of the collection")
flags.DEFINE_string("out", None, "HTML file or directory (default <episodes>/trees)")
flags.DEFINE_integer("max_tasks", 0, "--all: at most this many tasks (0 = all)")
flags.DEFINE_integer("thumb_width", 160, "thumbnail width in pixels")
flags.DEFINE_bool("include_errored", False, "also merge errored episodes")


def _is_dir_target(out: str) -> bool:
    return os.path.isdir(out) or out.endswith(os.sep) or not out.lower().endswith((".html", ".htm"))


def task_file_name(task_id: str) -> str:
    """The HTML file name of a task's tree page."""
    from rollout.recording import task_dir_name

    return task_dir_name(task_id) + ".html"


def write_trees(
    episodes_dir: str,
    *,
    task_ids=(),
    all_tasks: bool = False,
    out: str | None = None,
    max_tasks: int = 0,
    thumb_width: int = 160,
    include_errored: bool = False,
    cfg=None,
) -> list[dict]:
    """Build and draw the trees; -> one summary dict per written page (task_id, path, nodes, edges, ...)."""
    from rollout.recording import iter_episodes, read_tasks
    from trees.build import TreeConfig, build_task_graph
    from trees.episode_view import write_task_pages

    if not all_tasks and not task_ids:
        raise app.UsageError("give --task_id or --all")
    by_task: dict[str, list] = collections.defaultdict(list)
    for ep in iter_episodes(episodes_dir, include_errored=include_errored):
        by_task[ep.summary["task_id"]].append(ep)
    if not by_task:
        raise app.UsageError(f"no finished episodes in {episodes_dir}")
    tasks = {}
    if os.path.exists(os.path.join(episodes_dir, "tasks.jsonl")):
        tasks = {t.task_id: t for t in read_tasks(episodes_dir)}
    if all_tasks:
        chosen = list(by_task)
        if max_tasks:
            chosen = chosen[:max_tasks]
    else:
        missing = [t for t in task_ids if t not in by_task]
        if missing:
            have = list(by_task)
            raise app.UsageError(
                f"no episodes of {missing} in {episodes_dir}; have {have[:8]}" + (" …" if len(have) > 8 else "")
            )
        chosen = list(task_ids)
    out = out or os.path.join(episodes_dir, "trees")
    to_dir = all_tasks or len(chosen) > 1 or _is_dir_target(out)
    cfg = cfg if cfg is not None else TreeConfig()
    written = []
    for tid in chosen:
        eps = by_task[tid]
        task = tasks.get(tid)
        graph = build_task_graph(eps, task, cfg)
        path = os.path.join(out, task_file_name(tid)) if to_dir else out
        _, view = write_task_pages(graph, eps, task, path, title=f"Task {tid}", thumb_width=thumb_width)
        n_success = sum(1 for e in eps if e.summary["success"])
        written.append(
            {
                "task_id": tid,
                "path": path,
                "episodes_page": view,
                "episodes": len(eps),
                "successful": n_success,
                "nodes": len(graph.nodes),
                "edges": len(graph.edges),
                "branches": len(graph.branches),
            }
        )
    if to_dir and len(written) > 1:
        _write_index(out, written, tasks)
    return written


def _write_index(out: str, written: list[dict], tasks: dict) -> str:
    rows = "".join(
        f'<tr><td><a href="{html.escape(os.path.basename(w["path"]))}">{html.escape(w["task_id"])}</a> '
        f'(<a href="{html.escape(os.path.basename(w["episodes_page"]))}">episodes</a>)</td>'
        f"<td>{html.escape(tasks[w['task_id']].instruction if w['task_id'] in tasks else '')}</td>"
        f"<td>{w['successful']}/{w['episodes']}</td><td>{w['nodes']}</td><td>{w['edges']}</td></tr>"
        for w in written
    )
    page = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>task trees</title><style>"
        "body{font:14px system-ui,sans-serif;margin:20px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;"
        "text-align:left}</style></head><body><h1>task trees</h1><table><tr><th>task</th><th>instruction</th>"
        f"<th>successful</th><th>nodes</th><th>edges</th></tr>{rows}</table></body></html>\n"
    )
    path = os.path.join(out, "index.html")
    write_text_atomic(path, page)
    return path


def main(argv):
    """Draw the tree pages of the chosen tasks and print what was written."""
    prepare(argv)
    if not F.episodes:
        raise app.UsageError("--episodes is required")
    if not F.all and not F.task_id:
        raise app.UsageError("--task_id is required unless --all")
    written = write_trees(
        F.episodes,
        task_ids=[F.task_id] if F.task_id and not F.all else [],
        all_tasks=F.all,
        out=F.out,
        max_tasks=F.max_tasks,
        thumb_width=F.thumb_width,
        include_errored=F.include_errored,
    )
    print(json.dumps(written, indent=1))


if __name__ == "__main__":
    app.run(main)
