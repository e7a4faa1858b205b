"""The tree picture (TGPO Figure 2 for real data): one task's merged graph as a self-contained HTML page.

``render_html(graph)`` returns one HTML string with no external assets: an inline SVG of the merged graph
(screenshot thumbnails embedded as base64 data URIs), inline CSS and a few lines of inline JavaScript (hover
highlighting). Layout (``trees.layout``) is a simple layered one:
the layer (x position) of a node is its BFS depth from the root,
nodes within a layer are ordered by first appearance. Forward edges are curves from left to right; back edges (to a
node of the same or a smaller layer, i.e. correction loops) are arcs over the top; self-loops are small loops.
Every drawn node is ``<g class="node" data-node=ID>``, every drawn edge ``<g class="edge" data-src data-dst>``.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import os
import urllib.parse

from trees.graph import BranchValue, Edge, TaskGraph
from trees.layout import GAP_X, LABEL_H, MARGIN, Box, arrowhead, bezier_point, edge_curves, layout
from tgpo_jax.files import write_text_atomic

log = logging.getLogger(__name__)

# Diverging colour scale for branch values: low Q red, middle grey, high Q green.
Q_LOW, Q_MID, Q_HIGH = (0xD7, 0x30, 0x27), (0x9A, 0x9A, 0x9A), (0x1A, 0x98, 0x50)
NO_Q = "#5f6b7a"
SUCCESS, FAILURE, ROOT = "#1a9850", "#d73027", "#2b6cd4"

MAX_THUMB_RATIO = 1.0  # thumbnails are cropped to at most square (tall full-page shots)


# ---------------------------------------------------------------- helpers
def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def _shorten(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


def short_url(url: str) -> str:
    """The path (and query) of a URL, for a node's caption."""
    try:
        p = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    out = p.path or "/"
    if p.query:
        out += "?" + p.query
    return out if (p.scheme or p.netloc) else url


def _mix(a, b, t: float) -> str:
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


def q_colour(q: float | None, lo: float, hi: float) -> str:
    """Diverging scale over [lo, hi]: lo red, the midpoint grey, hi green (grey when the range is empty)."""
    if q is None or not math.isfinite(q):
        return NO_Q
    if not hi > lo:
        return _mix(Q_MID, Q_MID, 0)
    t = max(-1.0, min(1.0, (q - (lo + hi) / 2) / ((hi - lo) / 2)))
    return _mix(Q_MID, Q_HIGH, t) if t >= 0 else _mix(Q_MID, Q_LOW, -t)


def thumbnail_data_uri(path: str | None, width: int, cache: dict | None = None) -> tuple[str, int, int] | None:
    """(data URI, width, height) of a downscaled JPEG of ``path``; None when there is no readable image."""
    if not path or not os.path.isfile(path):
        return None
    key = (path, width)
    if cache is not None and key in cache:
        return cache[key]
    from PIL import Image

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            if w <= 0 or h <= 0:
                raise ValueError("empty image")
            th = max(1, round(h * width / w))
            im = im.resize((width, th), Image.Resampling.LANCZOS if w > width else Image.Resampling.BICUBIC)
            max_h = max(1, round(width * MAX_THUMB_RATIO))
            if th > max_h:
                im = im.crop((0, 0, width, max_h))
                th = max_h
            buf = io.BytesIO()
            im.save(buf, format="JPEG", quality=72, optimize=True)
    except Exception as e:  # a corrupt or unreadable screenshot is drawn as a placeholder
        log.warning("cannot thumbnail %s: %s", path, e)
        out = None
    else:
        out = ("data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii"), width, th)
    if cache is not None:
        cache[key] = out
    return out


