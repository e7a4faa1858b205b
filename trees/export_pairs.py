"""Preference pairs as JSONL in TRL's conversational preference format, plus the TGPO weight.

    {"prompt": [{"role": "system", ...}, {"role": "user", ...}],
     "chosen": [{"role": "assistant", "content": "Thought: …\\nCommand: …"}],
     "rejected": [{"role": "assistant", "content": "…"}],
     "weight": 2.0, "task_id": "…", "node_id": "…", "q_chosen": 5.0, "q_rejected": 2.0}

``trl.DPOTrainer`` reads prompt/chosen/rejected as they are; ``weight`` is for trainers that weight pairs.
"""

from __future__ import annotations

import json

from tgpo_jax.data.examples import PairConfig, normalise_weights, preference_pairs
from tgpo_jax.data.io import DatasetReader
from tgpo_jax.files import write_text_atomic


def export_pairs(data_dir: str, out_path: str, cfg: PairConfig = PairConfig(), normalise: bool = False) -> int:
    """Write every pair of the dataset; returns the number written. Atomic (temp file + rename)."""
    rows = []
    for node in DatasetReader(data_dir):
        for p in preference_pairs(node, cfg):
            w, loser = node.branches[p.chosen], node.branches[p.rejected]
            rows.append(
                {
                    "prompt": [dict(m) for m in node.prompt],
                    "chosen": [{"role": "assistant", "content": w.action}],
                    "rejected": [{"role": "assistant", "content": loser.action}],
                    "weight": p.weight,
                    "task_id": node.task_id,
                    "node_id": node.node_id,
                    "q_chosen": w.q,
                    "q_rejected": loser.q,
                }
            )
    if normalise and rows:
        for row, w in zip(rows, normalise_weights([r["weight"] for r in rows])):
            row["weight"] = w
    write_text_atomic(out_path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return len(rows)
