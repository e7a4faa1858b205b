"""Copy-swap augmentation: consistent whole-token replacement, and a resumable stream with new strings per epoch."""

import os
import re

import numpy as np
import pytest

from tgpo_jax.data.augment import swap_copies
from tgpo_jax.data.collate import CollateConfig
from tgpo_jax.data.io import write_dataset
from tgpo_jax.data.pipeline import NodeExamples, make_dataset
from tgpo_jax.data.schema import Branch, NodeRecord

RW = {"r_acc": 1.0, "r_format": 1.0, "r_red": 0.0, "r_subgoal": 1.0, "r": 5.0}


def _node(i=0, query="red tent"):
    prompt = [
        {"role": "system", "content": "You are a web agent. No content here."},
        {"role": "user", "content": f'Task: Search for "{query}", sort by rating.\nPage: [2] textbox "Search"'},
    ]
    good = Branch(
        f"Thought: Type '{query}' into textbox 'Search'.\nCommand: TYPE [2] [{query}]",
        f'TYPE textbox "Search" [{query}]',
        5.0,
        RW,
        2,
        2,
        0,
        True,
        True,
        behaviour_logprob=-1.5,
    )
    bad = Branch("Command: CLICK [3]", "CLICK button", 2.0, RW, 1, 0, 1, False, False)
    return NodeRecord(f"t{i}", "n0", prompt, [good, bad], meta={"copy": [{"text": query, "kind": "query"}]})


POOLS = {"query": ["red tent", "blue kayak", "green stove", "wool socks"]}


def test_swap_replaces_every_occurrence_and_only_whole_tokens():
    node = _node(query="tent")
    out = swap_copies(node, {"query": ["tent", "kayak"]}, np.random.default_rng(0), prob=1.0)
    user, action = out.prompt[1]["content"], out.branches[0].action
    assert 'Search for "kayak"' in user and "TYPE [2] [kayak]" in action and "Type 'kayak'" in action
    assert "tent" not in user + action and out.prompt[0]["content"].endswith("No content here.")  # "content" kept
    assert out.branches[0].behaviour_logprob is None  # a swapped action was never sampled by the behaviour policy
    assert out.branches[1].action == "Command: CLICK [3]"
    assert swap_copies(node, POOLS, np.random.default_rng(0), prob=0.0) is node


def test_swapped_string_is_never_the_original_and_covers_the_pool():
    seen = {
        swap_copies(_node(), POOLS, np.random.default_rng(s), 1.0).branches[0].action.rsplit("[", 1)[1]
        for s in range(60)
    }
    assert seen == {"blue kayak]", "green stove]", "wool socks]"}


def test_stream_changes_strings_between_epochs_and_resumes_exactly(tmp_path, spm_tokenizer):
    d = os.path.join(tmp_path, "data")
    write_dataset([_node(i) for i in range(4)], d, extra={"copy_pools": POOLS})
    cfg = CollateConfig(method="sft", max_len=160, max_prompt_len=120, max_completion_len=32)
    src = NodeExamples(d, spm_tokenizer, cfg, copy_swap=1.0)
    plain = NodeExamples(d, spm_tokenizer, cfg)
    ds = make_dataset(src, batch_size=4, seed=3, num_epochs=None)
    it = iter(ds)
    epochs = [next(it)["tokens"] for _ in range(3)]
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
    original = np.stack([plain[i]["tokens"] for i in range(4)])
    assert not any(np.array_equal(np.sort(e, axis=0), np.sort(original, axis=0)) for e in epochs)
    it = iter(make_dataset(src, batch_size=4, seed=3, num_epochs=None))
    next(it)
    state = it.get_state()
    want = [next(it)["tokens"] for _ in range(2)]
    it2 = iter(make_dataset(src, batch_size=4, seed=3, num_epochs=None))
    it2.set_state(state)
    np.testing.assert_array_equal(next(it2)["tokens"], want[0])
    np.testing.assert_array_equal(next(it2)["tokens"], want[1])


