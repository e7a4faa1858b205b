"""grain input pipeline: node records -> collated examples -> seeded shuffle -> process shard -> batches.

``NodeExamples`` is a random-access source over the nodes that yield something for the method (a
node with no preference pair is useless to DPO). Example ``i`` pairs its node with the completion of
example ``i + 1`` for KTO's KL slot — a fixed mismatch, as TRL builds its KL dataset — so every
example (and its reference log-probs) is a pure function of ``i``. grain's iterator state is a
small dict, saved with each checkpoint for exact resume.

With ``copy_swap > 0`` (copy-swap augmentation, ``augment.py``) an example is a function of ``i`` and grain's
per-element generator (``random_map``), which differs between epochs and is restored with the iterator state.
"""

from __future__ import annotations

import dataclasses
import logging

import grain
import numpy as np

from tgpo_jax.data import examples as ex
from tgpo_jax.data.augment import swap_copies
from tgpo_jax.data.collate import CollateConfig, action_ids, build_example, node_selection
from tgpo_jax.data.io import DatasetReader
from tgpo_jax.losses import kto_class_weights

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DatasetStats:
    """Counts of a training dataset: nodes, examples, pairs, desirable and undesirable KTO items, and the mean pair
    weight."""

    num_nodes: int
    num_examples: int
    num_pairs: int
    num_desirable: int
    num_undesirable: int
    mean_pair_weight: float


class NodeExamples:
    """Random-access collated examples over the usable nodes of one dataset directory."""

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
        if weight_norm not in ("none", "dataset_mean"):
            raise ValueError(f"weight_norm {weight_norm!r}: expected 'none' or 'dataset_mean'")
        if not 0.0 <= copy_swap <= 1.0:
            raise ValueError(f"copy_swap={copy_swap}: a probability in [0, 1]")
        self.data_dir, self.tokenizer, self.cfg = data_dir, tokenizer, cfg
        self.reader = DatasetReader(data_dir, verify=True)  # shards' sha256 vs the manifest: a damaged file is named
        self.copy_swap = copy_swap
        self.copy_pools = dict((self.reader.manifest.extra or {}).get("copy_pools") or {})
        if copy_swap and not self.copy_pools:
            log.warning("copy_swap=%s but %s records no copy spans: no augmentation", copy_swap, data_dir)
            self.copy_swap = 0.0
        self.indices: list[int] = []
        weights, n_d, n_u = [], 0, 0
        families, sft_counts = [], []  # per usable node: its task family, its SFT items (family_balance)
        for i in range(len(self.reader)):  # one pass: which nodes are usable, and dataset-level statistics
            node = self.reader[i]
            used, pairs, items = node_selection(node, cfg)
            if not used:
                continue
            self.indices.append(i)
            families.append(str(node.meta.get("family", "")))
            if cfg.family_balance:  # the node's SFT items (its only slots in SFT)
                sft_counts.append(len(set(ex.sft_items(node, cfg.pairs))))
            weights += [w for _, _, w in pairs]
            d, u = ex.class_counts(items)
            n_d, n_u = n_d + d, n_u + u
        if not self.indices:
            raise ValueError(f"dataset {data_dir} has no node usable for method {cfg.method!r}")
        mean_w = float(np.mean(weights)) if weights else 1.0
        self.weight_scale = ex.weight_scale(weights) if weight_norm == "dataset_mean" else 1.0
        self.class_weights = kto_class_weights(n_d, n_u)
        self.stats = DatasetStats(len(self.reader), len(self.indices), len(weights), n_d, n_u, mean_w)
        self.family_weight = family_weights(families, sft_counts) if cfg.family_balance else None
        self.node_family = families
        self.ref_table = ref_table
        if ref_table is not None and ref_table.shape != (len(self), cfg.num_slots):
            raise ValueError(
                f"reference table shape {ref_table.shape} != ({len(self)}, {cfg.num_slots}): "
                "it was computed for another dataset or collation"
            )

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.example(i)

    def example(self, i: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Example ``i``; with ``rng`` and ``copy_swap > 0``, its copied strings swapped (``augment.py``)."""
        i = int(i) % len(self)
        node = self.reader[self.indices[i]]
        if rng is not None and self.copy_swap:
            node = swap_copies(node, self.copy_pools, rng, self.copy_swap)
        kl = None
        if self.cfg.uses_kl:
            other = self.reader[self.indices[(i + 1) % len(self)]]
            used = node_selection(other, self.cfg)[0]
            kl = action_ids(other.branches[used[0]].action, self.tokenizer)[: self.cfg.max_completion_len]
        out = build_example(node, self.tokenizer, self.cfg, index=i, kl_completion=kl, weight_scale=self.weight_scale)
        if self.family_weight is not None:
            w = np.float32(self.family_weight[self.node_family[i]])
            if self.cfg.method == "sft":
                out["token_weight"] *= w
            else:  # the SFT term's slots (objective.sft_term)
                out["slot_weight"][:] = w
        if self.ref_table is not None:
            out["slot_ref"] = self.ref_table[i].astype(np.float32)
        return out


def family_weights(families: list[str], items: list[int]) -> dict[str, float]:
    """{family: loss weight} that gives every family the same total weight over its SFT items (``items[k]`` of node
    ``k``), the mean weight of an item staying 1: w_f = N / (F · n_f); a family without SFT items is not counted
    (weight 1, nothing to weigh). Why: on the shop the multi_cart family holds half the steps and three "Add to
    cart" presses for each "Buy Now" of webshop, the one decision only the task's family tells apart
    (docs/method.md §7 "family balance")."""
    n: dict[str, int] = {}
    for f, k in zip(families, items):
        n[f] = n.get(f, 0) + k
    counted = {f: c for f, c in n.items() if c}
    total = sum(counted.values())
    return {f: total / (len(counted) * counted[f]) if f in counted else 1.0 for f in n}


def make_dataset(
    source,
    *,
    batch_size: int,
    seed: int,
    num_epochs: int | None,
    shuffle: bool = True,
    process_index: int = 0,
    process_count: int = 1,
    drop_remainder: bool = True,
):
    """-> grain IterDataset of per-process batches ([batch_size // process_count, ...] arrays)."""
    if batch_size % process_count:
        raise ValueError(f"global batch size {batch_size} does not divide over {process_count} processes")
    augment = getattr(source, "copy_swap", 0.0) > 0
    ds = grain.MapDataset.range(len(source)) if augment else grain.MapDataset.source(source)
    if shuffle:
        ds = ds.seed(seed).shuffle()  # a fresh permutation every epoch
    ds = ds.repeat(num_epochs)
    if augment:  # the generator depends on the position in the repeated stream: new strings every epoch
        ds = ds.random_map(lambda i, rng: source.example(i, rng), seed=seed)
    ds = ds[process_index::process_count]
    ds = ds.batch(batch_size // process_count, drop_remainder=drop_remainder)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))


def steps_per_epoch(source, batch_size: int) -> int:
    """Whole batches of ``batch_size`` in ``source``; ``ValueError`` when it holds less than one batch."""
    n = len(source) // batch_size
    if n == 0:
        raise ValueError(f"dataset has {len(source)} examples, fewer than one batch of {batch_size}")
    return n
