"""What the side-by-side benchmarks share: each side runs in its own process and prints one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_side(module: str, mark: str, args: list[str], timeout: int, shown: list[str] | None = None) -> dict:
    """``python -m module *args`` -> the JSON after its last ``mark`` line, or {"error": ...}; ``shown``: the
    arguments to print (default all)."""
    cmd = [sys.executable, "-m", module, *args]
    print("  running: " + " ".join(args if shown is None else shown), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        sys.stderr.write(f"    timed out after {timeout} s\n{(e.stderr or b'')[-3000:]!s}\n")
        return {"side": args[0], "args": args, "error": "timeout"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(mark)]
    if p.returncode or not lines:
        sys.stderr.write(p.stdout[-3000:] + "\n" + p.stderr[-6000:] + "\n")
        return {"side": args[0], "args": args, "error": f"exit {p.returncode}"}
    out = json.loads(lines[-1][len(mark) :])
    out["wall_s"] = time.perf_counter() - t0
    print(f"    done in {out['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return out


def versions(names) -> dict:
    """{package: installed version} for those of ``names`` that are installed."""
    from importlib import metadata

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu_flags() -> str:
    """The CPU features that decide bf16 matmul speed (AVX512-BF16 / AMX: PyTorch's oneDNN bf16 runs natively)."""
    from tgpo_jax.hardware import cpu_flags as flags

    return flags()
