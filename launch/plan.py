"""Plan a training job on paper: per-device memory, fit and FLOPs of the real train step, compiled without weights.

  # a TPU topology, no TPU needed (pip install -e '.[tpu]': libtpu compiles for it)
  python -m launch.plan --model=Qwen3-14B --method=tgpo --seq_len=2048 --batch=64 --mesh=1,-1,4 \
      --topology=v5p:4x4x2 --json=plan.json
  # N simulated CPU devices standing for N GPUs of a size (--chip=h100: 80 GiB each)
  python -m launch.plan --model=Llama-3.1-8B --method=dpo --lora_rank=16 --cpu_devices=8 --chip=h100 \
      --parts=train,reference,decode

--model: a name under configs/hf/ (Qwen2.5-7B, Llama-3.1-8B, Qwen3-14B), a config.json or HF directory, or
'tiny' / a from-scratch preset (tgpo_jax.models.config.SCRATCH_PRESETS). The job's other settings come from
configs/<method>.py (remat, dtypes, reference, optimizer, collation); --set=section.key=value changes any of them.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from launch.entry import prepare

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "hf")

_MODEL = flags.DEFINE_string("model", "Qwen2.5-7B", "configs/hf name, config.json / HF directory, or scratch preset")
_METHOD = flags.DEFINE_enum("method", "tgpo", ["sft", "dpo", "tgpo", "kto", "kto_tree"], "training method")
_LORA = flags.DEFINE_integer("lora_rank", None, "LoRA rank (0 = full fine-tuning); default: the config's")
_SEQ = flags.DEFINE_integer("seq_len", None, "row length (data.max_len); default: the config's")
_BATCH = flags.DEFINE_integer("batch", None, "global batch (examples = nodes per step); default: the config's")
_ACCUM = flags.DEFINE_integer("grad_accum", None, "micro-batches per step; default: the config's")
_MESH = flags.DEFINE_string("mesh", "1,-1,1", "data,fsdp,tensor (-1 once: the rest)")
_REMAT = flags.DEFINE_boolean("remat", None, "rematerialise each layer in the backward pass; default: the config's")
_REF = flags.DEFINE_enum(
    "reference", None, ["live", "precomputed", "behaviour", "none"], "reference log-probs; default: the method config's"
)
_SET = flags.DEFINE_multi_string("set", [], "other config overrides, section.key=value (e.g. data.max_branches=4)")
_TOPOLOGY = flags.DEFINE_string("topology", "", "TPU topology, e.g. v5e:2x2, v5p:4x4x2, v6e:4x4 (needs libtpu)")
_CPU = flags.DEFINE_integer("cpu_devices", 0, "CPU route: simulate this many devices (0 = the local devices)")
_CHIP = flags.DEFINE_string(
    "chip",
    "",
    "HBM size and peak to plan against (v4, v5e, v5p, v6e, h100, h200); default: the topology's, h100 on the CPU route",
)
_HBM = flags.DEFINE_float("hbm_gib", 0, "per-device memory in GiB (overrides the chip's)")
_PARTS = flags.DEFINE_list("parts", ["train"], "programs to compile: train, reference, prefill, decode")
_DECODE_BATCH = flags.DEFINE_integer("decode_batch", 0, "sampler rows (0 = --batch)")
_DECODE_LEN = flags.DEFINE_integer("decode_len", 0, "sampler cache length (0 = --seq_len)")
_JSON = flags.DEFINE_string("json", "", "also write the plan as JSON here")


def model_config(name: str):
    """The ``ModelConfig`` that ``name`` names: a scratch preset, a directory under configs/hf/, an HF directory or a
    config.json; ``app.UsageError`` otherwise."""
    from tgpo_jax.models.config import SCRATCH_PRESETS, ModelConfig, scratch_config

    if name in SCRATCH_PRESETS:
        return scratch_config(name, 256)
    for path in (os.path.join(HF_DIR, name, "config.json"), os.path.join(name, "config.json"), name):
        if os.path.isfile(path):
            return ModelConfig.from_json_file(path)
    names = sorted(os.listdir(HF_DIR)) if os.path.isdir(HF_DIR) else []
    raise app.UsageError(
        f"--model={name!r}: not a config.json, an HF directory, one of {names} (configs/hf/) or "
        f"a scratch preset {sorted(SCRATCH_PRESETS)}"
    )


def job_config():
    """The training config of ``--method`` with the command line's sequence, batch, accumulation, remat, reference,
    ``--set`` and mesh overrides applied."""
    import importlib

    import ml_collections

    c = importlib.import_module(f"configs.{_METHOD.value}").get_config()
    if _LORA.value is not None:
        c.model.lora_rank = _LORA.value
    if _SEQ.value is not None:
        d = c.data
        d.max_len = _SEQ.value
        d.max_completion_len = min(d.max_completion_len, _SEQ.value // 4)
        d.max_prompt_len = _SEQ.value - d.max_completion_len
    if _BATCH.value is not None:
        c.train.batch_size = _BATCH.value
    if _ACCUM.value is not None:
        c.optim.grad_accum = _ACCUM.value
    if _REMAT.value is not None:
        c.model.remat = _REMAT.value
    if _REF.value is not None:
        c.loss.reference = _REF.value
    for item in _SET.value:
        key, _, value = item.partition("=")
        section, _, field = key.partition(".")
        if section not in c or field not in c[section]:
            raise app.UsageError(f"--set={item}: no config key {key!r}")
        old = c[section][field]
        c[section][field] = type(old)(value in ("1", "true", "True")) if isinstance(old, bool) else type(old)(value)
    c.mesh.shape = tuple(int(x) for x in _MESH.value.split(","))
    assert isinstance(c, ml_collections.ConfigDict)
    return c


def main(argv):
    """Plan the training job on the target devices and print the table (and write it as JSON with ``--json``)."""
    prepare(argv)
    if _TOPOLOGY.value and _CPU.value:
        raise app.UsageError("--topology (TPU, deviceless) or --cpu_devices (CPU route): one of them")
    if _CPU.value:  # before jax starts its CPU backend
        if "jax" in sys.modules:
            raise RuntimeError("jax was imported before --cpu_devices could take effect")
        flag = f"--xla_force_host_platform_device_count={_CPU.value}"
        os.environ["XLA_FLAGS"] = " ".join(
            [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f] + [flag]
        )
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from tgpo_jax.training import plan as pl

    cfg = job_config()
    chip = _CHIP.value or ("" if _TOPOLOGY.value else "h100")
    target = pl.make_target(cfg.mesh.shape, topology=_TOPOLOGY.value, chip=chip)
    if _HBM.value:
        pl.CHIPS[target.chip or "custom"] = {**pl.CHIPS.get(target.chip, {}), "hbm": int(_HBM.value * pl.GiB)}
        target.chip = target.chip or "custom"
    result = pl.plan(
        cfg,
        model_config(_MODEL.value),
        target,
        parts=_PARTS.value,
        decode_batch=_DECODE_BATCH.value,
        decode_len=_DECODE_LEN.value,
    )
    result["model"] = _MODEL.value
    result["command"] = " ".join(["python -m launch.plan", *sys.argv[1:]])
    print(pl.table(result))
    if _JSON.value:
        os.makedirs(os.path.dirname(os.path.abspath(_JSON.value)), exist_ok=True)
        with open(_JSON.value, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    app.run(main)
