"""The policy prompt's length in a model's own tokens, over a collection's recorded steps: how much of a training row
and of an evaluation step's prefill the prompt takes, and what a token budget cuts.

    python -m bench.prompt_lengths --episodes=runs/pipeline/episodes/round1 --tokenizer=bundled

For each prompt style (the full grammar, the compact one-line system text) it prints the untruncated prompt's token
count (chat template included) at percentiles, the completion's (the recorded output), and, for each budget, the
share of steps whose page is cut and whose cut page loses the element the recorded command acts on.
"""

from __future__ import annotations

import json
import re

from absl import app, flags

flags.DEFINE_string("episodes", None, "a collection's episodes directory (launch.collect / the pipeline's round 1)")
flags.DEFINE_string("tokenizer", "bundled", "a HF directory, a .gguf file or 'bundled'")
flags.DEFINE_list("budgets", ["384", "512", "768", "1024"], "prompt budgets (tokens) to check")
flags.DEFINE_string("page_cut", "text_first", "how a page over the budget is cut (prompt.PAGE_CUTS)")
flags.DEFINE_integer("max_steps", 0, "read at most this many steps (0 = all)")
F = flags.FLAGS
_ID = re.compile(r"\[(\d+)\]")


def percentiles(xs: list[int], qs=(50, 90, 99, 100)) -> dict[str, int]:
    s = sorted(xs)
    return {f"p{q}": s[min(len(s) - 1, max(0, -(-q * len(s) // 100) - 1))] for q in qs} if s else {}


def command_id(output: str) -> str | None:
    """The element id of a recorded output's command (None for commands without one)."""
    line = next((ln for ln in (output or "").splitlines() if ln.strip().lower().startswith("command:")), "")
    m = _ID.search(line)
    return m.group(1) if m else None


def main(argv):
    del argv
    from bench.sides import cpu_flags
    from rollout.policies.prompt import SYSTEM_PROMPTS, PromptConfig, count_tokens
    from rollout.recording import iter_episodes, read_tasks
    from trees.dataset import BuildConfig, step_prompt
    from tgpo_jax.models.tokenizer import load_tokenizer

    tok = load_tokenizer(F.tokenizer)
    tasks = {t.task_id: t for t in read_tasks(F.episodes)}
    steps = [(ep, t) for ep in iter_episodes(F.episodes) for t in range(len(ep.steps))]
    if F.max_steps:
        steps = steps[: F.max_steps]
    out = {"cpu_flags": cpu_flags(), "tokenizer": F.tokenizer, "steps": len(steps), "styles": {}}
    completion = [len(tok(ep.steps[t].get("output") or "", add_special_tokens=False)["input_ids"]) for ep, t in steps]
    out["completion_tokens"] = percentiles(completion)
    for style, system in SYSTEM_PROMPTS.items():
        full = BuildConfig(prompt=PromptConfig(1 << 20, system, thought_chars=0), tokenizer=F.tokenizer)
        lengths = [count_tokens(step_prompt(tasks.get(ep.task_id), ep, t, full), tok) for ep, t in steps]
        row = {"prompt_tokens": percentiles(lengths), "budgets": {}}
        for b in map(int, F.budgets):
            cfg = BuildConfig(
                prompt=PromptConfig(b, system, thought_chars=0, page_cut=F.page_cut), tokenizer=F.tokenizer
            )
            cut = lost = 0
            for (ep, t), n in zip(steps, lengths):
                if n <= b:
                    continue
                cut += 1
                want = command_id(ep.steps[t].get("output"))
                page = step_prompt(tasks.get(ep.task_id), ep, t, cfg)[-1]["content"]
                lost += want is not None and f"[{want}]" not in page
            row["budgets"][b] = {"cut": round(cut / len(steps), 3), "element_lost": round(lost / len(steps), 3)}
        out["styles"][style] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    flags.mark_flag_as_required("episodes")
    app.run(main)
