"""Memory and compute of a training job on paper: compile the real steps on abstract inputs, allocate nothing.

The train step is ``Trainer.jit_train_step`` (what ``launch/train.py`` runs through ``loop.fit``), the reference
pass is ``Trainer.jit_reference_logprobs`` (the precomputed sidecar's), and the sampler's steps are
``Sampler._prefill`` / ``Sampler._decode_chunk``. Their inputs are ShapeDtypeStructs carrying the shardings the
run would give them (the partition-rule table for parameters, the optimizer moments like their parameter, the
batch over data x fsdp), on any mesh: a TPU topology's devices without a TPU (``topology_devices``: libtpu compiles
for them), or N CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``). XLA's memory analysis is
per device; the arguments are also split by kind from their shardings.

FLOPs: XLA's cost analysis counts a while loop's body once, and the model scans over its layers (and the step
over micro-batches and log-prob chunks), so its figure is far below the step's work. ``counted`` FLOPs walk the
step's jaxpr instead: every dot product, times the length of each scan around it (rematerialised forward passes
included, as they run); elementwise work is not counted.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from tgpo_jax import sharding as shd
from tgpo_jax.data.collate import empty_example
from tgpo_jax.models.config import ModelConfig
from tgpo_jax.models.loading import abstract_model, flat_params, model_from_flat
from tgpo_jax.models.sampler import Sampler
from tgpo_jax.models.transformer import Transformer
from tgpo_jax.training import loop
from tgpo_jax.training.step import Trainer

GiB = 1024**3
# per-chip memory (bytes) and dense bf16 peak (FLOP/s) by chip; h100/h200 are planned on CPU devices
CHIPS = {
    "v4": dict(hbm=32 * GiB, peak=275e12),
    "v5e": dict(hbm=16 * GiB, peak=197e12),
    "v5p": dict(hbm=95 * GiB, peak=459e12),
    "v6e": dict(hbm=32 * GiB, peak=918e12),
    "h100": dict(hbm=80 * GiB, peak=989e12),
    "h200": dict(hbm=141 * GiB, peak=989e12),
}
PARTS = ("train", "reference", "prefill", "decode")


def chip_of(topology: str) -> str:
    """'v5p:4x4x4' -> 'v5p' ('v5litepod' is v5e)."""
    name = topology.split(":")[0].split("-")[0].lower()
    return "v5e" if name.startswith("v5lite") else name


def topology_devices(topology: str) -> list:
    """The devices of a named TPU topology (e.g. 'v5e:2x2', 'v5p:2x2x1'), compiled for without a TPU (libtpu)."""
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)


# --------------------------------------------------------------------------- abstract inputs
def abstract_sharded_model(cfg: ModelConfig, mesh) -> Transformer:
    """The model with every parameter a ShapeDtypeStruct carrying its partition-rule sharding (as loading places
    it): nothing is initialised or allocated."""
    flat = {
        p: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shd.sharding_for(p, v.shape, mesh))
        for p, v in flat_params(abstract_model(cfg)).items()
    }
    return model_from_flat(cfg, flat)


def abstract_batch(trainer: Trainer, ccfg, batch_size: int, grad_accum: int) -> dict:
    """A collated global batch [A, B/A, ...] (``to_global_batch``'s layout) as sharded ShapeDtypeStructs."""
    shapes = {
        k: ((grad_accum, batch_size // grad_accum, *v.shape), jax.dtypes.canonicalize_dtype(v.dtype))
        for k, v in empty_example(ccfg).items()
    }
    sh = trainer.batch_sharding({k: np.empty((0,) * len(s)) for k, (s, _) in shapes.items()})
    return {k: jax.ShapeDtypeStruct(s, dt, sharding=sh[k]) for k, (s, dt) in shapes.items()}


def _spec(mesh, shape, axes) -> NamedSharding:
    """axes per dimension, each dropped where it does not divide the dimension (as the rule table does)."""
    out = []
    for dim, axis in zip(shape, axes):
        size = int(np.prod([mesh.shape[a] for a in (axis if isinstance(axis, tuple) else (axis,))])) if axis else 1
        out.append(axis if axis and dim % size == 0 else None)
    return NamedSharding(mesh, P(*out))


def abstract_decode_carry(cfg: ModelConfig, mesh, batch: int, cache_len: int) -> tuple:
    """``Sampler._decode_chunk``'s carry: the KV cache (``KVCache``: [L, B, K, S, Dh] keys, [L, B, K, Dh, S]
    values) with rows over data x fsdp and kv heads over tensor (the sampler itself leaves this to the compiler),
    logits, masks, positions and row keys."""
    b, ba = batch, shd.BATCH_AXES
    sds = lambda shape, dt, axes: jax.ShapeDtypeStruct(shape, dt, sharding=_spec(mesh, shape, axes))  # noqa: E731
    key = jax.eval_shape(lambda: jax.vmap(jax.random.key)(jnp.zeros((b,), jnp.uint32)))
    from tgpo_jax.models.transformer import KVCache

    cache = jax.eval_shape(lambda: KVCache.zeros(cfg, b, cache_len))
    kv = KVCache(*(sds(a.shape, a.dtype, (None, ba, "tensor", None, None)) for a in cache))
    return (
        kv,
        sds((b, cfg.vocab_size), jnp.float32, (ba, "tensor")),
        sds((b, cache_len), jnp.bool_, (ba, None)),
        sds((b,), jnp.int32, (ba,)),
        sds((), jnp.int32, ()),
        sds((b,), jnp.bool_, (ba,)),
        sds(key.shape, key.dtype, (ba,)),
    )


def _itemsize(dtype) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):  # a typed key: its key data (uint32 words)
        return 4 * math.prod(jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape)
    return jnp.dtype(dtype).itemsize


def shard_bytes(tree) -> int:
    """Bytes one device holds of a pytree of sharded arrays / ShapeDtypeStructs (the largest shard per leaf)."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) is not None else x.shape
        total += int(np.prod(shape, dtype=np.int64)) * _itemsize(x.dtype)
    return total


def count_params(tree) -> int:
    """Number of elements over all leaves of ``tree`` (arrays or ShapeDtypeStructs)."""
    return sum(int(np.prod(x.shape, dtype=np.int64)) for x in jax.tree.leaves(tree))


# --------------------------------------------------------------------------- FLOPs
def _sub_jaxprs(value):
    vals = value if isinstance(value, (tuple, list)) else (value,)
    for v in vals:
        if hasattr(v, "eqns"):
            yield v
        elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
            yield v.jaxpr


def counted_flops(jaxpr) -> float:
    """FLOPs of every dot_general in a jaxpr, sub-jaxprs included, scans multiplied by their length, a cond by
    its costliest branch (a while loop's body, of unknown trip count, counted once: the model has none)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in lc)
            continue
        if name == "cond":
            total += max(counted_flops(j) for br in eqn.params["branches"] for j in _sub_jaxprs(br))
            continue
        mult = float(eqn.params["length"]) if name == "scan" else 1.0
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                total += mult * counted_flops(sub)
    return total


# --------------------------------------------------------------------------- compile one program
def _memory(compiled) -> dict[str, int]:
    ma = compiled.memory_analysis()
    if ma is None:
        return {}
    get = lambda k: int(getattr(ma, k, 0) or 0)  # noqa: E731
    out = {
        "arguments": get("argument_size_in_bytes"),
        "outputs": get("output_size_in_bytes"),
        "alias": get("alias_size_in_bytes"),
        "temp": get("temp_size_in_bytes"),
        "code": get("generated_code_size_in_bytes"),
    }
    # what the device holds while the program runs: inputs, outputs not written over donated inputs, scratch
    out["total"] = out["arguments"] + out["outputs"] - out["alias"] + out["temp"] + out["code"]
    host = get("host_argument_size_in_bytes") + get("host_temp_size_in_bytes") + get("host_output_size_in_bytes")
    if host:
        out["host"] = host
    return out


def _cost(compiled) -> dict[str, float]:
    ca = compiled.cost_analysis()
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else {}
    ca = ca or {}
    out = {}
    for k_in, k_out in (
        ("flops", "compiler_flops"),
        ("bytes accessed", "compiler_bytes"),
        ("optimal_seconds", "compiler_seconds"),
    ):
        if k_in in ca and ca[k_in] is not None and float(ca[k_in]) >= 0:
            out[k_out] = float(ca[k_in])
    return out


def compile_part(
    name: str,
    jitted,
    args: Sequence,
    n_devices: int,
    *,
    inputs: dict[str, Any] | None = None,
    hbm: int | None = None,
    peak: float | None = None,
) -> dict:
    """Trace, lower and compile ``jitted(*args)``; its per-device memory, FLOPs and time estimates."""
    t0 = time.perf_counter()
    traced = jitted.trace(*args)
    flops = counted_flops(traced.jaxpr.jaxpr)
    out = {
        "part": name,
        "inputs": {k: shard_bytes(v) for k, v in (inputs or {}).items()},
        "counted_flops": flops,
        "counted_flops_per_device": flops / n_devices,
    }
    if peak:
        out["seconds_at_peak"] = out["counted_flops_per_device"] / peak
    try:
        compiled = traced.lower().compile()
    except jax.errors.JaxRuntimeError as e:  # the TPU compiler refuses a program whose scratch exceeds HBM
        msg = str(e)
        if "RESOURCE_EXHAUSTED" not in msg:
            raise
        need = re.search(r"HLO temporaries \(([\d.]+)([KMGT])\)", msg)
        unit = {"K": 1024, "M": 1024**2, "G": GiB, "T": 1024 * GiB}
        out.update(
            compile_s=round(time.perf_counter() - t0, 1),
            fits=False,
            error=msg.strip().splitlines()[0][:400],
            memory={"temp": int(float(need.group(1)) * unit[need.group(2)])} if need else {},
        )
        return out
    out.update(compile_s=round(time.perf_counter() - t0, 1), memory=_memory(compiled), **_cost(compiled))
    total = out["memory"].get("total")
    if hbm and total is not None:
        out["fits"] = total <= hbm
        out["hbm_fraction"] = total / hbm
    return out


# --------------------------------------------------------------------------- the plan
@dataclasses.dataclass
class Target:
    """Where to plan: a mesh over real, simulated or topology devices, and the chip it stands for."""

    mesh: Any
    chip: str  # a CHIPS key: HBM size and peak
    label: str  # e.g. 'v5p:4x4x4' or 'cpu x8 (as h100)'
    platform: str

    @property
    def n_devices(self) -> int:
        """Number of devices in the mesh."""
        return int(self.mesh.devices.size)


def make_target(mesh_shape: Sequence[int], *, topology: str = "", chip: str = "") -> Target:
    """A TPU topology's devices (deviceless) or the local devices (CPU: as many as XLA was told to simulate)."""
    if topology:
        devices = topology_devices(topology)
        mesh = shd.make_mesh(tuple(mesh_shape), devices=devices)
        return Target(mesh, chip or chip_of(topology), topology, "tpu")
    devices = jax.devices()
    mesh = shd.make_mesh(tuple(mesh_shape), devices=devices)
    kind = devices[0].platform
    return Target(mesh, chip, f"{kind} x{mesh.devices.size}" + (f" (as {chip})" if chip else ""), kind)


def plan(
    cfg,
    model_cfg: ModelConfig,
    target: Target,
    parts: Sequence[str] = ("train",),
    *,
    decode_batch: int = 0,
    decode_len: int = 0,
    decode_steps: int = 0,
) -> dict:
    """Compile ``parts`` of the job ``cfg`` describes (a training config: configs/<method>.py) for ``model_cfg``
    (a checkpoint's config.json; cfg.model's dtype, param_dtype, remat and LoRA apply) on ``target``."""
    bad = set(parts) - set(PARTS)
    if bad:
        raise ValueError(f"parts {sorted(bad)}: expected some of {PARTS}")
    mesh = target.mesh
    loop.check_batch(cfg, mesh)
    mcfg = model_cfg.replace(param_dtype=cfg.model.param_dtype, **loop.model_overrides(cfg.model))
    model = abstract_sharded_model(mcfg, mesh)
    # total_steps only shapes the learning-rate schedule: no bearing on memory or FLOPs
    trainer = Trainer(model, loop.loss_config(cfg), loop.optim_config(cfg, 1000), mesh, chunk=cfg.train.chunk)
    ccfg = loop.collate_config(cfg)
    spec = CHIPS.get(target.chip, {})
    hbm, peak = spec.get("hbm"), spec.get("peak")
    n = target.n_devices
    head = {
        "target": target.label,
        "platform": target.platform,
        "chip": target.chip or None,
        "devices": n,
        "hbm_bytes": hbm,
        "peak_flops": peak,
        "mesh": dict(mesh.shape),
        "method": cfg.method,
        "lora_rank": mcfg.lora_rank,
        "reference": cfg.loss.reference,
        "model_type": mcfg.model_type,
        "params": count_params(nnx.state(model, nnx.Param)),
        "trainable_params": count_params(trainer.initial_params),
        "dtype": mcfg.dtype,
        "param_dtype": mcfg.param_dtype,
        "remat": mcfg.remat,
        "seq_len": ccfg.max_len,
        "rows_per_example": ccfg.rows,
        "layout": ccfg.layout,
        "batch": cfg.train.batch_size,
        "grad_accum": cfg.optim.grad_accum,
        "tokens_per_step": cfg.train.batch_size * ccfg.rows * ccfg.max_len,
        "parts": [],
    }
    kw = dict(hbm=hbm, peak=peak)
    for part in parts:
        if part == "train":
            state = trainer.abstract_state()
            batch = abstract_batch(trainer, ccfg, cfg.train.batch_size, cfg.optim.grad_accum)
            inputs = {
                "params": state["params"],
                "opt_state": state["opt_state"],
                "reference": trainer.ref_params,
                "frozen": trainer.frozen,
                "batch": batch,
            }
            r = compile_part(
                "train",
                trainer.jit_train_step(state, batch),
                (state, trainer.ref_params, trainer.update_mask, trainer.frozen, batch),
                n,
                inputs=inputs,
                **kw,
            )
        elif part == "reference":  # one pass of the precomputed sidecar, on a batch of the training batch's size
            batch = abstract_batch(trainer, ccfg, cfg.train.batch_size, 1)
            inputs = {"params": trainer.initial_params, "frozen": trainer.frozen, "batch": batch}
            r = compile_part(
                "reference",
                trainer.jit_reference_logprobs(),
                (trainer.initial_params, trainer.frozen, batch),
                n,
                inputs=inputs,
                **kw,
            )
        else:  # the sampler on the merged policy (what an exported model samples with: no adapters, no remat)
            b = decode_batch or cfg.train.batch_size
            length = decode_len or ccfg.max_len
            sampler = Sampler(abstract_sharded_model(mcfg.replace(lora_rank=0, remat=False), mesh))
            steps = decode_steps or sampler.chunk
            if part == "prefill":
                prompt = length - steps
                row = NamedSharding(
                    mesh, P(shd.BATCH_AXES if b % (mesh.shape["data"] * mesh.shape["fsdp"]) == 0 else None, None)
                )
                tokens = jax.ShapeDtypeStruct((b, prompt), jnp.int32, sharding=row)
                valid = jax.ShapeDtypeStruct((b, prompt), jnp.bool_, sharding=row)
                r = compile_part(
                    "prefill",
                    Sampler._prefill,
                    (sampler, sampler.weights, tokens, valid, length),
                    n,
                    inputs={"params": sampler.weights, "batch": (tokens, valid)},
                    **kw,
                )
            else:
                carry = abstract_decode_carry(sampler.cfg, mesh, b, length)
                eos = jax.ShapeDtypeStruct(
                    (max(len(mcfg.eos_token_ids), 1),), jnp.int32, sharding=NamedSharding(mesh, P())
                )
                r = compile_part(
                    "decode",
                    Sampler._decode_chunk,
                    (sampler, sampler.weights, steps, (1.0, 0, 1.0), carry, eos),
                    n,
                    inputs={"params": sampler.weights, "kv_cache": carry[0], "carry": carry[1:]},
                    **kw,
                )
                r["decode_steps"] = steps
            r["batch"], r["length"] = b, length
        head["parts"].append(r)
    return head


# --------------------------------------------------------------------------- printing
def _size(x, unit: int) -> str:
    return "-" if x is None else f"{x / unit:.2f}"


def _sci(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def table(result: dict) -> str:
    """A plain-text table of one plan: memory per device in GiB, FLOPs and time estimates."""
    r = result
    lines = [
        f"{r['target']} mesh {r['mesh']} | {r['model_type']} {r['params'] / 1e9:.2f}B params "
        f"({r['trainable_params'] / 1e9:.3g}B trainable) | {r['method']} "
        f"{'LoRA r' + str(r['lora_rank']) if r['lora_rank'] else 'full'} ref={r['reference']} "
        f"remat={r['remat']} {r['param_dtype']}/{r['dtype']} | batch {r['batch']} x {r['rows_per_example']} "
        f"x {r['seq_len']} tokens, grad_accum {r['grad_accum']} | HBM {_size(r['hbm_bytes'], GiB)} GiB/device"
    ]
    cols = [
        "part",
        "params",
        "opt",
        "ref",
        "frozen",
        "batch",
        "args",
        "out",
        "alias",
        "temp",
        "TOTAL",
        "fits",
        "flops/dev",
        "xla flops",
        "xla s",
        "s@peak",
        "compile s",
    ]
    biggest = max([max(p["memory"].get("total", 0), p["memory"].get("temp", 0)) for p in r["parts"]] + [0])
    unit, uname = (GiB, "GiB") if biggest >= GiB // 4 else (1024**2, "MiB")
    _gib = lambda x: _size(x, unit)  # noqa: E731
    rows = []
    for p in r["parts"]:
        i, m = p["inputs"], p["memory"]
        rows.append(
            [
                p["part"],
                _gib(i.get("params")),
                _gib(i.get("opt_state")),
                _gib(i.get("reference")),
                _gib(i.get("frozen")),
                _gib(i.get("batch", i.get("kv_cache"))),
                _gib(m.get("arguments")),
                _gib(m.get("outputs")),
                _gib(m.get("alias")),
                _gib(m.get("temp")),
                _gib(m.get("total")),
                {True: "yes", False: "NO"}.get(p.get("fits"), "-"),
                _sci(p.get("counted_flops_per_device")),
                _sci(p.get("compiler_flops")),
                _sci(p.get("compiler_seconds")),
                _sci(p.get("seconds_at_peak")),
                str(p["compile_s"]),
            ]
        )
    widths = [max(len(c), *(len(row[k]) for row in rows)) for k, c in enumerate(cols)]
    fmt = lambda row: "  ".join(v.rjust(w) for v, w in zip(row, widths))  # noqa: E731
    lines += [fmt(cols), *map(fmt, rows)]
    lines += [f"{p['part']}: {p['error']}" for p in r["parts"] if p.get("error")]
    lines.append(
        f"memory in {uname} per device (decode: 'batch' is the KV cache); flops/dev: the jaxpr's dot products "
        "per device, scans multiplied out; xla flops: XLA's count (loop bodies once)"
    )
    return "\n".join(lines)
