"""Sharded ArrayRecord datasets of ``NodeRecord``s with a JSON manifest.

Layout of a dataset directory::

    nodes-00000-of-00003.array_record   # one JSON-encoded NodeRecord per record (schema.to_bytes)
    nodes-00001-of-00003.array_record
    nodes-00002-of-00003.array_record
    manifest.json                        # written last; the directory is a dataset iff it exists and matches

Records go round-robin over shards, so the global index (shards in manifest order, records in file order)
is the order in which ``grain.sources.ArrayRecordDataSource(reader.paths)`` sees them.

Atomicity: shards are written under ``.tmp-*`` names (never ``*.array_record``), fsynced and renamed into place;
the manifest goes last by tmp + rename. Overwriting first removes the old manifest, so a write killed at any
point leaves no manifest, i.e. nothing that reads as a valid dataset.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import uuid
from bisect import bisect_right
from typing import Any, Iterable, Mapping

from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from tgpo_jax.data.schema import READABLE_VERSIONS, SCHEMA_VERSION, NodeRecord
from tgpo_jax.files import sha256_file

FORMAT = "tgpo-nodes"
MANIFEST = "manifest.json"
SHARD_SUFFIX = ".array_record"
TMP_PREFIX = ".tmp-"
# group_size:1 -> every record is its own chunk, so a random read decodes one record, not 65536.
WRITER_OPTIONS = "group_size:1"
# Readahead is wasted work under shuffled random access (array_record's own advice).
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


class DatasetError(ValueError):
    """A dataset directory is missing, incomplete, corrupt or of another schema version."""


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file of a dataset: its basename, record count and sha256."""

    file: str  # basename inside the dataset directory
    num_records: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        """The shard's fields as a JSON-safe dict."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A dataset's ``manifest.json``: schema version, format, creation time, shards, counts, the builder's config and
    free-form statistics."""

    schema_version: int
    format: str
    created: str  # ISO 8601, UTC
    num_records: int
    shards: tuple[ShardInfo, ...]
    counts: Mapping[str, int]  # nodes, branches, tasks, multi_branch_nodes
    config: Mapping[str, Any]  # the caller's (builder) config, verbatim
    extra: Mapping[str, Any]  # free-form stats, e.g. label-conflict rate

    def to_dict(self) -> dict[str, Any]:
        """The manifest as a JSON-safe dict (the inverse of ``from_dict``)."""
        return {
            "schema_version": self.schema_version,
            "format": self.format,
            "created": self.created,
            "num_records": self.num_records,
            "shards": [s.to_dict() for s in self.shards],
            "counts": dict(self.counts),
            "config": self.config,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        """A manifest from its ``to_dict`` form (``config`` and ``extra`` default to empty)."""
        shards = tuple(
            ShardInfo(file=s["file"], num_records=int(s["num_records"]), sha256=s["sha256"]) for s in d["shards"]
        )
        return cls(
            schema_version=d["schema_version"],
            format=d["format"],
            created=d["created"],
            num_records=int(d["num_records"]),
            shards=shards,
            counts=dict(d["counts"]),
            config=d.get("config") or {},
            extra=d.get("extra") or {},
        )


# ---------------------------------------------------------------------------------------------- writing
def shard_name(name: str, i: int, n: int) -> str:
    """The file name of shard ``i`` of ``n`` of the dataset ``name``."""
    return f"{name}-{i:05d}-of-{n:05d}{SHARD_SUFFIX}"


def write_dataset(
    records: Iterable[NodeRecord],
    out_dir: str,
    *,
    num_shards: int = 1,
    config: Mapping[str, Any] | None = None,
    name: str = "nodes",
    overwrite: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Manifest:
    """Validate, serialise and write ``records`` round-robin into ``num_shards`` shards; manifest last."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if not name or os.sep in name or name.startswith("."):
        raise ValueError(f"bad dataset name {name!r}")
    config, extra = dict(config or {}), dict(extra or {})
    try:  # fail before any work if the manifest could not be written
        json.dumps({"config": config, "extra": extra}, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"config/extra must be JSON-serialisable: {e}") from e

    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    old_files: set[str] = set()
    if os.path.exists(manifest_path):
        if not overwrite:
            raise DatasetError(f"{out_dir}: a dataset already exists (pass overwrite=True to replace it)")
        try:
            old_files = {s.file for s in read_manifest(out_dir, check_files=False).shards}
        except DatasetError:
            pass  # unreadable old manifest: nothing trustworthy to clean up later
        # Invalidate first: from here until the new manifest lands, the directory is not a dataset.
        os.unlink(manifest_path)
        _fsync_dir(out_dir)

    token = uuid.uuid4().hex[:12]
    finals = [shard_name(name, i, num_shards) for i in range(num_shards)]
    tmps = [os.path.join(out_dir, f"{TMP_PREFIX}{token}-{f}.partial") for f in finals]
    writers: list[ArrayRecordWriter] = []
    counts = [0] * num_shards
    stats = {"nodes": 0, "branches": 0, "multi_branch_nodes": 0}
    tasks: set[str] = set()
    try:
        writers = [ArrayRecordWriter(t, WRITER_OPTIONS) for t in tmps]
        for k, rec in enumerate(records):
            rec.validate()
            writers[k % num_shards].write(rec.to_bytes())
            counts[k % num_shards] += 1
            stats["nodes"] += 1
            stats["branches"] += len(rec.branches)
            stats["multi_branch_nodes"] += len(rec.branches) >= 2
            tasks.add(rec.task_id)
        for w, t in zip(writers, tmps):
            if not w.ok():  # ok() is False once closed, so ask before; close() itself raises on failure
                raise DatasetError(f"{out_dir}: ArrayRecord writer failed on {os.path.basename(t)}")
            w.close()
        shards = []
        for t, f, n in zip(tmps, finals, counts):
            _fsync_file(t)
            shards.append(ShardInfo(file=f, num_records=n, sha256=sha256_file(t)))
            os.replace(t, os.path.join(out_dir, f))
        _fsync_dir(out_dir)
    except BaseException:
        for w in writers:  # best effort: the original error is the one to report
            try:
                if w.is_open():
                    w.close()
            except Exception:
                pass
        for t in tmps:
            if os.path.exists(t):
                os.unlink(t)
        raise

    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        format=FORMAT,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        num_records=sum(counts),
        shards=tuple(shards),
        counts={**stats, "tasks": len(tasks)},
        config=config,
        extra=extra,
    )
    tmp_manifest = os.path.join(out_dir, f"{TMP_PREFIX}{token}-{MANIFEST}")
    with open(tmp_manifest, "w", encoding="utf-8") as fh:
        json.dump(manifest.to_dict(), fh, indent=2, sort_keys=True, allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp_manifest, manifest_path)
    _fsync_dir(out_dir)

    # Only now is the new dataset in place: drop old shards it does not reuse (e.g. a different shard count).
    for f in old_files - set(finals):
        p = os.path.join(out_dir, f)
        if os.path.basename(f) == f and os.path.exists(p):
            os.unlink(p)
    return manifest


# ---------------------------------------------------------------------------------------------- reading
def read_manifest(data_dir: str, *, check_files: bool = True) -> Manifest:
    """Load and sanity-check ``manifest.json``; with ``check_files`` also require every listed shard to exist."""
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.isfile(path):
        raise DatasetError(f"{data_dir}: no {MANIFEST} (not a dataset, or its write did not finish)")
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{os.path.join(data_dir, MANIFEST)} is unreadable: {e}") from e
    if not isinstance(d, dict):
        raise DatasetError(f"{data_dir}: {MANIFEST} is not a JSON object")
    if d.get("format") != FORMAT:
        raise DatasetError(f"{data_dir}: {MANIFEST} format {d.get('format')!r}, expected {FORMAT!r}")
    if d.get("schema_version") not in READABLE_VERSIONS:
        raise DatasetError(
            f"{data_dir}: dataset schema_version {d.get('schema_version')!r}, "
            f"this reader knows {', '.join(map(str, READABLE_VERSIONS))}"
        )
    try:
        m = Manifest.from_dict(d)
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{data_dir}: malformed {MANIFEST}: {e!r}") from e
    if sum(s.num_records for s in m.shards) != m.num_records:
        raise DatasetError(f"{data_dir}: {MANIFEST} num_records {m.num_records} != sum over shards")
    for s in m.shards:
        if os.path.basename(s.file) != s.file or s.file.startswith("."):
            raise DatasetError(f"{data_dir}: {MANIFEST} lists a bad shard name {s.file!r}")
        if check_files and not os.path.isfile(os.path.join(data_dir, s.file)):
            raise DatasetError(f"{data_dir}: shard {s.file} listed in {MANIFEST} is missing")
    return m


def verify_dataset(data_dir: str) -> Manifest:
    """Recompute each shard's sha256 and record count against the manifest (errors name the file)."""
    m = read_manifest(data_dir)
    for s in m.shards:
        path = os.path.join(data_dir, s.file)
        digest = sha256_file(path)
        if digest != s.sha256:
            raise DatasetError(
                f"{path}: sha256 {digest} does not match the manifest's {s.sha256} (truncated or corrupted shard)"
            )
        n = _open_reader(path).num_records()
        if n != s.num_records:
            raise DatasetError(f"{path}: holds {n} records, manifest says {s.num_records}")
    return m


def decode_record(raw: bytes, where: str) -> NodeRecord:
    """Bytes of one record -> NodeRecord; any failure becomes a DatasetError naming ``where``."""
    try:
        return NodeRecord.from_bytes(raw)
    except Exception as e:  # schema errors, but also odd JSON shapes that trip attribute access
        raise DatasetError(f"{where}: cannot decode record: {e}") from e


class DatasetReader:
    """Random access to a dataset's records by global index (shards in manifest order)."""

    def __init__(self, data_dir: str, verify: bool = False):
        self.data_dir = data_dir
        self.manifest = verify_dataset(data_dir) if verify else read_manifest(data_dir)
        self.paths = [os.path.join(data_dir, s.file) for s in self.manifest.shards]
        self._starts: list[int] = []  # global index of each shard's first record
        total = 0
        for s in self.manifest.shards:
            self._starts.append(total)
            total += s.num_records
        self._len = total
        self._readers: dict[int, ArrayRecordReader] = {}

    def __len__(self) -> int:
        return self._len

    def _reader(self, k: int) -> ArrayRecordReader:
        r = self._readers.get(k)
        if r is None:
            r = _open_reader(self.paths[k])
            if r.num_records() != self.manifest.shards[k].num_records:
                raise DatasetError(
                    f"{self.paths[k]}: holds {r.num_records()} records, manifest says "
                    f"{self.manifest.shards[k].num_records}"
                )
            self._readers[k] = r
        return r

    def read_bytes(self, i: int) -> bytes:
        """The raw bytes of record ``i`` (over all shards, in order)."""
        k, j = self._locate(i)
        return self._read(k, j)

    def __getitem__(self, i: int) -> NodeRecord:
        k, j = self._locate(i)
        return decode_record(self._read(k, j), self._where(k, j))

    def _where(self, k: int, j: int) -> str:
        return f"{self.paths[k]} record {j} (global index {j + self._starts[k]})"

    def _read(self, k: int, j: int) -> bytes:
        try:
            return self._reader(k).read([j])[0]
        except DatasetError:
            raise
        except Exception as e:  # Riegeli's C++ status (a hash mismatch, a cut chunk) names neither file nor record
            raise DatasetError(
                f"{self._where(k, j)}: cannot be read ({str(e).splitlines()[0][:300]}); the shard is "
                "damaged: rebuild the dataset (launch.build_dataset) or restore the file"
            ) from e

    def _locate(self, i: int) -> tuple[int, int]:
        if not isinstance(i, int):
            raise TypeError(f"index must be an int, got {type(i).__name__}")
        g = i + self._len if i < 0 else i
        if not 0 <= g < self._len:
            raise IndexError(f"index {i} out of range for {self._len} records")
        # Last shard starting at or before g; an empty shard shares its start with the next, so it is never picked.
        k = bisect_right(self._starts, g) - 1
        return k, g - self._starts[k]

    def close(self) -> None:
        """Close the open shard readers."""
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __enter__(self) -> "DatasetReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- helpers
def _open_reader(path: str) -> ArrayRecordReader:
    try:
        return ArrayRecordReader(path, READER_OPTIONS)
    except Exception as e:  # C++ status errors surface as RuntimeError/ValueError
        raise DatasetError(f"{path}: cannot open ArrayRecord shard: {e}") from e


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    # Makes the renames durable; some filesystems refuse fsync on directories, which is harmless here.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
