"""Copy-swap augmentation: replace a copied string by another of the same kind, consistently, in a node.

A web agent must copy text from its instruction into commands (``TYPE [2] [wireless mouse]`` for a task that says
'Search for "wireless mouse"'). Collected trajectories hold few distinct strings, so a small model memorises them
instead of learning where to copy from. A node whose successful branch types a string of the instruction carries
``meta["copy"] = [{"text", "kind"}]`` (``trees.dataset``); each time such an example is drawn, every copied
string is, with probability ``prob``, replaced by a random string of the same kind from the dataset's
``copy_pools`` — in every prompt message and every branch — so each epoch shows new strings at the same places.

Replacement is whole-token (no letter or digit directly before or after the match), so "tent" never rewrites
"content". Pure: no I/O, the caller passes the generator (grain's per-element ``random_map`` generator).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

import numpy as np

from tgpo_jax.data.schema import NodeRecord


def _pattern(texts) -> re.Pattern:
    """Any of ``texts`` (longest first), not glued to a letter or digit on either side."""
    alts = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    return re.compile(r"(?<![^\W_])(?:" + alts + r")(?![^\W_])")


def swap_copies(node: NodeRecord, pools: Mapping[str, Sequence[str]], rng: np.random.Generator,
                prob: float) -> NodeRecord:
    """``node`` with each copied string replaced (probability ``prob``) by another string of its kind."""
    subs = {}
    for c in node.meta.get("copy", ()):
        pool = pools.get(c["kind"]) or ()
        if len(pool) < 2 or rng.random() >= prob:
            continue
        new = c["text"]
        while new == c["text"]:
            new = pool[int(rng.integers(len(pool)))]
        subs[c["text"]] = new
    if not subs:
        return node
    pat = _pattern(subs)

    def sub(s: str) -> str:  # one pass: a replacement is never rewritten by another
        return pat.sub(lambda m: subs[m.group(0)], s)

    prompt = [dict(m, content=sub(m["content"])) for m in node.prompt]
    branches = [dataclasses.replace(b, action=sub(b.action), command=sub(b.command), behaviour_logprob=None)
                for b in node.branches]
    return dataclasses.replace(node, prompt=prompt, branches=branches)
