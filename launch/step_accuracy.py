"""Teacher-forced step accuracy of a model on recorded episodes, per task family and command kind
(experiment/step_accuracy.py): which decisions does it get wrong? A minute where a browser evaluation takes several.

  python -m launch.collect --split=test --num_tasks=60 --runs=1 --wrong_choice=0 --loop=0 --malformed=0 \
      --premature_stop=0 --thoughts=scratch_copy --out=data/heldout-oracle
  # (--thoughts as the model's run worded its oracle's thoughts, its policy.json's "thoughts"; with plain ones,
  # --page_ids as its page_ids)
  python -m launch.step_accuracy --model=runs/pipeline/models/sft --episodes=data/heldout-oracle
  # one decision on the model's own training episodes: does it fit it? (the thoughts' first words are counted)
  python -m launch.step_accuracy --model=runs/pipeline/models/sft --episodes=runs/pipeline/episodes \
      --match='button "(Buy Now|Add to cart)"'
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from launch.entry import prepare

F = flags.FLAGS
flags.DEFINE_string("model", None, "training run directory / HF directory / .gguf / 'bundled'")
flags.DEFINE_integer("step", None, "checkpoint step of a run directory (default: the latest)")
flags.DEFINE_string(
    "episodes", None, "a collection directory (launch.collect's output), e.g. the clean oracle on held-out tasks"
)
flags.DEFINE_integer("prompt_tokens", 0, "prompt budget in the model's tokens (0 = the one saved with the model)")
flags.DEFINE_enum("prompt_style", None, ["full", "compact"], "system text (default: saved with the model, else full)")
flags.DEFINE_integer(
    "thought_chars", None, "characters of each earlier thought in the history (default: saved with the model, else 160)"
)
flags.DEFINE_integer("batch", 16, "prompts per sampler call")
flags.DEFINE_integer("max_tokens", 64, "tokens per step")
flags.DEFINE_bool(
    "force_thought",
    False,
    "give the recorded thought and score only the command the model writes "
    "after it (does it carry out a right decision?)",
)
flags.DEFINE_integer("examples", 3, "wrong steps kept per family and command kind in the result")
flags.DEFINE_string(
    "match",
    "",
    "only the steps whose recorded output contains this regular expression: one "
    "decision alone, e.g. --match='button \"Buy Now\"' on the training episodes "
    "(does the model fit the decision it trained on?)",
)
flags.DEFINE_string("out", "", "also write the result here (JSON)")
flags.mark_flags_as_required(["model", "episodes"])


def main(argv):
    """Measure the model's teacher-forced step accuracy on the recorded episodes: the table goes to stderr, the accuracy
    as JSON to stdout (and all of it to ``--out``)."""
    prepare(argv)
    from experiment.evaluate import load_policy
    from rollout.policies.prompt import saved_prompt
    from experiment.step_accuracy import measure, table
    from tgpo_jax.models.sampler import SamplingParams

    if not os.path.isdir(F.episodes):
        raise app.UsageError(f"--episodes={F.episodes!r} is not a directory")
    try:
        saved = saved_prompt(F.model)  # {} for a model without one
        policy = load_policy(
            F.model,
            params=SamplingParams(temperature=0.0, max_tokens=F.max_tokens),
            budget_tokens=F.prompt_tokens or saved.get("budget_tokens", 2048),
            step=F.step,
            prompt_style=F.prompt_style,
            thought_chars=F.thought_chars,
        )
        if not hasattr(policy, "sampler"):
            raise ValueError(f"--model={F.model!r} is not a model policy")
        result = measure(
            policy, F.episodes, batch=F.batch, force_thought=F.force_thought, examples=F.examples, match=F.match
        )
    except (FileNotFoundError, ValueError) as e:
        raise app.UsageError(str(e)) from None
    import sys

    print(table(result), file=sys.stderr)
    for family, heads in result["heads"].items():
        print(f"{family}: " + ", ".join(f"{h!r} {n}" for h, n in list(heads.items())[:6]), file=sys.stderr)
    if F.out:
        from rollout.recording import write_json_atomic

        write_json_atomic(F.out, result)
    print(json.dumps(result["accuracy"], indent=1))


if __name__ == "__main__":
    app.run(main)
