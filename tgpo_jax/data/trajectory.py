"""Trajectory pairs -> fixed-shape examples for Agent Q's trajectory-level DPO (docs/method.md §9.3).

A trajectory-pair dataset holds one record per step (``value_source = "trajectory"``, one branch: the step's
output), grouped by ``meta["pair"]`` and ``meta["side"]`` ("chosen": the successful trajectory, "rejected": the
failed one) and ordered by ``meta["t"]``. The steps both trajectories share (same prompt, same output) were left
out by the builder (``trees/trajectory_records.py``): they add the same log-prob to both sides, so the pair's margin
is the same without them.

One example = one pair, in the ``plain`` layout: row k is step k's own prompt followed by its output (slot k), and
``slot_side`` says which trajectory the slot belongs to (+1 chosen, -1 rejected). The loss sums each side's slot
log-probs (``tgpo_jax.training.objective``): log π(τ) = Σ_t log π(a_t | s_t).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Sequence

import numpy as np

from tgpo_jax.data.collate import CollateConfig, _place, action_ids, empty_example
from tgpo_jax.data.io import DatasetReader
from tgpo_jax.data.pipeline import DatasetStats
from tgpo_jax.data.schema import NodeRecord

log = logging.getLogger(__name__)
SIDES = {"chosen": 1, "rejected": -1}


def group_pairs(records: Sequence[NodeRecord]) -> dict[str, tuple[list[int], list[int]]]:
    """{pair id: (chosen record indices, rejected record indices)}, each side in step order. A record that is not a
    trajectory step (another value source, no pair or side, more than one branch) is an error naming it."""
    sides: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for i, r in enumerate(records):
        where = f"record {i} ({r.task_id}/{r.node_id})"
        if r.value_source != "trajectory":
            raise ValueError(
                f"{where} has value_source {r.value_source!r}: traj_dpo trains on a trajectory-pair "
                "dataset (launch.build_dataset --values=trajectory)"
            )
        pair, side, t = r.meta.get("pair"), r.meta.get("side"), r.meta.get("t")
        if not isinstance(pair, str) or side not in SIDES or not isinstance(t, int) or len(r.branches) != 1:
            raise ValueError(
                f"{where}: a trajectory step needs meta pair (str), side (chosen/rejected), t (int) "
                f"and one branch; got pair={pair!r} side={side!r} t={t!r}, {len(r.branches)} branches"
            )
        sides[pair][0 if side == "chosen" else 1].append((t, i))
    return {p: ([i for _, i in sorted(c)], [i for _, i in sorted(r)]) for p, (c, r) in sorted(sides.items())}


def build_trajectory_example(
    chosen: Sequence[NodeRecord], rejected: Sequence[NodeRecord], tokenizer, cfg: CollateConfig, *, index: int = -1
) -> dict[str, np.ndarray]:
    """Collate one pair: a row per step (its prompt, then its output as slot k), chosen steps first."""
    from tgpo_jax.models.tokenizer import chat_ids

    steps = [(r, 1) for r in chosen] + [(r, -1) for r in rejected]
    if len(steps) > cfg.num_slots:
        raise ValueError(
            f"a pair of {len(chosen)} + {len(rejected)} steps needs {len(steps)} slots; "
            f"data.max_branches is {cfg.max_branches}"
        )
    out = empty_example(cfg)
    out["index"] = np.asarray(index, np.int64)
    for k, (rec, side) in enumerate(steps):
        prompt = chat_ids(tokenizer, rec.prompt, add_generation_prompt=True)[-cfg.max_prompt_len :]
        ids = action_ids(rec.branches[0].action, tokenizer)[: cfg.max_completion_len]
        end = _place(out, k, 0, prompt, 0, 0, 0, -1)
        _place(out, k, end, ids, 1, len(prompt), len(prompt) - 1, k)
        out["slot_valid"][k], out["slot_side"][k] = True, side
        lp = rec.branches[0].behaviour_logprob
        if lp is not None:
            out["slot_behaviour"][k], out["slot_has_behaviour"][k] = lp, True
    return out


class TrajectoryExamples:
    """Random-access collated pairs of one trajectory-pair dataset (the interface of ``NodeExamples``)."""

    def __init__(
        self,
        data_dir: str,
        tokenizer,
        cfg: CollateConfig,
        *,
        weight_norm: str = "none",
        ref_table: np.ndarray | None = None,
        copy_swap: float = 0.0,
    ):
        if cfg.method != "traj_dpo":
            raise ValueError(f"TrajectoryExamples collates for traj_dpo, not {cfg.method!r}")
        if copy_swap:
            raise ValueError("data.copy_swap is not supported for traj_dpo")
        self.data_dir, self.tokenizer, self.cfg = data_dir, tokenizer, cfg
        self.reader = DatasetReader(data_dir, verify=True)
        self.records = [self.reader[i] for i in range(len(self.reader))]
        grouped = group_pairs(self.records)
        self.pairs, too_long = [], []
        for pid, (c, r) in grouped.items():
            if not c or not r:
                raise ValueError(
                    f"{data_dir}: pair {pid} has {len(c)} chosen and {len(r)} rejected steps; a pair needs both"
                )
            (self.pairs if len(c) + len(r) <= cfg.num_slots else too_long).append((c, r))
        if too_long:  # kept out rather than cut: a cut pair's margin is not the trajectories' margin
            log.warning(
                "%d of %d trajectory pairs have more steps than data.max_branches=%d and are left out",
                len(too_long),
                len(grouped),
                cfg.max_branches,
            )
        if not self.pairs:
            raise ValueError(
                f"dataset {data_dir}: no trajectory pair fits data.max_branches={cfg.max_branches} "
                f"({len(too_long)} longer)"
            )
        self.left_out = len(too_long)
        self.indices = [c[0] for c, _ in self.pairs]  # a record of each pair, to name it in errors
        self.copy_swap, self.copy_pools = 0.0, {}
        self.weight_scale, self.class_weights = 1.0, (1.0, 1.0)
        self.stats = DatasetStats(len(self.records), len(self.pairs), len(self.pairs), 0, 0, 1.0)
        self.ref_table = ref_table

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.example(i)

    def example(self, i: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """The collated example of trajectory pair ``i`` (modulo the number of pairs), with its reference log-probs when
        a table is loaded; ``rng`` is unused."""
        i = int(i) % len(self)
        c, r = self.pairs[i]
        out = build_trajectory_example(
            [self.records[j] for j in c], [self.records[j] for j in r], self.tokenizer, self.cfg, index=i
        )
        if self.ref_table is not None:
            out["slot_ref"] = self.ref_table[i].astype(np.float32)
        return out


def examples_for(method: str):
    """The example source class a method trains on."""
    from tgpo_jax.data.pipeline import NodeExamples

    return TrajectoryExamples if method == "traj_dpo" else NodeExamples
