"""The compute dtype picked from the machine: bf16 only where the CPU has bf16 units (or on an accelerator)."""

import pytest

from tgpo_jax.hardware import compute_dtype, cpu_flags, cpu_has_bf16_units

AVX2 = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}
AMX = AVX2 | {"avx512f", "amx_tile", "amx_bf16"}


def test_auto_takes_bf16_only_where_the_cpu_has_bf16_units():
    assert compute_dtype("auto", backend="cpu", flags=AVX2) == "float32"
    assert compute_dtype("auto", backend="cpu", flags=AVX2 | {"avx512f"}) == "float32"  # AVX-512 without BF16
    assert compute_dtype("auto", backend="cpu", flags=AVX512_BF16) == "bfloat16"
    assert compute_dtype("auto", backend="cpu", flags=AMX) == "bfloat16"
    assert compute_dtype("auto", backend="cpu", flags=frozenset()) == "float32"  # flags unknown: the safe choice
    assert compute_dtype("auto", backend="gpu", flags=AVX2) == "bfloat16"
    assert compute_dtype("auto", backend="tpu", flags=AVX2) == "bfloat16"
    assert not cpu_has_bf16_units(AVX2) and cpu_has_bf16_units(AVX512_BF16)


def test_an_explicit_dtype_stays_and_a_bad_one_is_named():
    for d in ("float32", "bfloat16"):
        assert compute_dtype(d, backend="cpu", flags=AVX2) == d
    with pytest.raises(ValueError, match="model dtype 'fp16'"):
        compute_dtype("fp16", backend="cpu", flags=AVX2)


def test_this_machines_flags_decide_the_training_dtype():
    """A run config's dtype 'auto' (configs/base.py) reaches the model as this machine's choice."""
    from configs.base import get_config
    from tgpo_jax.training.loop import model_overrides

    c = get_config("smollm2-135m")
    assert c.model.dtype == "auto"
    want = "bfloat16" if ("avx512_bf16" in cpu_flags() or "amx_bf16" in cpu_flags()) else "float32"
    assert model_overrides(c.model)["dtype"] == want
