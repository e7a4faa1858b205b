"""Where the tree picture draws things (``trees.render``): a layered layout — a node's layer (x position) is its BFS
depth from the root, nodes within a layer ordered by first appearance — and the edges' curves between the boxes
(forward edges left to right, back edges as arcs over the top, self-loops as small loops)."""

from __future__ import annotations

import collections
import logging
import math
from typing import Callable

from trees.graph import Edge, Node, TaskGraph

log = logging.getLogger(__name__)

GAP_X = 230  # horizontal room between layers (edge labels live here)
GAP_Y = 34
MARGIN = 24
END_W, END_H = 74, 34
LABEL_H = 34  # text lines under a thumbnail


def layers(graph: TaskGraph) -> dict[str, int]:
    """BFS depth from the root; nodes the root does not reach go one layer past the deepest."""
    out_edges: dict[str, list[str]] = collections.defaultdict(list)
    for e in graph.edges:
        out_edges[e.src].append(e.dst)
    depth: dict[str, int] = {}
    if graph.root in graph.nodes:
        depth[graph.root] = 0
        queue = collections.deque([graph.root])
        while queue:
            n = queue.popleft()
            for d in out_edges[n]:
                if d not in depth and d in graph.nodes:
                    depth[d] = depth[n] + 1
                    queue.append(d)
    rest = [n for n in graph.nodes if n not in depth]
    if rest:
        extra = max(depth.values(), default=-1) + 1
        for n in rest:
            depth[n] = extra
    return depth


def _first_appearance(graph: TaskGraph) -> list[str]:
    """Node ids in order of first appearance: BFS discovery from the root (edges in order), then the rest."""
    order, seen = [], set()
    out_edges: dict[str, list[str]] = collections.defaultdict(list)
    for e in graph.edges:
        out_edges[e.src].append(e.dst)
    queue = collections.deque([graph.root] if graph.root in graph.nodes else [])
    seen.update(queue)
    while queue:
        n = queue.popleft()
        order.append(n)
        for d in out_edges[n]:
            if d not in seen and d in graph.nodes:
                seen.add(d)
                queue.append(d)

    def first_state(nid):
        st = graph.nodes[nid].states
        return (min(st), nid) if st else ((1 << 60, 0), nid)

    order += sorted((n for n in graph.nodes if n not in seen), key=first_state)
    return order


class Box:
    """A node's box in the drawing: its layer, position, size and thumbnail."""

    __slots__ = ("node", "x", "y", "w", "h", "thumb", "layer")

    def __init__(self, node: Node, layer: int, w: float, h: float, thumb):
        self.node, self.layer, self.w, self.h, self.thumb = node, layer, w, h, thumb
        self.x = self.y = 0.0


def layout(graph: TaskGraph, thumb_width: int, thumb: Callable[[Node], tuple | None]) -> dict[str, Box]:
    """Each node's box, placed: its layer's column, stacked in first-appearance order, each layer centred.
    ``thumb(node)``: the node's thumbnail (data URI, width, height) or None."""
    depth = layers(graph)
    boxes: dict[str, Box] = {}
    placeholder_h = round(thumb_width * 9 / 16)
    for nid in _first_appearance(graph):
        node = graph.nodes[nid]
        if node.is_end:
            boxes[nid] = Box(node, depth[nid], END_W, END_H, None)
            continue
        t = thumb(node)
        img_h = t[2] if t else placeholder_h
        boxes[nid] = Box(node, depth[nid], thumb_width + 12, img_h + 12 + LABEL_H, t)
    n_layers = max((b.layer for b in boxes.values()), default=0) + 1
    col_w = thumb_width + 12
    per_layer: dict[int, list[Box]] = collections.defaultdict(list)
    for b in boxes.values():
        per_layer[b.layer].append(b)
    heights = {k: sum(b.h for b in v) + GAP_Y * (len(v) - 1) for k, v in per_layer.items()}
    total_h = max(heights.values(), default=0)
    for k in range(n_layers):
        col = per_layer.get(k, [])
        y = MARGIN + (total_h - heights.get(k, 0)) / 2  # centre each layer vertically
        for b in col:
            b.x = MARGIN + k * (col_w + GAP_X) + (col_w - b.w) / 2
            b.y = y
            y += b.h + GAP_Y
    return boxes


