"""The computer-use recipe's LLM-as-judge DPO in the main job (docs/method.md §9.2): the stage that turns round 1's
successful training episodes into DPO-1 / DPO-2 / DPO-3 records, and what the report says of it. Functions of the
pipeline ``p`` (``experiment.pipeline.Pipeline``), as ``experiment.agent_q`` is.

At each step of the successful episodes of the first ``judge.tasks`` training tasks, the first seed's SFT model,
served on loopback as the recipe's sampler (one request per candidate, its own seed), proposes ``judge.k``
candidates; the judge scores them against the recorded action. No browser step is spent: the pairs come from the
trees' own episodes, so ``judge_dpo`` trains on the same browser budget as TGPO.
"""

from __future__ import annotations

import json

from experiment.names import display_name, model_name
from experiment.pipeline_config import plain as _plain
from experiment.stages import Stage

REFERENCE = "reference match (built-in: 100 for the recorded action's command, 0 otherwise)"


def _pairing(mode: str) -> str:
    return mode.upper().replace("DPO", "DPO-")  # dpo3 -> DPO-3, as the recipe names them


def judge_stages(p) -> list[Stage]:
    """The judge dataset after the first seed's SFT."""
    c = p.cfg
    sft = model_name("sft", 1, p.tag(p.seeds[0]))
    judge = {k: v for k, v in _plain(c.judge).items() if k != "concurrency"}  # how fast, not what
    spec = {"judge": judge, "sampler": sft, "dataset": _plain(c.dataset), **p.prompt_spec()}
    n = min(c.judge.tasks, c.tasks.num_train)
    return [
        Stage(
            "dataset-judge-r1",
            lambda: build_judge(p),
            spec,
            ("collect-r1", sft),
            (p.judge_dataset(1),),
            f"{_pairing(c.judge.mode)} records: {display_name(sft)}'s {c.judge.k} samples per step of "
            f"{n} training tasks' successful episodes, judged by {c.judge.model or 'reference match'}",
        )
    ]


def make_judge(p):
    """The configured judge: a ``StepJudge`` on ``judge.url`` (answers cached beside the dataset, so a resumed
    stage asks only what it has not asked), or the built-in reference judge."""
    from trees.judge_pairs import ReferenceJudge

    j = p.cfg.judge
    if not j.url:
        return ReferenceJudge()
    from rollout.judge import StepJudge

    return StepJudge(
        j.url, j.model, concurrency=j.concurrency, cache_path=p.path("datasets", "judge-round1.judge.jsonl")
    )


def build_judge(p) -> dict:
    """The judge dataset stage: sample candidates from the first seed's SFT model (served locally) at the steps of round
    1's training tasks, have the judge score them and build the records; its counts. ``RuntimeError`` when there are
    fewer records than one batch."""
    from serving.serve import ModelServer
    from trees.judge_dataset import JudgeDataConfig, build_judge_dataset

    j = p.cfg.judge
    sft = model_name("sft", 1, p.tag(p.seeds[0]))
    server = ModelServer.from_path(p.model_dir(sft), sft)
    url = server.start()
    try:
        summary = build_judge_dataset(
            p.episodes(1),
            p.judge_dataset(1),
            p.build_config(),
            JudgeDataConfig(k=j.k, mode=j.mode, threshold=j.threshold, max_tokens=j.max_tokens),
            url,
            sft,
            make_judge(p),
            progress=p.progress,
            task_ids=[t.task_id for t in p.tasks("train")[: j.tasks]],
        )
    finally:
        server.stop()
    batch = p.cfg.judge_dpo.train.batch_size
    if summary["records"] < batch:  # said here, not as a failed first batch of judge_dpo
        raise RuntimeError(
            f"the judge gave {summary['records']} records, fewer than one judge_dpo batch of {batch}: "
            "judge more tasks (judge.tasks) or candidates (judge.k), or set "
            f"--config.judge_dpo.train.batch_size to at most {summary['records']}"
        )
    return {
        k: summary[k]
        for k in (
            "tasks",
            "steps",
            "unscored",
            "records",
            "judge_calls",
            "judge_malformed",
            "judge_cache_hits",
            "broken_episodes",
        )
    }


def budget_notes(p) -> list[str]:
    """The report's line on what the judge dataset cost (samples, steps, judge, records), when judge_dpo is trained."""
    if "judge_dpo" not in p.cfg.methods:
        return []
    with open(p.path("stages", "dataset-judge-r1.json")) as f:
        r = json.load(f)["result"]
    j = p.cfg.judge
    return [
        f"DPO (judge): {j.k} samples of the first seed's SFT at each of {r['steps']} steps of the successful "
        f"episodes of {r['tasks']} training tasks (round 1's, the trees' own: no browser steps), judged by "
        f"{j.model if j.url else REFERENCE}: {r['records']} {_pairing(j.mode)} records, {r['unscored']} steps "
        f"unscored, {r['judge_malformed']} malformed answers asked again."
    ]
