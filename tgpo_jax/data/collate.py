"""One tree node -> one fixed-shape training example (numpy), for every method and layout.

Layouts (``CollateConfig.layout``):
- ``packed``: one row per node: the prompt once, then each used branch as its own segment. A
  branch token attends to the prompt and to its own earlier tokens only; its positions continue
  from the prompt end. A branch's first token is predicted from the prompt's last hidden state.
- ``plain``: one row per branch, each ``prompt + branch`` (the usual per-sequence layout).

Either way an example holds: rows ``tokens/positions/segments/pred/slot`` [R, L]; per-branch
*slots* [S] (a slot = one completion whose summed log-prob a loss needs); ``pairs`` [P] over slots;
KTO ``items`` [I] over slots; and an optional KL slot (a mismatched completion, for KTO's KL estimate).
Prompt tokens never carry loss (slot = -1); the action is tokenised separately from the prompt (no
merge across the boundary) and ends with EOS, trained once.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from tgpo_jax.data import examples as ex
from tgpo_jax.data.decisions import continuations, decision_mask
from tgpo_jax.data.schema import NodeRecord

METHODS = ("sft", "kto", "kto_tree", "dpo", "tgpo")  # the training methods, in TGPO Table 1's order
PREFERENCE = METHODS[1:]  # the ones that start from the SFT model
# Agent Q's trajectory-level DPO (docs/method.md §9.3): trained on trajectory-pair datasets (data/trajectory.py),
# not on tree nodes, so it is not one of Table 1's methods
BASELINES = ("traj_dpo",)
LAYOUTS = ("packed", "plain")


@dataclasses.dataclass(frozen=True)
class CollateConfig:
    """How node records become fixed-shape examples: the training method, the row layout (packed or plain), the length
    limits, and the numbers of slots, pairs and KTO items per example."""

    method: str = "tgpo"
    layout: str = "packed"
    max_len: int = 1024  # L: row length
    max_prompt_len: int = 768  # prompts are cut from the left (the observation is at the end)
    max_completion_len: int = 128
    max_branches: int = 4  # S: slots per example (branches kept per node)
    max_pairs: int = 6  # P: pairs per example
    max_items: int = 8  # I: KTO items per example
    kl_slot: bool = True  # KTO: add a mismatched completion for the KL estimate
    # SFT and the preference methods' SFT term: each task family (the record's meta "family") weighs alike in that
    # loss, whatever its share of the steps (pipeline.family_weights; docs/method.md §7 "family balance")
    family_balance: bool = False
    sft_slots: bool = False  # DPO / TGPO / KTO(-Tree): also the node's SFT items as slots (slot_sft), for the SFT term
    # DPO / TGPO: token_weight 1 on decision tokens, 0 on copies (decisions.py), for a margin without the copies
    # (objective.pair_token_logprobs; set from loss.margin_copies)
    margin_decisions: bool = False
    pairs: ex.PairConfig = ex.PairConfig()

    def __post_init__(self):
        if self.method not in METHODS + BASELINES:
            raise ValueError(f"method {self.method!r}: expected one of {METHODS + BASELINES}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r}: expected one of {LAYOUTS}")
        if self.method == "traj_dpo" and self.layout != "plain":
            raise ValueError("method traj_dpo needs layout 'plain': every step of a trajectory pair has its own prompt")
        if self.family_balance and not (self.method == "sft" or self.sft_slots):
            raise ValueError(
                f"family_balance weighs SFT's loss or the SFT term; method {self.method!r} without "
                "the SFT term (loss.sft_alpha) has no use for it"
            )
        if self.margin_decisions and self.method not in ("dpo", "tgpo"):
            raise ValueError(f"margin_decisions is a DPO / TGPO setting (method {self.method!r})")
        if self.pairs.kto_reachable and self.method != "kto":  # KTO-Tree's labels come from Q, not from the runs
            raise ValueError(f"kto_reachable is a plain-KTO setting (method {self.method!r})")
        if self.max_prompt_len + self.max_completion_len > self.max_len:
            raise ValueError(
                f"max_prompt_len ({self.max_prompt_len}) + max_completion_len "
                f"({self.max_completion_len}) exceeds max_len ({self.max_len})"
            )

    @property
    def num_slots(self) -> int:
        """Slots per example: the branches kept per node, plus one for the KL estimate when it is used."""
        return self.max_branches + int(self.uses_kl)

    @property
    def uses_kl(self) -> bool:
        """Whether examples carry a mismatched completion for KTO's KL estimate (KTO and KTO-Tree with ``kl_slot``)."""
        return self.method in ("kto", "kto_tree") and self.kl_slot

    @property
    def rows(self) -> int:
        """Token rows per example: 1 packed (the prompt once, then every branch), else one row per slot."""
        return 1 if self.layout == "packed" else self.num_slots


