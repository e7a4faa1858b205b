"""Resumable stages: each stage records what it was run with, so a re-run skips what is finished and refuses to
mix outputs of different configurations.

A stage's *fingerprint* hashes its own configuration slice and its dependencies' fingerprints. The marker
``<out>/stages/<name>.json`` holds the fingerprint, the slice, the status (``running`` while it runs, ``done``
after) and the stage's small JSON result. On a re-run:

- no marker, or a ``running`` marker with the same fingerprint: the stage runs (its own resume takes over:
  collection skips finished episodes, training restarts from the latest checkpoint, evaluation likewise);
- a ``done`` marker with the same fingerprint: skipped;
- a different fingerprint: ``StaleStage`` naming the changed keys, unless the stage is in ``redo`` — then its
  outputs are deleted and it runs again, and so does every stage downstream of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import time
from typing import Callable, Sequence

from tgpo_jax.files import write_text_atomic


class StaleStage(RuntimeError):
    """A finished (or started) stage was run with a different configuration than the current one."""


class DamagedInput(RuntimeError):
    """A stage failed reading a file another stage wrote: the message names the file and the ``--redo`` that
    rewrites it."""


# the errors a damaged or missing file gives (JSON, datasets, checkpoints, episodes, safetensors: ValueError or
# OSError subclasses, or a library's own RuntimeError)
READ_ERRORS = (ValueError, OSError, KeyError, RuntimeError)


@dataclasses.dataclass
class Stage:
    """One resumable step of the pipeline: its work, the spec and dependencies its output depends on, the paths a forced
    re-run deletes, and a description."""

    name: str
    run: Callable[[], dict]  # does the work; returns a small JSON-able result
    spec: dict  # the configuration this stage's output depends on
    deps: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()  # paths deleted before a forced re-run
    describe: str = ""


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))


def fingerprints(stages: Sequence[Stage]) -> dict[str, str]:
    """Stage name -> a hash of its spec and its dependencies' fingerprints; ``ValueError`` when a dependency is missing
    or comes later."""
    out: dict[str, str] = {}
    for s in stages:  # stages are in dependency order
        missing = [d for d in s.deps if d not in out]
        if missing:
            raise ValueError(f"stage {s.name!r} depends on {missing}, which come later or do not exist")
        payload = _canonical({"spec": s.spec, "deps": {d: out[d] for d in s.deps}})
        out[s.name] = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return out


def downstream(stages: Sequence[Stage], roots: Sequence[str]) -> set[str]:
    """``roots`` and every stage that depends on one of them, directly or not."""
    names = {s.name for s in stages}
    unknown = sorted(set(roots) - names)
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; stages: {[s.name for s in stages]}")
    hit = set(roots)
    for s in stages:
        if hit.intersection(s.deps):
            hit.add(s.name)
    return hit


def diff(old, new, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested JSON values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            if k not in old:
                out.append(f"{key}: (absent) -> {new[k]!r}")
            elif k not in new:
                out.append(f"{key}: {old[k]!r} -> (absent)")
            else:
                out += diff(old[k], new[k], key)
        return out
    return [] if _canonical(old) == _canonical(new) else [f"{prefix or '(value)'}: {old!r} -> {new!r}"]


class StageRunner:
    """Runs stages in order, skipping those whose marker records the same fingerprint, and refusing to redo finished
    stages whose configuration changed."""

    def __init__(self, out_dir: str, stages: Sequence[Stage], redo: Sequence[str] = (), log=None):
        self.out_dir = out_dir
        self.stages = list(stages)
        self.prints = fingerprints(self.stages)
        self.redo = downstream(self.stages, redo) if redo else set()
        self.marker_dir = os.path.join(out_dir, "stages")
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        # A stage whose own configuration is unchanged but which now reads another set of stages (the report and
        # export when a model is added to eval.models) holds derived output: it re-runs, with what follows it,
        # except a stage whose own configuration changed (that one is still refused, naming the change).
        markers = {s.name: self.marker(s.name) for s in self.stages}
        spec_changed = {
            s.name
            for s in self.stages
            if markers[s.name] is not None and _canonical(markers[s.name].get("spec")) != _canonical(s.spec)
        }
        self.regathered = {}  # stage -> '+eval-kto, -eval-dpo'
        for s in self.stages:
            m = markers[s.name]
            if m is None or "deps" not in m or m.get("fingerprint") == self.prints[s.name] or s.name in spec_changed:
                continue
            old, new = set(m["deps"]), set(s.deps)
            if old != new:
                self.regathered[s.name] = ", ".join(
                    [f"+{d}" for d in sorted(new - old)] + [f"-{d}" for d in sorted(old - new)]
                )
        self.redo |= downstream(self.stages, list(self.regathered)) - spec_changed

    def marker_path(self, name: str) -> str:
        """Path of stage ``name``'s marker file."""
        return os.path.join(self.marker_dir, f"{name}.json")

    def marker(self, name: str) -> dict | None:
        """Stage ``name``'s marker (None when absent); ``StaleStage`` when it cannot be read."""
        path = self.marker_path(name)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise StaleStage(
                f"stage marker {path} is unreadable ({e}); delete it or re-run with --redo={name}"
            ) from None

    def _write(self, name: str, record: dict) -> None:
        write_text_atomic(self.marker_path(name), json.dumps(record, indent=1, default=str))

    def status(self) -> list[dict]:
        """Per stage: name, state (done / running / stale / todo / redo) and the recorded seconds."""
        rows = []
        for s in self.stages:
            m = self.marker(s.name)
            if s.name in self.redo:
                state = "redo"
            elif m is None:
                state = "todo"
            elif m.get("fingerprint") != self.prints[s.name]:
                state = "stale"
            else:
                state = m.get("status", "running")
            rows.append({"stage": s.name, "state": state, "seconds": (m or {}).get("seconds"), "describe": s.describe})
        return rows

    def producer(self, message: str, reader: str) -> tuple[str, str] | None:
        """(stage, output path) of the earlier stage whose output ``message`` names first (an error names its
        subject first; ``model.path=…`` and the like come after), None if it names none."""
        best = None  # (position, -length, stage, path)
        for s in self.stages:
            if s.name == reader:
                break
            for p in s.outputs:
                m = p and re.search(re.escape(p) + r"(?![\w-]|\.\w)", message)  # not a longer name's prefix
                if m and (best is None or (m.start(), -len(p)) < best[:2]):
                    best = (m.start(), -len(p), s.name, p)
        return None if best is None else best[2:]

    def check(self) -> None:
        """Refuse before any work when a finished stage's configuration changed (nothing is run or deleted)."""
        problems = []
        for s in self.stages:
            m = self.marker(s.name)
            if m is None or s.name in self.redo or m.get("fingerprint") == self.prints[s.name]:
                continue
            changes = diff(m.get("spec"), s.spec)
            why = (
                "; ".join(changes[:6]) + (" …" if len(changes) > 6 else "")
                if changes
                else "a stage it depends on changed or was re-run"
            )
            problems.append(f"  {s.name} ({m.get('status')}): {why}")
        if problems:
            raise StaleStage(
                "these stages ran with a different configuration:\n"
                + "\n".join(problems)
                + f"\nRe-run them (and everything after them) with --redo={problems[0].split()[0]} "
                "(comma-separated for several), or use a new output directory."
            )

    def run(self, until: str | None = None) -> dict[str, dict]:
        """Run every stage in order (``until``: stop after that one)."""
        if until is not None and until not in self.prints:
            raise ValueError(f"unknown stage {until!r}; stages: {list(self.prints)}")
        self.check()
        # a redo outlives this process: a finished stage this run is to re-run is marked 'redo' now, so a run killed
        # before reaching it still re-runs it (with its outputs deleted) when started again without --redo
        for s in self.stages:
            m = self.marker(s.name)
            if s.name in self.redo and m is not None and m.get("status") == "done":
                self._write(s.name, {**m, "status": "redo"})
            if s.name == until:
                break
        results: dict[str, dict] = {}
        n = len(self.stages)
        for i, s in enumerate(self.stages, 1):
            if until is not None and i > 1 and self.stages[i - 2].name == until:
                break
            m = self.marker(s.name)
            head = f"[{i}/{n}] {s.name}"
            if m is not None and s.name not in self.redo and m.get("status") == "done":
                self.log(f"{head}: done earlier ({m.get('seconds', 0):.0f} s), skipped")
                results[s.name] = m.get("result") or {}
                continue
            if s.name in self.redo or (m is not None and m.get("status") == "redo"):
                for p in s.outputs:
                    if os.path.isdir(p):
                        shutil.rmtree(p)
                    elif os.path.exists(p):
                        os.remove(p)
                self.redo.discard(s.name)
            if s.name in self.regathered:
                self.log(f"{head}: reads other stages now ({self.regathered[s.name]}), running again")
            resumed = m is not None and m.get("status") == "running"
            self.log(f"{head}: {'resuming' if resumed else 'running'}" + (f" - {s.describe}" if s.describe else ""))
            record = {
                "name": s.name,
                "fingerprint": self.prints[s.name],
                "spec": s.spec,
                "deps": list(s.deps),
                "status": "running",
                "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            self._write(s.name, record)
            t0 = time.perf_counter()
            try:
                result = s.run() or {}
            except READ_ERRORS as e:
                source = self.producer(str(e), s.name)
                if source is None:
                    raise
                raise DamagedInput(
                    f"{s.name}: {e}\n{source[1]} was written by stage {source[0]}, and reading it "
                    f"failed: re-run that stage with --redo={source[0]} (and what follows it), "
                    "or restore the file"
                ) from e
            record.update(
                status="done",
                result=result,
                seconds=time.perf_counter() - t0,
                finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
            )
            self._write(s.name, record)
            self.log(f"{head}: done in {record['seconds']:.0f} s")
            results[s.name] = result
        return results
