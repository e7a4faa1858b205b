"""Episode recordings: one directory per episode with ``steps.jsonl``, screenshots and ``summary.json``.

Layout under a collection directory::

    collection.json                   what was collected (env, policy, seed, K, harness settings)
    tasks.jsonl                       the tasks, one JSON object per line
    episodes/<task dir>/<run:03d>/
        steps.jsonl                   one line per step, appended and flushed as the step ends
        screens/<t:03d>.png           the screenshot of state s_t (final state: final.png)
        summary.json                  written last, atomically: an episode is finished iff it exists

A directory without ``summary.json`` is an interrupted episode; resuming deletes and re-runs it.
Errored episodes (browser crash, watchdog) have ``status == "errored"``; resume re-runs them by default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from typing import Iterator

from rollout.core import Task
from rollout.episode_format import (  # noqa: F401 (FINISHED, STATUSES, RecordingError: re-exported)
    FINISHED,
    FORMAT,
    STATUSES,
    EpisodeSummary,
    RecordingError,
    StepRecord,
    check_summary_to_write,
    upgrade_step,
    upgrade_summary,
)
from tgpo_jax.files import write_json_atomic, write_text_atomic  # noqa: F401 (write_json_atomic: re-exported)

log = logging.getLogger(__name__)


def task_dir_name(task_id: str) -> str:
    """The directory name of a task's episodes (``/`` replaced by ``__``)."""
    return task_id.replace("/", "__")


def episode_dir(out_dir: str, task_id: str, run: int) -> str:
    """The directory of run ``run`` of task ``task_id`` in a collection."""
    return os.path.join(out_dir, "episodes", task_dir_name(task_id), f"{run:03d}")


class EpisodeWriter:
    """Writes one episode as it happens; ``finish`` seals it with the summary."""

    def __init__(self, out_dir: str, task_id: str, run: int, screenshots: bool = True):
        self.dir = episode_dir(out_dir, task_id, run)
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)  # an interrupted or errored earlier attempt
        os.makedirs(os.path.join(self.dir, "screens") if screenshots else self.dir, exist_ok=True)
        self._steps = open(os.path.join(self.dir, "steps.jsonl"), "w", encoding="utf-8")
        self._digest = hashlib.sha256()  # sealed into the summary: a reader detects any later change of the steps
        self.num_steps = 0

    def screenshot_path(self, name: str) -> tuple[str, str]:
        """(absolute path, path relative to the episode directory) for screenshot ``name``."""
        rel = os.path.join("screens", f"{name}.png")
        return os.path.join(self.dir, rel), rel

    def step(self, record: StepRecord) -> None:
        """Append one step record to ``steps.jsonl`` (flushed) and to the running digest; ``RecordingError`` for a
        record that does not follow the format (``rollout/episode_format.py``)."""
        upgrade_step(record, f"step {self.num_steps} to write")
        line = json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"
        self._steps.write(line)
        self._steps.flush()
        self._digest.update(line.encode("utf-8"))
        self.num_steps += 1

    def finish(self, summary: dict) -> None:
        """Close the steps file and write ``summary.json`` in this format, sealed with the steps' sha256;
        ``RecordingError`` (a ``ValueError``) for a summary that does not follow the format."""
        check_summary_to_write(summary)
        self._steps.close()
        sealed = {**summary, "format": FORMAT, "steps_sha256": self._digest.hexdigest()}
        write_json_atomic(os.path.join(self.dir, "summary.json"), sealed)

    def close(self) -> None:
        """Close the steps file if still open (an episode never finished has no summary)."""
        if not self._steps.closed:
            self._steps.close()


def read_summary(path: str) -> EpisodeSummary | None:
    """The episode's ``summary.json`` in this reader's format, or None when it has none; ``RecordingError`` when it is
    not valid JSON or does not follow the format."""
    f = os.path.join(path, "summary.json")
    if not os.path.exists(f):
        return None
    try:
        with open(f, encoding="utf-8") as fh:
            d = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordingError(f"corrupt episode summary {f}: {e}") from e
    return upgrade_summary(d, f)


def episode_status(out_dir: str, task_id: str, run: int, repair: bool = False) -> str | None:
    """'success' | 'failure' | 'errored' for a sealed episode, None if absent, interrupted or damaged (a summary
    that is not JSON or does not follow the format). ``repair``: a damaged episode is moved to
    ``<out_dir>/damaged/<task>/<run>-<time>`` (kept, out of the way), so a resumed collection runs it again."""
    path = episode_dir(out_dir, task_id, run)
    try:
        s = read_summary(path)
        if s is None:
            return None
        return s["status"]
    except (RecordingError, OSError) as e:
        problem = str(e)
    if repair:
        set_aside(out_dir, path, problem)
    return None


