"""The evaluation report: TGPO Table 1 / Table 2 for our runs, dataset statistics and training curves.

``write_report(out_dir, title=…, models={"base": eval, "SFT": eval, …}, dataset=summary, curves={run: metrics})``
writes ``report.md``, ``report.html`` (self-contained: inline CSS, the PNGs next to it by relative path) and the
PNG plots (matplotlib, Agg, no display) into ``out_dir``. Every file is written atomically (temp + ``os.replace``).

Formats (Table 1): success rate in percent with one decimal (``78.6 ± 2.1``; an evaluation's ``success_rate`` is a
fraction in [0, 1]), average and redundant steps with two decimals (``8.66 ± 0.41``). ``±`` is the 95% CI
half-width (``ci95[metric]``: a number or experiment.evaluate's ``{"low", "high", "half_width"}``), left out when
None; a missing value is ``—``. The best value of each column (highest success, fewest steps, fewest redundant
steps, compared at the displayed precision, ties all) is in bold.

The reference section is the paper's whole Table 1 (``PAPER_TABLE1``: C-WebShop and Online-Mind2Web, every method,
GPT-4o's Online-Mind2Web success); Table 2 puts our label-conflict rate beside the paper's two, or says it does not
apply where the dataset has one run per task (``one_run_per_task``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from experiment.document import DASH, Heading, Image, Para, Table, num, to_html, to_markdown
from experiment.plots import plot_curves, plot_learning, plot_steps, plot_success
from tgpo_jax.files import write_text_atomic


# The TGPO paper's Table 1 in full (/work/shared/METHOD.md §6, docs/method.md §8): benchmark -> model -> (success %,
# avg. steps, redundant steps); None where the paper gives no number (GPT-4o: Online-Mind2Web success only).
PAPER_BENCHMARKS = {"C-WebShop": "SeeAct, Qwen2.5-VL-72B", "Online-Mind2Web": "Browser-use, Qwen3-14B"}
PAPER_TABLE1 = {
    "C-WebShop": {
        "base": (36.7, 14.28, 4.95),
        "SFT": (70.3, 9.73, 1.26),
        "KTO": (72.9, 9.42, 1.40),
        "KTO-Tree": (77.6, 8.97, 1.08),
        "DPO": (72.1, 9.85, 1.41),
        "TGPO": (78.6, 8.66, 0.97),
    },
    "Online-Mind2Web": {
        "base": (26.8, 12.79, 3.31),
        "SFT": (31.8, 11.73, 2.76),
        "KTO": (27.1, 11.94, 2.90),
        "KTO-Tree": (34.4, 10.98, 2.42),
        "DPO": (34.0, 11.53, 2.88),
        "TGPO": (38.4, 10.71, 2.52),
        "GPT-4o": (30.0, None, None),
    },
}
# The paper's Table 2: share of step occurrences labelled both ways by episode outcomes, per benchmark.
PAPER_LABEL_CONFLICT = {"C-WebShop": 0.2695, "Online-Mind2Web": 0.3871}
NOT_APPLICABLE = "not applicable (one run per task)"

# (key in an evaluation's "mean", column header, scale, decimals, higher is better)
COLUMNS = (
    ("success_rate", "Success rate (%)", 100.0, 1, True),
    ("avg_steps", "Avg. steps", 1.0, 2, False),
    ("redundant_steps", "Redundant steps", 1.0, 2, False),
)

# Dataset statistics shown first, in this order, with these labels; other scalar keys follow alphabetically.
DATASET_KEYS = (
    ("tasks", "tasks"),
    ("episodes", "episodes"),
    ("successful_episodes", "successful episodes"),
    ("success_rate", "episode success rate"),
    ("steps", "steps"),
    ("states", "states (before merging)"),
    ("nodes", "nodes (after merging)"),
    ("merge_ratio", "nodes / states"),
    ("edges", "edges"),
    ("records", "node records"),
    ("pairs", "preference pairs"),
    ("sft_items", "SFT items"),
    ("kto_desirable", "KTO desirable"),
    ("kto_undesirable", "KTO undesirable"),
    ("kto_tree_desirable", "KTO-Tree desirable"),
    ("kto_tree_undesirable", "KTO-Tree undesirable"),
    ("redundant_steps_per_episode", "redundant steps / episode"),
    ("label_conflict_rate", "label-conflict rate"),
)
_RATE_KEYS = {"success_rate", "label_conflict_rate"}


# ---------------------------------------------------------------------------------------------------------------------
# Numbers


@dataclass
class Cell:
    """A table cell: the scaled value, its 95% half-width, the decimals shown and the per-seed values."""

    value: float | None  # scaled (percent for success)
    ci: float | None
    decimals: int
    seeds: list[float] = field(default_factory=list)  # scaled per-seed values

    @property
    def key(self) -> float | None:
        """The value rounded as shown (what ties and the best value compare), or None."""
        return None if self.value is None else round(self.value, self.decimals)

    def text(self) -> str:
        """The value as shown, ``v ± ci`` when there is an interval, a dash when missing."""
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
        out[key] = Cell(
            r.mean * scale, None if r.half_width is None else r.half_width * scale, dec, [v * scale for v in r.per_seed]
        )
    return out


def model_cells(ev: dict | None) -> dict[str, Cell]:
    """One evaluation dict -> its Table 1 cells (``mean`` / ``ci95``; falls back to per-seed means, flat keys)."""
    ev = ev or {}
    mean, ci = ev.get("mean") or {}, ev.get("ci95") or {}
    per_seed = [s for s in (ev.get("per_seed") or []) if isinstance(s, dict)]
    out = {}
    for key, _, scale, dec, _ in COLUMNS:
        seeds = [v * scale for v in (num(s.get(key)) for s in per_seed) if v is not None]
        v = num(mean.get(key)) if key in mean else num(ev.get(key))
        if v is None and seeds:
            v = sum(seeds) / len(seeds) / scale
        c = _half_width(ci.get(key))
        out[key] = Cell(None if v is None else v * scale, None if c is None or v is None else c * scale, dec, seeds)
    return out


def _half_width(ci) -> float | None:
    """A CI as a half-width number or as experiment.evaluate's {"low", "high", "half_width"} dict (None: no CI)."""
    if isinstance(ci, dict):
        h = num(ci.get("half_width"))
        if h is None and num(ci.get("low")) is not None and num(ci.get("high")) is not None:
            h = (num(ci["high"]) - num(ci["low"])) / 2
        return h
    return num(ci)


