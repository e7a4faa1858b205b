"""Recipes: everything that only one model needs, in one place, selected by a preset.

The library (``tgpo_jax``) trains any model; a model that needs more than that (its own initialisation, the entries
its fine-tuning must leave alone, and the settings they read) keeps all of it in one recipe package here rather than
spread over the library and the layers above it. A recipe registers its pieces under the names a preset's config
selects (``model.init``, ``model.freeze``: ``tgpo_jax/training/registry.py``; ``thoughts``:
``rollout/policies/thoughts.py``); the library and rollout look them up by name and never import a recipe.

- ``scratch_copy``: the from-scratch 'copy' model (configs/models.py ``scratch-copy``) with its planted copy
  circuit (``model.init=copy_circuit``), the circuit's freeze (``model.freeze=copy_circuit``) and the noisy oracle's
  thoughts worded for the circuit (``thoughts=scratch_copy``, registered with ``rollout/policies/thoughts.py``).

Entry points (``launch.entry.prepare``, ``experiment.pipeline.Pipeline``, the benchmarks that build a model) call
``register_all()`` before they build or train anything; registering imports no jax.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RECIPES = {"scratch_copy": "recipes.scratch_copy"}  # name -> its package (with a ``register()``)


def get(name: str) -> ModuleType:
    """The recipe package ``name`` (imported, not yet registered: call its ``register()``)."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}: known recipes are {sorted(RECIPES)}")
    return importlib.import_module(RECIPES[name])


def register_all() -> None:
    """Register every recipe's pieces (initialisers, freezes, thought wordings; repeating it is a no-op)."""
    for name in RECIPES:
        get(name).register()
