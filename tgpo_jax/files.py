"""Atomic file writes: a reader sees the old file or the whole new one, never part of it, and a crash leaves no
half-written file behind (temporary file in the same directory, flushed to disk, then ``os.replace``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from typing import Any, Iterator


def file_mode() -> int:
    """Ordinary permissions for a new file (``mkstemp`` makes 0600 ones): 0666 less the process's umask, read when
    a file is written (Python can only read the umask by setting it, so it is set back at once)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends without an error,
    removed when it raises. The directory is created if needed."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # on disk before the rename: a power cut leaves the old file, not an empty one
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8 atomically (a temporary file, then a rename)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def write_json_atomic(path: str, obj: Any) -> None:
    """``obj`` as indented, key-sorted UTF-8 JSON."""
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True))


def sha256_file(path: str) -> str:
    """The file's sha256 (hex), read in 8 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 23), b""):
            h.update(block)
    return h.hexdigest()
