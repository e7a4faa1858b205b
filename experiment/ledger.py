"""A run's results ledger: one JSON file with what a pipeline run measured and how it was run, so a result can be
cited and compared without re-reading its report.

The report stage (``experiment.outputs.report``) writes ``<cfg.out>/report/results/<preset>-<commit>.json`` on every
run (inside the report stage's outputs: ``--redo=report`` rewrites it with the rest of the report). The repository's
own ``results/<name>.json`` holds the ledgers of chosen runs: a developer copies a run's file there by hand; the
pipeline never writes into the repository.

Keys: ``command`` (the command line as run), ``commit`` (``git rev-parse HEAD`` of this repository, or null),
``dirty`` (uncommitted changes to tracked files, or null), ``cpu_flags`` (the CPU features that decide float
rounding and bf16 speed, ``tgpo_jax.hardware.cpu_flags``), ``preset``, ``held_out_tasks``, ``seeds`` (training seeds),
``decoding``, ``methods`` (method key -> success_rate in [0, 1], avg_steps, redundant_steps: Table 1's values, the mean
over training seeds; ``success_by_family`` where the episodes name task families) and ``comparisons`` (Table 1's
paired comparisons with their 95 % intervals, the report's own numbers), and ``stage_seconds`` (each finished
stage's recorded seconds, the report's own left out, and their sum ``stages_total_s``: what the run cost on the
machine ``cpu_flags`` names; a stage done by an earlier invocation keeps the seconds it took then).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from typing import Mapping, Sequence

from experiment import results, stats
from experiment.names import method_label, model_name, parse_name
from tgpo_jax.files import write_json_atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command_line() -> str:
    """The command as run: the interpreter's own arguments (``python -m launch.pipeline …``) where Python keeps them
    (3.10+), else ``sys.argv``; shell-quoted, so it can be pasted back."""
    return shlex.join(getattr(sys, "orig_argv", None) or sys.argv)


def _git(*args: str, root: str = ROOT) -> str | None:
    """``git -C root args`` -> its stripped stdout, or None when git is absent, fails or the tree is no repository."""
    try:
        p = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def git_commit(root: str = ROOT) -> str | None:
    """The commit checked out at ``root``, or None outside a git checkout."""
    return _git("rev-parse", "HEAD", root=root) or None


def git_dirty(root: str = ROOT) -> bool | None:
    """Whether tracked files differ from the commit (None: unknown): such a run's commit does not say its code."""
    out = _git("status", "--porcelain", "--untracked-files=no", root=root)
    return None if out is None else bool(out)


def cpu_flags() -> str:
    """The CPU features that decide float rounding and bf16 speed (``tgpo_jax.hardware.cpu_flags``, the benchmarks'
    own: avx2, avx512f, avx512_bf16, amx_bf16, amx_tile; "unknown" without /proc/cpuinfo)."""
    from tgpo_jax.hardware import cpu_flags as flags

    return flags()


def method_key(name: str) -> str:
    """A model name's method key, training seed dropped: ``tgpo-s1`` -> ``tgpo``, ``tgpo-r2-s0`` -> ``tgpo-r2``."""
    method, r, _ = parse_name(name)
    return model_name(method, r)


def key_groups(evals: Mapping[str, dict], first_seed: int) -> dict[str, dict[int, dict]]:
    """``outputs.groups`` keyed by method key instead of display label: key -> {training seed: evaluation}
    (a name without a seed is the first seed's, as there)."""
    out: dict[str, dict[int, dict]] = {}
    for name, ev in evals.items():
        seed = parse_name(name)[2]
        out.setdefault(method_key(name), {})[first_seed if seed is None else seed] = ev
    return out


def held_out_tasks(groups: Mapping[str, Mapping[int, dict]]) -> int | list[int] | None:
    """The number of held-out tasks each evaluation ran: one number, or the sorted distinct numbers where the
    evaluations differ (None: no evaluation says)."""
    counts = sorted(
        {ev["tasks"] for runs in groups.values() for ev in runs.values() if isinstance(ev.get("tasks"), int)}
    )
    return None if not counts else counts[0] if len(counts) == 1 else counts


def method_entries(groups: Mapping[str, Mapping[int, dict]]) -> dict[str, dict]:
    """Method key -> Table 1's values (``results.table``: the mean over training seeds) and, where the episodes name
    task families, success per family (``results.table`` on that family's tasks)."""
    rows = results.table(groups)
    fams = [f for f in results.families(groups) if f]
    by_family = {f: results.table(groups, f) for f in fams}
    out = {}
    for key, row in rows.items():
        entry: dict = {m: row[m].mean for m in results.METRICS}
        entry["training_seeds"] = len(groups[key])
        if fams:
            entry["success_by_family"] = {f: by_family[f][key]["success_rate"].mean for f in fams}
        out[key] = entry
    return out


def comparison_entry(c: stats.Comparison, keys: Mapping[str, str]) -> dict:
    """A comparison as JSON, its sides named by method key (``keys``: display label -> key; unknown labels kept)."""
    d = dataclasses.asdict(c)
    d.update(a=keys.get(c.a, c.a), b=keys.get(c.b, c.b), label=f"{c.a} − {c.b}")
    return d


def build_ledger(
    groups: Mapping[str, Mapping[int, dict]],
    comparisons: Sequence[stats.Comparison],
    *,
    command: str,
    commit: str | None,
    dirty: bool | None,
    cpu_flags: str | None,
    preset: str,
    seeds: Sequence[int],
    decoding: Mapping | None = None,
    stage_seconds: Mapping[str, float] | None = None,
) -> dict:
    """The ledger of one run (keys in the module docstring). ``groups``: method key -> {training seed: evaluation}
    (``key_groups``); ``comparisons``: the report's ``results.comparisons``, whose sides are display labels."""
    keys = {method_label(k): k for k in groups}
    return {
        "command": command,
        "commit": commit,
        "dirty": dirty,
        "cpu_flags": cpu_flags,
        "preset": preset,
        "held_out_tasks": held_out_tasks(groups),
        "seeds": [int(s) for s in seeds],
        "decoding": dict(decoding or {}),
        "methods": method_entries(groups),
        "comparisons": [comparison_entry(c, keys) for c in comparisons],
        "stage_seconds": {k: round(float(v), 1) for k, v in (stage_seconds or {}).items()},
        "stages_total_s": round(sum(float(v) for v in (stage_seconds or {}).values()), 1),
    }


def finished_stage_seconds(status: Sequence[Mapping]) -> dict[str, float]:
    """Stage name -> recorded seconds of the stages ``StageRunner.status()`` calls done (current fingerprint)."""
    return {r["stage"]: float(r["seconds"]) for r in status if r["state"] == "done" and r.get("seconds") is not None}


def ledger_name(preset: str, commit: str | None) -> str:
    """``<preset>-<first 8 hex digits of the commit>``, or the preset alone without a commit."""
    return f"{preset}-{commit[:8]}" if commit else preset


def write_ledger(out_dir: str, ledger: dict) -> str:
    """``out_dir/<ledger_name>.json``, written atomically; returns its path."""
    path = os.path.join(out_dir, ledger_name(ledger["preset"], ledger["commit"]) + ".json")
    write_json_atomic(path, ledger)
    return path