def _node_svg(b: Box, graph: TaskGraph, thumb_width: int, episodes_of: dict[str, int]) -> str:
    n = b.node
    root = n.id == graph.root
    cls = ["node"]
    if root:
        cls.append("root")
    if n.is_end:
        cls.append("end")
    if n.success_ends:
        cls.append("success-end")
    if n.failure_ends:
        cls.append("failure-end")
    border = SUCCESS if n.success_ends else FAILURE if n.failure_ends else ROOT if root else "#8a94a3"
    width = 3.5 if (root or n.success_ends or n.failure_ends) else 1.4
    tip = [
        f"node {n.id}" + (" (root)" if root else "") + (" (END)" if n.is_end else ""),
        f"URL: {n.url}",
        f"normalized: {n.norm_url}",
        f"merged states: {len(n.states)} from {episodes_of.get(n.id, 0)} episode(s)",
    ]
    if n.states:
        tip.append(
            "states: "
            + ", ".join(f"e{s.episode}:t{s.step}" for s in n.states[:12])
            + (" …" if len(n.states) > 12 else "")
        )
    if n.check:
        tip.append("check: " + ", ".join(f"{k}={v}" for k, v in sorted(n.check.items())))
    if n.phash:
        tip.append(f"pHash: {n.phash}")
    if n.success_ends or n.failure_ends:
        tip.append(f"episodes ending here: {n.success_ends} successful, {n.failure_ends} failed")
    if n.screenshot and not b.thumb:
        tip.append(f"screenshot missing: {n.screenshot}")
    marks = []
    if n.success_ends:
        marks.append(f'<tspan class="ok" fill="{SUCCESS}">✓{n.success_ends}</tspan>')
    if n.failure_ends:
        marks.append(f'<tspan class="bad" fill="{FAILURE}">✗{n.failure_ends}</tspan>')
    parts = [
        f'<g class="{" ".join(cls)}" data-node="{_esc(n.id)}" transform="translate({b.x:.1f},{b.y:.1f})">',
        f"<title>{_esc(chr(10).join(tip))}</title>",
    ]
    if n.is_end:
        parts.append(
            f'<rect width="{b.w}" height="{b.h}" rx="{b.h / 2}" fill="#f4f5f7" stroke="{border}" '
            f'stroke-width="{width}"/>'
        )
        label = "END " + " ".join(marks) if marks else "END"
        parts.append(f'<text class="end-label" x="{b.w / 2}" y="{b.h / 2 + 5}" text-anchor="middle">{label}</text>')
    else:
        parts.append(
            f'<rect class="frame" width="{b.w}" height="{b.h}" rx="6" fill="#fff" stroke="{border}" '
            f'stroke-width="{width}"/>'
        )
        img_h = b.h - 12 - LABEL_H
        if b.thumb:
            uri, _, _ = b.thumb
            parts.append(
                f'<image class="thumb" x="6" y="6" width="{thumb_width}" height="{img_h}" '
                f'preserveAspectRatio="xMidYMin slice" href="{uri}"/>'
            )
        else:
            parts.append(
                f'<rect class="placeholder" x="6" y="6" width="{thumb_width}" height="{img_h}" '
                f'fill="#eceff3" stroke="#c5ccd6" stroke-dasharray="4 3"/>'
            )
            parts.append(
                f'<text class="ph-label" x="{6 + thumb_width / 2}" y="{6 + img_h / 2 + 4}" '
                f'text-anchor="middle">no screenshot</text>'
            )
        max_chars = max(8, int(thumb_width / 6.4))
        parts.append(
            f'<text class="path" x="6" y="{b.h - LABEL_H + 8}">{_esc(_shorten(short_url(n.url), max_chars))}</text>'
        )
        info = f"{_esc(n.id)} · {len(n.states)} state{'s' if len(n.states) != 1 else ''}"
        parts.append(
            f'<text class="info" x="6" y="{b.h - 8}">{info}' + (" " + " ".join(marks) if marks else "") + "</text>"
        )
        if root:
            parts.append(
                f'<rect x="{b.w - 44}" y="-9" width="40" height="17" rx="4" fill="{ROOT}"/>'
                f'<text class="badge" x="{b.w - 24}" y="3" text-anchor="middle">ROOT</text>'
            )
    parts.append("</g>")
    return "".join(parts)