def best_keys(cells: dict[str, dict[str, Cell]]) -> dict[str, float | None]:
    """Per column, the best shown value over the models (highest or lowest as the column prefers), or None."""
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
    f = num(v)
    if f is None:
        return DASH if v is None else str(v)
    if key in _RATE_KEYS:
        return f"{100 * f:.2f}%"
    return f"{f:.2f}" if f != int(f) else str(int(f))


def pct(v) -> str:
    """A fraction as a percentage with two decimals, a dash when it is not a number."""
    f = num(v)
    return DASH if f is None else f"{100 * f:.2f}%"


# ---------------------------------------------------------------------------------------------------------------------
# The report


def _table1(
    names: list[str],
    episodes: dict[str, str],
    cells: dict[str, dict[str, Cell]],
    caption: str = "Mean over evaluation seeds; ± is the 95% confidence half-width; best per column in bold.",
) -> Table:
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
            row.append(
                (
                    DASH
                    if r is None or r.mean is None
                    else f"{100 * r.mean:.1f}" + ("" if r.half_width is None else f" ± {100 * r.half_width:.1f}"),
                    False,
                )
            )
        out.append(row)
    return Table(
        ["Model"] + [f"{f} success (%)" for f in fams],
        out,
        "Per task family; mean over training seeds, ± the 95% interval over seeds.",
    )


def _comparison_table(comparisons: list) -> Table:
    rows = []
    for c in comparisons:
        scale, unit = (100.0, " pts") if c.metric == "success_rate" else (1.0, "")
        rows.append(
            [
                (f"{c.a} − {c.b}", False),
                (c.metric.replace("_", " "), False),
                (f"{scale * c.diff:+.2f}{unit}", False),
                (f"[{scale * c.low:+.2f}, {scale * c.high:+.2f}]", False),
                (str(c.tasks), False),
                (f"{c.seeds_a} / {c.seeds_b}", False),
            ]
        )
    return Table(
        ["Comparison", "Metric", "Difference", "95% interval", "Tasks", "Seeds"],
        rows,
        "Paired by held-out task (and by training seed where both methods have the same seeds); the "
        "interval is a two-level bootstrap over tasks and training seeds (experiment/stats.py).",
    )


