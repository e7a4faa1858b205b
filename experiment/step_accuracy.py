"""Teacher-forced step accuracy: does a model give the oracle's command at each step of recorded episodes?

A browser evaluation says whether whole episodes succeed; one wrong step anywhere makes it 0. This diagnostic says
*which* decisions a model gets wrong: it replays recorded episodes (normally the clean oracle on held-out tasks:
``launch.collect --split=test --wrong_choice=0 --loop=0 --malformed=0 --premature_stop=0``), rebuilds each step's
prompt as the policy would see it there (the recorded history as the runner builds it, the page, the model's saved
prompt settings), decodes the model's next output greedily and compares its command with the recorded one. Accuracy is
reported per task family, per command kind (the recorded one) and both. Steps the behaviour policy took as a
mistake (a noisy oracle's detour, wrong choice, malformed output or premature stop) are skipped: they are not the
answer to learn.

With ``force_thought`` the recorded thought is given (the output up to ``Command:`` is appended to the prompt) and
the model writes only the command: whether it *carries out* a right decision, as opposed to making it. Measured on
a from-scratch model: with the thought given, held-out TYPE commands
copy the thought's text in 58 of 120 steps and SELECT commands its value in 8 of 49, so most wrong free text is lost
between the thought and the command.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from typing import Callable, Sequence

from rollout.commands import parse_output
from rollout.core import ActionError


@dataclasses.dataclass(frozen=True)
class StepCase:
    """One recorded step to score: its task, family, step index, the recorded command (canonical), the prompt and the
    recorded output."""

    task_id: str
    family: str
    step: int
    gold: str  # the recorded command, rendered canonically
    messages: tuple  # the prompt as the policy sees it at this step
    output: str = ""  # the recorded output (thought and command)


def canonical(output: str) -> str | None:
    """The command of a policy output, rendered canonically (None when it does not parse)."""
    try:
        return parse_output(output)[1].render()
    except ActionError:
        return None


def cases(by_task: dict, tasks: dict, prompt_of: Callable, match: str = "") -> list[StepCase]:
    """Every non-mistake step of every episode. ``by_task``: ``load_episodes`` output; ``tasks``: task id -> Task;
    ``prompt_of(task, episode, t)``: the step's messages (``step_prompt`` with the model's settings); ``match``: a
    regular expression the recorded output must contain (one decision alone, e.g. ``button "Buy Now"``)."""
    pattern = re.compile(match) if match else None
    out = []
    for task_id in sorted(by_task):
        task = tasks.get(task_id)
        for ep in by_task[task_id]:
            for t, s in enumerate(ep.steps):
                if (s.get("policy_info") or {}).get("mistake"):
                    continue
                gold = canonical(s["output"]) if s.get("output") else None
                if gold is None or (pattern is not None and not pattern.search(s["output"])):
                    continue
                family = getattr(task, "family", None) or ep.summary["family"]
                out.append(StepCase(task_id, family, t, gold, tuple(prompt_of(task, ep, t)), s["output"]))
    return out


def thought_prefix(output: str) -> str:
    """The recorded output through its first command label (``Command:``, the policy's own pattern): the thought a
    forced decode continues from; '' when the output has no command line."""
    from rollout.policies.prompt import _COMMAND_LINE

    m = _COMMAND_LINE.search(output)
    return output[: m.start("body")].rstrip(" \t") if m else ""  # the command's leading space is the model's


def forced_output(prefix: str, completion: str) -> str:
    """The output a forced decode stands for: the given prefix and the model's continuation, ended after the
    command as the policy ends it (``command_end``)."""
    from rollout.policies.prompt import command_end

    text = prefix + completion
    cut = command_end(text)
    return text if cut is None else text[:cut]


def thought_head(output: str, words: int = 3) -> str:
    """The first ``words`` words of an output's thought (what it decides first: ``Set combobox "size"[6]`` or
    ``Click button "Buy``), or the output's start when it has no thought."""
    text = output.split("Thought:", 1)[1] if "Thought:" in output else output
    return " ".join(text.split("\n", 1)[0].split()[:words])


def score(steps: Sequence[StepCase], outputs: Sequence[str], examples: int = 3) -> dict:
    """``{"accuracy": {key: [correct, total, rate]}, "wrong": {key: [examples]}, "heads": {family: {head: n}}}``
    over keys ``all``, the family, the command kind and ``family/kind``; ``heads`` counts the first words of the
    model's thoughts (``thought_head``), most common first."""
    if len(steps) != len(outputs):
        raise ValueError(f"{len(steps)} steps but {len(outputs)} outputs")
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong: dict[str, list[dict]] = defaultdict(list)
    heads: dict[str, Counter] = defaultdict(Counter)
    for case, text in zip(steps, outputs):
        heads[case.family][thought_head(text)] += 1
        pred = canonical(text)
        kind = case.gold.split(" ", 1)[0]
        ok = pred == case.gold
        for key in ("all", case.family, kind, f"{case.family}/{kind}"):
            counts[key][0] += ok
            counts[key][1] += 1
        if not ok and len(wrong[f"{case.family}/{kind}"]) < examples:
            wrong[f"{case.family}/{kind}"].append(
                {"task_id": case.task_id, "step": case.step, "gold": case.gold, "output": text}
            )
    return {
        "accuracy": {k: [c, n, c / n] for k, (c, n) in sorted(counts.items())},
        "wrong": dict(wrong),
        "heads": {f: dict(c.most_common()) for f, c in sorted(heads.items())},
    }


def table(result: dict) -> str:
    """A Markdown table of correct / total / accuracy per key of ``result['accuracy']``."""
    lines = ["| steps | correct | total | accuracy |", "|---|---:|---:|---:|"]
    for k, (c, n, r) in result["accuracy"].items():
        lines.append(f"| {k} | {c} | {n} | {100 * r:.1f} % |")
    return "\n".join(lines)


def measure(
    policy,
    episodes_dir: str,
    *,
    batch: int = 16,
    progress: bool = True,
    force_thought: bool = False,
    examples: int = 3,
    match: str = "",
) -> dict:
    """Score a ``ModelPolicy`` (``experiment.evaluate.load_policy``) on the collection at ``episodes_dir``; with
    ``force_thought`` the recorded thought is given and only the command is the model's; ``examples`` wrong steps
    are kept per family and command kind; ``match``: only the steps whose recorded output contains this regular
    expression."""
    from tqdm import tqdm

    from rollout.policies.model import cut_after_command
    from rollout.policies.prompt import messages_for
    from rollout.recording import read_tasks
    from trees.dataset import history_of, load_episodes
    from tgpo_jax.models.sampler import SamplingParams
    from tgpo_jax.models.tokenizer import chat_ids

    by_task, broken = load_episodes(episodes_dir)
    tasks = {t.task_id: t for t in read_tasks(episodes_dir)}

    def prompt_of(task, ep, t):  # as this policy builds it (not the recorded policy's prompt)
        instruction = task.instruction if task is not None else ep.summary.get("instruction", "")
        return messages_for(
            instruction, history_of(ep, t), ep.steps[t]["observation"], policy.prompt, tokenizer=policy.tokenizer
        )

    steps = cases(by_task, tasks, prompt_of, match)
    if not steps:
        raise ValueError(
            f"{episodes_dir}: no steps to score (no sealed episodes, or only mistakes"
            + (f", or none whose output matches {match!r})" if match else ")")
        )
    params = SamplingParams(temperature=0.0, max_tokens=policy.params.max_tokens)
    outputs: list[str] = []
    for i in tqdm(range(0, len(steps), batch), desc="step accuracy", unit="batch", disable=not progress):
        chunk = steps[i : i + batch]
        prefixes = [thought_prefix(c.output) if force_thought else "" for c in chunk]
        prompts = [
            chat_ids(policy.tokenizer, list(c.messages))
            + (policy.tokenizer(p, add_special_tokens=False)["input_ids"] if p else [])  # as SFT tokenises
            for c, p in zip(chunk, prefixes)
        ]
        completions = policy.sampler.generate(prompts, params)
        if force_thought:
            outputs += [forced_output(p, c.text) for p, c in zip(prefixes, completions)]
        else:
            outputs += [cut_after_command(c, policy.tokenizer).text for c in completions]
    result = score(steps, outputs, examples)
    result.update(
        episodes=episodes_dir, model=policy.name, broken_episodes=len(broken), force_thought=force_thought, match=match
    )
    return result
