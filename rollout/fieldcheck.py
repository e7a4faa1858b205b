"""Field-by-field checks of JSON records against a spec ``{field: type}``, with messages that name the field.

A spec's type is a Python type (``int`` excludes ``bool``), ``None`` (JSON null), ``NUM`` (a finite int or float, not
a bool) or a tuple of these (any of them). ``check_fields`` calls ``fail(message)`` on the first problem; ``fail``
raises the reader's own error, which names the file and line.
"""

from __future__ import annotations

import math
from typing import Any, Callable

NUM = "number"  # int or float, not bool, finite


def matches(value: Any, want: Any) -> bool:
    """Whether ``value`` is of spec type ``want``."""
    if isinstance(want, tuple):
        return any(matches(value, w) for w in want)
    if want is None:
        return value is None
    if want == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def type_name(want: Any) -> str:
    """A spec type as a message writes it (``str or null``)."""
    if isinstance(want, tuple):
        return " or ".join(type_name(w) for w in want)
    return "null" if want is None else want if isinstance(want, str) else want.__name__


def check_fields(
    obj: dict, spec: dict, where: str, fail: Callable[[str], Any], *, optional: dict | None = None
) -> None:
    """Every field of ``spec`` present in ``obj`` with its type; the fields of ``optional`` of their type where
    present. ``fail(message)`` on the first that is not."""
    for key, want in spec.items():
        if key not in obj:
            fail(f"{where} has no {key!r}")
        _typed(obj, key, want, where, fail)
    for key, want in (optional or {}).items():
        if key in obj:
            _typed(obj, key, want, where, fail)


def _typed(obj: dict, key: str, want: Any, where: str, fail) -> None:
    if not matches(obj[key], want):
        fail(f"{where}: {key!r} should be {type_name(want)}, not {type(obj[key]).__name__} {obj[key]!r:.60}")
