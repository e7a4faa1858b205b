"""Every launch entry point imports and defines its flags: a flag definition that fails at import (a wrong argument,
a name not imported) breaks the command before any test of its work runs, and only the slow tier ran most of them."""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTRIES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "launch", "*.py"))
                 if os.path.basename(p) not in ("__init__.py", "entry.py", "browser_flags.py"))


@pytest.mark.parametrize("name", ENTRIES)
def test_entry_point_lists_its_flags(name):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run([sys.executable, "-m", f"launch.{name}", "--help"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-3000:]
    assert f"launch.{name}" in out or "flags:" in out.lower(), out[-3000:]
