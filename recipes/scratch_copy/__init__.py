"""The from-scratch 'copy' model's recipe: the planted copy circuit (``circuit.py``) as ``model.init=copy_circuit``
and its freeze as ``model.freeze=copy_circuit``, with the settings both read from ``cfg.model``
(``model.circuit_recency``, ``model.circuit_recency_after``, ``model.circuit_bigram``, ``model.circuit_trigram``).

``register()`` hands both to the training loop's registry (``tgpo_jax/training/registry.py``); the preset that
selects them is configs/models.py ``scratch-copy``.
"""
from __future__ import annotations

from recipes.scratch_copy.circuit import CircuitConfig, frozen_mask, init_planted, recency_token_ids

NAME = "copy_circuit"  # the model.init and model.freeze value that selects this recipe's pieces


def circuit_config(m) -> CircuitConfig:
    """The planted circuit's settings from ``cfg.model`` (model.circuit_recency, model.circuit_bigram,
    model.circuit_trigram)."""
    return CircuitConfig(recency=float(m.get("circuit_recency", 0.0)),
                         bigram=float(m.get("circuit_bigram", CircuitConfig.bigram)),
                         trigram=float(m.get("circuit_trigram", CircuitConfig.trigram)))


def planted(mc, m, tokenizer):
    """model.init=copy_circuit: the circuit, with the recency term's trigger pieces read from the tokenizer."""
    c = circuit_config(m)
    tokens = recency_token_ids(tokenizer, m.circuit_recency_after) if c.recency else ()
    return init_planted(mc, seed=m.init_seed, c=c, recency_tokens=tokens)


def freeze(mc, m):
    """model.freeze=copy_circuit: path -> True where fine-tuning leaves the planted circuit alone."""
    return frozen_mask(mc, circuit_config(m))


def register() -> None:
    """Make ``model.init=copy_circuit`` and ``model.freeze=copy_circuit`` known to the training loop."""
    from tgpo_jax.training.registry import register_freeze, register_init

    register_init(NAME, planted)
    register_freeze(NAME, freeze)
