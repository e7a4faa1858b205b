"""The from-scratch 'copy' model's recipe: the planted copy circuit (``circuit.py``) as ``model.init=copy_circuit``
and its freeze as ``model.freeze=copy_circuit``, with the settings both read from ``cfg.model``
(``model.circuit_recency``, ``model.circuit_recency_after``, ``model.circuit_bigram``, ``model.circuit_trigram``),
the element ids its tokenizer keeps as single pieces (``id_pieces``, from ``tokenizer.id_pieces``), and the noisy
oracle's thoughts worded for that circuit (``thoughts.py``) as ``thoughts=scratch_copy``.

``register()`` hands the first two to the training loop's registry (``tgpo_jax/training/registry.py``) and the
wording to the oracle's (``rollout/policies/thoughts.py``); the presets that select them are configs/models.py
``scratch-copy`` and configs/pipeline.py's ``default``, ``large``, ``tiny`` and ``miniwob`` (``thoughts``).
"""

from __future__ import annotations

from recipes.scratch_copy.circuit import CircuitConfig, frozen_mask, init_planted, recency_token_ids

NAME = "copy_circuit"  # the model.init and model.freeze value that selects this recipe's pieces


def circuit_config(m) -> CircuitConfig:
    """The planted circuit's settings from ``cfg.model`` (model.circuit_recency, model.circuit_bigram,
    model.circuit_trigram)."""
    return CircuitConfig(
        recency=float(m.get("circuit_recency", 0.0)),
        bigram=float(m.get("circuit_bigram", CircuitConfig.bigram)),
        trigram=float(m.get("circuit_trigram", CircuitConfig.trigram)),
    )


def planted(mc, m, tokenizer):
    """model.init=copy_circuit: the circuit, with the recency term's trigger pieces read from the tokenizer."""
    c = circuit_config(m)
    tokens = recency_token_ids(tokenizer, m.circuit_recency_after) if c.recency else ()
    return init_planted(mc, seed=m.init_seed, c=c, recency_tokens=tokens)


def freeze(mc, m):
    """model.freeze=copy_circuit: path -> True where fine-tuning leaves the planted circuit alone."""
    return frozen_mask(mc, circuit_config(m))


def id_pieces(n: int) -> list[str]:
    """The element ids ``[0]`` .. ``[n-1]`` as user-defined tokenizer symbols (``tokenizer.id_pieces`` = n; 0: none),
    for the library's SentencePiece training (``extra_pieces``). Why: the circuit copies a command's value
    (``SELECT [6] [red]``) by matching the tokens before it; with the id split into ``[``, digits and ``]``, ``[``
    opened ids and free text alike, and that match tied with every ``[`` of the prompt. As single pieces, ``▁[``
    opens only free text, and the ids are pieces that turn the circuit's recency term on
    (``model.circuit_recency_after``)."""
    return [f"[{i}]" for i in range(int(n))]


def register() -> None:
    """Make ``model.init=copy_circuit`` and ``model.freeze=copy_circuit`` known to the training loop, and
    ``thoughts=scratch_copy`` to the oracle (with the valid-argument decoding's rules for its setting thoughts)."""
    from recipes.scratch_copy import thoughts
    from rollout.policies.thoughts import register_thoughts
    from tgpo_jax.training.registry import register_freeze, register_init

    register_init(NAME, planted)
    register_freeze(NAME, freeze)
    register_thoughts(thoughts.NAME, thoughts.thought, setting_form=True, name_ids=False)
