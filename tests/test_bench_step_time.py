"""bench/step_time.py's pure parts: the share / decode-step arithmetic, the tables, and rebuilding a step's request
from its prompt (what valid-argument decoding reads) through the policy's own prompt renderer."""

import pytest

from bench import step_time as st
from rollout.core import Element, ErrorInfo, HistoryItem, Observation, PolicyRequest, Task
from rollout.harness.observe import format_node
from rollout.policies.constrain import step_strings
from rollout.policies.prompt import PromptConfig, build_messages


def test_shares_rates_and_decode_steps():
    assert st.shares({"a": 1.0, "b": 3.0}) == {"a": 0.25, "b": 0.75}
    assert st.shares({"a": 1.0}, total=4.0) == {"a": 0.25}
    assert st.shares({"a": 0.0, "b": 0.0}) == {"a": 0.0, "b": 0.0}
    assert st.rate(10, 2.0) == 5.0 and st.rate(1, 0.0) == float("inf")
    assert (st.fmt_share(0.0005), st.fmt_share(0.0), st.fmt_share(0.25), st.fmt_share(None)) == (
        "<0.1%",
        "0.0%",
        "25.0%",
        "-",
    )
    # unconstrained: whole chunks until the longest row is done; constrained: one step per token of the longest row
    assert st.decode_steps([4, 2], 16, False) == 16 and st.decode_steps([17, 3], 16, False) == 32
    assert st.decode_steps([4, 2], 16, True) == 4 and st.decode_steps([], 16, False) == 0


def test_timed_warms_up_once_then_takes_the_median():
    calls = []
    t = st.timed(lambda: calls.append(1) or len(calls), reps=3)
    assert len(calls) == 4 and t["out"] == 4 and len(t["times"]) == 3
    assert t["median_s"] == sorted(t["times"])[1]


def _request(error=None) -> PolicyRequest:
    nodes = [
        dict(id="1", role="link", name="Home"),
        dict(id="2", role="textbox", name='Search "q"', value='a "b"'),
        dict(id="6", role="combobox", name="size", value="M", options=["S", "M", "L"]),
        dict(id="7", role="combobox", name="color", value="red", options=["red", "dark blue"]),
        dict(id="9", role="button", name="Buy Now"),
    ]
    lines = [format_node(n) for n in nodes[:3]] + [
        'heading "Price: $3 [sale]"',
        "  " + format_node(nodes[3]),
        format_node(nodes[4]),
        'text "[7] is not an element here"',
    ]
    els = tuple(
        Element(id=n["id"], role=n["role"], name=n["name"], value=n.get("value"), options=tuple(n.get("options", ())))
        for n in nodes
    )
    obs = Observation(
        url="http://127.0.0.1:8000/item/3",
        title="A pillow",
        text="\n".join(lines),
        elements=els,
        error=error,
        origin="http://127.0.0.1:8000",
    )
    task = Task(
        task_id="t",
        env="shop",
        family="webshop",
        instruction='Buy a [pillow] in size [M], name "Ann"',
        start_path="/",
        optimal_steps=4,
        split="test",
    )
    history = (
        HistoryItem("CLICK [3]", "Open the result | the first one.", None),
        HistoryItem("SELECT [6] [S]", "Set size.", "no_such_option"),
        HistoryItem("SELECT [7] [red]", "Set color.", None),
        HistoryItem("SELECT [6] [M]", "Set size.", None),
    )
    return PolicyRequest(task=task, observation=obs, history=history, step=4, episode_key="t/0", seed=0)


@pytest.mark.parametrize(
    "page_ids,history_last,thought_chars,error",
    [("before", False, 160, None), ("after", True, 0, ErrorInfo("no_such_element", "no element [99]"))],
)
def test_request_from_prompt_round_trips_what_constraints_read(page_ids, history_last, thought_chars, error):
    req = _request(error)
    messages = build_messages(
        req, prompt=PromptConfig(page_ids=page_ids, history_last=history_last, thought_chars=thought_chars)
    )
    back = st.request_from_prompt(messages)
    assert step_strings(back) == step_strings(req)  # ids, options, names, quoted strings, SELECTs set on this page
    assert step_strings(back).set_here == frozenset({"size", "color"})
    assert back.task.instruction == req.task.instruction
    assert [(h.command, h.error) for h in back.history] == [(h.command, h.error) for h in req.history]
    assert back.observation.url == "/item/3" and back.observation.title == "A pillow"
    assert [e.value for e in back.observation.elements] == [None, 'a "b"', "M", "red", None]


def test_parse_prompt_refuses_other_text():
    with pytest.raises(ValueError, match="Task"):
        st.parse_prompt("hello")


def _timing(median, first=None):
    return {"first_s": median if first is None else first, "times": [median], "median_s": median}


def test_tables_report_shares_of_the_step():
    setting = dict(
        n_params=100e6,
        n_trainable=100e6,
        dtype="float32",
        param_dtype="float32",
        remat=True,
        lora_rank=0,
        forward=_timing(1.0, 5.0),
        step=_timing(4.0, 20.0),
    )
    train = {
        "tokens": {"positions": 1152, "real": 1000, "loss": 50, "rows": 2, "row_len": 576},
        "collate": _timing(0.004),
        "to_device": _timing(0.02),
        "settings": {"base": setting, "lora16": {**setting, "n_trainable": 5e6, "step": _timing(5.0)}},
    }
    text = "\n".join(st.train_table(train, "sft", 2, 1))
    assert "backward + update = (3) - (2)" in text and "75.0%" in text and "125.0%" in text  # lora16: 5 / 4
    assert "288" in text  # 1152 positions / 4 s
    gen = {"setup_s": 0.0, "prefill_s": 1.0, "decode_s": 2.0, "new_tokens": [20, 3], "first": {"call_s": 9.0}}
    e = {
        "prompts": 2,
        "prompt_tokens": [300, 500],
        "padded_to": 512,
        "chunk": 16,
        "tokenize": _timing(0.5),
        "unconstrained": gen,
        "constrained": {
            **gen,
            "setup_s": 0.5,
            "decode_s": 3.0,
            "new_tokens": [20, 20],
            "piece_table_once_s": 1.0,
            "elements": [4, 6],
        },
    }
    parts = st.eval_parts(e)
    assert st.shares(parts["unconstrained"]) == {
        "tokenize + chat template": 0.5 / 3.5,
        "constraint set-up": 0.0,
        "prefill": 1 / 3.5,
        "decode": 2 / 3.5,
    }
    assert sum(parts["constrained"].values()) == 5.0
    text = "\n".join(st.eval_table(e, 32))
    assert "32 decode steps of the batch computed (jitted chunks of 16)" in text
    assert "20 decode steps of the batch computed (one jitted _feed call each)" in text
