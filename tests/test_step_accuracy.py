"""Teacher-forced step accuracy (experiment/step_accuracy.py): which steps are scored, how outputs are compared."""

from types import SimpleNamespace

import pytest

from rollout.policies.prompt import PromptConfig
from experiment.step_accuracy import (
    StepCase,
    canonical,
    cases,
    forced_output,
    measure,
    score,
    table,
    thought_head,
    thought_prefix,
)


def _ep(outputs, mistakes=(), family="procedure"):
    steps = [{"output": o, "policy_info": {"mistake": "loop"} if i in mistakes else {}} for i, o in enumerate(outputs)]
    return SimpleNamespace(steps=steps, summary={"family": family})


def test_canonical_reads_the_command_line():
    assert canonical("Thought: search.\nCommand: CLICK [3]") == "CLICK [3]"
    assert canonical("Thought: x\nCommand:   TYPE [2] [red shoes]  ") == "TYPE [2] [red shoes]"
    assert canonical("Thought: x\nCommand: CLICK 3") is None  # malformed: never equal to a gold command
    assert canonical("") is None


def test_cases_skip_mistakes_and_unparsable_steps_and_use_the_prompt_of_each_step():
    by_task = {
        "t1": [
            _ep(
                ["Command: CLICK [3]", "Command: CLICK [5]", "Command: GO_BACK", "garbage", "Command: STOP []"],
                mistakes={1},
            )
        ]
    }
    tasks = {"t1": SimpleNamespace(family="webshop")}
    seen = []

    def prompt_of(task, ep, t):
        seen.append(t)
        return [{"role": "user", "content": f"step {t}"}]

    got = cases(by_task, tasks, prompt_of)
    assert [(c.step, c.gold, c.family) for c in got] == [
        (0, "CLICK [3]", "webshop"),
        (2, "GO_BACK", "webshop"),
        (4, "STOP []", "webshop"),
    ]
    assert seen == [0, 2, 4] and got[1].messages == ({"role": "user", "content": "step 2"},)


def test_cases_keep_only_the_steps_whose_recorded_output_matches():
    outs = [
        'Thought: Set combobox "size"[6] to size [L].\nCommand: SELECT [6] [L]',
        'Thought: Click button "Buy Now"[7].\nCommand: CLICK [7]',
        'Thought: Click button "Add to cart"[8].\nCommand: CLICK [8]',
        'Thought: Click button "Buy Now"[7].\nCommand: CLICK [7]',
    ]
    by_task = {"t1": [_ep(outs, mistakes={3})]}
    got = cases(by_task, {}, lambda task, ep, t: [], match='button "(Buy Now|Add to cart)"')
    assert [c.step for c in got] == [1, 2]  # step 3 matches but is a mistake
    assert [c.step for c in cases(by_task, {}, lambda task, ep, t: [], match="Buy Now")] == [1]
    assert len(cases(by_task, {}, lambda task, ep, t: [])) == 3


def test_thought_heads_count_what_the_model_decides_first():
    assert thought_head('Thought: Click button "Buy Now"[7].\nCommand: CLICK [7]') == 'Click button "Buy'
    assert thought_head("Thought: Go back.\nCommand: GO_BACK") == "Go back."
    assert thought_head("Command: STOP []") == "Command: STOP []"
    steps = [StepCase("a", "webshop", k, "CLICK [7]", ()) for k in range(3)]
    outs = [
        'Thought: Set combobox "size"[6] to size [L].\nCommand: SELECT [6] [L]',
        'Thought: Click button "Buy Now"[7].\nCommand: CLICK [7]',
        'Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [6] [M]',
    ]
    assert score(steps, outs)["heads"] == {"webshop": {'Set combobox "size"[6]': 2, 'Click button "Buy': 1}}