def _family_comparison_table(by_pair: dict) -> Table:
    fams = sorted({f for by_family in by_pair.values() for f in by_family})
    rows = []
    for (a, b), by_family in by_pair.items():
        cells = [
            (DASH if c is None else f"{100 * c.diff:+.1f} [{100 * c.low:+.1f}, {100 * c.high:+.1f}]", False)
            for c in (by_family.get(f) for f in fams)
        ]
        rows.append([(f"{a} − {b}", False)] + cells)
    return Table(
        ["Comparison"] + [f"{f} (pts)" for f in fams],
        rows,
        "Success difference in points within each task family [95% interval], paired and bootstrapped as "
        "above over that family's held-out tasks. One interval per cell, none corrected for the number of "
        "cells: read a single excluded zero as a lead to check, not a finding.",
    )


def _grad_table(grads: dict) -> Table:
    rows = [
        [
            (label, False),
            (f"{g.median:.2f}", False),
            (f"{100 * g.clipped:.0f}", False),
            (f"{g.clip:g}", False),
            (str(g.steps), False),
        ]
        for label, g in grads.items()
    ]
    return Table(
        ["Method", "Median gradient norm", "Updates clipped (%)", "Clip", "Logged steps"],
        rows,
        "Global gradient norm before clipping, over every logged step of every training seed. "
        "A method's terms "
        "(pairs or labelled items, anchor, SFT term) are summed before the clip and AdamW, so the term with "
        "the largest gradient sets the update's direction: compare a preference method's norm with SFT "
        "(continued)'s, the SFT term alone (docs/method.md §7).",
    )


def _search_table(rows: list[dict]) -> Table:
    p = lambda v: DASH if v is None else f"{100 * v:.1f}"  # noqa: E731
    return Table(
        [
            "Model",
            "Tasks",
            "Simulations",
            "Without search (%)",
            "First simulation (%)",
            "Any simulation (%)",
            "Browser steps per task",
        ],
        [
            [
                (r["model"], False),
                (str(r["tasks"]), False),
                (str(r["simulations"]), False),
                (p(r["plain"]), False),
                (p(r["first_success_rate"]), False),
                (p(r["success_rate"]), True),
                (f"{r['browser_steps_per_task']:.1f}", False),
            ]
            for r in rows
        ],
        "Agent Q's search on the first held-out tasks (docs/method.md §9.1): the model proposes, its "
        "log-probs rank, the environment's success check is the reward it backs up; solved = a simulation "
        "succeeded. Without search: the same model's greedy evaluation on the same tasks.",
    )


ELEMENT_COLUMNS = (
    ("localisation", "Localisation (%)"),
    ("value_match", "Value match (%)"),
    ("answer_exact", "Answer exact (%)"),
    ("answer_f1", "Answer token F1 (%)"),
)


def element_rows(models: dict) -> list[list]:
    """One row per model with element-level metrics (docs/tasks.md): each the mean over its evaluations' means
    (one per training seed) where the metric applies, with the episodes it applies to."""
    rows = []
    for label, evs in models.items():
        evs = [e for e in (evs if isinstance(evs, list) else [evs]) if isinstance(e, dict)]
        row, any_value = [(label, False)], False
        for key, _ in ELEMENT_COLUMNS:
            vals = [num((e.get("mean") or {}).get(key)) for e in evs]
            vals = [v for v in vals if v is not None]
            n = sum(
                int(((s.get("elements") or {}).get(f"{key}_n")) or 0)
                for e in evs
                for s in (e.get("per_seed") or [])
                if isinstance(s, dict)
            )
            any_value |= bool(vals)
            row.append((f"{100 * sum(vals) / len(vals):.1f} (n={n})" if vals else DASH, False))
        if any_value:
            rows.append(row)
    return rows


def _element_table(rows: list[list]) -> Table:
    return Table(
        ["Model"] + [h for _, h in ELEMENT_COLUMNS],
        rows,
        'From the check\'s HTML elements (docs/tasks.md, "Element-level metrics"): localisation = the '
        "share of the elements whose state the task changes, shown to the agent, that it acted on; value "
        "match = the share of those holding the asked value at the end; answer exact / token F1 = the STOP "
        "answer against the check's reference. n = episodes where the metric applies.",
    )


def _claims_table(claims: list) -> Table:
    return Table(
        ["Claim (TGPO paper)", "Paper", "Ours (difference [95% interval])", "Verdict"],
        [[(c.text, False), (c.paper, False), (c.ours, False), (c.verdict, c.verdict == "reproduced")] for c in claims],
        "Reproduced: the interval lies on the claimed side of 0. Not reproduced: it lies on the other side, "
        "or excludes half the paper's gap. Inconclusive: otherwise.",
    )