def _edge_svg(
    e: Edge, kind: str, pts, k: int, bv: BranchValue | None, lo: float, hi: float, cmd_chars: int
) -> tuple[str, tuple]:
    q = bv.q if bv is not None else None
    colour = q_colour(q, lo, hi)
    n = max(1, len(e.steps))
    sw = min(9.0, 1.6 + 1.5 * math.log2(n))
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = pts
    # The arrow ends a little before the target so the head is not hidden under it.
    path = f"M{x0:.1f},{y0:.1f} C{x1:.1f},{y1:.1f} {x2:.1f},{y2:.1f} {x3:.1f},{y3:.1f}"
    head = arrowhead(pts, 7 + 1.3 * sw)
    lx, ly = bezier_point(pts, 0.5)
    anchor = "middle"
    if kind == "self":  # labels stacked above the node, ending left of the loops
        lx, ly, anchor = pts[0][0] - 8 + 10 * k, pts[0][1] - 6 - 14 * k, "end"
    if kind == "forward":
        ly -= 5
    elif kind == "back":
        ly += -4 if y1 < y0 else 12
    qtxt = f"Q={_fmt(q)}" if q is not None else "Q=n/a"
    label = f"{_shorten(e.command, cmd_chars)} {qtxt}"
    half = 3.2 * len(label) + 3  # monospace 10.5px: about 6.3px a character
    tip = [
        f"{e.command}",
        f"{e.src} → {e.dst} ({kind} edge)",
        f"taken {len(e.steps)}×: "
        + ", ".join(f"e{s.episode}:t{s.step}" for s in e.steps[:12])
        + (" …" if len(e.steps) > 12 else ""),
    ]
    if bv is not None:
        tip.append(f"branch Q = {bv.q:.4f}")
        tip.append(f"trajectories: n_total={bv.n_total} n_success={bv.n_success} n_failed={bv.n_failed}")
        if bv.rewards:
            tip.append("reward means: " + ", ".join(f"{k}={v:.3f}" for k, v in sorted(bv.rewards.items())))
        tip.append(f"on success path: {bv.on_success_path}; reaches success: {bv.reaches_success}")
    else:
        tip.append("no branch value")
    left = lx - half if anchor == "middle" else lx - 2 * half + 3
    dash = ' stroke-dasharray="7 4"' if kind == "back" else ""
    qattr = f' data-q="{_fmt(q, 4)}"' if q is not None else ""
    svg = (
        f'<g class="edge {kind}" data-src="{_esc(e.src)}" data-dst="{_esc(e.dst)}" '
        f'data-command="{_esc(e.command)}"{qattr} data-count="{len(e.steps)}">'
        f"<title>{_esc(chr(10).join(tip))}</title>"
        f'<path class="wire" d="{path}" fill="none" stroke="{colour}" stroke-width="{sw:.2f}"{dash} '
        f'stroke-linecap="round" opacity="0.85"/>'
        f'<path class="head" d="{head}" fill="{colour}"/>'
        f'<rect class="lbg" x="{left:.1f}" y="{ly - 10:.1f}" width="{2 * half:.1f}" height="13" rx="3"/>'
        f'<text class="elabel" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">'
        f'<tspan class="cmd">{_esc(_shorten(e.command, cmd_chars))}</tspan> '
        f'<tspan class="q" fill="{colour}">{_esc(qtxt)}</tspan></text></g>'
    )
    return svg, ((left, ly - 12), (left + 2 * half, ly + 4))


CSS = """
body{width:max-content;min-width:100%;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;\
margin:0;background:#fafbfc;color:#1f2933}
header{padding:14px 22px;background:#fff;border-bottom:1px solid #dde2e8}
header h1{font-size:19px;margin:0 0 4px}
header .instr{color:#52606d;margin:2px 0 6px;max-width:1100px}
.stats{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:13px}
.stats b{font-variant-numeric:tabular-nums}
.legend{display:flex;flex-wrap:wrap;gap:6px 20px;align-items:center;padding:8px 22px;font-size:12px;
 background:#fff;border-bottom:1px solid #dde2e8}
.legend .sw{display:inline-block;vertical-align:middle;margin-right:5px}
.legend .bar{width:150px;height:10px;border-radius:3px}
.scroll{padding:10px}
svg.tree{display:block}
svg text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px;fill:#1f2933}
svg text.badge{fill:#fff;font-size:10px;font-weight:700}
svg text.ph-label{fill:#8a94a3}
svg text.end-label{font-size:12px;font-weight:700}
svg text.info{fill:#52606d}
svg text.elabel{font-size:10.5px}
svg rect.lbg{fill:#fafbfc;fill-opacity:.88}
svg text.elabel tspan.q{font-weight:700}
g.node,g.edge{transition:opacity .12s}
svg.focus g.node,svg.focus g.edge{opacity:.15}
svg.focus g.hl{opacity:1}
g.edge:hover .wire{opacity:1}
details{padding:4px 22px 20px}
table.branches{border-collapse:collapse;font-size:12px}
table.branches td,table.branches th{border-bottom:1px solid #e4e7eb;padding:3px 8px;text-align:left}
table.branches td.num{text-align:right;font-variant-numeric:tabular-nums}
"""

