"""A configuration section as the typed config it configures.

The launchers take ml_collections sections (``configs/base.py``: ``data``, ``loss``, ``optim``; overridden as
``--config.loss.beta=0.2``); the library's parts take frozen dataclasses that check themselves (``CollateConfig``,
``PairConfig``, ``LossConfig``, ``OptimConfig``). ``from_section`` is the one bridge: each dataclass field the
section holds is read from it by name, nothing is copied by hand and no default is restated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def from_section(cls: type[T], section: Mapping[str, Any], **given: Any) -> T:
    """``cls`` with every field that ``section`` holds read from it and ``given`` (derived values) over them; a field
    in neither keeps ``cls``'s default. ``TypeError`` for a ``given`` name ``cls`` has no field for."""
    names = [f.name for f in dataclasses.fields(cls)]
    extra = sorted(set(given) - set(names))
    if extra:
        raise TypeError(f"{cls.__name__} has no field(s) {extra}")
    return cls(**{k: section[k] for k in names if k in section and k not in given}, **given)
