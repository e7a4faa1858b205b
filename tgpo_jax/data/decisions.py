"""Which completion tokens are decisions, and which are copies (docs/method.md §7, "Copies out of the margin").

An agent's action is mostly copied text (a query, a title, an id the page writes after a name) around a few tokens
that decide (the thought's first word, which element, which result). A pair margin over whole actions moves the
copies as much as the decisions; with ``loss.margin_copies`` False DPO / TGPO read the decisions alone
(collation's ``margin_decisions``). ``decision_mask`` marks, without knowing the grammar, the tokens that no copy
from the context explains, by the rule an induction head follows:

take the longest suffix (up to ``max_n`` tokens) of the context before ``y[k]`` (the prompt, then the completion so
far) that occurred earlier in it; ``y[k]`` is a *copy* when every earlier occurrence of that suffix is followed by
``y[k]``, and a *decision* otherwise: its context never occurred (format words, a word no copy starts), or occurred
followed by something else (which of the page's `Sort: Price low…` / `Sort: Price high…` links; which id a rank word
names).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_N = 8  # longest context matched; a copy's source is pinned by far fewer tokens than this in practice


def continuations(ids: Sequence[int], max_n: int = MAX_N) -> dict[tuple[int, ...], set[int]]:
    """{n-gram: {tokens that followed it}} for every n-gram (1 <= n <= max_n) of ``ids`` that has a successor."""
    out: dict[tuple[int, ...], set[int]] = {}
    ids = list(ids)
    for j in range(1, len(ids)):
        for n in range(1, min(max_n, j) + 1):
            out.setdefault(tuple(ids[j - n : j]), set()).add(ids[j])
    return out


def decision_mask(
    prompt: Sequence[int],
    completion: Sequence[int],
    table: dict[tuple[int, ...], set[int]] | None = None,
    max_n: int = MAX_N,
) -> np.ndarray:
    """-> bool [len(completion)]: True where the completion token is a decision (see the module docstring).

    ``table``: ``continuations(prompt, max_n)``, when several completions share one prompt (it is not modified)."""
    table = continuations(prompt, max_n) if table is None else table
    seq = list(prompt) + list(completion)
    added: dict[tuple[int, ...], set[int]] = {}  # n-grams the completion itself adds as it goes
    out = np.ones(len(completion), bool)
    for k, y in enumerate(completion):
        i = len(prompt) + k
        for n in range(min(max_n, i), 0, -1):  # longest earlier occurrence wins
            key = tuple(seq[i - n : i])
            seen = table.get(key, set()) | added.get(key, set())
            if seen:
                out[k] = seen != {y}
                break
        for n in range(1, min(max_n, i) + 1):
            added.setdefault(tuple(seq[i - n : i]), set()).add(y)
    return out
