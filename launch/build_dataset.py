"""Build a training dataset from an episodes directory: merged trees, process rewards, node records.

  python -m launch.build_dataset --episodes=data/episodes/train --out=data/nodes/train
  python -m launch.build_dataset --episodes=… --out=… --alpha=5 --q_aggregate=sum --merge=strict \
      --pairs_jsonl=data/pairs.jsonl          # also export TRL-format preference pairs with weights
  python -m launch.build_dataset --episodes=data/episodes/search --values=mcts --out=data/nodes/search
                                              # Agent Q: records of the search trees (launch.collect --mode=mcts)
  python -m launch.build_dataset --episodes=data/episodes/train --values=trajectory --out=data/nodes/traj
                                              # successful vs failed episodes: configs/traj_dpo.py trains on them
  python -m launch.build_dataset --episodes=… --values=judge --sample_url=http://127.0.0.1:8000 \
      --judge_url=https://api.example.com --judge_model=gpt-4o --out=data/nodes/judge     # DPO-1/2/3 records
Every choice the method leaves open (docs/method.md §2–§4) is a flag here and lands in the manifest's ``config``.
"""

from __future__ import annotations

import json

from absl import app, flags

from launch.entry import prepare
from rollout.policies.prompt import KEEP_RECENT, PAGE_CUTS

F = flags.FLAGS
flags.DEFINE_string("episodes", None, "collection directory written by launch.collect", required=True)
flags.DEFINE_string("out", None, "output dataset directory (ArrayRecord shards + manifest.json)", required=True)
flags.DEFINE_enum("merge", "either", ["either", "strict"], "merge rule: URL and (sequence or pHash) / all three")
flags.DEFINE_integer("phash_threshold", 0, "pHash Hamming distance counted as equal")
flags.DEFINE_bool("guard", True, "never merge states whose task check differs")
flags.DEFINE_float("alpha", 3.0, "R = R_acc + R_format + R_red + alpha * R_subgoal")
flags.DEFINE_enum("q_aggregate", "mean", ["mean", "sum", "discounted"], "branch value over the trajectory suffix")
flags.DEFINE_float("gamma", 0.9, "discount for --q_aggregate=discounted")
flags.DEFINE_enum("l_min", "env", ["env", "graph"], "L_min: the task's optimal length when known, or the graph's")
flags.DEFINE_list("splits", ["train"], "task splits admitted (test tasks stay out of training data)")
flags.DEFINE_integer("num_shards", 4, "ArrayRecord shards")
flags.DEFINE_integer("prompt_budget_tokens", 2048, "prompt budget for rebuilt prompts")
flags.DEFINE_string("tokenizer", "", "count the prompt budget with this tokenizer (the policy's); '' = 4 chars/token")
flags.DEFINE_enum("prompt_style", "full", ["full", "compact"], "system text of rebuilt prompts (the policy's)")
flags.DEFINE_integer(
    "thought_chars", 160, "characters of each earlier thought kept in rebuilt histories (the policy's)"
)
flags.DEFINE_enum("page_ids", "before", ["before", "after"], "where page lines put element ids (the policy's)")
flags.DEFINE_bool("history_last", False, "previous actions after the page in rebuilt prompts (the policy's)")
flags.DEFINE_integer("keep_recent", KEEP_RECENT, "history items kept before the page is cut (the policy's)")
flags.DEFINE_enum("page_cut", "end", list(PAGE_CUTS), "how a page too long for the budget is cut (the policy's)")
flags.DEFINE_bool("include_invalid", True, "keep branches whose output did not parse")
flags.DEFINE_bool("overwrite", False, "replace an existing dataset")
flags.DEFINE_enum("verifier", "builtin", ["builtin", "judge"], "R_acc: built-in checks or a judge model")
flags.DEFINE_string("judge_url", None, "judge: OpenAI-compatible endpoint (vision model)")
flags.DEFINE_string("judge_model", None, "judge: model name")
flags.DEFINE_enum(
    "values",
    "tree",
    ["tree", "mcts", "judge", "trajectory"],
    "branch values: the merged tree's (docs/method.md §4), the collection's Agent Q search trees "
    "(§9.1; train DPO on them with data.margin = theta), judge scores of sampled candidates (§9.2: "
    "--sample_url, --judge_url, --judge_model) or successful vs failed episodes of a task (§9.3: "
    "pairs for --config=configs/traj_dpo.py)",
)
flags.DEFINE_integer("traj_max_pairs", 4, "values=trajectory: pairs per task")
flags.DEFINE_integer(
    "traj_max_steps",
    16,
    "values=trajectory: steps of a pair after the shared ones (both sides); "
    "longer pairs are left out. Train with data.max_branches at least this",
)
flags.DEFINE_string("sample_url", None, "values=judge: OpenAI-compatible server of the policy that samples candidates")
flags.DEFINE_string("sample_model", "bundled", "values=judge: the sampling model's name on that server")
flags.DEFINE_integer("judge_k", 10, "values=judge: candidates per step")
flags.DEFINE_enum("judge_mode", "dpo3", ["dpo1", "dpo2", "dpo3"], "values=judge: which pairings' records")
flags.DEFINE_string("judge_cache", None, "values=judge: JSON-lines cache of judge answers (default <out>.judge.jsonl)")
flags.DEFINE_string("pairs_jsonl", None, "also write preference pairs (TRL format + weight) here")
flags.DEFINE_float("pair_margin", 0.0, "pairs need Q_w - Q_l > margin (JSONL export)")


