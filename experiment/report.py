"""The evaluation report: TGPO Table 1 / Table 2 for our runs, dataset statistics and training curves.

``write_report(out_dir, title=…, models={"base": eval, "SFT": eval, …}, dataset=summary, curves={run: metrics})``
writes ``report.md``, ``report.html`` (self-contained: inline CSS, the PNGs next to it by relative path) and the
PNG plots (matplotlib, Agg, no display) into ``out_dir``. Every file is written atomically (temp + ``os.replace``).

Formats (Table 1): success rate in percent with one decimal (``78.6 ± 2.1``; an evaluation's ``success_rate`` is a
fraction in [0, 1]), average and redundant steps with two decimals (``8.66 ± 0.41``). ``±`` is the 95% CI
half-width (``ci95[metric]``: a number or experiment.evaluate's ``{"low", "high", "half_width"}``), left out when
None; a missing value is ``—``. The best value of each column (highest success, fewest steps, fewest redundant
steps, compared at the displayed precision, ties all) is in bold.
"""
from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field

from tgpo_jax.files import atomic_path, write_text_atomic

DASH = "—"

# TGPO paper, Table 1 (C-WebShop, Qwen2.5-VL-72B backbone): success %, avg steps, redundant steps;
# see docs/method.md §8.
PAPER_TABLE1 = {
    "base": (36.7, 14.28, 4.95),
    "SFT": (70.3, None, None),
    "KTO": (72.9, None, None),
    "KTO-Tree": (77.6, None, None),
    "DPO": (72.1, None, None),
    "TGPO": (78.6, 8.66, 0.97),
}
PAPER_LABEL_CONFLICT = 0.2695

# (key in an evaluation's "mean", column header, scale, decimals, higher is better)
COLUMNS = (
    ("success_rate", "Success rate (%)", 100.0, 1, True),
    ("avg_steps", "Avg. steps", 1.0, 2, False),
    ("redundant_steps", "Redundant steps", 1.0, 2, False),
)

# Training curves: plot name -> metric keys to look for (first one a run logged wins), y label.
CURVES = (
    ("loss", ("train/loss", "loss"), "training loss"),
    ("reward_accuracy", ("train/rewards/accuracies", "rewards/accuracies", "train/reward_accuracy",
                         "reward_accuracy"), "reward accuracy"),
    ("eval_loss", ("eval/loss",), "held-out loss"),
)

# Dataset statistics shown first, in this order, with these labels; other scalar keys follow alphabetically.
DATASET_KEYS = (
    ("tasks", "tasks"), ("episodes", "episodes"), ("successful_episodes", "successful episodes"),
    ("success_rate", "episode success rate"), ("steps", "steps"), ("states", "states (before merging)"),
    ("nodes", "nodes (after merging)"), ("merge_ratio", "nodes / states"), ("edges", "edges"),
    ("records", "node records"), ("pairs", "preference pairs"), ("sft_items", "SFT items"),
    ("kto_desirable", "KTO desirable"), ("kto_undesirable", "KTO undesirable"),
    ("kto_tree_desirable", "KTO-Tree desirable"), ("kto_tree_undesirable", "KTO-Tree undesirable"),
    ("redundant_steps_per_episode", "redundant steps / episode"), ("label_conflict_rate", "label-conflict rate"),
)
_RATE_KEYS = {"success_rate", "label_conflict_rate"}


# ---------------------------------------------------------------------------------------------------------------------
# Numbers


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass
class Cell:
    value: float | None  # scaled (percent for success)
    ci: float | None
    decimals: int
    seeds: list[float] = field(default_factory=list)  # scaled per-seed values

    @property
    def key(self) -> float | None:
        return None if self.value is None else round(self.value, self.decimals)

    def text(self) -> str:
        if self.value is None:
            return DASH
        s = f"{self.value:.{self.decimals}f}"
        return s if self.ci is None else f"{s} ± {self.ci:.{self.decimals}f}"


