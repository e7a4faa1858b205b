"""Device mesh and the partition-rule table for every model parameter.

Mesh axes: ``data`` (pure data parallel), ``fsdp`` (data parallel with parameters sharded),
``tensor`` (Megatron-style model parallel over heads and MLP width).
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # the batch dimension is split over both data-parallel axes

# (regex on the "/"-joined parameter path, spec). First match wins; anything unmatched is replicated.
# Stacked layer weights carry a leading [L] axis, never sharded.
PARTITION_RULES: tuple[tuple[str, P], ...] = (
    (r"^embed$", P("tensor", "fsdp")),  # [V, D]
    (r"^lm_head$", P("fsdp", "tensor")),  # [D, V]
    (r"^layers/(q|k|v)_proj$", P(None, "fsdp", "tensor", None)),  # [L, D, H|K, Dh]
    (r"^layers/(q|k|v)_bias$", P(None, "tensor", None)),  # [L, H|K, Dh]
    (r"^layers/o_proj$", P(None, "tensor", None, "fsdp")),  # [L, H, Dh, D]
    (r"^layers/(gate|up)_proj$", P(None, "fsdp", "tensor")),  # [L, D, F]
    (r"^layers/down_proj$", P(None, "tensor", "fsdp")),  # [L, F, D]
    # LoRA factors of a weight [L, *in, *out] (A [L, *in, r], B [L, r, *out]): split over fsdp x tensor on every mesh,
    # tensor on the head / MLP axis where the weight has it, r never. Replicated, they and their Adam moments were
    # whole on every chip (41.9 M adapter parameters at rank 16 on Llama-3.1-8B). A tuple splits one dimension over
    # both axes, the first major (spec_for drops
    # the last that does not divide).
    (r"^layers/(q|k|v|gate|up)_proj_lora_a$", P(None, ("fsdp", "tensor"), None)),  # [L, D, r]
    (r"^layers/(q|k|v)_proj_lora_b$", P(None, None, "tensor", "fsdp")),  # [L, r, H|K, Dh]
    (r"^layers/(gate|up)_proj_lora_b$", P(None, None, ("tensor", "fsdp"))),  # [L, r, F]
    (r"^layers/o_proj_lora_a$", P(None, "tensor", "fsdp", None)),  # [L, H, Dh, r]
    (r"^layers/down_proj_lora_a$", P(None, ("tensor", "fsdp"), None)),  # [L, F, r]
    (r"^layers/(o|down)_proj_lora_b$", P(None, None, ("fsdp", "tensor"))),  # [L, r, D]
    (r".*", P()),  # norms, biases over D
)

log = logging.getLogger(__name__)


def make_mesh(shape: Sequence[int] = (1, 1, 1), devices=None) -> Mesh:
    """A (data, fsdp, tensor) mesh over ``devices`` (default: all). -1 in one place takes the rest."""
    devices = list(devices if devices is not None else jax.devices())
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ValueError(f"mesh shape {shape}: at most one -1")
    if any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh shape {tuple(shape)}: sizes must be positive (or -1 once, for the rest)")
    if -1 in shape:
        rest = int(np.prod([s for s in shape if s != -1]))
        if len(devices) % rest:  # else -1 would become 0 or drop devices silently
            raise ValueError(f"mesh shape {tuple(shape)}: {len(devices)} devices do not divide by {rest}")
        shape[shape.index(-1)] = len(devices) // rest
    need = int(np.prod(shape))
    if need > len(devices) or (need < len(devices) and jax.process_count() > 1):
        raise ValueError(f"mesh shape {tuple(shape)} needs {need} devices, have {len(devices)}")
    if need < len(devices):
        log.warning("mesh shape %s uses %d of %d devices", tuple(shape), need, len(devices))
    arr = np.asarray(devices[:need], dtype=object).reshape(shape)
    return Mesh(arr, AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(AXES))


def spec_for(path: str, shape: Sequence[int], mesh: Mesh, rules=PARTITION_RULES) -> P:
    """The rule's spec for a parameter, with any axis that does not divide the dimension dropped."""
    for pattern, spec in rules:
        if re.search(pattern, path):
            break
    else:  # pragma: no cover - the table ends with a catch-all
        spec = P()
    out = []
    for dim, axis in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        axes = (axis,) if isinstance(axis, str) else tuple(axis or ())
        while axes and dim % int(np.prod([mesh.shape[a] for a in axes])):  # drop the minor axes that do not divide
            log.info("parameter %s: dim %d not divisible by mesh axes %s; replicated on %s", path, dim, axes, axes[-1])
            axes = axes[:-1]
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return P(*out)


def sharding_for(path: str, shape: Sequence[int], mesh: Mesh | None):
    """The sharding of parameter ``path`` with ``shape`` on ``mesh`` (the first device without a mesh)."""
    if mesh is None:
        return jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return NamedSharding(mesh, spec_for(path, shape, mesh))


def put(array: np.ndarray, sharding) -> jax.Array:
    """Place a host array with ``sharding``; each process only transfers its addressable shards."""
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda idx: array[idx])


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """A batch array's sharding: the leading axis over the data-parallel axes, the other ``ndim - 1`` replicated."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def check_batch_divides(batch_size: int, mesh: Mesh) -> None:
    """Raise ``ValueError`` unless ``batch_size`` divides over the mesh's data x fsdp devices."""
    n = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_size % n:
        raise ValueError(
            f"batch size {batch_size} does not divide over the mesh's data x fsdp = {n} devices "
            f"(mesh {dict(mesh.shape)}); choose a multiple of {n}"
        )
