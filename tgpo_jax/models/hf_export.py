"""Export our model to a Hugging Face directory that ``AutoModelForCausalLM.from_pretrained`` loads.

Writes sharded safetensors with an index (or a single ``model.safetensors``), ``config.json``,
``generation_config.json`` and the tokenizer files. The directory is assembled under a temporary
name and renamed into place, so an interrupted export never leaves a directory that looks complete.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import jax
import ml_dtypes
import numpy as np

from tgpo_jax.models.loading import flat_params, merged_model
from tgpo_jax.models.transformer import Transformer
from tgpo_jax.files import sha256_file
from tgpo_jax.models.weights import CHECKSUMS, ours_to_hf

log = logging.getLogger(__name__)
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _shards(tensors: dict[str, np.ndarray], max_shard_bytes: int) -> list[dict[str, np.ndarray]]:
    shards, cur, size = [], {}, 0
    for name, arr in tensors.items():  # keep HF order: one layer's tensors stay together
        if cur and size + arr.nbytes > max_shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = arr
        size += arr.nbytes
    if cur:
        shards.append(cur)
    return shards


def export_hf(
    model: Transformer,
    out_dir: str,
    tokenizer=None,
    *,
    dtype: str | None = None,
    max_shard_bytes: int = 2 * 1024**3,
    generation_config: dict | None = None,
) -> str:
    """Write ``model`` (and ``tokenizer``) as a HF checkpoint directory; returns ``out_dir``."""
    from safetensors.numpy import save_file

    model = merged_model(model)  # LoRA adapters are folded in: the export is a plain checkpoint
    cfg = model.cfg
    dtype = dtype or cfg.param_dtype
    if dtype not in DTYPES:
        raise ValueError(f"export dtype {dtype!r}: expected one of {sorted(DTYPES)}")
    host = {p: np.asarray(jax.device_get(v)) for p, v in flat_params(model).items()}
    tensors = {k: v.astype(DTYPES[dtype]) for k, v in ours_to_hf(host, cfg).items()}

    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        shards = _shards(tensors, max_shard_bytes)
        meta = {"format": "pt"}
        if len(shards) == 1:
            save_file(shards[0], os.path.join(tmp, "model.safetensors"), metadata=meta)
        else:
            weight_map = {}
            for i, shard in enumerate(shards):
                fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                save_file(shard, os.path.join(tmp, fname), metadata=meta)
                weight_map.update({k: fname for k in shard})
            index = {"metadata": {"total_size": int(sum(a.nbytes for a in tensors.values()))}, "weight_map": weight_map}
            _write_json(os.path.join(tmp, "model.safetensors.index.json"), index)
        # what a reader verifies before trusting the tensors (weights.SafetensorsSource): a flipped byte inside a
        # tensor is otherwise read as a weight
        _write_json(
            os.path.join(tmp, CHECKSUMS),
            {
                "sha256": {
                    f: sha256_file(os.path.join(tmp, f)) for f in sorted(os.listdir(tmp)) if f.endswith(".safetensors")
                }
            },
        )
        hf_cfg = cfg.to_hf_dict()
        hf_cfg["torch_dtype"] = hf_cfg["dtype"] = dtype
        _write_json(os.path.join(tmp, "config.json"), hf_cfg)
        gen = {
            "bos_token_id": cfg.bos_token_id,
            "eos_token_id": hf_cfg["eos_token_id"],
            "pad_token_id": cfg.pad_token_id,
            **(generation_config or {}),
        }
        _write_json(os.path.join(tmp, "generation_config.json"), {k: v for k, v in gen.items() if v is not None})
        if tokenizer is not None:
            if cfg.model_type == "qwen2" and os.path.exists(getattr(tokenizer, "vocab_file", None) or ""):
                log.warning(
                    "transformers' AutoTokenizer loads Qwen2Tokenizer for model_type qwen2, which "
                    "misreads a SentencePiece tokenizer; load it with TokenizersBackend explicitly"
                )
            tokenizer.save_pretrained(tmp)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
