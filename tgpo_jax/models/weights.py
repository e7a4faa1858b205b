"""Hugging Face <-> our parameter layout: one declarative name map, used both to load and to export.

Each entry names a Hugging Face tensor (``{i}`` = layer index), our parameter path, and the layout
transform between them. GGUF files are read through a second map (llama.cpp names -> HF names), so
every format ends in the same table.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Callable, Iterable, Mapping

import numpy as np

from tgpo_jax.files import sha256_file
from tgpo_jax.models.config import ModelConfig
from tgpo_jax.models.transformer import layer_param_names

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint lacks a tensor, has one of the wrong shape, or cannot be read."""


# --------------------------------------------------------------------------- layout transforms
# our layout -> HF layout and back. ``shape`` is our parameter's shape (without the layer axis).
@dataclasses.dataclass(frozen=True)
class Transform:
    """A tensor's layout change: ``to_ours(array, shape)`` from the HF layout to our parameter's shape, ``to_hf(array)``
    back."""

    to_ours: Callable[[np.ndarray, tuple], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


IDENTITY = Transform(lambda a, s: a.reshape(s), lambda a: a.reshape(-1) if a.ndim == 1 else a)
# HF Linear weight [out, in]; ours [in, *out] (q/k/v split heads, gate/up, lm_head)
LINEAR = Transform(lambda a, s: a.T.reshape(s), lambda a: a.reshape(a.shape[0], -1).T)
# HF Linear weight [out, in]; ours [*in, out] (o_proj over heads, down_proj)
LINEAR_IN = Transform(lambda a, s: a.T.reshape(s), lambda a: a.reshape(-1, a.shape[-1]).T)
FLAT = Transform(lambda a, s: a.reshape(s), lambda a: a.reshape(-1))  # biases/norms split over heads


@dataclasses.dataclass(frozen=True)
class Entry:
    """A checkpoint tensor: its HF name, our parameter path and the layout transform between them."""

    hf: str  # HF tensor name; "{i}" for the layer index
    ours: str  # our parameter path, "/"-joined
    transform: Transform


TOP_LEVEL = (
    Entry("model.embed_tokens.weight", "embed", IDENTITY),
    Entry("model.norm.weight", "final_norm", IDENTITY),
    Entry("lm_head.weight", "lm_head", LINEAR),
)
PER_LAYER = {
    "attn_norm": ("model.layers.{i}.input_layernorm.weight", IDENTITY),
    "q_proj": ("model.layers.{i}.self_attn.q_proj.weight", LINEAR),
    "k_proj": ("model.layers.{i}.self_attn.k_proj.weight", LINEAR),
    "v_proj": ("model.layers.{i}.self_attn.v_proj.weight", LINEAR),
    "o_proj": ("model.layers.{i}.self_attn.o_proj.weight", LINEAR_IN),
    "q_bias": ("model.layers.{i}.self_attn.q_proj.bias", FLAT),
    "k_bias": ("model.layers.{i}.self_attn.k_proj.bias", FLAT),
    "v_bias": ("model.layers.{i}.self_attn.v_proj.bias", FLAT),
    "o_bias": ("model.layers.{i}.self_attn.o_proj.bias", FLAT),
    "q_norm": ("model.layers.{i}.self_attn.q_norm.weight", IDENTITY),
    "k_norm": ("model.layers.{i}.self_attn.k_norm.weight", IDENTITY),
    "mlp_norm": ("model.layers.{i}.post_attention_layernorm.weight", IDENTITY),
    "gate_proj": ("model.layers.{i}.mlp.gate_proj.weight", LINEAR),
    "up_proj": ("model.layers.{i}.mlp.up_proj.weight", LINEAR),
    "down_proj": ("model.layers.{i}.mlp.down_proj.weight", LINEAR_IN),
}


def name_map(cfg: ModelConfig) -> list[Entry]:
    """The entries this config's model has (biases, q/k norms and lm_head only where used)."""
    entries = [e for e in TOP_LEVEL if e.ours != "lm_head" or not cfg.tie_word_embeddings]
    entries += [Entry(PER_LAYER[n][0], f"layers/{n}", PER_LAYER[n][1]) for n in layer_param_names(cfg)]
    return entries


# --------------------------------------------------------------------------- tensor sources
CHECKSUMS = "tgpo_checksums.json"  # {"sha256": {file: hex}}, written by hf_export next to the safetensors


def _checksums(directory: str) -> dict[str, str]:
    """The export's recorded sha256 per safetensors file ({} for a directory we did not write)."""
    path = os.path.join(directory, CHECKSUMS)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return dict(json.load(f)["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path} is unreadable ({e}); without it the weights cannot be verified") from None


class SafetensorsSource:
    """A HF directory with ``model.safetensors`` or a sharded ``model.safetensors.index.json``."""

    def __init__(self, directory: str):
        from safetensors import safe_open

        index = os.path.join(directory, "model.safetensors.index.json")
        single = os.path.join(directory, "model.safetensors")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        elif os.path.exists(single):
            files, weight_map = ["model.safetensors"], None
        else:
            raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {directory}")
        self._handles, self._where = {}, {}
        sums = _checksums(directory)
        for fname in files:
            path = os.path.join(directory, fname)
            if not os.path.exists(path):
                raise CheckpointError(f"shard {fname} listed in the index is missing from {directory}")
            if fname in sums and sha256_file(path) != sums[fname]:
                raise CheckpointError(f"{path}: its sha256 does not match {CHECKSUMS} (the file is damaged)")
            try:
                h = safe_open(path, framework="numpy")
            except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError (not exported)
                raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
            self._handles[fname] = h
            for k in h.keys():
                self._where[k] = fname
        self.description = directory

    def keys(self) -> Iterable[str]:
        """Names of the tensors in the checkpoint."""
        return self._where.keys()

    def shape(self, name: str) -> tuple:
        """The shape of tensor ``name``, without reading it."""
        return tuple(self._handles[self._where[name]].get_slice(name).get_shape())

    def get(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a numpy array."""
        return self._handles[self._where[name]].get_tensor(name)


# llama.cpp tensor names -> HF names (per-layer names use "{i}")
GGUF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.attn_q.bias": "model.layers.{i}.self_attn.q_proj.bias",
    "blk.{i}.attn_k.bias": "model.layers.{i}.self_attn.k_proj.bias",
    "blk.{i}.attn_v.bias": "model.layers.{i}.self_attn.v_proj.bias",
    "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}
GGUF_ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


def _gguf_hf_name(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "blk":
        key = ".".join(["blk", "{i}"] + parts[2:])
        hf = GGUF_NAMES.get(key)
        return hf.replace("{i}", parts[1]) if hf else None
    return GGUF_NAMES.get(name)


def _unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved -> rotate-half RoPE layout)."""
    dim = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFSource:
    """A GGUF file, dequantized tensor by tensor (``gguf`` package) and renamed to HF names."""

    def __init__(self, path: str):
        import gguf

        if not os.path.exists(path):
            raise CheckpointError(f"GGUF file not found: {path}")
        try:
            self._reader = gguf.GGUFReader(path)
        except Exception as e:  # the gguf package raises bare ValueErrors for bad magic/versions
            raise CheckpointError(f"cannot read GGUF file {path}: {e}") from e
        self._tensors = {}
        for t in self._reader.tensors:
            hf = _gguf_hf_name(t.name)
            if hf is None:
                log.info("GGUF tensor %s has no mapping; ignored", t.name)
                continue
            self._tensors[hf] = t
        big = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")
        self.metadata = {k: _field_value(f) for k, f in self._reader.fields.items() if k not in big}
        self.arch = self.metadata.get("general.architecture")
        if self.arch not in GGUF_ARCHS:
            raise CheckpointError(
                f"GGUF architecture {self.arch!r} in {path} is not supported; supported: {sorted(GGUF_ARCHS)}"
            )
        self.description = path

    def config(self, **overrides) -> ModelConfig:
        """The ``ModelConfig`` read from the GGUF metadata, with ``overrides`` applied."""
        m, a = self.metadata, self.arch
        heads = int(m[f"{a}.attention.head_count"])
        d = int(m[f"{a}.embedding_length"])
        tok = self._reader.fields.get("tokenizer.ggml.tokens")
        vocab = int(m.get(f"{a}.vocab_size") or len(tok.data))
        eos = m.get("tokenizer.ggml.eos_token_id")
        kw = dict(
            model_type=GGUF_ARCHS[a],
            vocab_size=vocab,
            hidden_size=d,
            intermediate_size=int(m[f"{a}.feed_forward_length"]),
            num_layers=int(m[f"{a}.block_count"]),
            num_heads=heads,
            num_kv_heads=int(m.get(f"{a}.attention.head_count_kv", heads)),
            head_dim=int(m.get(f"{a}.attention.key_length") or m.get(f"{a}.rope.dimension_count") or d // heads),
            rms_norm_eps=float(m[f"{a}.attention.layer_norm_rms_epsilon"]),
            rope_theta=float(m.get(f"{a}.rope.freq_base", 10000.0)),
            max_position_embeddings=int(m.get(f"{a}.context_length", 2048)),
            tie_word_embeddings="lm_head.weight" not in self._tensors,
            qkv_bias=a == "qwen2",
            qk_norm=a == "qwen3",
            bos_token_id=_opt_int(m.get("tokenizer.ggml.bos_token_id")),
            eos_token_id=_opt_int(eos),
            pad_token_id=_opt_int(m.get("tokenizer.ggml.padding_token_id")),
        )
        kw.update(overrides)
        self._cfg = ModelConfig(**kw)
        return self._cfg

    def keys(self) -> Iterable[str]:
        """Names of the tensors in the checkpoint (HF names)."""
        return self._tensors.keys()

    def shape(self, name: str) -> tuple:
        """The shape of tensor ``name`` in HF order."""
        # GGUF stores dims innermost-first; HF order is the reverse
        return tuple(int(x) for x in reversed(self._tensors[name].shape))

    def get(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantized to float32 in HF layout (Llama's q/k projections un-permuted for HF's rotary
        layout)."""
        import gguf

        t = self._tensors[name]
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(self.shape(name)).astype(np.float32)
        if self.arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            cfg = getattr(self, "_cfg", None) or self.config()
            w = _unpermute_rope(w, cfg.num_heads if "q_proj" in name else cfg.num_kv_heads)
        return w


def _field_value(field):
    try:
        return field.contents()
    except Exception:  # pragma: no cover - exotic field types
        return None


def _opt_int(v):
    return None if v is None else int(v)


# --------------------------------------------------------------------------- conversion
def hf_to_ours(
    source, cfg: ModelConfig, shapes: Mapping[str, tuple], put: Callable[[str, np.ndarray], object], dtype=np.float32
) -> dict[str, object]:
    """Read every tensor of ``name_map(cfg)`` from ``source`` into our layout.

    ``shapes``: our parameter path -> full shape (with the layer axis); ``put(path, array)`` places the
    finished host array (on a device, with its sharding). Returns path -> placed array.
    """
    available = set(source.keys())
    entries = name_map(cfg)
    missing = [
        e.hf.replace("{i}", str(i))
        for e in entries
        for i in (range(cfg.num_layers) if "{i}" in e.hf else [None])
        if (e.hf.replace("{i}", str(i)) if i is not None else e.hf) not in available
    ]
    if missing:
        shown = ", ".join(missing[:8]) + (f" ... ({len(missing)} in all)" if len(missing) > 8 else "")
        raise CheckpointError(f"checkpoint {source.description} is missing tensors: {shown}")
    out = {}
    used = set()
    for e in entries:
        full = tuple(shapes[e.ours])
        if "{i}" in e.hf:
            per = full[1:]
            arrays = [_read(source, e.hf.replace("{i}", str(i)), e, per, dtype, used) for i in range(cfg.num_layers)]
            out[e.ours] = put(e.ours, np.stack(arrays))
        else:
            out[e.ours] = put(e.ours, _read(source, e.hf, e, full, dtype, used))
    extra = sorted(available - used - {"lm_head.weight"})  # a tied checkpoint may still carry lm_head
    if extra:
        log.warning(
            "checkpoint %s has %d tensors the model does not use, e.g. %s", source.description, len(extra), extra[:4]
        )
    return out


def _read(source, name, entry: Entry, shape, dtype, used) -> np.ndarray:
    used.add(name)
    arr = np.asarray(source.get(name))
    try:
        ours = entry.transform.to_ours(arr, shape)
    except ValueError:
        ours = None
    if ours is None or ours.shape != tuple(shape) or int(np.prod(arr.shape)) != int(np.prod(shape)):
        expected = entry.transform.to_hf(np.zeros(shape, np.float32)).shape
        raise CheckpointError(
            f"tensor {name} in {source.description} has shape {tuple(arr.shape)}, "
            f"expected {tuple(expected)} for this config"
        )
    return ours.astype(dtype)


def ours_to_hf(params: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Our parameters (path -> host array) -> HF tensor name -> array."""
    out = {}
    for e in name_map(cfg):
        arr = np.asarray(params[e.ours])
        if "{i}" in e.hf:
            for i in range(cfg.num_layers):
                out[e.hf.replace("{i}", str(i))] = np.ascontiguousarray(e.transform.to_hf(arr[i]))
        else:
            out[e.hf] = np.ascontiguousarray(e.transform.to_hf(arr))
    return out
