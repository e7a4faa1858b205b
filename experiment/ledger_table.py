"""The results ledger as one Markdown page: a row per measured method of every ``results/*.json`` entry and its paired
comparisons, so the docs quote the ledger instead of copying its numbers by hand (``launch.results_table`` writes
``docs/results.md``; a test keeps the page equal to the ledger)."""

from __future__ import annotations

import glob
import json
import os
from typing import Mapping

from experiment.names import DISPLAY, method_label, parse_name

HEADER = (
    "# Results\n\n"
    "Generated from the results ledger (`results/*.json`, written by the pipeline's report stage) by\n"
    "`python -m launch.results_table`; edit the ledger, not this page. Success is held-out, greedy decoding;\n"
    "steps are the mean per episode; comparisons are paired over the held-out tasks (and training seeds), with\n"
    "95 % intervals.\n"
)


def load_entries(results_dir: str) -> dict[str, dict]:
    """Entry name (the file's stem) -> its ledger, every ``*.json`` under ``results_dir`` in name order."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return out


def method_order(key: str) -> tuple:
    """Table 1's order: base, SFT, KTO, KTO-Tree, DPO, TGPO, then the baselines; rounds after round 1."""
    method, r, _ = parse_name(key)
    order = list(DISPLAY)
    return (order.index(method) if method in order else len(order), r, key)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "−")


def entry_section(name: str, d: Mapping) -> str:
    """One entry: how it was run, then a row per method (success, its families, steps) and its success comparisons."""
    seeds = ", ".join(str(s) for s in d["seeds"])
    commit = (d.get("commit") or "unknown")[:8]
    lines = [
        f"## {name}",
        "",
        f"`{d['command']}`",
        "",
        f"Preset `{d['preset']}` · commit `{commit}` · CPU flags `{d['cpu_flags']}` · "
        f"{d['held_out_tasks']} held-out tasks · training seeds {seeds}"
        + (f" · stages {d['stages_total_s'] / 60:.0f} min" if d.get("stages_total_s") else ""),
        "",
    ]
    families = sorted({f for m in d["methods"].values() for f in m.get("success_by_family", {})})
    head = ["method", "success %", *[f"{f} %" for f in families], "avg steps", "redundant steps"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(d["methods"], key=method_order):
        m = d["methods"][key]
        by_family = m.get("success_by_family", {})
        cells = [
            method_label(key),
            _pct(m["success_rate"]),
            *[_pct(by_family[f]) if f in by_family else "—" for f in families],
            f"{m['avg_steps']:.2f}",
            f"{m['redundant_steps']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    paired = [c for c in d.get("comparisons", []) if c.get("metric") == "success_rate"]
    if paired:
        lines += [""] + [
            f"- {c['label']}: {_points(c['diff'])} points [{_points(c['low'])}, {_points(c['high'])}] "
            f"over {c['tasks']} tasks"
            for c in paired
        ]
    return "\n".join(lines) + "\n"


def render(entries: Mapping[str, Mapping]) -> str:
    """The whole page: the header, then each entry in name order."""
    return HEADER + "".join("\n" + entry_section(name, entries[name]) for name in sorted(entries))