def set_aside(out_dir: str, path: str, problem: str) -> str:
    """Move the damaged episode ``path`` to ``<out_dir>/damaged/<task>/<run>-<time>`` (kept for inspection, out of
    the way: a resumed collection runs that episode again). -> the new path."""
    task, run = os.path.split(os.path.normpath(path))
    dst = os.path.join(
        out_dir, "damaged", os.path.basename(task), f"{run}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    )
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.rename(path, dst)
    log.warning("damaged episode: %s; moved to %s, it runs again", problem, dst)
    return dst


@dataclasses.dataclass
class EpisodeRecord:
    """A recorded episode: its directory, summary and step records."""

    path: str
    summary: EpisodeSummary
    steps: list[StepRecord]

    @property
    def task_id(self) -> str:
        """The episode's task id."""
        return self.summary["task_id"]


def read_steps(path: str, summary: EpisodeSummary | None = None) -> list[StepRecord]:
    """The steps of ``path``, each checked against the format; with ``summary``, the file first checked against its
    seal (``verify_steps``) in the same read."""
    with open(os.path.join(path, "steps.jsonl"), "rb") as f:
        data = f.read()
    if summary is not None:
        _check_seal(path, summary, data)
    lines = data.split(b"\n")  # only "\n": JSON escapes it, while other line separators may be in a page's text
    if lines and not lines[-1]:
        lines.pop()  # after the last newline
    steps = []
    for i, line in enumerate(lines):
        try:
            d = json.loads(line.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RecordingError(f"corrupt step {i} in {path}/steps.jsonl: {e}") from e
        steps.append(upgrade_step(d, f"{path}/steps.jsonl, line {i + 1}"))
    return steps


def verify_steps(path: str, summary: dict) -> None:
    """Raise RecordingError when ``steps.jsonl`` is not the file the episode sealed (``steps_sha256`` in the
    summary; recordings made before it are not checked)."""
    with open(os.path.join(path, "steps.jsonl"), "rb") as f:
        _check_seal(path, summary, f.read())


def _check_seal(path: str, summary: dict, data: bytes) -> None:
    want = summary.get("steps_sha256")
    if want is None:
        return
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise RecordingError(
            f"{path}/steps.jsonl was changed after the episode was sealed (sha256 {got[:12]}…, "
            f"the summary says {want[:12]}…)"
        )


def iter_episodes(out_dir: str, include_errored: bool = False, verify: bool = False) -> Iterator[EpisodeRecord]:
    """Sealed episodes of a collection, in task / run order (errored ones only when asked). ``verify``: each
    episode's steps are first checked against its seal (RecordingError when they were changed)."""
    root = os.path.join(out_dir, "episodes")
    if not os.path.isdir(root):
        raise RecordingError(f"{out_dir} is not a collection directory (no episodes/)")
    for task in sorted(os.listdir(root)):
        for run in sorted(os.listdir(os.path.join(root, task))):
            path = os.path.join(root, task, run)
            summary = read_summary(path)
            if summary is None or (summary["status"] == "errored" and not include_errored):
                continue
            yield EpisodeRecord(path, summary, read_steps(path, summary if verify else None))


def write_tasks(out_dir: str, tasks: list[Task]) -> None:
    """Write the collection's tasks to ``tasks.jsonl`` (atomically)."""
    write_text_atomic(
        os.path.join(out_dir, "tasks.jsonl"),
        "".join(json.dumps(t.to_json(), ensure_ascii=False, sort_keys=True) + "\n" for t in tasks),
    )


def read_tasks(out_dir: str) -> list[Task]:
    """The tasks of a collection's ``tasks.jsonl``."""
    with open(os.path.join(out_dir, "tasks.jsonl"), encoding="utf-8") as f:
        return [Task.from_json(json.loads(line)) for line in f if line.strip()]


def check_collection(out_dir: str, meta: dict) -> None:
    """Write ``collection.json``, or check a resumed / sibling-shard collection used the same settings."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "collection.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        diff = {k: (old.get(k), meta.get(k)) for k in set(old) | set(meta) if old.get(k) != meta.get(k)}
        if diff:
            raise RecordingError(
                f"{out_dir} holds a collection with other settings ("
                f"{', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in sorted(diff.items()))}); "
                "use another --out, or move that directory aside to start over"
            )
        return
    write_json_atomic(path, meta)
