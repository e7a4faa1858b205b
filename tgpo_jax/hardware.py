"""What the machine computes fast: the CPU's bf16 units, and the compute dtype picked from them.

XLA:CPU and PyTorch run bf16 matrix work natively only where the CPU has bf16 units (AVX512-BF16 or AMX); on an
AVX2-only CPU bf16 is emulated and slower than float32. A model
config's ``dtype="auto"`` takes bfloat16 on accelerators and on CPUs with those units, float32 elsewhere.
"""

from __future__ import annotations

import functools

FLAGS_SHOWN = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # the flags benchmarks print
BF16_UNITS = ("avx512_bf16", "amx_bf16")
DTYPES = ("float32", "bfloat16")


@functools.lru_cache(maxsize=1)
def _flag_set(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    try:
        with open(path) as f:
            line = next(ln for ln in f if ln.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return frozenset(line.split(":", 1)[1].split())


def cpu_flags() -> str:
    """The CPU features that decide bf16 matmul speed, space-separated ("unknown" where /proc/cpuinfo has none)."""
    fl = _flag_set()
    if fl is None:
        return "unknown"
    return " ".join(x for x in FLAGS_SHOWN if x in fl) or "no AVX2"


def cpu_has_bf16_units(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU (or the given set of CPU flags) has bf16 arithmetic units."""
    fl = _flag_set() if flags is None else flags
    return bool(fl) and any(x in fl for x in BF16_UNITS)


def compute_dtype(requested: str, backend: str | None = None, flags: frozenset[str] | None = None) -> str:
    """``requested`` as a concrete dtype name: "auto" is bfloat16 on a GPU / TPU or a CPU with bf16 units, else
    float32; "float32" and "bfloat16" stay as they are."""
    if requested in DTYPES:
        return requested
    if requested != "auto":
        raise ValueError(f"model dtype {requested!r}: expected 'auto' or one of {DTYPES}")
    if backend is None:
        import jax

        backend = jax.default_backend()
    if backend != "cpu":
        return "bfloat16"
    return "bfloat16" if cpu_has_bf16_units(flags) else "float32"
