"""Copy-swap augmentation: replace a copied string by another of the same kind, consistently, in a node.

A web agent must copy text from its instruction into commands (``TYPE [2] [wireless mouse]`` for a task that says
'Search for "wireless mouse"'). Collected trajectories hold few distinct strings, so a small model memorises them
instead of learning where to copy from. A node whose successful branch types a string of the instruction carries
``meta["copy"] = [{"text", "kind"}]`` (``trees.dataset``); each time such an example is drawn, every copied
string is, with probability ``prob``, replaced by a random string of the same kind from the dataset's
``copy_pools`` — in every prompt message and every branch — so each epoch shows new strings at the same places.

Replacement is whole-token (no letter or digit directly before or after the match), so "tent" never rewrites
"content", and a replacement is never a string the node's prompt already holds. Kinds: what the environment's
``typed_strings`` names (queries, titles, names, addresses; the shop's option names, "size" -> "scent" in the task,
on the page and in the thought alike). Pure: no I/O, the caller passes the generator (grain's per-element
``random_map`` generator).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

import numpy as np

from tgpo_jax.data.schema import NodeRecord


# Draws per string for a replacement that the node does not already hold. Why: a string already on the page would
# make two things of one (a second combobox "color" beside the one that was "size"); after that many draws that
# all collide, the string is left as it is.
_DRAWS = 8


def whole_token(texts) -> re.Pattern:
    """Any of ``texts`` (longest first), not glued to a letter or digit on either side."""
    alts = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    return re.compile(r"(?<![^\W_])(?:" + alts + r")(?![^\W_])")


def swap_copies(
    node: NodeRecord, pools: Mapping[str, Sequence[str]], rng: np.random.Generator, prob: float
) -> NodeRecord:
    """``node`` with each copied string replaced (probability ``prob``) by another string of its kind."""
    subs = {}
    text = "\n".join(m["content"] for m in node.prompt)
    for c in node.meta.get("copy", ()):
        pool = pools.get(c["kind"]) or ()
        if len(pool) < 2 or rng.random() >= prob:
            continue
        for _ in range(_DRAWS):
            new = pool[int(rng.integers(len(pool)))]
            if new != c["text"] and not whole_token([new]).search(text):
                subs[c["text"]] = new
                break
    if not subs:
        return node
    pat = whole_token(subs)

    def sub(s: str) -> str:  # one pass: a replacement is never rewritten by another
        return pat.sub(lambda m: subs[m.group(0)], s)

    prompt = [dict(m, content=sub(m["content"])) for m in node.prompt]
    branches = [
        dataclasses.replace(b, action=sub(b.action), command=sub(b.command), behaviour_logprob=None)
        for b in node.branches
    ]
    return dataclasses.replace(node, prompt=prompt, branches=branches)
