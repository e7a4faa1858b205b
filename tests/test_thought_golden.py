"""The from-scratch model's oracle thoughts are the recorded ones, byte for byte: every (command, observation,
instruction) case of tests/data/oracle_thoughts.json (the shop's own pages, tests/thought_cases.py) gets the recorded
thought from the scratch_copy writer, and the noisy oracle with that writer gives each recorded episode's outputs
again when its observations are replayed."""

import asyncio
import functools
import json

import pytest

from thought_cases import PATH, command_of, observation_of, shop


@pytest.fixture(scope="module")
def golden():
    with open(PATH) as f:
        return json.load(f)


@pytest.fixture(scope="module", autouse=True)
def registered():
    import recipes

    recipes.get("scratch_copy").register()


def writer():
    from rollout.policies.thoughts import thought_writer

    return thought_writer("scratch_copy")


def test_scratch_copy_writer_reproduces_every_recorded_thought(golden):
    explain = writer()
    pages = [observation_of(p) for p in golden["pages"]]
    wrong = []
    for page, ins, name, el, arg, thought in golden["cases"]:
        got = explain(
            command_of([name, el, arg]), pages[page] if page is not None else None, golden["instructions"][ins]
        )
        if got != thought:
            wrong.append((name, el, arg, thought, got))
    assert not wrong, f"{len(wrong)} of {len(golden['cases'])} differ, e.g. {wrong[:3]}"
    assert len(golden["cases"]) > 1000


@pytest.mark.parametrize("page_ids", ["before", "after"])
def test_noisy_oracle_replays_every_recorded_episode(golden, page_ids):
    """Under either page_ids (the default and large presets write ids after names, tiny and miniwob before them) the
    wording is the recorded one: it always writes ids after names."""
    from rollout.core import PolicyRequest
    from rollout.policies.oracle import OracleNoise, OraclePolicy

    envs = functools.lru_cache(maxsize=None)(shop)
    for ep in golden["episodes"]:
        env = envs(ep["item_names"], ep["locale"])
        task = next(t for t in env.tasks("train") if t.task_id == ep["task_id"])
        noise = OracleNoise(**golden["noise"]) if ep["noisy"] else OracleNoise()
        policy = OraclePolicy(env, noise, seed=ep["seed"], thoughts="scratch_copy", page_ids=page_ids)
        for step, s in enumerate(ep["steps"]):
            request = PolicyRequest(task, observation_of(golden["pages"][s["page"]]), (), step, ep["key"], ep["seed"])
            assert asyncio.run(policy.act(request)).text == s["output"], (ep["task_id"], step)
