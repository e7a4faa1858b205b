"""Reference log-probs: a precomputed sidecar, or the behaviour log-probs stored in the records.

The sidecar is a table [examples, slots] of summed reference log-probs, computed in one pass and
stored under a fingerprint of everything it depends on (reference weights, tokenizer, collation,
dataset files), so a change to any of them computes a new table instead of reusing a stale one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from tgpo_jax.data.pipeline import NodeExamples, make_dataset
from tgpo_jax.files import atomic_path
from tgpo_jax.training.step import to_global_batch


def weights_fingerprint(params) -> str:
    """A content hash of parameter values: position-weighted sums of each array, computed on device."""
    leaves = jax.tree.leaves(params)

    @jax.jit
    def sums(xs):
        return jnp.stack([jnp.sum(x.astype(jnp.float32) * jnp.linspace(1.0, 2.0, x.size).reshape(x.shape)) for x in xs])

    return hashlib.sha256(np.asarray(jax.device_get(sums(leaves))).tobytes()).hexdigest()[:16]


def fingerprint(trainer, source: NodeExamples, model_id: str) -> str:
    """The key a reference log-prob table is stored under: a hash of the reference weights, tokenizer, collation, weight
    scale, dataset shards and LoRA setting."""
    tok = source.tokenizer
    vocab = hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()[:16]
    shards = [s.sha256 for s in source.reader.manifest.shards]
    key = {
        "model": model_id,
        "weights": weights_fingerprint(trainer.initial_params),
        "vocab": vocab,
        "chat_template": getattr(tok, "chat_template", None),
        "collate": dataclasses.asdict(source.cfg),
        "weight_scale": source.weight_scale,
        "data": shards,
        "lora": trainer.lora,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]


def reference_table(trainer, source: NodeExamples, cache_dir: str, *, batch_size: int, model_id: str) -> np.ndarray:
    """Load the sidecar for this fingerprint, or compute it in one pass (examples in index order)."""
    key = fingerprint(trainer, source, model_id)
    path = os.path.join(cache_dir, f"ref-{key}.npy")
    if os.path.exists(path):
        table = np.load(path)
        if table.shape == (len(source), source.cfg.num_slots):
            return table
    n, s = len(source), source.cfg.num_slots
    nproc = jax.process_count()
    table = np.zeros((n, s), np.float32)
    ds = make_dataset(
        source,
        batch_size=batch_size,
        seed=0,
        num_epochs=1,
        shuffle=False,
        process_index=jax.process_index(),
        process_count=nproc,
        drop_remainder=False,
    )
    for local in ds:
        b = len(local["index"])
        if b * nproc != batch_size:  # the ragged last batch: pad with copies of its first example
            pad = batch_size // nproc - b
            local = {k: np.concatenate([v, np.repeat(v[:1], pad, axis=0)]) for k, v in local.items()}
        out = trainer.reference_logprobs(to_global_batch(local, trainer.mesh, 1))
        idx = to_global_batch({"index": local["index"]}, trainer.mesh, 1)["index"]
        out, idx = multihost_utils.process_allgather((out, idx), tiled=True)
        table[np.asarray(idx).reshape(-1)] = np.asarray(out).reshape(-1, s)
    if jax.process_index() == 0:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, table)
    return table


def check_behaviour_logprobs(source: NodeExamples, probe: int = 64) -> None:
    """reference=behaviour needs every used branch to carry the collecting policy's log-prob."""
    for i in range(min(len(source), probe)):
        e = source[i]
        missing = e["slot_valid"] & ~e["slot_has_behaviour"]
        if missing.any():
            rec = source.reader[source.indices[i]]
            raise ValueError(
                f"reference=behaviour but node {rec.task_id}/{rec.node_id} has branches without "
                f"behaviour_logprob; collect with a policy that records log-probs, or use "
                f"reference=live/precomputed"
            )
