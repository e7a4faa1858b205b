"""Run an ablation: one training run per named override set, then one table of their final metrics.

  python -m launch.ablate --config=configs/tgpo.py:tiny --out=runs/ablate \
      --set=model.tokenizer=data/tok --set=data.train_dir=data/train --set=data.eval_dir=data/test \
      --sweep=base: --sweep=margin0:data.margin=0.0 --sweep=clip2:data.weight_clip=2.0,optim.learning_rate=3e-6
Each run trains in this process, one after another, into ``<out>/<name>``. Rerunning the same command
skips runs that finished (``summary.json`` exists) and resumes an interrupted one from its checkpoint.
The table goes to ``<out>/summary.md`` and ``<out>/summary.csv``.

Values are Python literals where ``ast.literal_eval`` reads them (``3e-6``, ``True``, ``(1, 1, 1)``),
strings otherwise; a string field keeps the text as written. A sweep's overrides are separated by
commas that precede ``key=`` (so ``mesh.shape=(1,1,1),train.seed=1`` is two overrides).
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import logging
import math
import os
import re
import sys
from typing import Any, Callable, Iterable, Sequence

from absl import app, flags

from launch.entry import prepare
from tgpo_jax.files import atomic_path, write_text_atomic

log = logging.getLogger(__name__)

METRICS = ("eval/rewards/accuracies", "eval/rewards/margins", "eval/loss", "train/loss")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_SPLIT = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_.]*\s*=)")  # a comma that starts the next key=value


class OverrideError(ValueError):
    """A malformed override or one naming a key the config does not have."""


# ---------------------------------------------------------------------------------------------- parsing
def parse_value(text: str) -> Any:
    """A Python literal where ``ast.literal_eval`` reads one, else the text itself."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text.strip()


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """["a.b=1", "c=x"] -> {"a.b": 1, "c": "x"} (insertion-ordered; a later key wins).

    Each item may also hold several overrides separated by commas (``a=1,b=(1,2)``).
    """
    out: dict[str, Any] = {}
    for item in items:
        if item is None or not item.strip():
            continue
        for part in _SPLIT.split(item):
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or not key:
                raise OverrideError(f"override {part!r}: expected key=value (e.g. data.margin=0.1)")
            if not _KEY.match(key):
                raise OverrideError(f"override {part!r}: {key!r} is not a dotted config key")
            out[key] = parse_value(value)
    return out


def parse_sweep(entry: str) -> tuple[str, dict[str, Any]]:
    """ "name:key=value,key=value" -> (name, overrides); "name" or "name:" alone is a run with no overrides."""
    name, _, rest = entry.partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise OverrideError(
            f"sweep entry {entry!r}: the run name {name!r} must be letters, digits, '_', '-' or '.' "
            f"(it names the run's directory); expected name:key=value,key=value"
        )
    return name, parse_overrides([rest])


def apply_overrides(cfg, overrides: dict[str, Any]):
    """Set each dotted key of ``overrides`` on the ConfigDict ``cfg`` (in place; returns it).

    Unknown keys raise OverrideError naming the key and the fields that exist there. A string field
    takes the text as written (``model.tokenizer=123`` stays "123"); a bool field also reads true/false.
    """
    for key, value in overrides.items():
        *head, last = key.split(".")
        node, where = cfg, []
        for part in head:
            child = _get(node, part)
            if child is _MISSING:
                raise OverrideError(_unknown(key, ".".join(where), node))
            if not hasattr(child, "keys"):
                raise OverrideError(
                    f"unknown config key {key!r}: {'.'.join(where + [part])} is a value ({child!r}), not a section"
                )
            node, where = child, where + [part]
        current = _get(node, last)
        if current is _MISSING:
            raise OverrideError(_unknown(key, ".".join(where), node))
        if hasattr(current, "keys"):
            raise OverrideError(
                f"config key {key!r} is a section ({', '.join(sorted(current.keys()))}), "
                f"not a value: set one of its fields, e.g. {key}.{sorted(current.keys())[0]}=..."
            )
        value = _coerce(value, current)
        try:
            node[last] = value
        except (TypeError, ValueError) as e:
            raise OverrideError(
                f"config key {key!r}: cannot set {value!r} ({type(value).__name__}) on a field "
                f"of type {type(current).__name__}: {e}"
            ) from e
    return cfg


