"""Orbax checkpoints of the whole training state: parameters, optimizer, step, RNG and data iterator.

Saves are asynchronous (training continues while arrays are written) and atomic (Orbax writes to a
temporary directory and renames it when complete), ``keep`` most recent are kept, plus every multiple of
``keep_period`` (the snapshots a success-vs-steps curve evaluates). Restores go into an
abstract target carrying each array's sharding, so a run resumes onto the same mesh layout.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import jax
import orbax.checkpoint as ocp


log = logging.getLogger(__name__)


class CheckpointDamaged(RuntimeError):
    """No kept checkpoint step could be read back."""


class Checkpointer:
    """Orbax checkpoints of a run: the train state with a JSON sidecar (step, data iterator state, extras), keeping the
    last ``keep``."""

    def __init__(self, directory: str, *, keep: int = 3, async_save: bool = True, keep_period: int | None = None):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True, keep_period=keep_period or None
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest saved step, or None."""
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        """All saved steps, ascending."""
        return sorted(self.manager.all_steps())

    def save(
        self,
        step: int,
        state: dict[str, Any],
        data_state: dict | None = None,
        extra: dict | None = None,
        force: bool = True,
    ) -> None:
        """Save ``state`` at ``step`` with the data iterator's state and ``extra`` in the metadata (asynchronously when
        so configured)."""
        meta = {"step": int(step), "data_state": _jsonable(data_state), **(extra or {})}
        self.manager.save(
            step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=force
        )

    def restore(self, state_like: dict[str, Any], step: int | None = None) -> tuple[dict[str, Any], dict]:
        """``state_like``: a live or abstract state; its arrays' shardings place the restored arrays."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state_like)
        out = self.manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
        )
        return out["state"], out["meta"]

    def restore_intact(self, state_like: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        """The newest step that reads back whole, newest first; a damaged step (a deleted or truncated file) is
        moved to ``<directory>-damaged/`` (kept for inspection, out of the manager's way: the run saves that step
        again) and the next older one is tried. -> (state, meta)."""
        damaged: list[int] = []
        errors: list[str] = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state, meta = self.restore(state_like, step)
                if damaged:
                    log.warning(
                        "checkpoint step(s) %s in %s were damaged (moved to %s-damaged); resumed from step %d",
                        damaged,
                        self.directory,
                        self.directory,
                        step,
                    )
                return state, meta
            except Exception as e:  # noqa: BLE001 - Orbax raises many kinds (structure, zstd, missing file)
                damaged.append(step)
                errors.append(f"step {step}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
                self._move_aside(step)
        raise CheckpointDamaged(
            f"no intact checkpoint in {self.directory}: " + "; ".join(errors) + f" (moved to {self.directory}-damaged/)"
        )

    def _move_aside(self, step: int) -> None:
        src = os.path.join(self.directory, str(step))
        if not os.path.isdir(src):
            return
        dst_dir = self.directory + "-damaged"
        os.makedirs(dst_dir, exist_ok=True)
        os.rename(src, os.path.join(dst_dir, f"{step}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"))
        self.manager.reload()

    def wait(self) -> None:
        """Block until pending saves are written."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and close the manager."""
        self.manager.wait_until_finished()
        self.manager.close()


def _jsonable(x):
    """grain iterator states are JSON-friendly dicts; anything else is stored as its repr-free JSON form."""
    return json.loads(json.dumps(x)) if x is not None else None
