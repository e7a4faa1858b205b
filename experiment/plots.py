"""The report's PNG plots (matplotlib figures without pyplot, rendered with Agg, written atomically): success and
steps per model, success vs training steps, training curves."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from experiment.document import DASH, num
from tgpo_jax.files import atomic_path

if TYPE_CHECKING:
    from experiment.report import Cell

# Training curves: plot name -> metric keys to look for (first one a run logged wins), y label.
CURVES = (
    ("loss", ("train/loss", "loss"), "training loss"),
    (
        "reward_accuracy",
        ("train/rewards/accuracies", "rewards/accuracies", "train/reward_accuracy", "reward_accuracy"),
        "reward accuracy",
    ),
    ("eval_loss", ("eval/loss",), "held-out loss"),
)


def _save_fig(fig, path: str) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def _figure(width: float = 7.0, height: float = 4.0):
    # A bare Figure (no pyplot): renders with Agg, no display and no global figure state.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot(1, 1, 1)


def plot_success(path: str, names: list[str], cells: dict[str, dict[str, Cell]]) -> None:
    """Bar chart of each model's success rate with its 95% interval and per-seed points, saved to ``path``."""
    fig, ax = _figure(max(5.0, 1.1 * len(names) + 2), 4.0)
    xs = list(range(len(names)))
    vals = [cells[n]["success_rate"].value for n in names]
    errs = [cells[n]["success_rate"].ci or 0.0 for n in names]
    ax.bar(
        xs,
        [v if v is not None else 0.0 for v in vals],
        yerr=errs,
        capsize=4,
        color="#4C72B0",
        edgecolor="black",
        linewidth=0.6,
    )
    for x, n, v, err in zip(xs, names, vals, errs):
        seeds = cells[n]["success_rate"].seeds
        if len(seeds) > 1:
            ax.scatter([x] * len(seeds), seeds, s=10, color="black", alpha=0.6, zorder=3)
        top = max([(v or 0.0) + err] + seeds)
        ax.annotate(
            DASH if v is None else f"{v:.1f}",
            (x, top),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(xs, names)
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 110)
    ax.set_title("Success rate (mean ± 95% CI)")
    ax.grid(axis="y", alpha=0.3)
    _save_fig(fig, path)


def plot_steps(path: str, names: list[str], cells: dict[str, dict[str, Cell]]) -> None:
    """Grouped bars of each model's average and redundant steps per episode with 95% intervals, saved to ``path``."""
    fig, ax = _figure(max(5.0, 1.3 * len(names) + 2), 4.0)
    w = 0.38
    for off, key, label, color in (
        (-w / 2, "avg_steps", "average steps", "#55A868"),
        (w / 2, "redundant_steps", "redundant steps", "#C44E52"),
    ):
        vals = [cells[n][key].value for n in names]
        errs = [cells[n][key].ci or 0.0 for n in names]
        ax.bar(
            [i + off for i in range(len(names))],
            [v if v is not None else 0.0 for v in vals],
            w,
            yerr=errs,
            capsize=3,
            label=label,
            color=color,
            edgecolor="black",
            linewidth=0.6,
        )
    ax.set_xticks(list(range(len(names))), names)
    ax.set_ylabel("steps per episode")
    ax.set_title("Average and redundant steps (mean ± 95% CI)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    _save_fig(fig, path)


def plot_learning(path: str, curves: dict[str, list[tuple[int, float]]]) -> None:
    """Held-out success (%) against training step, a line per model, saved to ``path``."""
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
        pts = [(float(r["step"]), num(r[key])) for r in rows if key in r and "step" in r]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            return sorted(pts)
    return []


def plot_curves(out_dir: str, curves: dict[str, list[dict]]) -> list[tuple[str, str]]:
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
