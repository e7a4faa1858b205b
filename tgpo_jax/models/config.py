"""Model configuration: one frozen dataclass for the Llama / Qwen2 / Qwen3 family.

Read from a Hugging Face ``config.json`` (transformers v4 ``rope_theta``/``rope_scaling`` or v5
``rope_parameters``), from GGUF metadata, or built from scratch for tests and CPU demos.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

# model_type -> (architecture class name written on export, family)
SUPPORTED = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
ROPE_TYPES = ("default", "llama3", "linear")
ATTENTION = ("dense", "blocked", "cudnn", "xla", "auto")
# LoRA-able weights -> how many leading (input) dims of the per-layer weight the A factor takes
LORA_SPLIT = {"q_proj": 1, "k_proj": 1, "v_proj": 1, "o_proj": 2, "gate_proj": 1, "up_proj": 1, "down_proj": 1}


class UnsupportedModelError(ValueError):
    """The checkpoint's architecture or one of its options is not implemented."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The architecture of a decoder-only transformer (Llama, Qwen2, Qwen3), its token ids, dtypes, and the training
    options that shape the model (remat, trained layers, LoRA, attention kernel)."""

    model_type: str  # llama | qwen2 | qwen3
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # None, or a dict with rope_type in ROPE_TYPES and its parameters (HF names).
    rope_scaling: Mapping[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 (always), Llama/Qwen3 when attention_bias
    o_bias: bool = False  # Llama/Qwen3 when attention_bias
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    dtype: str = "float32"  # compute dtype: float32 | bfloat16
    param_dtype: str = "float32"  # master weights
    remat: bool = False  # rematerialise each layer in the backward pass
    # > 0: training reaches only the top train_layers layers (with the final norm and the output projection); the
    # layers below run as a constant, so the backward pass and the rematerialised forward skip them
    train_layers: int = 0
    # dense: our einsum attention (float32 [T, S] scores per head); blocked: the same over causal query blocks (keys
    # after a block are skipped; needs causal masks, which are all the project builds); cudnn:
    # jax.nn.dot_product_attention's fused cuDNN kernel (GPU, bf16/fp16); xla: the same API's XLA path; auto: cudnn
    # where it applies, else blocked
    attention: str = "auto"
    lora_rank: int = 0  # > 0 adds LoRA factors (nnx.LoRAParam) to lora_targets; the base stays frozen
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    @property
    def frozen_layers(self) -> int:
        """The bottom layers training leaves constant (0 unless ``train_layers`` is set below ``num_layers``)."""
        return self.num_layers - self.train_layers if self.train_layers else 0

    def __post_init__(self):
        if self.model_type not in SUPPORTED:
            raise UnsupportedModelError(
                f"model_type {self.model_type!r} is not supported; supported: {sorted(SUPPORTED)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))
            if kind not in ROPE_TYPES:
                raise UnsupportedModelError(f"rope scaling type {kind!r} is not supported; supported: {ROPE_TYPES}")
        if not 0 <= self.train_layers <= self.num_layers:
            raise ValueError(f"train_layers={self.train_layers}: expected 0 (all) to num_layers={self.num_layers}")
        bad = set(self.lora_targets) - set(LORA_SPLIT)
        if bad:
            raise ValueError(f"lora_targets {sorted(bad)} are not LoRA-able weights; choose from {sorted(LORA_SPLIT)}")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention={self.attention!r}: expected one of {ATTENTION}")
        if self.attention == "cudnn" and self.dtype != "bfloat16":
            raise ValueError(
                "attention='cudnn' needs dtype='bfloat16' (cuDNN's fused attention has no float32 "
                "kernel); use attention='auto' to fall back to dense attention"
            )
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in ("float32", "bfloat16"):
                raise ValueError(f"{name}={getattr(self, name)!r}: expected 'float32' or 'bfloat16'")

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The end-of-sequence ids as a tuple (empty when there is none)."""
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)

    def replace(self, **kw) -> "ModelConfig":
        """A copy with the given fields replaced."""
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------------ Hugging Face config.json
    @classmethod
    def from_hf_dict(cls, hf: Mapping[str, Any], **overrides) -> "ModelConfig":
        """The config of a Hugging Face ``config.json`` dict, with ``overrides`` applied; ``UnsupportedModelError`` for
        an architecture or option this model does not implement."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED:
            arch = hf.get("architectures")
            raise UnsupportedModelError(
                f"unsupported architecture: model_type={model_type!r} architectures={arch}; "
                f"supported model types: {sorted(SUPPORTED)}"
            )
        for flag in ("use_sliding_window", "mlp_bias"):
            if hf.get(flag):
                raise UnsupportedModelError(f"{model_type} config option {flag}=True is not supported")
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"hidden_act={hf.get('hidden_act')!r} is not supported (only silu)")
        rope = dict(hf.get("rope_parameters") or {})
        theta = rope.pop("rope_theta", hf.get("rope_theta", 10000.0))
        scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        if scaling is not None:
            scaling = {k: v for k, v in dict(scaling).items() if k != "rope_theta"}
            if scaling.get("rope_type", scaling.get("type")) == "default":
                scaling = None
        heads = hf["num_attention_heads"]
        attention_bias = bool(hf.get("attention_bias", False))
        kw = dict(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=True if model_type == "qwen2" else attention_bias,
            o_bias=False if model_type == "qwen2" else attention_bias,
            qk_norm=model_type == "qwen3",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=_as_ids(hf.get("eos_token_id")),
            pad_token_id=hf.get("pad_token_id"),
        )
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def from_json_file(cls, path: str, **overrides) -> "ModelConfig":
        """The config of a Hugging Face ``config.json`` file; ``FileNotFoundError`` when it is missing."""
        if not os.path.exists(path):
            raise FileNotFoundError(f"no config.json at {path}")
        with open(path) as f:
            return cls.from_hf_dict(json.load(f), **overrides)

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json transformers reads for this model (v5 ``rope_parameters`` form)."""
        rope = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling:
            rope = {**dict(self.rope_scaling), "rope_theta": self.rope_theta}
            rope.setdefault("rope_type", rope.pop("type", "default"))
        out = {
            "architectures": [SUPPORTED[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": rope,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) > 1 else self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": self.param_dtype,
            "dtype": self.param_dtype,
        }
        if self.model_type != "qwen2":
            out["attention_bias"] = self.qkv_bias
        if self.model_type in ("qwen2", "qwen3"):
            out["use_sliding_window"] = False
        return out


def _as_ids(v):
    if isinstance(v, list):
        return tuple(v) if len(v) != 1 else v[0]
    return v


def tiny_config(model_type: str = "llama", vocab_size: int = 256, **overrides) -> ModelConfig:
    """A from-scratch model small enough for unit tests and CPU demos (about 0.2M parameters)."""
    kw = dict(
        model_type=model_type,
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        qkv_bias=model_type == "qwen2",
        qk_norm=model_type == "qwen3",
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    kw.update(overrides)
    return ModelConfig(**kw)


# From-scratch presets (``model.scratch``): sizes over ``tiny_config``'s defaults. ``copy`` is the model the
# pipeline's CPU default trains (about 3.8M parameters with a 2k vocabulary), shaped for the planted copy circuit
# (recipes/scratch_copy/circuit.py: 64-wide heads, rope_theta 1e7 so the slow rotary pairs are position-invariant).
SCRATCH_PRESETS = {
    "tiny": {},
    "small": dict(
        hidden_size=192,
        intermediate_size=512,
        num_layers=4,
        num_heads=6,
        num_kv_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
    ),
    "copy": dict(
        hidden_size=256,
        intermediate_size=640,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        rope_theta=1e7,
        max_position_embeddings=2048,
    ),
}


def scratch_config(preset: str, vocab_size: int, **overrides) -> ModelConfig:
    """The config of the from-scratch preset ``preset`` with ``vocab_size`` tokens; ``ValueError`` for an unknown
    preset."""
    if preset not in SCRATCH_PRESETS:
        raise ValueError(f"model.scratch={preset!r}: expected one of {sorted(SCRATCH_PRESETS)}")
    return tiny_config(vocab_size=vocab_size, **{**SCRATCH_PRESETS[preset], **overrides})