def node_selection(node: NodeRecord, cfg: CollateConfig):
    """-> (branch indices used, pairs [(ci, ri, w)], items [(bi, desirable)]) in node branch indices."""
    pc = cfg.pairs
    if cfg.method in BASELINES:
        raise ValueError(f"method {cfg.method} trains on trajectory pairs (tgpo_jax.data.trajectory), not nodes")
    if cfg.method == "sft":
        return sorted(set(ex.sft_items(node, pc))), [], []
    if cfg.method in ("dpo", "tgpo"):
        pairs = [(p.chosen, p.rejected, p.weight) for p in ex.preference_pairs(node, pc)]
        pairs = sorted(pairs, key=lambda p: -p[2])[: cfg.max_pairs]  # keep the most informative pairs
        used = sorted({i for c, r, _ in pairs for i in (c, r)})
        if cfg.sft_slots:  # after the pairs' branches, which keep their slots first
            used += [i for i in sorted(set(ex.sft_items(node, pc))) if i not in used]
        return used, pairs, []
    items = ex.kto_items(node, pc) if cfg.method == "kto" else ex.kto_tree_items(node, pc)
    # every branch is an item (its own labels), so the SFT items' branches are among these already (sft_slots)
    return sorted({i for i, _ in items}), [], items


def tokenize_node(node: NodeRecord, tokenizer, cfg: CollateConfig):
    """-> (prompt ids, [completion ids per branch], truncated flag)."""
    from tgpo_jax.models.tokenizer import chat_ids

    prompt = chat_ids(tokenizer, node.prompt, add_generation_prompt=True)
    truncated = len(prompt) > cfg.max_prompt_len
    prompt = prompt[-cfg.max_prompt_len :]
    full = [action_ids(b.action, tokenizer) for b in node.branches]
    truncated |= any(len(ids) > cfg.max_completion_len for ids in full)
    return prompt, [ids[: cfg.max_completion_len] for ids in full], truncated


def action_ids(action: str, tokenizer) -> list[int]:
    """The action tokenised on its own (no merge with the prompt), ending with EOS."""
    return tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def empty_example(cfg: CollateConfig) -> dict[str, np.ndarray]:
    """An all-padding example for ``cfg``: the arrays every example has, with their shapes ([rows, max_len] per token,
    [slots], [pairs], [items]) and dtypes."""
    r, length, s = cfg.rows, cfg.max_len, cfg.num_slots
    return {
        "tokens": np.zeros((r, length), np.int32),
        "positions": np.zeros((r, length), np.int32),
        "segments": np.full((r, length), -1, np.int32),  # -1 pad, 0 prompt, k >= 1 completion segment k
        "pred": np.zeros((r, length), np.int32),  # index of the token whose hidden state predicts this one
        "slot": np.full((r, length), -1, np.int32),  # slot of a loss-carrying token, -1 elsewhere
        "slot_pos": np.zeros((r, length), np.int32),  # index of a loss-carrying token within its action
        # loss weight of a loss-carrying token, 0 elsewhere: 1 (SFT: its family's weight with family_balance, set by
        # data/pipeline.py; DPO / TGPO with margin_decisions: 1 decision, 0 copy)
        "token_weight": np.zeros((r, length), np.float32),
        "slot_valid": np.zeros((s,), bool),
        "slot_behaviour": np.zeros((s,), np.float32),
        "slot_has_behaviour": np.zeros((s,), bool),
        "slot_ref": np.zeros((s,), np.float32),
        "slot_sft": np.zeros((s,), bool),  # the slot's branch is an SFT item (CollateConfig.sft_slots)
        "slot_weight": np.ones((s,), np.float32),  # the SFT term's weight of the slot (family_balance; else 1)
        "slot_side": np.zeros((s,), np.int32),  # traj_dpo: +1 a step of the chosen trajectory, -1 of the rejected
        "pair_chosen": np.zeros((cfg.max_pairs,), np.int32),
        "pair_rejected": np.zeros((cfg.max_pairs,), np.int32),
        "pair_weight": np.zeros((cfg.max_pairs,), np.float32),
        "pair_valid": np.zeros((cfg.max_pairs,), bool),
        "pair_from": np.zeros((cfg.max_pairs,), np.int32),  # first token where the pair's two actions differ
        "item_slot": np.zeros((cfg.max_items,), np.int32),
        "item_desirable": np.zeros((cfg.max_items,), bool),
        "item_valid": np.zeros((cfg.max_items,), bool),
        "kl_slot": np.full((1,), -1, np.int32),
        "index": np.full((), -1, np.int64),
    }