def _reference_table() -> Table:
    """The paper's Table 1: one row per model, success · avg. steps · redundant steps for each benchmark."""
    models = list(dict.fromkeys(m for by_model in PAPER_TABLE1.values() for m in by_model))
    rows = []
    for m in models:
        row = [(m, False)]
        for by_model in PAPER_TABLE1.values():
            vals = by_model.get(m) or (None,) * len(COLUMNS)
            row += [(DASH if v is None else f"{v:.{dec}f}", False) for v, (_, _, _, dec, _) in zip(vals, COLUMNS)]
        rows.append(row)
    header = ["Model"] + [f"{b}: {h}" for b in PAPER_TABLE1 for _, h, *_ in COLUMNS]
    setups = "; ".join(f"{b} with {s}" for b, s in PAPER_BENCHMARKS.items())
    return Table(header, rows, f"TGPO paper, Table 1 ({setups}). GPT-4o: Online-Mind2Web success only.")


def one_run_per_task(dataset: dict) -> bool:
    """Whether the dataset summary shows one run per task (as many episodes as tasks, each task having at least
    one): then no step is taken by both a successful and a failed run of its task, and a label-conflict rate of 0
    measures nothing. False where the summary does not say (no ``tasks`` / ``episodes``)."""
    tasks, episodes = dataset.get("tasks"), dataset.get("episodes")
    return isinstance(tasks, int) and isinstance(episodes, int) and 0 < tasks == episodes


def conflict_text(dataset: dict) -> str:
    """Our label-conflict rate as the report shows it: a percentage, or not applicable with one run per task."""
    return NOT_APPLICABLE if one_run_per_task(dataset) else pct(dataset.get("label_conflict_rate"))


def _label_conflict_blocks(dataset: dict) -> list:
    """Table 2: our rate (per task family below it where there are several) beside the paper's benchmarks."""
    ours = conflict_text(dataset)
    by_family = dataset.get("label_conflict_by_family") or {}
    if len(by_family) < 2 or one_run_per_task(dataset):  # one family: its rate is the pooled one
        by_family = {}
    paper = [[(f"TGPO paper ({b})", False), (pct(rate), False)] for b, rate in PAPER_LABEL_CONFLICT.items()]
    table = Table(
        ["Dataset", "Label-conflict rate"],
        [[("ours", False), (ours, False)]]
        + [[(f"ours: {family or 'no family'}", False), (pct(rate), False)] for family, rate in by_family.items()]
        + paper,
        "Share of step occurrences whose merged branch is taken by at least one successful "
        "and at least one failed trajectory (per task family below the pooled rate): steps that "
        "KTO's episode outcomes label both ways, where the tree gives them one label. Only a dataset "
        "with several runs per task can have such steps.",
    )
    theirs = ", ".join(f"{pct(rate)} ({b})" for b, rate in PAPER_LABEL_CONFLICT.items())
    return [table, Para(f"Label-conflict rate, ours: {ours}; TGPO paper: {theirs}.")]


def _dataset_table(dataset: dict) -> Table:
    rows, seen = [], set()
    for key, label in DATASET_KEYS:
        if key in dataset:
            text = conflict_text(dataset) if key == "label_conflict_rate" else _fmt_stat(key, dataset[key])
            rows.append([(label, False), (text, False)])
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