JS = """
(function(){
  var svg=document.querySelector('svg.tree'); if(!svg) return;
  function clear(){svg.classList.remove('focus');
    svg.querySelectorAll('.hl').forEach(function(x){x.classList.remove('hl');});}
  svg.querySelectorAll('g.node').forEach(function(n){
    n.addEventListener('mouseenter',function(){
      var id=n.getAttribute('data-node'); svg.classList.add('focus'); n.classList.add('hl');
      svg.querySelectorAll('g.edge').forEach(function(e){
        if(e.getAttribute('data-src')===id||e.getAttribute('data-dst')===id){
          e.classList.add('hl');
          var o=e.getAttribute('data-src')===id?e.getAttribute('data-dst'):e.getAttribute('data-src');
          svg.querySelectorAll('g.node').forEach(function(m){if(m.getAttribute('data-node')===o)m.classList.add('hl');});
        }});
    });
    n.addEventListener('mouseleave',clear);
  });
  svg.querySelectorAll('g.edge').forEach(function(e){
    e.addEventListener('mouseenter',function(){e.parentNode.appendChild(e);});
  });
})();
"""


def _episodes_per_node(graph: TaskGraph) -> dict[str, int]:
    return {nid: len({s.episode for s in n.states}) for nid, n in graph.nodes.items()}