def _place(
    ex_: dict, row: int, start: int, ids: Sequence[int], segment: int, pos0: int, pred0: int, slot: int, weight=1.0
):
    """Write ``ids`` into ``row`` from ``start``; the first token is predicted from index ``pred0``."""
    n = len(ids)
    sl = slice(start, start + n)
    ex_["tokens"][row, sl] = ids
    ex_["positions"][row, sl] = np.arange(pos0, pos0 + n)
    ex_["segments"][row, sl] = segment
    if slot >= 0:
        ex_["pred"][row, sl] = np.concatenate([[pred0], np.arange(start, start + n - 1)])
        ex_["slot"][row, sl] = slot
        ex_["slot_pos"][row, sl] = np.arange(n)
        ex_["token_weight"][row, sl] = weight
    return start + n


def token_weights(prompt: Sequence[int], seqs, cfg: CollateConfig) -> dict[int, np.ndarray | float]:
    """{slot: per-token loss weight}: 1 on every token, except DPO / TGPO with ``margin_decisions``: 1 on decision
    tokens, 0 on copies (the pair margin's tokens, ``decisions.py``)."""
    if not cfg.margin_decisions:
        return {slot: 1.0 for slot, _ in seqs}
    table = continuations(prompt)
    return {slot: decision_mask(prompt, ids, table).astype(np.float32) for slot, ids in seqs}


def build_example(
    node: NodeRecord,
    tokenizer,
    cfg: CollateConfig,
    *,
    index: int = -1,
    kl_completion: Sequence[int] | None = None,
    weight_scale: float = 1.0,
    tokenized=None,
) -> dict[str, np.ndarray]:
    """Collate one node. ``kl_completion``: token ids of another node's completion (KTO's KL slot)."""
    out = empty_example(cfg)
    out["index"] = np.asarray(index, np.int64)
    used, pairs, items = node_selection(node, cfg)
    prompt, comps, _ = tokenized or tokenize_node(node, tokenizer, cfg)
    p = len(prompt)

    # Which branches fit: all used ones in plain layout (one row each); in packed layout while the row has room.
    kept, room = [], cfg.max_len - p
    for b in used[: cfg.max_branches]:
        if cfg.layout == "packed":
            if len(comps[b]) > room:
                continue
            room -= len(comps[b])
        kept.append(b)
    slot_of = {b: k for k, b in enumerate(kept)}
    seqs = [(slot_of[b], comps[b]) for b in kept]
    if (
        cfg.uses_kl
        and kl_completion is not None
        and len(kl_completion)
        and (cfg.layout == "plain" or len(kl_completion[: cfg.max_completion_len]) <= room)
    ):
        kl = cfg.max_branches
        seqs.append((kl, list(kl_completion[: cfg.max_completion_len])))
        out["kl_slot"][0] = kl

    weights = token_weights(prompt, seqs, cfg)
    if cfg.layout == "packed":
        end = _place(out, 0, 0, prompt, 0, 0, 0, -1)
        for slot, ids in seqs:
            end = _place(out, 0, end, ids, slot + 1, p, p - 1, slot, weights[slot])
    else:
        for slot, ids in seqs:
            end = _place(out, slot, 0, prompt, 0, 0, 0, -1)
            _place(out, slot, end, ids, 1, p, p - 1, slot, weights[slot])
    for slot, _ in seqs:
        out["slot_valid"][slot] = True
    if cfg.sft_slots:
        for b in set(ex.sft_items(node, cfg.pairs)) & set(slot_of):
            out["slot_sft"][slot_of[b]] = True
    for b, k in slot_of.items():
        lp = node.branches[b].behaviour_logprob
        if lp is not None:
            out["slot_behaviour"][k], out["slot_has_behaviour"][k] = lp, True

    pairs = [(c, r, w) for c, r, w in pairs if c in slot_of and r in slot_of][: cfg.max_pairs]
    for j, (c, r, w) in enumerate(pairs):
        out["pair_chosen"][j], out["pair_rejected"][j] = slot_of[c], slot_of[r]
        out["pair_weight"][j], out["pair_valid"][j] = w * weight_scale, True
        out["pair_from"][j] = first_difference(comps[c], comps[r])
    items = [(b, d) for b, d in items if b in slot_of][: cfg.max_items]
    for j, (b, d) in enumerate(items):
        out["item_slot"][j], out["item_desirable"][j], out["item_valid"][j] = slot_of[b], d, True
    return out


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first token where two actions differ (the shorter one's length if one is a prefix)."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def stack(examples: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack examples (dicts of arrays with the same keys) into one batch along a new leading axis."""
    return {k: np.stack([e[k] for e in examples]) for k in examples[0]}