def main(argv):
    """Build the dataset the flags describe (node, trajectory-pair or judge-scored) from an episodes directory and print
    its summary as JSON."""
    prepare(argv)
    from trees.build import TreeConfig
    from trees.dataset import BuildConfig, build_dataset

    tree = TreeConfig(
        merge=F.merge,
        phash_threshold=F.phash_threshold,
        guard=F.guard,
        alpha=F.alpha,
        q_aggregate=F.q_aggregate,
        gamma=F.gamma,
        l_min=F.l_min,
    )
    from rollout.policies.prompt import SYSTEM_PROMPTS, PromptConfig

    prompt = PromptConfig(
        budget_tokens=F.prompt_budget_tokens,
        system_prompt=SYSTEM_PROMPTS[F.prompt_style],
        thought_chars=F.thought_chars,
        page_ids=F.page_ids,
        history_last=F.history_last,
        keep_recent=F.keep_recent,
        page_cut=F.page_cut,
    )
    cfg = BuildConfig(
        tree=tree,
        splits=tuple(F.splits),
        num_shards=F.num_shards,
        prompt=prompt,
        tokenizer=F.tokenizer,
        include_invalid=F.include_invalid,
        overwrite=F.overwrite,
        judge_url=F.judge_url,
        judge_model=F.judge_model,
        # with --values=judge the judge scores candidates, not R_acc: the tree's verifier is unused
        verifier="builtin" if F.values == "judge" else F.verifier,
        values=F.values if F.values in ("mcts", "trajectory") else "tree",
        traj_max_pairs=F.traj_max_pairs,
        traj_max_steps=F.traj_max_steps,
    )
    if F.values == "judge":
        from rollout.judge import StepJudge
        from trees.judge_dataset import JudgeDataConfig, build_judge_dataset

        if not (F.sample_url and F.judge_url and F.judge_model):
            raise app.UsageError("--values=judge needs --sample_url, --judge_url and --judge_model")
        judge = StepJudge(F.judge_url, F.judge_model, cache_path=F.judge_cache or F.out.rstrip("/") + ".judge.jsonl")
        summary = build_judge_dataset(
            F.episodes, F.out, cfg, JudgeDataConfig(k=F.judge_k, mode=F.judge_mode), F.sample_url, F.sample_model, judge
        )
        print(json.dumps(summary, indent=1, default=str))
        return
    summary = build_dataset(F.episodes, F.out, cfg)
    if F.pairs_jsonl:
        from trees.export_pairs import export_pairs
        from tgpo_jax.data.examples import PairConfig

        summary["pairs_jsonl"] = {
            "path": F.pairs_jsonl,
            "pairs": export_pairs(F.out, F.pairs_jsonl, PairConfig(margin=F.pair_margin)),
        }
    summary["broken_episodes"] = len(summary["broken_episodes"])
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    app.run(main)
