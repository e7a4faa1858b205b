"""Synthetic tree-node records: a small preference task with a known answer, for tests and benchmarks.

Each node asks to click one target item among several; the branch that clicks the target has the
highest Q, a scroll (a harmless detour) a middle Q, clicking another item the lowest. A policy that learns the task must
copy the target from the prompt into its command, so held-out nodes (new target/option draws) measure
generalisation, not memorisation. ``observation_words`` pads the prompt like a web page's
accessibility tree (web-agent-shaped: long shared prompt, short actions).
"""

from __future__ import annotations

import random

from tgpo_jax.data.schema import Branch, NodeRecord

ITEMS = ["shoes", "socks", "shirt", "hat", "scarf", "gloves", "jacket", "boots", "belt", "bag", "watch", "ring"]
FILLER = ["link", "button", "heading", "listitem", "img", "text", "menu", "search", "cart", "price", "rating"]


def synthetic_nodes(
    n: int, seed: int = 0, *, num_branches: int = 3, observation_words: int = 0, task_prefix: str = "task"
) -> list[NodeRecord]:
    """``n`` deterministic toy node records (seeded by ``seed``): add an item to the cart, one correct click (Q 1), one
    scroll (Q 0.4) and wrong clicks (Q 0), with ``observation_words`` filler entries on the page."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        options = rng.sample(ITEMS, max(num_branches, 3))
        target = options[0]
        obs = " ".join(f"[{k}] {rng.choice(FILLER)} {rng.choice(ITEMS)}" for k in range(observation_words))
        page = "\n".join(f"[{k + 1}] button '{o}'" for k, o in enumerate(rng.sample(options, len(options))))
        prompt = [
            {"role": "system", "content": "You are a web agent. Answer with one command."},
            {"role": "user", "content": f"Task: add the {target} to the cart.\nPage:\n{obs}\n{page}"},
        ]
        qs = [1.0, 0.4] + [0.0] * (num_branches - 2)
        branches = []
        for k in range(num_branches):
            item = options[k]
            ok = k == 0
            action, command = (f"CLICK [{item}]", f"CLICK [button '{item}']") if k != 1 else ("SCROLL [DOWN]",) * 2
            branches.append(
                Branch(
                    action=action,
                    command=command,
                    q=qs[k],
                    rewards={"r_acc": 1.0, "r_format": 1.0, "r_red": 0.0, "r_subgoal": qs[k], "r": 2.0 + 3 * qs[k]},
                    n_total=2,
                    n_success=2 if ok else 0,
                    n_failed=0 if ok else 2,
                    on_success_path=ok,
                    reaches_success=ok,
                    behaviour_logprob=-1.0 - 0.5 * k,
                )
            )
        rng.shuffle(branches)
        out.append(
            NodeRecord(
                task_id=f"{task_prefix}-{i // 2}",
                node_id=f"n{i}",
                prompt=prompt,
                branches=branches,
                meta={"target": target},
            ).validate()
        )
    return out
