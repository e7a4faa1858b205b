"""The LLM-as-judge dataset (docs/method.md §9.2): for every step of the collection's successful training episodes,
K candidates sampled from a policy behind an OpenAI-compatible endpoint under the step's prompt, scored by a judge
against the recorded action (the reference), written as judge records (DPO-1 / DPO-2 / DPO-3).

Sampling follows the recipe (T 0.7, top-k 10, top-p 0.9), one request per candidate with its own seed, so any
server that takes ``seed`` gives K distinct draws. A step whose judge answers never parse is left out and counted.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Sequence

from tqdm import tqdm

from rollout.endpoint import ChatEndpoint
from rollout.judge import SAMPLING, StepJudge
from rollout.recording import read_tasks
from trees.dataset import BuildConfig, load_episodes, step_prompt
from trees.judge_pairs import ScoredStep, judge_records


@dataclasses.dataclass(frozen=True)
class JudgeDataConfig:
    """How the judge-scored dataset is sampled and paired: candidates per step, the DPO mode, the DPO-1 score threshold
    and the token limit per candidate; ``ValueError`` for invalid values."""

    k: int = 10  # candidates per step
    mode: str = "dpo3"  # dpo1 / dpo2 / dpo3
    threshold: float = 80.0  # DPO-1: candidates scored below this are rejected
    max_tokens: int = 96  # per candidate

    def __post_init__(self):
        if self.k < 1 or self.mode not in ("dpo1", "dpo2", "dpo3") or not 0 <= self.threshold <= 100:
            raise ValueError(f"invalid judge data config: {self}")


def sample_candidates(
    endpoint: ChatEndpoint, model: str, prompt: Sequence[dict], k: int, max_tokens: int, seed: int
) -> list[str]:
    """``k`` sampled answers of ``model`` to ``prompt`` (seeds ``seed``, ``seed + 1``, ...); an unreadable answer counts
    as an empty candidate."""
    out = []
    for j in range(k):
        answer = endpoint.post(
            {"model": model, "messages": list(prompt), "max_tokens": max_tokens, "seed": seed + j, **SAMPLING}
        )
        try:
            out.append(str(answer["choices"][0]["message"]["content"] or ""))
        except (KeyError, IndexError, TypeError):
            out.append("")  # an empty candidate: the judge scores it like any other
    return out


def judge_dataset_records(
    episodes_dir: str,
    cfg: BuildConfig,
    jcfg: JudgeDataConfig,
    sampler_url: str,
    sampler_model: str,
    judge: StepJudge,
    progress: bool = True,
    task_ids: Sequence[str] | None = None,
) -> tuple[list, dict]:
    """-> (records, counts) for every step of the successful episodes of ``cfg.splits`` (of ``task_ids`` only, when
    given). ``judge``: a ``StepJudge`` or anything with its ``score`` (``trees.judge_pairs.ReferenceJudge``)."""
    by_task, broken = load_episodes(episodes_dir)
    tasks = {t.task_id: t for t in read_tasks(episodes_dir)}
    endpoint = ChatEndpoint(sampler_url)
    records, counts = [], {"steps": 0, "unscored": 0, "broken_episodes": len(broken)}
    wanted = set(by_task) if task_ids is None else set(task_ids)
    steps = [
        (task_id, ep, t)
        for task_id in sorted(by_task)
        if task_id in wanted
        for ep in by_task[task_id]
        if ep.summary["success"] and ep.summary["split"] in cfg.splits
        for t in range(len(ep.steps))
    ]
    counts["tasks"] = len({task_id for task_id, _, _ in steps})
    for task_id, ep, t in tqdm(steps, desc="judge steps", unit="step", disable=not progress):
        prompt = step_prompt(tasks.get(task_id), ep, t, cfg)
        reference = ep.steps[t]["output"]
        key = f"{ep.summary['episode_key']}:{t}"
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
        candidates = sample_candidates(endpoint, sampler_model, prompt, jcfg.k, jcfg.max_tokens, seed)
        page = "\n".join(m["content"] for m in prompt if m["role"] != "system")
        scores = judge.score(page, reference, candidates)
        counts["steps"] += 1
        if scores is None:
            counts["unscored"] += 1
            continue
        records += judge_records(
            ScoredStep(key, reference, tuple(candidates), tuple(scores)), prompt, task_id, jcfg.mode, jcfg.threshold
        )
    counts["records"] = len(records)
    return records, counts


def build_judge_dataset(
    episodes_dir: str,
    out_dir: str,
    cfg: BuildConfig,
    jcfg: JudgeDataConfig,
    sampler_url: str,
    sampler_model: str,
    judge: StepJudge,
    progress: bool = True,
    task_ids: Sequence[str] | None = None,
) -> dict:
    """``judge_dataset_records`` written as a dataset; -> its summary (also in the manifest's ``extra``)."""
    from tgpo_jax.data.io import write_dataset

    records, counts = judge_dataset_records(
        episodes_dir, cfg, jcfg, sampler_url, sampler_model, judge, progress, task_ids
    )
    if not records:
        raise ValueError(f"{episodes_dir}: no judge records ({counts})")
    summary = {
        **counts,
        "judge_calls": judge.calls,
        "judge_malformed": judge.malformed,
        "judge_cache_hits": judge.hits,
        "episodes_dir": episodes_dir,
    }
    write_dataset(
        records,
        out_dir,
        num_shards=cfg.num_shards,
        overwrite=cfg.overwrite,
        config={
            **cfg.to_json(),
            "judge": dataclasses.asdict(jcfg),
            "sampler_model": sampler_model,
            "judge_model": judge.model,
        },
        extra=summary,
    )
    return summary
