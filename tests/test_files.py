"""Atomic writes (tgpo_jax/files.py): the old file or the whole new one, never part of either."""

import json
import os
import stat

import pytest

from tgpo_jax.files import atomic_path, write_json_atomic, write_text_atomic


def test_write_replaces_whole_file_with_ordinary_permissions(tmp_path):
    path = str(tmp_path / "sub" / "a.json")  # the directory is made
    write_json_atomic(path, {"b": 1, "a": "é"})
    write_json_atomic(path, {"b": 2})
    assert json.load(open(path, encoding="utf-8")) == {"b": 2}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    assert os.listdir(tmp_path / "sub") == ["a.json"]


def test_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "a.txt")
    write_text_atomic(path, "old\n")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(path) as tmp, open(tmp, "w") as f:
            f.write("half of the new")
            raise RuntimeError("killed mid-write")
    assert open(path).read() == "old\n" and os.listdir(tmp_path) == ["a.txt"]
