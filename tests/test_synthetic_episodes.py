"""Synthetic episode collections: the real harness's recording format, deterministic, fast, varied."""

import collections
import filecmp
import os

import pytest

from rollout.commands import parse_output
from rollout.recording import iter_episodes, read_tasks, verify_steps
from trees.synthetic import write_synthetic_collection
from rollout.urls import normalize_url

# rollout.harness.runner.run_episode: the ``record`` dict + ``_state_json``'s keys, and the summary's keys.
STATE_KEYS = {"url", "norm_url", "title", "observation", "truncated", "screenshot", "phash", "obs_error", "check"}
STEP_KEYS = STATE_KEYS | {
    "step",
    "output",
    "thought",
    "command",
    "command_name",
    "target",
    "format_ok",
    "error",
    "effect",
    "logprob",
    "num_tokens",
    "policy_info",
    "timings",
}
SUMMARY_KEYS = {
    "task_id",
    "run",
    "episode_key",
    "env",
    "family",
    "split",
    "policy",
    "seed",
    "optimal_steps",
    "status",
    "success",
    "score",
    "steps",
    "end_reason",
    "final",
    "error",
    "duration_s",
    "started_at",
    "steps_sha256",
    "format",
}
CHECK_KEYS = {"success", "score", "progress", "done"}
EFFECT_KEYS = {"url_changed", "dom_changed", "navigated", "expected_change", "detail"}
TIMING_KEYS = {"observe_s", "check_s", "policy_s", "execute_s"}


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("syn") / "c")
    counts = write_synthetic_collection(out, num_tasks=40, runs=8, seed=3)
    return out, counts


def _files(root):
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in fs]
    return sorted(out)


def test_reads_back_sealed(collection):
    out, counts = collection
    eps = list(iter_episodes(out))
    assert counts == {"episodes": 320, "steps": sum(len(e.steps) for e in eps), "tasks": 40}
    assert len(eps) == 320
    assert list(iter_episodes(out, include_errored=True)) == eps
    assert all(os.path.exists(os.path.join(e.path, "summary.json")) for e in eps)
    assert not any(os.path.exists(os.path.join(e.path, "screens")) for e in eps)
    tasks = {t.task_id: t for t in read_tasks(out)}
    assert len(tasks) == 40 and all(t.env == "synthetic" and t.family == "synthetic" for t in tasks.values())
    assert {e.task_id for e in eps} == set(tasks)
    assert os.path.exists(os.path.join(out, "collection.json"))


def test_record_fields_match_harness(collection):
    out, _ = collection
    for e in iter_episodes(out):
        s = e.summary
        assert set(s) == SUMMARY_KEYS
        assert s["status"] in ("success", "failure") and s["error"] is None and s["steps"] == len(e.steps)
        assert set(s["final"]) == STATE_KEYS and set(s["final"]["check"]) == CHECK_KEYS
        assert s["success"] == s["final"]["check"]["success"] == (s["status"] == "success")
        assert s["score"] == s["final"]["check"]["score"]
        assert s["optimal_steps"] == tasks_optimal(out)[e.task_id]
        verify_steps(e.path, s)  # the seal matches the steps file's bytes
        for t, r in enumerate(e.steps):
            assert set(r) == STEP_KEYS, set(r) ^ STEP_KEYS
            assert r["step"] == t and r["screenshot"] is None and r["truncated"] is False
            assert set(r["check"]) == CHECK_KEYS and set(r["timings"]) == TIMING_KEYS
            assert r["norm_url"] == normalize_url(r["url"])
            assert len(r["phash"]) == 16 and int(r["phash"], 16) >= 0
            assert r["observation"].startswith(f"URL: {r['url']}\nTitle: {r['title']}\n")
            assert r["logprob"] < 0 and r["num_tokens"] > 0 and r["policy_info"] == {}
            if r["format_ok"]:
                thought, cmd = parse_output(r["output"])
                assert (thought, cmd.render(), cmd.name) == (r["thought"], r["command"], r["command_name"])
                if r["target"] is not None:
                    line = f'[{cmd.id}] {r["target"]["role"]} "{r["target"]["name"]}"'
                    assert line in r["observation"].splitlines()
                if cmd.name == "STOP" or r["error"] is not None:
                    assert r["effect"] is None
                else:
                    assert set(r["effect"]) == EFFECT_KEYS
            else:
                assert r["command"] is r["command_name"] is r["target"] is r["effect"] is None
                assert r["error"]["kind"] == "malformed_command" and r["thought"] == ""
                with pytest.raises(Exception):
                    parse_output(r["output"])
            if t > 0:  # the previous action's error is shown in this observation
                assert r["obs_error"] == e.steps[t - 1]["error"]
        last = e.steps[-1]
        if s["end_reason"] == "stop":
            assert last["command"] == "STOP []" and s["final"] == {k: last[k] for k in STATE_KEYS}
        else:
            assert s["end_reason"] == "max_steps" and last["command_name"] != "STOP"


