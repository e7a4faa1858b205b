"""Language-model pretraining records for a from-scratch base model: the text of the collected steps (each step's
prompt as the policy sees it, then its output), cut into windows of ``window`` tokens, as node records whose single
branch is the window. SFT on them is next-token prediction over all of that text.

Why: SFT trains on the actions alone (docs/method.md §7). A from-scratch model trained only on them learns the format
and the order of the commands but not to copy from its prompt (the search query from the task, an id from the page),
because a few hundred actions show too few copies. The page text repeats the query and the ids many times (the
history, the search box, the results header), so a short pass of plain language modelling over it is the "base
model" pretraining that a from-scratch model otherwise lacks. Only training episodes are read.
"""

from __future__ import annotations

from typing import Iterator

from rollout.policies.prompt import PromptConfig
from rollout.recording import iter_episodes, read_tasks
from tgpo_jax.data.schema import Branch, NodeRecord


def step_texts(episodes_dir: str, system_prompt: str) -> Iterator[tuple[str, str]]:
    """(task id, text) per recorded step: the user turn of its prompt, then the output."""
    from trees.dataset import BuildConfig, step_prompt

    tasks = {t.task_id: t for t in read_tasks(episodes_dir)}
    cfg = BuildConfig(prompt=PromptConfig(1 << 20, system_prompt))
    for ep in iter_episodes(episodes_dir):
        for t, step in enumerate(ep.steps):
            user = "\n".join(
                m["content"] for m in step_prompt(tasks.get(ep.task_id), ep, t, cfg) if m["role"] != "system"
            )
            yield ep.task_id, f"{user}\n{step.get('output') or ''}"


def windows(ids: list[int], window: int) -> list[list[int]]:
    """Consecutive windows of ``window`` token ids (the last one may be shorter; empty input gives none)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return [ids[i : i + window] for i in range(0, len(ids), window)]


def lm_records(episodes_dir: str, tokenizer, window: int, system_prompt: str) -> list[NodeRecord]:
    """The pretraining records of an episodes directory: each step's text cut into ``window``-token pieces, one
    single-branch node record per non-blank piece."""
    records = []
    for i, (task_id, text) in enumerate(step_texts(episodes_dir, system_prompt)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for j, chunk in enumerate(windows(ids, window)):
            piece = tokenizer.decode(chunk)
            if not piece.strip():
                continue
            branch = Branch(
                action=piece,
                command="",
                q=0.0,
                rewards={},
                n_total=1,
                n_success=1,
                n_failed=0,
                on_success_path=True,
                reaches_success=True,
            )
            records.append(
                NodeRecord(
                    task_id=task_id,
                    node_id=f"lm-{i}-{j}",
                    prompt=[{"role": "system", "content": system_prompt}],
                    branches=[branch],
                    meta={"kind": "lm", "split": "train"},
                )
            )
    return records
