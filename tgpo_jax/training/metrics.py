"""Metrics to JSONL and TensorBoard event files (tensorboardX), written by process 0 only."""

from __future__ import annotations

import json
import logging
import math
import os
import time

import jax
import numpy as np

log = logging.getLogger(__name__)


class MetricsWriter:
    """Writes scalar metrics to ``<directory>/metrics.jsonl`` and TensorBoard (on process 0 by default)."""

    def __init__(self, directory: str, enabled: bool | None = None):
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.path = os.path.join(directory, "metrics.jsonl")
        self._tb = None
        if self.enabled:
            os.makedirs(directory, exist_ok=True)
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(directory, "tensorboard"))

    def write(self, step: int, metrics: dict, prefix: str = "train") -> dict:
        """Record ``metrics`` at ``step`` under ``prefix/``; the row of prefixed float values."""
        row = {f"{prefix}/{k}": _scalar(v) for k, v in metrics.items()}
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps({"step": int(step), "time": time.time(), **row}) + "\n")
            for k, v in row.items():
                if math.isfinite(v):
                    self._tb.add_scalar(k, v, int(step))
        return row

    def flush(self) -> None:
        """Flush the TensorBoard writer."""
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Close the TensorBoard writer."""
        if self._tb is not None:
            self._tb.close()


def _scalar(v) -> float:
    return float(np.asarray(jax.device_get(v)))


def read_metrics(directory: str) -> list[dict]:
    """The rows of ``directory/metrics.jsonl``; a line that is not JSON (a write cut short by a kill) is skipped
    with a warning naming file and line, as the training resume drops it."""
    path = os.path.join(directory, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                log.warning("%s line %d is not JSON (a write cut short); skipped", path, n)
    return rows