def test_score_counts_per_family_and_kind():
    steps = [
        StepCase("a", "procedure", 0, "CLICK [3]", ()),
        StepCase("a", "procedure", 1, "CLICK [6]", ()),
        StepCase("b", "webshop", 0, "SELECT [6] [red]", ()),
        StepCase("b", "webshop", 1, "CLICK [3]", ()),
    ]
    outputs = [
        "Thought: t\nCommand: CLICK [3]",
        "Command: CLICK [8]",
        "Command: SELECT [6] [blue]",
        "Thought: t\nCommand: CLICK [3]",
    ]
    r = score(steps, outputs)
    acc = r["accuracy"]
    assert acc["all"][:2] == [2, 4] and acc["CLICK"][:2] == [2, 3] and acc["SELECT"][:2] == [0, 1]
    assert acc["procedure"][:2] == [1, 2] and acc["webshop/CLICK"][:2] == [1, 1]
    assert acc["procedure/CLICK"][2] == pytest.approx(0.5)
    assert [w["gold"] for w in r["wrong"]["procedure/CLICK"]] == ["CLICK [6]"]
    assert "| webshop/SELECT | 0 | 1 | 0.0 % |" in table(r)
    with pytest.raises(ValueError, match="4 steps but 3 outputs"):
        score(steps, outputs[:3])


def test_thought_prefix_ends_after_the_first_command_label():
    out = 'Thought: Choose color [red] in combobox "color" [6].\nCommand: SELECT [6] [red]'
    assert thought_prefix(out) == 'Thought: Choose color [red] in combobox "color" [6].\nCommand:'
    assert thought_prefix("Command: GO_BACK") == "Command:"
    assert thought_prefix("Thought: no command here") == "" and thought_prefix("") == ""
    forced = forced_output("Thought: t\nCommand:", " SELECT [6] [red]\nThought: junk")
    assert forced == "Thought: t\nCommand: SELECT [6] [red]"
    assert forced_output("Thought: t\nCommand:", " CLICK [7] [11]") == "Thought: t\nCommand: CLICK [7]"


class _CharTokenizer:  # one id per character; the chat template joins the contents
    chat_template = "joined"

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "".join(m["content"] for m in messages) + "|"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


def test_forced_thought_gives_the_recorded_thought_and_scores_the_model_command(monkeypatch):
    import rollout.recording
    import trees.dataset

    outputs = [
        'Thought: Type [red shoes] into textbox "Search" [2].\nCommand: TYPE [2] [red shoes]',
        'Thought: Choose color [red] in combobox "color" [6].\nCommand: SELECT [6] [red]',
    ]
    ep = SimpleNamespace(
        steps=[{"output": o, "observation": f"page {i}", "policy_info": {}} for i, o in enumerate(outputs)],
        summary={"family": "webshop"},
    )
    monkeypatch.setattr(trees.dataset, "load_episodes", lambda d: ({"t1": [ep]}, []))
    monkeypatch.setattr(trees.dataset, "history_of", lambda ep, t: [])
    monkeypatch.setattr(
        rollout.recording, "read_tasks", lambda d: [SimpleNamespace(task_id="t1", family="webshop", instruction="buy")]
    )
    seen = []

    class Sampler:  # writes the first command right and the second wrong, then runs on
        def generate(self, prompts, params):
            seen.extend(prompts)
            return [
                SimpleNamespace(text=" TYPE [2] [red shoes]\nThought: more"),
                SimpleNamespace(text=" SELECT [6] [blue]"),
            ]

    policy = SimpleNamespace(
        tokenizer=_CharTokenizer(),
        sampler=Sampler(),
        prompt=PromptConfig(budget_tokens=10_000, system_prompt="sys", thought_chars=0),
        params=SimpleNamespace(max_tokens=16),
        name="fake",
    )
    r = measure(policy, "unused", progress=False, force_thought=True)
    assert r["force_thought"] and r["accuracy"]["TYPE"][:2] == [1, 1] and r["accuracy"]["SELECT"][:2] == [0, 1]
    prefix = 'Thought: Choose color [red] in combobox "color" [6].\nCommand:'
    assert "".join(map(chr, seen[1])).endswith("|" + prefix)  # the prompt, then the recorded thought
    assert r["wrong"]["webshop/SELECT"][0]["output"] == prefix + " SELECT [6] [blue]"