_MISSING = object()


def _get(node, key):
    try:
        return node[key] if key in node else _MISSING
    except TypeError:
        return _MISSING


def _unknown(key: str, where: str, node) -> str:
    known = (
        f"; known keys there: {', '.join(sorted(node.keys()))}" if node is not None and hasattr(node, "keys") else ""
    )
    return f"unknown config key {key!r} (no such field in {where or 'the top-level config'}){known}"


def _coerce(value, current):
    if isinstance(current, str) and value is not None and not isinstance(value, str):
        return _text(value)
    if isinstance(current, bool) and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(value)
    if isinstance(current, list) and isinstance(value, tuple):
        return list(value)
    return value


def _text(value) -> str:
    return value if isinstance(value, str) else repr(value)


def load_config(spec: str):
    """``path/to/config.py[:preset]`` -> the module's ``get_config(preset)`` (or ``get_config()``)."""
    path, sep, preset = spec.partition(":")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {path!r} not found (expected path/to/config.py[:preset])")
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))  # configs/x.py imports `configs.base`
    if root not in sys.path:
        sys.path.insert(0, root)
    name = f"_ablate_config_{abs(hash(os.path.abspath(path)))}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.get_config(preset) if sep else module.get_config()


# ---------------------------------------------------------------------------------------------- table
def summary_row(name: str, overrides: dict[str, Any], summary: dict | None, status: str = "done") -> dict:
    """One table row from a run's summary.json contents (None for a failed run)."""
    summary = summary or {}
    metrics = {**(summary.get("final") or {}), **(summary.get("eval") or {})}
    row = {
        "run": name,
        "status": status,
        "overrides": dict(overrides),
        "steps": summary.get("final_step", summary.get("steps")),
    }
    row.update({m: metrics.get(m) for m in METRICS})
    return row


def write_summary(out_dir: str, rows: Sequence[dict], *, common: dict[str, Any] | None = None) -> tuple[str, str]:
    """Write ``summary.csv`` and ``summary.md`` for ``rows`` (from ``summary_row``); returns their paths.

    Columns: run, status, one per override key (in first-seen order; blank where a run does not set
    it), steps, then the metrics. ``common``: the overrides shared by every run, noted above the table.
    """
    os.makedirs(out_dir, exist_ok=True)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r.get("overrides", {}) if k not in keys]
    extra = [c for r in rows for c in r if c not in ("run", "status", "overrides", "steps", *METRICS)]
    extra = list(dict.fromkeys(extra))
    header = ["run", "status", *keys, "steps", *METRICS, *extra]

    def cells(r, fmt, fmt_ov=None):
        ov, fmt_ov = r.get("overrides", {}), fmt_ov or fmt
        return [
            fmt(r.get("run")),
            fmt(r.get("status")),
            *(fmt_ov(ov[k]) if k in ov else "" for k in keys),
            *(fmt(r.get(c)) for c in ("steps", *METRICS, *extra)),
        ]

    csv_path = os.path.join(out_dir, "summary.csv")
    with atomic_path(csv_path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in rows:
            w.writerow(cells(r, _csv_cell))

    md_path = os.path.join(out_dir, "summary.md")
    lines = [f"# Ablation: {os.path.abspath(out_dir)}", ""]
    if common:
        lines += ["Every run: " + ", ".join(f"`{k}={_text(v)}`" for k, v in common.items()), ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cells(r, _md_cell, _md_text)) + " |" for r in rows]  # overrides as given
    write_text_atomic(md_path, "\n".join(lines) + "\n")
    return md_path, csv_path


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return _text(v)


def _md_cell(v) -> str:
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:.4g}"
    return _md_text(v)


def _md_text(v) -> str:
    return "" if v is None else _text(v).replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------------------------- runner