def write_report(
    out_dir: str,
    *,
    title: str,
    models: dict[str, dict],
    dataset: dict | None = None,
    curves: dict[str, list[dict]] | None = None,
    trees: dict[str, str] | None = None,
    notes: str = "",
    reference: bool = True,
    rows: dict | None = None,
    family_rows: dict | None = None,
    comparisons: list | None = None,
    claims: list | None = None,
    family_comparisons: dict | None = None,
    learning_curves: dict[str, list[tuple[int, float]]] | None = None,
    search_rows: list[dict] | None = None,
    grad_rows: dict | None = None,
) -> dict:
    """Write ``report.md``, ``report.html`` and the plots into ``out_dir``; returns their paths.

    ``models``: label -> evaluation dict (Table 1 from each evaluation's own mean / interval). ``rows`` (label ->
    metric -> ``experiment.results.Row``, pooled over training seeds) replaces that when given, with ``models`` then
    mapping each label to its list of evaluations. ``family_rows`` (family -> rows), ``comparisons``, ``claims``,
    ``family_comparisons`` ((A, B) -> family -> comparison; ``experiment.results``), ``learning_curves`` (label ->
    [(step, success)]), ``search_rows`` (search at inference, ``experiment.outputs.search_rows``) and ``grad_rows``
    (method label -> ``experiment.results.GradRow``) add their sections."""
    os.makedirs(out_dir, exist_ok=True)
    models = dict(models or {})
    if rows is not None:
        names = list(rows)
        cells = {n: row_cells(rows[n]) for n in names}
        episodes = {n: _pooled_episodes(models.get(n) or []) for n in names}
        caption = (
            "Mean over training seeds (one model each, greedy decoding unless stated); ± is the 95% "
            "t-interval over seeds; best per column in bold."
        )
    else:
        names = list(models)
        cells = {n: model_cells(models[n]) for n in names}
        episodes = {n: _episodes(models[n]) for n in names}
        caption = "Mean over evaluation seeds; ± is the 95% confidence half-width; best per column in bold."

    caption += _decoding(models)
    plots = []
    plot_success(os.path.join(out_dir, "success.png"), names, cells)
    plot_steps(os.path.join(out_dir, "steps.png"), names, cells)
    plots += [os.path.join(out_dir, "success.png"), os.path.join(out_dir, "steps.png")]
    curve_files = plot_curves(out_dir, dict(curves or {}))
    plots += [os.path.join(out_dir, f) for f, _ in curve_files]

    blocks: list = [Heading(title, 1)]
    blocks.append(Heading("Table 1: held-out evaluation"))
    if names:
        evs = [m for v in models.values() for m in (v if isinstance(v, list) else [v]) if isinstance(m, dict)]
        tasks = {m.get("tasks") for m in evs if m.get("tasks") is not None}
        policies = (
            []
            if rows is not None
            else [f"{n}: {m['policy']}" for n, m in models.items() if isinstance(m, dict) and m.get("policy")]
        )
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
    elements = element_rows(models)
    if elements:
        blocks.append(Heading("Element-level metrics"))
        blocks.append(_element_table(elements))
    if family_rows:
        blocks.append(Heading("Success per task family"))
        blocks.append(_family_table(family_rows))
    if claims:
        blocks.append(Heading("The paper's claims"))
        blocks.append(_claims_table(claims))
    if comparisons:
        blocks.append(Heading("Paired comparisons"))
        blocks.append(_comparison_table(comparisons))
    if family_comparisons:
        blocks.append(Heading("Paired comparisons per task family"))
        blocks.append(_family_comparison_table(family_comparisons))
    if search_rows:
        blocks.append(Heading("Search at inference (Agent Q)"))
        blocks.append(_search_table(search_rows))
    if learning_curves:
        plot_learning(os.path.join(out_dir, "learning.png"), learning_curves)
        plots.append(os.path.join(out_dir, "learning.png"))
        blocks.append(Heading("Success vs training steps"))
        blocks.append(
            Para(
                "Held-out success of training snapshots (first training seed) on a fixed subset of the "
                "held-out tasks; the last point is the final model on the same tasks. A method trained "
                "from SFT goes on from SFT's last point (its steps counted after SFT's)."
            )
        )
        blocks.append(Image("learning.png", "success vs training steps"))
    if reference:
        blocks.append(Heading("Reference: the TGPO paper"))
        blocks.append(_reference_table())

    blocks.append(Heading("Table 2: label conflicts"))
    blocks += _label_conflict_blocks(dataset or {})

    blocks.append(Heading("Dataset statistics"))
    blocks.append(_dataset_table(dataset) if dataset else Para("No dataset summary."))

    blocks.append(Heading("Training curves"))
    if curve_files:
        blocks.append(Para(f"Runs: {', '.join(curves)}.", [(label, f) for f, label in curve_files]))
        blocks += [Image(f, label) for f, label in curve_files]
    else:
        blocks.append(Para("No training metrics."))
    if grad_rows:
        blocks.append(_grad_table(grad_rows))

    if trees:
        from trees.episode_view import episodes_page

        links = []
        for task, rel in trees.items():
            links.append((task, rel))
            if os.path.exists(os.path.join(out_dir, episodes_page(rel))):  # launch.report may name trees alone
                links.append((f"{task}: episodes", episodes_page(rel)))
        blocks.append(Heading("Trees"))
        blocks.append(
            Para(
                "Each task's merged tree, and its episodes step by step (screenshot, output, command or "
                "error, effect, process reward).",
                links,
            )
        )

    if notes and notes.strip():
        blocks.append(Heading("Notes"))
        blocks.append(Para(notes.strip(), pre=True))

    md_path, html_path = os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.html")
    write_text_atomic(md_path, to_markdown(blocks))
    write_text_atomic(html_path, to_html(blocks, title))
    return {"markdown": md_path, "html": html_path, "plots": plots}
