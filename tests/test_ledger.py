"""The results ledger (experiment/ledger.py): pooled means from hand-made evaluations, comparisons named by method
key, git and the command line, and the report stage's writer."""

import json
import os
import re
import sys
import types

import ml_collections
import pytest

from experiment import ledger, results

FAMILIES = ("webshop", "webshop", "multi_cart", "multi_cart")


def ev(success, steps, redundant, seed=0):
    """One evaluation of tasks t0..t3 (one greedy episode each), its ``mean`` the plain mean over the tasks."""
    rows = [
        {"task_id": f"t{i}", "family": f, "success": s, "steps": n, "redundant": r}
        for i, (f, s, n, r) in enumerate(zip(FAMILIES, success, steps, redundant))
    ]
    mean = {"success_rate": sum(success) / 4, "avg_steps": sum(steps) / 4, "redundant_steps": sum(redundant) / 4}
    return {"per_seed": [{"seed": seed, "episodes_table": rows}], "mean": mean, "tasks": 4, "episodes": 4}


EVALS = {
    "base": ev([0, 0, 0, 1], [10, 10, 10, 10], [3, 3, 3, 3]),
    "sft-s0": ev([1, 1, 0, 0], [4, 6, 10, 10], [0, 1, 2, 3]),  # 0.5, 7.5, 1.5
    "sft-s1": ev([1, 0, 1, 1], [5, 5, 5, 5], [0, 0, 0, 1]),  # 0.75, 5, 0.25
    "tgpo-s0": ev([1, 1, 1, 0], [4, 4, 4, 8], [0, 0, 0, 2]),  # 0.75, 5, 0.5
    "tgpo-s1": ev([1, 1, 1, 1], [4, 4, 4, 4], [0, 0, 0, 0]),  # 1.0, 4, 0
}
# by hand: the mean over training seeds of each seed's mean over tasks; per family, the same on its two tasks
EXPECTED = {
    "base": {
        "success_rate": 0.25,
        "avg_steps": 10.0,
        "redundant_steps": 3.0,
        "training_seeds": 1,
        "success_by_family": {"multi_cart": 0.5, "webshop": 0.0},
    },
    "sft": {
        "success_rate": 0.625,
        "avg_steps": 6.25,
        "redundant_steps": 0.875,
        "training_seeds": 2,
        "success_by_family": {"multi_cart": 0.5, "webshop": 0.75},
    },
    "tgpo": {
        "success_rate": 0.875,
        "avg_steps": 4.5,
        "redundant_steps": 0.25,
        "training_seeds": 2,
        "success_by_family": {"multi_cart": 0.75, "webshop": 1.0},
    },
}
LABEL_GROUPS = {
    "base": {0: EVALS["base"]},
    "SFT": {0: EVALS["sft-s0"], 1: EVALS["sft-s1"]},
    "TGPO": {0: EVALS["tgpo-s0"], 1: EVALS["tgpo-s1"]},
}


def test_method_keys_and_groups():
    assert ledger.method_key("tgpo-s1") == "tgpo" and ledger.method_key("tgpo-r2-s0") == "tgpo-r2"
    assert ledger.method_key("kto_tree") == "kto_tree" and ledger.method_key("base") == "base"
    groups = ledger.key_groups(EVALS, first_seed=0)
    assert {k: sorted(v) for k, v in groups.items()} == {"base": [0], "sft": [0, 1], "tgpo": [0, 1]}
    assert groups["sft"][1] is EVALS["sft-s1"]