def test_swap_needs_a_reference_it_can_compute(tmp_path):
    from train_helpers import make_workspace, tiny_config

    from tgpo_jax.training import loop

    work = make_workspace(tmp_path, n_train=16, n_test=4)
    c = tiny_config(work, "dpo", tmp_path / "x", **{"data.copy_swap": 0.5, "loss.reference": "precomputed"})
    with pytest.raises(ValueError, match="copy_swap"):
        loop.train(c)


def test_swap_never_puts_in_a_string_the_prompt_already_holds():
    node = _node(query="red tent")
    node.prompt[1]["content"] += '\n[3] link "blue kayak"'
    seen = {
        swap_copies(node, POOLS, np.random.default_rng(s), 1.0).branches[0].action.rsplit("[", 1)[1] for s in range(60)
    }
    assert seen == {"green stove]", "wool socks]"}  # "blue kayak" is on the page: it would be two things of one
    crowded = _node(query="red tent")
    crowded.prompt[1]["content"] += "\nblue kayak, green stove, wool socks"
    assert swap_copies(crowded, POOLS, np.random.default_rng(0), 1.0) is crowded  # nothing free: left as it is


def test_copy_spans_name_the_combobox_a_successful_select_sets():
    from rollout.core import Task
    from trees.dataset import copy_spans

    task = Task(
        "t0", "shop", "webshop", "i am looking for [oak desk] with size [large], color [red]", "/", 6, "train", {}
    )
    page = (
        '[2] textbox "Search" value="oak desk"\n[6] combobox "size" value="small" options=["small","large"]\n'
        '[7] combobox "color" value="red" options=["red","blue"]\n[8] combobox "finish" value="matte"\n'
        '[9] button "Buy Now"'
    )

    def branch(out, n_success):
        return Branch(out, "", 1.0, RW, 2, n_success, 2 - n_success, n_success > 0, n_success > 0)

    good = branch('Thought: Set combobox "size"[6] to size [large].\nCommand: SELECT [6] [large]', 2)
    failed = branch('Thought: Set combobox "color"[7] to color [blue].\nCommand: SELECT [7] [blue]', 0)
    unnamed = branch('Thought: Set combobox "finish"[8] to finish [gloss].\nCommand: SELECT [8] [gloss]', 1)
    typed = branch("Thought: Type for [oak desk].\nCommand: TYPE [2] [oak desk]", 1)
    # the set combobox's name, kind from the environment when it names one; a failed branch's and a name the
    # task does not write ("finish") are not copies
    assert copy_spans([good, failed, unnamed, typed], task, {"oak desk": "query"}, page) == [
        {"text": "size", "kind": "option"},
        {"text": "oak desk", "kind": "query"},
    ]
    assert copy_spans([good], task, {"size": "dim"}, page) == [{"text": "size", "kind": "dim"}]
    assert copy_spans([good], task, {}) == []  # no page: no element names


def test_shop_typed_strings_name_every_option_a_task_sets():
    """Copy-swap's kinds (trees.dataset.copy_spans): the option names a task's SELECTs set, as the task and the
    combobox write them (kind "option"), beside the strings it types."""
    from rollout.envs.shop.env import ShopEnv

    env = ShopEnv()  # tasks and catalog only: no server
    for t in [t for t in env.tasks("train") if t.family != "procedure"][:200]:
        kinds = env.typed_strings(t)
        opts = (
            t.goal["goal_options"]
            if t.family == "webshop"
            else {k: v for it in t.goal["items"] for k, v in it["options"].items()}
        )
        assert {s for s, k in kinds.items() if k == "option"} == {env.catalog.option_label(k) for k in opts}
        assert all(re.search(rf"\b{re.escape(s)} \[", t.instruction) for s, k in kinds.items() if k == "option")
        assert {k for k in kinds.values()} - {"option"} == (
            {"query"} if t.family == "webshop" else {"title", "name", "address"}
        )