def render_html(
    graph: TaskGraph,
    *,
    title: str | None = None,
    thumb_width: int = 160,
    instruction: str | None = None,
    links: tuple[tuple[str, str], ...] = (),
) -> str:
    """The merged graph of one task as one self-contained HTML page (see the module docstring); ``links``:
    (label, href) pairs shown under the title (the task's episode viewer, ``trees.episode_view``)."""
    if thumb_width < 16:
        raise ValueError(f"thumb_width must be at least 16, got {thumb_width}")
    cache: dict = {}
    boxes = layout(graph, thumb_width, lambda node: thumbnail_data_uri(node.screenshot, thumb_width, cache))
    curves = edge_curves(graph, boxes)
    qs = [b.q for b in graph.branches.values() if b.q is not None and math.isfinite(b.q)]
    lo, hi = (min(qs), max(qs)) if qs else (0.0, 0.0)
    cmd_chars = max(14, int(GAP_X / 6.6) - 7)

    edge_svgs, xs, ys = [], [], []
    for e, kind, pts, k in curves:
        svg, (a, b) = _edge_svg(e, kind, pts, k, graph.branches.get((e.src, e.command)), lo, hi, cmd_chars)
        edge_svgs.append(svg)
        for x, y in (*pts, a, b):
            xs.append(x)
            ys.append(y)
    episodes_of = _episodes_per_node(graph)
    node_svgs = []
    for b in boxes.values():
        node_svgs.append(_node_svg(b, graph, thumb_width, episodes_of))
        xs += [b.x - 2, b.x + b.w + 2]
        ys += [b.y - 12, b.y + b.h + 2]
    if not xs:
        xs, ys = [0, 200], [0, 80]
    x_min, x_max = min(xs) - MARGIN, max(xs) + MARGIN
    y_min, y_max = min(ys) - MARGIN, max(ys) + MARGIN
    vw, vh = x_max - x_min, y_max - y_min

    # Header numbers.
    episodes = {s.episode for s in graph.state_node} | {s.episode for n in graph.nodes.values() for s in n.states}
    n_success = sum(n.success_ends for n in graph.nodes.values())
    n_failure = sum(n.failure_ends for n in graph.nodes.values())
    n_end = sum(1 for n in graph.nodes.values() if n.is_end)
    n_back = sum(1 for c in curves if c[1] == "back")
    n_self = sum(1 for c in curves if c[1] == "self")
    multi = sum(1 for nid in graph.nodes if len({e.command for e in graph.edges if e.src == nid}) >= 2)
    title = title or f"Task {graph.task_id}"
    stats = [
        ("task", graph.task_id),
        ("episodes", len(episodes)),
        ("successful", f"{n_success}" + (f" / {n_success + n_failure}" if n_success + n_failure else "")),
        ("nodes", f"{len(graph.nodes)} ({n_end} END)"),
        ("edges", len(graph.edges)),
        ("branches", len(graph.branches)),
        ("branching nodes", multi),
        ("back edges", n_back),
        ("self-loops", n_self),
    ]
    if qs:
        stats.append(("Q range", f"{_fmt(lo)} … {_fmt(hi)}"))
    shown = {k for k, _ in stats}
    for k, v in sorted(graph.stats.items()):
        if str(k) not in shown and isinstance(v, (int, float, str, bool)) and len(str(v)) < 40:
            stats.append((str(k), v))

    grad = (
        f"linear-gradient(90deg,{q_colour(lo, lo, hi) if hi > lo else _mix(Q_LOW, Q_LOW, 0)},"
        f"{_mix(Q_MID, Q_MID, 0)},{q_colour(hi, lo, hi) if hi > lo else _mix(Q_HIGH, Q_HIGH, 0)})"
    )
    legend = (
        f'<div class="legend">'
        f'<span><span class="sw bar" style="background:{grad}"></span>edge colour: branch Q '
        f"{_fmt(lo) if qs else 'low'} → {_fmt(hi) if qs else 'high'}</span>"
        f'<span><svg class="sw" width="34" height="12"><line x1="2" y1="6" x2="32" y2="6" stroke="{NO_Q}" '
        f'stroke-width="1.6"/></svg>1× · <svg class="sw" width="34" height="12"><line x1="2" y1="6" x2="32" y2="6" '
        f'stroke="{NO_Q}" stroke-width="5"/></svg>8× taken (width)</span>'
        f'<span><svg class="sw" width="34" height="12"><line x1="2" y1="6" x2="32" y2="6" stroke="{NO_Q}" '
        f'stroke-width="2" stroke-dasharray="7 4"/></svg>back edge (revisit / correction loop)</span>'
        f'<span><span class="sw" style="width:16px;height:12px;border:3px solid {ROOT};border-radius:3px"></span>'
        f"root s0</span>"
        f'<span><span class="sw" style="width:16px;height:12px;border:3px solid {SUCCESS};border-radius:3px"></span>'
        f'<b style="color:{SUCCESS}">✓n</b> successful episodes ended here</span>'
        f'<span><span class="sw" style="width:16px;height:12px;border:3px solid {FAILURE};border-radius:3px"></span>'
        f'<b style="color:{FAILURE}">✗n</b> failed episodes ended here</span>'
        f'<span><span class="sw" style="width:28px;height:12px;border:1.5px solid #8a94a3;border-radius:7px"></span>'
        f"END (reached by STOP)</span>"
        f"<span>hover: full command, Q, n_total / n_success / n_failed, reward means</span></div>"
    )

    rows = []
    for (nid, cmd), bv in sorted(graph.branches.items(), key=lambda kv: (kv[0][0], -kv[1].q)):
        rewards = ", ".join(f"{k}={v:.2f}" for k, v in sorted(bv.rewards.items()))
        rows.append(
            f"<tr><td>{_esc(nid)}</td><td>{_esc(cmd)}</td><td class=num>{_fmt(bv.q)}</td>"
            f"<td class=num>{bv.n_total}</td><td class=num>{bv.n_success}</td><td class=num>{bv.n_failed}</td>"
            f"<td>{'✓' if bv.on_success_path else ''}</td><td>{'✓' if bv.reaches_success else ''}</td>"
            f"<td>{_esc(rewards)}</td></tr>"
        )
    table = (
        (
            "<details><summary>branch values (" + str(len(rows)) + ")</summary><table class=branches>"
            "<tr><th>node</th><th>command</th><th>Q</th><th>n_total</th><th>n_success</th><th>n_failed</th>"
            "<th>on success path</th><th>reaches success</th><th>reward means</th></tr>"
            + "".join(rows)
            + "</table></details>"
        )
        if rows
        else ""
    )

    svg = (
        f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" width="{vw:.0f}" height="{vh:.0f}" '
        f'viewBox="{x_min:.1f} {y_min:.1f} {vw:.1f} {vh:.1f}" role="img" aria-label="{_esc(title)}">'
        + "".join(edge_svgs)
        + "".join(node_svgs)
        + "</svg>"
    )
    head_stats = "".join(f"<span>{_esc(k)}: <b>{_esc(v)}</b></span>" for k, v in stats)
    instr = f'<div class="instr">{_esc(instruction)}</div>' if instruction else ""
    instr += "".join(f'<div><a class="link" href="{_esc(href)}">{_esc(label)}</a></div>' for label, href in links)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{_esc(title)}</title>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<style>{CSS}</style></head><body>"
        f'<header><h1>{_esc(title)}</h1>{instr}<div class="stats">{head_stats}</div></header>'
        f'{legend}<div class="scroll">{svg}</div>{table}<script>{JS}</script></body></html>\n'
    )


def write_html(graph: TaskGraph, path: str, **kw) -> str:
    """Render ``graph`` and write it to ``path`` atomically (temp file + rename); returns ``path``."""
    write_text_atomic(path, render_html(graph, **kw))
    return path