_OPT = {}


def tasks_optimal(out):
    if out not in _OPT:
        _OPT[out] = {t.task_id: t.optimal_steps for t in read_tasks(out)}
    return _OPT[out]


def test_variety(collection):
    out, _ = collection
    eps = list(iter_episodes(out))
    status = collections.Counter(e.summary["status"] for e in eps)
    assert status["success"] > 0 and status["failure"] > 0
    assert {e.summary["end_reason"] for e in eps} == {"stop", "max_steps"}
    steps = [r for e in eps for r in e.steps]
    kinds = collections.Counter((r["error"] or {}).get("kind") for r in steps)
    assert kinds["malformed_command"] > 0 and kinds["no_such_element"] > 0
    assert any(r["effect"] and not r["effect"]["expected_change"] for r in steps)  # no-op clicks
    assert len({r["url"] for r in steps}) > len({r["norm_url"] for r in steps})  # normalisation matters
    assert any("#" in r["url"] for r in steps) and any("utm_source=" in r["url"] for r in steps)
    # revisits: a trajectory returns to a normalised URL it left
    assert any(len({r["norm_url"] for r in e.steps}) < len(e.steps) for e in eps)
    # pHash merging: same URL + pHash reached by different in-page actions since the last URL change
    arrivals = collections.defaultdict(set)
    for e in eps:
        for a, b in zip(e.steps, e.steps[1:]):
            if a["effect"] and not a["effect"]["url_changed"] and a["effect"]["expected_change"]:
                arrivals[(b["norm_url"], b["phash"])].add((a["phash"], a["target"]["name"]))
    assert any(len(v) >= 2 for v in arrivals.values())
    # merge guard: same URL, different progress (the wrong item in the cart)
    prog = collections.defaultdict(set)
    for r in steps:
        prog[r["norm_url"]].add(r["check"]["progress"])
    assert any(len(v) >= 2 for v in prog.values())


def test_perfect_policy_is_optimal(tmp_path):
    out = str(tmp_path / "p")
    write_synthetic_collection(out, num_tasks=10, runs=2, branching=0.0, max_steps=30)
    for e in iter_episodes(out):
        assert e.summary["status"] == "success" and e.summary["end_reason"] == "stop"
        assert e.summary["steps"] == e.summary["optimal_steps"]


def test_deterministic_and_writer_bytes(tmp_path):
    a, b, c = (str(tmp_path / x) for x in "abc")
    write_synthetic_collection(a, num_tasks=6, runs=3, seed=5)
    write_synthetic_collection(b, num_tasks=6, runs=3, seed=5)
    write_synthetic_collection(c, num_tasks=6, runs=3, seed=5, use_writer=True)  # EpisodeWriter's own bytes
    files = _files(a)
    assert files == _files(b) == _files(c) and len(files) == 2 + 2 * 18
    for f in files:
        assert filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False), f
        assert filecmp.cmp(os.path.join(a, f), os.path.join(c, f), shallow=False), f
    d = str(tmp_path / "d")
    write_synthetic_collection(d, num_tasks=6, runs=3, seed=6)
    assert any(not filecmp.cmp(os.path.join(a, f), os.path.join(d, f), shallow=False) for f in files)


def test_rewrite_same_dir(tmp_path):
    out = str(tmp_path / "r")
    first = write_synthetic_collection(out, num_tasks=3, runs=2)
    assert write_synthetic_collection(out, num_tasks=3, runs=2) == first
    with pytest.raises(ValueError):
        write_synthetic_collection(out, num_tasks=4, runs=2)  # other settings in the same directory


def test_many_tasks(tmp_path):
    counts = write_synthetic_collection(str(tmp_path / "f"), num_tasks=25, runs=8)
    assert counts["episodes"] == 200


def test_a_steps_file_changed_after_the_seal_is_reported_broken(tmp_path):
    """A change that keeps every line valid JSON (a flipped letter in a page text) is caught by the summary's
    ``steps_sha256``; the untouched episodes still load."""
    from trees.dataset import load_episodes

    out = str(tmp_path / "c")
    write_synthetic_collection(out, num_tasks=2, runs=2, seed=1)
    victim = sorted(e.path for e in iter_episodes(out))[1]
    path = os.path.join(victim, "steps.jsonl")
    text = open(path, encoding="utf-8").read()
    i = text.index('"observation": "URL: ') + len('"observation": "URL: ')
    open(path, "w", encoding="utf-8").write(text[:i] + ("X" if text[i] != "X" else "Y") + text[i + 1 :])
    by_task, broken = load_episodes(out)
    assert [b["path"] for b in broken] == [victim] and "changed after the episode was sealed" in broken[0]["error"]
    assert sum(len(v) for v in by_task.values()) == 3
