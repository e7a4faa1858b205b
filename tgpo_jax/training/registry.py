"""Named from-scratch initialisers (``model.init``) and update freezes (``model.freeze``) the training loop looks up.

The library holds only what any from-scratch model can use (``normal``: the plain random initialisation); what one
model alone needs (its own initialisation, the entries its fine-tuning must leave alone) registers itself here from
outside, from a recipe (``recipes/``), so the loop never names it. Registering is cheap (no jax import), so an
entry point can do it before anything sets up devices.

An initialiser is ``fn(model_cfg, cfg.model, tokenizer) -> Transformer``; a freeze is
``fn(model_cfg, cfg.model) -> {path: bool array}``, True where updates must not apply (paths as
``loading.flat_params``).
"""

from __future__ import annotations

from typing import Callable

HINT = "a recipe registers more: recipes.register_all(), or recipes.get(name).register() (recipes/)"


def _normal(mc, m, tokenizer):
    """model.init=normal: the model's own random initialisation, seeded by model.init_seed."""
    from tgpo_jax.models.transformer import init_model

    return init_model(mc, seed=m.init_seed)


INITS: dict[str, Callable] = {"normal": _normal}
FREEZES: dict[str, Callable] = {}


def _register(table: dict, kind: str, name: str, fn: Callable) -> None:
    """Add ``name``; registering the same function again is a no-op, another one under a taken name an error."""
    if table.get(name, fn) is not fn:
        raise ValueError(f"{kind}={name!r} is registered already (by {table[name].__module__}); pick another name")
    table[name] = fn


def register_init(name: str, fn: Callable) -> None:
    """``model.init=name`` builds the model with ``fn(model_cfg, cfg.model, tokenizer)``."""
    _register(INITS, "model.init", name, fn)


def register_freeze(name: str, fn: Callable) -> None:
    """``model.freeze=name`` leaves the entries ``fn(model_cfg, cfg.model)`` marks True untouched while training."""
    _register(FREEZES, "model.freeze", name, fn)


def init_fn(name: str) -> Callable:
    """The initialiser registered as ``name``; ValueError naming the known ones otherwise."""
    if name not in INITS:
        raise ValueError(f"model.init={name!r}: expected one of {sorted(INITS)}; {HINT}")
    return INITS[name]


def freeze_fn(name: str) -> Callable:
    """The freeze registered as ``name``; ValueError naming the known ones otherwise."""
    if name not in FREEZES:
        raise ValueError(f"model.freeze={name!r}: expected '' or one of {sorted(FREEZES)}; {HINT}")
    return FREEZES[name]