def row_cells(rows: dict) -> dict[str, Cell]:
    """A method's ``experiment.results.Row`` per metric -> its Table 1 cells (pooled over training seeds)."""
    out = {}
    for key, _, scale, dec, _ in COLUMNS:
        r = rows.get(key)
        if r is None or r.mean is None:
            out[key] = Cell(None, None, dec)
            continue
        out[key] = Cell(r.mean * scale, None if r.half_width is None else r.half_width * scale, dec,
                        [v * scale for v in r.per_seed])
    return out


def model_cells(ev: dict | None) -> dict[str, Cell]:
    """One evaluation dict -> its Table 1 cells (``mean`` / ``ci95``; falls back to per-seed means, flat keys)."""
    ev = ev or {}
    mean, ci = ev.get("mean") or {}, ev.get("ci95") or {}
    per_seed = [s for s in (ev.get("per_seed") or []) if isinstance(s, dict)]
    out = {}
    for key, _, scale, dec, _ in COLUMNS:
        seeds = [v * scale for v in (_num(s.get(key)) for s in per_seed) if v is not None]
        v = _num(mean.get(key)) if key in mean else _num(ev.get(key))
        if v is None and seeds:
            v = sum(seeds) / len(seeds) / scale
        c = _half_width(ci.get(key))
        out[key] = Cell(None if v is None else v * scale, None if c is None or v is None else c * scale, dec, seeds)
    return out


def _half_width(ci) -> float | None:
    """A CI as a half-width number or as experiment.evaluate's {"low", "high", "half_width"} dict (None: no CI)."""
    if isinstance(ci, dict):
        h = _num(ci.get("half_width"))
        if h is None and _num(ci.get("low")) is not None and _num(ci.get("high")) is not None:
            h = (_num(ci["high"]) - _num(ci["low"])) / 2
        return h
    return _num(ci)


def best_keys(cells: dict[str, dict[str, Cell]]) -> dict[str, float | None]:
    best = {}
    for key, _, _, _, higher in COLUMNS:
        vals = [c[key].key for c in cells.values() if c[key].key is not None]
        best[key] = (max(vals) if higher else min(vals)) if vals else None
    return best


def _episodes(ev: dict | None) -> str:
    ev = ev or {}
    n = ev.get("episodes")
    if n is None and ev.get("per_seed"):
        eps = [s.get("episodes") for s in ev["per_seed"] if isinstance(s, dict)]
        n = sum(e for e in eps if isinstance(e, int)) or None
    seeds = len(ev.get("per_seed") or [])
    if n is None:
        return DASH
    return f"{n} ({seeds} seeds)" if seeds > 1 else str(n)


def _pooled_episodes(evs: list) -> str:
    n = sum(int(e.get("episodes") or 0) for e in evs if isinstance(e, dict))
    return DASH if not evs else (f"{n} ({len(evs)} models)" if len(evs) > 1 else str(n))


def _fmt_stat(key: str, v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    f = _num(v)
    if f is None:
        return DASH if v is None else str(v)
    if key in _RATE_KEYS:
        return f"{100 * f:.2f}%"
    return f"{f:.2f}" if f != int(f) else str(int(f))


def pct(v) -> str:
    f = _num(v)
    return DASH if f is None else f"{100 * f:.2f}%"


# ---------------------------------------------------------------------------------------------------------------------
# Document model: a list of blocks rendered both to Markdown and to HTML.


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str  # plain text (escaped for HTML)
    links: list[tuple[str, str]] = field(default_factory=list)  # (label, href) appended as a list
    pre: bool = False  # keep line breaks (free-form notes)


@dataclass
class Table:
    header: list[str]
    rows: list[list[tuple[str, bool]]]  # (text, bold)
    caption: str = ""


@dataclass
class Image:
    path: str  # relative to out_dir
    alt: str


def _md_cell(text: str, bold: bool) -> str:
    t = text.replace("|", "\\|")
    return f"**{t}**" if bold and text != DASH else t


def to_markdown(blocks: list) -> str:
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            if b.text:
                out.append(b.text)
            if b.links:
                out.append("\n".join(f"- [{label}]({href})" for label, href in b.links))
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(h.replace("|", "\\|") for h in b.header) + " |",
                     "|" + "|".join(["---"] + ["---:"] * (len(b.header) - 1)) + "|"]
            lines += ["| " + " | ".join(_md_cell(t, bold) for t, bold in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
            if b.caption:
                out.append(f"*{b.caption}*")
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.path})")
    return "\n\n".join(out) + "\n"


CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; }
th, td { border: 1px solid #ccc; padding: .35em .8em; }
th { background: #f4f4f4; }
td:not(:first-child), th:not(:first-child) { text-align: right; }
tr:nth-child(even) td { background: #fafafa; }
caption { caption-side: bottom; font-size: .9em; color: #666; padding-top: .4em; text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
.notes { white-space: pre-wrap; background: #f8f8f8; padding: .8em; border-radius: 4px; }
""".strip()


def to_html(blocks: list, title: str) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">', f"<title>{e(title)}</title>",
           f"<style>\n{CSS}\n</style>", "</head>", "<body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            if b.text:
                cls = ' class="notes"' if b.pre else ""
                out.append(f"<p{cls}>{e(b.text)}</p>")
            if b.links:
                out.append("<ul>" + "".join(f'<li><a href="{e(href)}">{e(label)}</a></li>'
                                            for label, href in b.links) + "</ul>")
        elif isinstance(b, Table):
            rows = ["<table>"]
            if b.caption:
                rows.append(f"<caption>{e(b.caption)}</caption>")
            rows.append("<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in b.header) + "</tr></thead>")
            rows.append("<tbody>")
            for row in b.rows:
                cells = []
                for i, (t, bold) in enumerate(row):
                    tag = "th" if i == 0 else "td"
                    txt = f"<strong>{e(t)}</strong>" if bold and t != DASH else e(t)
                    cells.append(f"<{tag}>{txt}</{tag}>")
                rows.append("<tr>" + "".join(cells) + "</tr>")
            rows.append("</tbody></table>")
            out.append("\n".join(rows))
        elif isinstance(b, Image):
            out.append(f'<figure><img src="{e(b.path)}" alt="{e(b.alt)}"></figure>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# Files


def _save_fig(fig, path: str) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def _figure(width: float = 7.0, height: float = 4.0):
    # A bare Figure (no pyplot): renders with Agg, no display and no global figure state.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot(1, 1, 1)


def _plot_success(path: str, names: list[str], cells: dict[str, dict[str, Cell]]) -> None:
    fig, ax = _figure(max(5.0, 1.1 * len(names) + 2), 4.0)
    xs = list(range(len(names)))
    vals = [cells[n]["success_rate"].value for n in names]
    errs = [cells[n]["success_rate"].ci or 0.0 for n in names]
    ax.bar(xs, [v if v is not None else 0.0 for v in vals], yerr=errs, capsize=4, color="#4C72B0",
           edgecolor="black", linewidth=0.6)
    for x, n, v, err in zip(xs, names, vals, errs):
        seeds = cells[n]["success_rate"].seeds
        if len(seeds) > 1:
            ax.scatter([x] * len(seeds), seeds, s=10, color="black", alpha=0.6, zorder=3)
        top = max([(v or 0.0) + err] + seeds)
        ax.annotate(DASH if v is None else f"{v:.1f}", (x, top), textcoords="offset points", xytext=(0, 3),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, names)
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 110)
    ax.set_title("Success rate (mean ± 95% CI)")
    ax.grid(axis="y", alpha=0.3)
    _save_fig(fig, path)


def _plot_steps(path: str, names: list[str], cells: dict[str, dict[str, Cell]]) -> None:
    fig, ax = _figure(max(5.0, 1.3 * len(names) + 2), 4.0)
    w = 0.38
    for off, key, label, color in ((-w / 2, "avg_steps", "average steps", "#55A868"),
                                   (w / 2, "redundant_steps", "redundant steps", "#C44E52")):
        vals = [cells[n][key].value for n in names]
        errs = [cells[n][key].ci or 0.0 for n in names]
        ax.bar([i + off for i in range(len(names))], [v if v is not None else 0.0 for v in vals], w, yerr=errs,
               capsize=3, label=label, color=color, edgecolor="black", linewidth=0.6)
    ax.set_xticks(list(range(len(names))), names)
    ax.set_ylabel("steps per episode")
    ax.set_title("Average and redundant steps (mean ± 95% CI)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    _save_fig(fig, path)


def _plot_learning(path: str, curves: dict[str, list[tuple[int, float]]]) -> None:
    fig, ax = _figure(7.0, 4.0)
    for label, pts in curves.items():
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, [100 * y for y in ys], marker="o", markersize=4, linewidth=1.4, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out success (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Success vs training steps")
    ax.grid(alpha=0.3)
    ax.legend()
    _save_fig(fig, path)


def _curve_points(rows: list[dict], keys: tuple[str, ...]) -> list[tuple[float, float]]:
    for key in keys:
        pts = [(float(r["step"]), _num(r[key])) for r in rows if key in r and "step" in r]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            return sorted(pts)
    return []


def _plot_curves(out_dir: str, curves: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """One PNG per metric that at least one run logged; returns [(file name, label)]."""
    written = []
    for name, keys, label in CURVES:
        series = {run: _curve_points(rows or [], keys) for run, rows in curves.items()}
        series = {run: pts for run, pts in series.items() if pts}
        if not series:
            continue
        fig, ax = _figure(7.0, 4.0)
        for run, pts in series.items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) <= 20 else None, markersize=3, linewidth=1.4, label=run)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.set_title(f"Training curves: {label}")
        ax.grid(alpha=0.3)
        ax.legend()
        fname = f"curves_{name}.png"
        _save_fig(fig, os.path.join(out_dir, fname))
        written.append((fname, label))
    return written


# ---------------------------------------------------------------------------------------------------------------------
# The report


def _table1(names: list[str], episodes: dict[str, str], cells: dict[str, dict[str, Cell]],
            caption: str = "Mean over evaluation seeds; ± is the 95% confidence half-width; best per column in "
                           "bold.") -> Table:
    best = best_keys(cells)
    rows = []
    for n in names:
        row = [(n, False)]
        for key, *_ in COLUMNS:
            c = cells[n][key]
            row.append((c.text(), c.key is not None and c.key == best[key]))
        row.append((episodes[n], False))
        rows.append(row)
    return Table(["Model"] + [h for _, h, *_ in COLUMNS] + ["Episodes"], rows, caption)


def _family_table(family_rows: dict[str, dict[str, dict]]) -> Table:
    """Success per method (rows) and task family (columns), pooled over training seeds."""
    fams = list(family_rows)
    labels = list(dict.fromkeys(label for rows in family_rows.values() for label in rows))
    out = []
    for label in labels:
        row = [(label, False)]
        for f in fams:
            r = family_rows[f].get(label, {}).get("success_rate")
            row.append((DASH if r is None or r.mean is None else
                        f"{100 * r.mean:.1f}" + ("" if r.half_width is None else f" ± {100 * r.half_width:.1f}"),
                        False))
        out.append(row)
    return Table(["Model"] + [f"{f} success (%)" for f in fams], out,
                 "Per task family; mean over training seeds, ± the 95% interval over seeds.")


def _comparison_table(comparisons: list) -> Table:
    rows = []
    for c in comparisons:
        scale, unit = (100.0, " pts") if c.metric == "success_rate" else (1.0, "")
        rows.append([(f"{c.a} − {c.b}", False), (c.metric.replace("_", " "), False),
                     (f"{scale * c.diff:+.2f}{unit}", False), (f"[{scale * c.low:+.2f}, {scale * c.high:+.2f}]", False),
                     (str(c.tasks), False), (f"{c.seeds_a} / {c.seeds_b}", False)])
    return Table(["Comparison", "Metric", "Difference", "95% interval", "Tasks", "Seeds"], rows,
                 "Paired by held-out task (and by training seed where both methods have the same seeds); the "
                 "interval is a two-level bootstrap over tasks and training seeds (experiment/stats.py).")


def _claims_table(claims: list) -> Table:
    return Table(["Claim (TGPO paper)", "Paper", "Ours (difference [95% interval])", "Verdict"],
                 [[(c.text, False), (c.paper, False), (c.ours, False), (c.verdict, c.verdict == "reproduced")]
                  for c in claims],
                 "Reproduced: the interval lies on the claimed side of 0. Not reproduced: it lies on the other side, "
                 "or excludes half the paper's gap. Inconclusive: otherwise.")


def _reference_table() -> Table:
    rows = []
    for n, vals in PAPER_TABLE1.items():
        row = [(n, False)]
        for v, (_, _, _, dec, _) in zip(vals, COLUMNS):
            row.append((DASH if v is None else f"{v:.{dec}f}", False))
        rows.append(row)
    return Table(["Model"] + [h for _, h, *_ in COLUMNS], rows,
                 "TGPO paper, Table 1 (C-WebShop, Qwen2.5-VL-72B); steps are reported for base and TGPO only.")


def _dataset_table(dataset: dict) -> Table:
    rows, seen = [], set()
    for key, label in DATASET_KEYS:
        if key in dataset:
            rows.append([(label, False), (_fmt_stat(key, dataset[key]), False)])
            seen.add(key)
    for key in sorted(dataset):
        v = dataset[key]
        if key in seen:
            continue
        if isinstance(v, (list, tuple)):
            rows.append([(key.replace("_", " "), False), (str(len(v)), False)])
        elif isinstance(v, (int, float, str, bool)) or v is None:
            rows.append([(key.replace("_", " "), False), (_fmt_stat(key, v), False)])
    return Table(["Statistic", "Value"], rows)


def _decoding(models: dict) -> str:
    """The caption's note on valid-argument decoding, from the evaluations' meta (docs/method.md §8)."""
    evals = [x for v in models.values() for x in (v if isinstance(v, list) else [v]) if isinstance(x, dict)]
    flags = {bool((x.get("meta") or {}).get("constrain")) for x in evals}
    if flags == {True}:
        return " Decoding: valid-argument (every bracketed group one the step offers, docs/method.md §8)."
    return " Decoding: valid-argument for some rows only." if len(flags) > 1 else ""


def write_report(out_dir: str, *, title: str, models: dict[str, dict], dataset: dict | None = None,
                 curves: dict[str, list[dict]] | None = None, trees: dict[str, str] | None = None, notes: str = "",
                 reference: bool = True, rows: dict | None = None, family_rows: dict | None = None,
                 comparisons: list | None = None, claims: list | None = None,
                 learning_curves: dict[str, list[tuple[int, float]]] | None = None) -> dict:
    """Write ``report.md``, ``report.html`` and the plots into ``out_dir``; returns their paths.

    ``models``: label -> evaluation dict (Table 1 from each evaluation's own mean / interval). ``rows`` (label ->
    metric -> ``experiment.results.Row``, pooled over training seeds) replaces that when given, with ``models`` then
    mapping each label to its list of evaluations. ``family_rows`` (family -> rows), ``comparisons``, ``claims``
    (``experiment.results``) and ``learning_curves`` (label -> [(step, success)]) add their sections."""
    os.makedirs(out_dir, exist_ok=True)
    models = dict(models or {})
    if rows is not None:
        names = list(rows)
        cells = {n: row_cells(rows[n]) for n in names}
        episodes = {n: _pooled_episodes(models.get(n) or []) for n in names}
        caption = ("Mean over training seeds (one model each, greedy decoding unless stated); ± is the 95% "
                   "t-interval over seeds; best per column in bold.")
    else:
        names = list(models)
        cells = {n: model_cells(models[n]) for n in names}
        episodes = {n: _episodes(models[n]) for n in names}
        caption = "Mean over evaluation seeds; ± is the 95% confidence half-width; best per column in bold."

    caption += _decoding(models)
    plots = []
    _plot_success(os.path.join(out_dir, "success.png"), names, cells)
    _plot_steps(os.path.join(out_dir, "steps.png"), names, cells)
    plots += [os.path.join(out_dir, "success.png"), os.path.join(out_dir, "steps.png")]
    curve_files = _plot_curves(out_dir, dict(curves or {}))
    plots += [os.path.join(out_dir, f) for f, _ in curve_files]

    blocks: list = [Heading(title, 1)]
    blocks.append(Heading("Table 1: held-out evaluation"))
    if names:
        evs = [m for v in models.values() for m in (v if isinstance(v, list) else [v]) if isinstance(m, dict)]
        tasks = {m.get("tasks") for m in evs if m.get("tasks") is not None}
        policies = [] if rows is not None else [f"{n}: {m['policy']}" for n, m in models.items()
                                                 if isinstance(m, dict) and m.get("policy")]
        info = []
        if tasks:
            info.append("Held-out tasks: " + ", ".join(str(t) for t in sorted(tasks, key=str)))
        if policies:
            info.append("Policies: " + "; ".join(policies))
        if info:
            blocks.append(Para(". ".join(info) + "."))
        blocks.append(_table1(names, episodes, cells, caption))
    else:
        blocks.append(Para("No evaluation results."))
    blocks += [Image("success.png", "success rate per model"), Image("steps.png", "average and redundant steps")]
    if family_rows:
        blocks.append(Heading("Success per task family"))
        blocks.append(_family_table(family_rows))
    if claims:
        blocks.append(Heading("The paper's claims"))
        blocks.append(_claims_table(claims))
    if comparisons:
        blocks.append(Heading("Paired comparisons"))
        blocks.append(_comparison_table(comparisons))
    if learning_curves:
        _plot_learning(os.path.join(out_dir, "learning.png"), learning_curves)
        plots.append(os.path.join(out_dir, "learning.png"))
        blocks.append(Heading("Success vs training steps"))
        blocks.append(Para("Held-out success of training snapshots (first training seed) on a fixed subset of the "
                           "held-out tasks; the last point is the final model on the same tasks."))
        blocks.append(Image("learning.png", "success vs training steps"))
    if reference:
        blocks.append(Heading("Reference: the TGPO paper"))
        blocks.append(_reference_table())

    blocks.append(Heading("Table 2: label conflicts"))
    ours = (dataset or {}).get("label_conflict_rate")
    blocks.append(Table(["Dataset", "Label-conflict rate"],
                        [[("ours", False), (pct(ours), False)],
                         [("TGPO paper (C-WebShop)", False), (pct(PAPER_LABEL_CONFLICT), False)]],
                        "Share of step occurrences whose merged branch is taken by at least one successful "
                        "and at least one failed trajectory."))
    blocks.append(Para(f"Label-conflict rate: {pct(ours)} (ours) vs {pct(PAPER_LABEL_CONFLICT)} (TGPO paper)."))

    blocks.append(Heading("Dataset statistics"))
    blocks.append(_dataset_table(dataset) if dataset else Para("No dataset summary."))

    blocks.append(Heading("Training curves"))
    if curve_files:
        blocks.append(Para(f"Runs: {', '.join(curves)}.", [(label, f) for f, label in curve_files]))
        blocks += [Image(f, label) for f, label in curve_files]
    else:
        blocks.append(Para("No training metrics."))

    if trees:
        blocks.append(Heading("Trees"))
        blocks.append(Para("", [(task, rel) for task, rel in trees.items()]))

    if notes and notes.strip():
        blocks.append(Heading("Notes"))
        blocks.append(Para(notes.strip(), pre=True))

    md_path, html_path = os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.html")
    write_text_atomic(md_path, to_markdown(blocks))
    write_text_atomic(html_path, to_html(blocks, title))
    return {"markdown": md_path, "html": html_path, "plots": plots}