def run_ablation(
    config: str | Callable[[], Any],
    sweeps: Sequence[str],
    out: str,
    sets: Sequence[str] = (),
    *,
    train_fn: Callable | None = None,
) -> list[dict]:
    """Train each sweep entry (``name:key=value,...``) in turn into ``<out>/<name>``; write the table.

    ``config``: a ``path[:preset]`` spec or a zero-argument factory returning a fresh ConfigDict.
    Every configuration is built and checked before the first run trains, so a typo in the last entry
    fails at once. Finished runs (``summary.json`` present) are not retrained. A run that raises is
    reported in the table (status ``failed: ...``) and the others still run; the error is re-raised
    at the end as RuntimeError.
    """
    if train_fn is None:
        from tgpo_jax.training import loop

        train_fn = loop.train
    if not sweeps:
        raise OverrideError("no --sweep entries: give at least one name:key=value,... (or 'base:' for no change)")
    common = parse_overrides(sets)
    entries = [parse_sweep(s) for s in sweeps]
    names = [n for n, _ in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise OverrideError(f"sweep run names must be unique; repeated: {dup}")
    factory = config if callable(config) else (lambda: load_config(config))
    out = os.path.abspath(out)

    configs = []
    for name, ov in entries:
        cfg = factory()
        apply_overrides(cfg, common)
        apply_overrides(cfg, ov)
        cfg.train.output_dir = os.path.join(out, name)
        configs.append(cfg)

    rows, failed = [], []
    os.makedirs(out, exist_ok=True)
    for (name, ov), cfg in zip(entries, configs):
        path = os.path.join(cfg.train.output_dir, "summary.json")
        status = "done"
        if not os.path.exists(path):
            log.info("ablation run %s (%s)", name, ", ".join(f"{k}={_text(v)}" for k, v in ov.items()) or "base")
            try:
                result = train_fn(cfg)
            except Exception as e:  # noqa: BLE001 - reported in the table, re-raised at the end
                log.exception("ablation run %s failed", name)
                failed.append((name, e))
                rows.append(summary_row(name, ov, None, status=f"failed: {type(e).__name__}: {e}"))
                write_summary(out, rows, common=common)
                continue
            if isinstance(result, dict) and "stopped_early_at" in result:
                rows.append(summary_row(name, ov, None, status=f"stopped at step {result['stopped_early_at']}"))
                write_summary(out, rows, common=common)
                continue
        else:
            status = "done (earlier)"
            log.info("ablation run %s: finished earlier, skipped", name)
            if _config_changed(cfg):
                status = "done (earlier, with a different config)"
                log.warning(
                    "ablation run %s finished earlier with a config that differs from this one; delete %s "
                    "to retrain it",
                    name,
                    cfg.train.output_dir,
                )
        with open(path) as f:
            rows.append(summary_row(name, ov, json.load(f), status=status))
        write_summary(out, rows, common=common)  # a partial table survives an interruption
    write_summary(out, rows, common=common)
    if failed:
        raise RuntimeError(
            f"{len(failed)} of {len(entries)} ablation runs failed: "
            + "; ".join(f"{n}: {type(e).__name__}: {e}" for n, e in failed)
        )
    return rows


def _config_changed(cfg) -> bool:
    """Whether the config.json a finished run wrote differs from ``cfg`` (what this rerun would train)."""
    path = os.path.join(cfg.train.output_dir, "config.json")
    try:
        with open(path) as f:
            return json.load(f) != json.loads(cfg.to_json_best_effort())
    except (OSError, ValueError):
        return False


def _define_flags():
    flags.DEFINE_string("config", "configs/tgpo.py", "training config file (path[:preset])")
    flags.DEFINE_multi_string("set", [], "override applied to every run: key=value (dotted key)")
    flags.DEFINE_multi_string("sweep", [], "one run: name:key=value,key=value")
    flags.DEFINE_string("out", None, "ablation directory: one subdirectory per run, summary.md / summary.csv")
    flags.mark_flag_as_required("out")


def main(argv):
    """Run the ablation the flags describe and print its summary table and the table's path."""
    prepare(argv)
    f = flags.FLAGS
    run_ablation(f.config, f.sweep, f.out, f.set)
    md = os.path.join(os.path.abspath(f.out), "summary.md")
    with open(md) as fh:
        print(fh.read())
    print(md)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