# ---------------------------------------------------------------- edge geometry
def bezier_point(p, t: float):
    """The point at ``t`` in [0, 1] of the cubic Bezier curve with control points ``p``."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = p
    u = 1 - t
    a, b, c, d = u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t
    return a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3


def arrowhead(p, size: float) -> str:
    """An SVG path of a filled arrowhead of ``size`` at the end of the Bezier curve ``p``, pointing along its last
    direction."""
    (x3, y3) = p[3]
    for q in (p[2], p[1], p[0]):
        dx, dy = x3 - q[0], y3 - q[1]
        if abs(dx) + abs(dy) > 1e-6:
            break
    else:
        dx, dy = 1.0, 0.0
    n = math.hypot(dx, dy)
    ux, uy = dx / n, dy / n
    bx, by = x3 - ux * size, y3 - uy * size
    px, py = -uy * size * 0.5, ux * size * 0.5
    return f"M{x3:.1f},{y3:.1f} L{bx + px:.1f},{by + py:.1f} L{bx - px:.1f},{by - py:.1f} Z"


def edge_curves(graph: TaskGraph, boxes: dict[str, Box]) -> list[tuple[Edge, str, tuple, int]]:
    """(edge, kind, control points, index among its kind at the pair) per edge; kind 'forward' | 'back' | 'self'."""
    fwd_out: dict[str, list[int]] = collections.defaultdict(list)
    fwd_in: dict[str, list[int]] = collections.defaultdict(list)
    kinds = []
    for i, e in enumerate(graph.edges):
        s, d = boxes.get(e.src), boxes.get(e.dst)
        if s is None or d is None:
            kinds.append(None)
        elif e.src == e.dst:
            kinds.append("self")
        elif d.layer > s.layer:
            kinds.append("forward")
            fwd_out[e.src].append(i)
            fwd_in[e.dst].append(i)
        else:
            kinds.append("back")
    # Order ports by the other end's vertical position so parallel curves do not cross at the node.
    for lst, other in ((fwd_out, "dst"), (fwd_in, "src")):
        for k in lst:
            lst[k].sort(key=lambda i: (boxes[getattr(graph.edges[i], other)].y, i))
    # (boxes above, boxes below) in each node's layer.
    columns: dict[int, list[Box]] = collections.defaultdict(list)
    for b in boxes.values():
        columns[b.layer].append(b)
    rank = {}
    for col in columns.values():
        col.sort(key=lambda b: b.y)
        for i, b in enumerate(col):
            rank[b.node.id] = (i, len(col) - 1 - i)
    # Back edges between layers: over the top when both ends sit nearer the tops of their columns, else under
    # the bottom; each gets the lowest level (arc height) not used by an arc over an overlapping layer span.
    same_count: dict[tuple[str, str], int] = collections.Counter()
    back_up: dict[int, bool] = {}
    back_level: dict[int, int] = {}
    back_x_out: dict[str, list[int]] = collections.defaultdict(list)
    back_x_in: dict[str, list[int]] = collections.defaultdict(list)
    spans = {}
    for i, e in enumerate(graph.edges):
        if kinds[i] == "back" and boxes[e.src].layer != boxes[e.dst].layer:
            sl, dl = boxes[e.src].layer, boxes[e.dst].layer
            spans[i] = (min(sl, dl), max(sl, dl))
            back_up[i] = rank[e.src][0] + rank[e.dst][0] <= rank[e.src][1] + rank[e.dst][1]
            back_x_out[e.src].append(i)
            back_x_in[e.dst].append(i)
    used: dict[tuple[bool, int], list[tuple[int, int]]] = collections.defaultdict(list)
    for i in sorted(spans, key=lambda i: (spans[i][1] - spans[i][0], i)):
        a, b = spans[i]
        level = 0
        while any(not (b < c or d < a) for c, d in used[(back_up[i], level)]):
            level += 1
        used[(back_up[i], level)].append((a, b))
        back_level[i] = level
    for lst, other in ((back_x_out, "dst"), (back_x_in, "src")):
        for k in lst:
            lst[k].sort(key=lambda i: (boxes[getattr(graph.edges[i], other)].x, i))
    self_count: dict[str, int] = collections.Counter()
    out = []
    for i, e in enumerate(graph.edges):
        kind = kinds[i]
        if kind is None:
            log.warning("edge %s -> %s references an unknown node; not drawn", e.src, e.dst)
            continue
        s, d = boxes[e.src], boxes[e.dst]
        if kind == "forward":
            so, di = fwd_out[e.src], fwd_in[e.dst]
            sy = s.y + s.h * (so.index(i) + 1) / (len(so) + 1)
            dy = d.y + d.h * (di.index(i) + 1) / (len(di) + 1)
            x0, x3 = s.x + s.w, d.x
            c = max(40.0, (x3 - x0) * 0.45)
            pts = ((x0, sy), (x0 + c, sy), (x3 - c, dy), (x3, dy))
        elif kind == "self":
            k = self_count[e.src]
            self_count[e.src] += 1
            r = 34 + 16 * k
            x0, y0 = s.x + s.w - 26 - 10 * k, s.y
            x3, y3 = s.x + s.w, s.y + 22 + 10 * k
            pts = ((x0, y0), (x0 + 4, y0 - r), (x3 + r, y3 - 4), (x3, y3))
        else:  # back edge: an arc over the top (or under the bottom) of the layers it spans
            if d.layer == s.layer:  # same layer: a bulge to the right
                k = same_count[(e.src, e.dst)]
                same_count[(e.src, e.dst)] += 1
                x0, y0 = s.x + s.w, s.y + s.h * 0.3
                x3, y3 = d.x + d.w, (d.y + d.h * 0.7) if d.y < s.y else (d.y + d.h * 0.3)
                bulge = 70 + 0.15 * abs(y3 - y0) + 22 * k
                pts = ((x0, y0), (x0 + bulge, y0), (x3 + bulge, y3), (x3, y3))
            else:
                lo_l, hi_l = spans[i]
                span = [b for b in boxes.values() if lo_l <= b.layer <= hi_l]
                so, di = back_x_out[e.src], back_x_in[e.dst]
                # leave from the left half of the source's edge, arrive on the right half of the target's
                x0 = s.x + s.w * (0.05 + 0.4 * (so.index(i) + 1) / (len(so) + 1))
                x3 = d.x + d.w * (0.55 + 0.4 * (di.index(i) + 1) / (len(di) + 1))
                lift = 30 + 24 * back_level[i]
                if back_up[i]:
                    y0, y3 = s.y, d.y
                    peak = min(b.y for b in span) - lift
                else:
                    y0, y3 = s.y + s.h, d.y + d.h
                    peak = max(b.y + b.h for b in span) + lift
                c = (peak - 0.125 * (y0 + y3)) / 0.75  # the curve's midpoint reaches ``peak``
                pts = ((x0, y0), (x0, c), (x3, c), (x3, y3))
        out.append((e, kind, pts, self_count[e.src] - 1 if kind == "self" else 0))
    return out


# ---------------------------------------------------------------- drawing