def test_ledger_pools_over_seeds_and_keeps_the_reports_comparisons():
    comparisons = results.comparisons(LABEL_GROUPS)  # what the report shows: TGPO − SFT in success and redundancy
    out = ledger.build_ledger(
        ledger.key_groups(EVALS, 0),
        comparisons,
        command="python -m launch.pipeline",
        commit="a" * 40,
        dirty=False,
        cpu_flags="avx2 avx512f",
        preset="default",
        seeds=(0, 1),
        decoding={"greedy": True},
    )
    assert set(out) >= {
        "command",
        "commit",
        "cpu_flags",
        "preset",
        "held_out_tasks",
        "seeds",
        "methods",
        "comparisons",
        "decoding",
    }
    assert (out["command"], out["commit"], out["cpu_flags"], out["preset"]) == (
        "python -m launch.pipeline",
        "a" * 40,
        "avx2 avx512f",
        "default",
    )
    assert out["held_out_tasks"] == 4 and out["seeds"] == [0, 1] and out["decoding"] == {"greedy": True}
    assert out["methods"].keys() == EXPECTED.keys()
    for key, want in EXPECTED.items():
        got = out["methods"][key]
        assert got["training_seeds"] == want["training_seeds"]
        for m in ("success_rate", "avg_steps", "redundant_steps"):
            assert got[m] == pytest.approx(want[m]), (key, m)
        assert got["success_by_family"] == pytest.approx(want["success_by_family"]), key
    by = {(c["a"], c["b"], c["metric"]): c for c in out["comparisons"]}
    assert set(by) == {("tgpo", "sft", "success_rate"), ("tgpo", "sft", "redundant_steps")}
    success = by["tgpo", "sft", "success_rate"]
    assert success["diff"] == pytest.approx(0.875 - 0.625) and success["label"] == "TGPO − SFT"
    assert by["tgpo", "sft", "redundant_steps"]["diff"] == pytest.approx(0.25 - 0.875)
    same = next(c for c in comparisons if c.metric == "success_rate")  # the report's numbers, not recomputed
    assert (success["low"], success["high"], success["tasks"]) == (same.low, same.high, 4)
    assert success["low"] <= success["diff"] <= success["high"] and success["paired_seeds"] is True
    json.dumps(out)  # JSON as it is


def test_held_out_tasks_when_evaluations_differ():
    groups = {"base": {0: {"tasks": 50}}, "sft": {0: {"tasks": 30}, 1: {"tasks": 50}}}
    assert ledger.held_out_tasks(groups) == [30, 50] and ledger.held_out_tasks({"x": {0: {}}}) is None


def test_git_and_command_line(tmp_path, monkeypatch):
    assert ledger.git_commit(str(tmp_path)) is None and ledger.git_dirty(str(tmp_path)) is None  # no repository
    commit = ledger.git_commit()
    assert commit is None or re.fullmatch("[0-9a-f]{40}", commit)
    flags = ledger.cpu_flags().split()
    assert flags and set(flags) <= {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "no", "AVX2", "unknown"}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the path: null, no failure
    assert ledger.git_commit() is None and ledger.git_dirty() is None
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "launch.pipeline", "--config.title=a b"])
    assert ledger.command_line() == "python -m launch.pipeline '--config.title=a b'"


def test_the_report_stage_writes_the_ledger(tmp_path, monkeypatch):
    from experiment.outputs import write_run_ledger

    monkeypatch.setattr(ledger, "git_commit", lambda: "0123456789abcdef" * 2 + "01234567")
    monkeypatch.setattr(ledger, "git_dirty", lambda: True)
    cfg = ml_collections.ConfigDict(
        {"preset": "tiny", "eval": {"temperature": 0.0, "top_p": 1.0, "constrain": True, "seeds": (0,), "runs": 1}}
    )
    status = [
        {"stage": "collect-r1", "state": "done", "seconds": 155.04},
        {"stage": "sft", "state": "done", "seconds": 3000.0},
        {"stage": "tgpo", "state": "stale", "seconds": 800.0},
        {"stage": "eval-sft", "state": "todo", "seconds": None},
        {"stage": "report", "state": "running", "seconds": None},
    ]
    p = types.SimpleNamespace(
        cfg=cfg,
        seeds=(0, 1),
        path=lambda *parts: os.path.join(str(tmp_path), *parts),
        runner=lambda: types.SimpleNamespace(status=lambda: status),
    )
    path = write_run_ledger(p, EVALS, results.comparisons(LABEL_GROUPS))
    assert path == os.path.join(str(tmp_path), "report", "results", "tiny-01234567.json")
    assert os.listdir(os.path.dirname(path)) == ["tiny-01234567.json"]  # no temporary file left
    with open(path) as f:
        saved = json.load(f)
    assert saved["preset"] == "tiny" and saved["dirty"] is True and saved["seeds"] == [0, 1]
    assert saved["decoding"] == {
        "greedy": True,
        "temperature": 0.0,
        "top_p": 1.0,
        "constrain": True,
        "eval_seeds": [0],
        "runs_per_task": 1,
    }
    assert saved["methods"]["sft"]["success_rate"] == pytest.approx(0.625)
    # what the run cost: the stages finished with the current configuration, the stale and unfinished ones left out
    assert saved["stage_seconds"] == {"collect-r1": 155.0, "sft": 3000.0} and saved["stages_total_s"] == 3155.0
    assert ledger.ledger_name("tiny", None) == "tiny"
