"""Stage bookkeeping of the pipeline (experiment/stages.py): skip finished stages, resume an interrupted one, refuse
a changed configuration naming the changed key, and --redo a stage with everything downstream of it."""

import json
import os

import pytest

from experiment.stages import DamagedInput, Stage, StageRunner, StaleStage, diff, downstream, fingerprints


def make(tmp_path, calls, spec_b=None, fail_c=False):
    out = str(tmp_path)

    def work(name):
        def run():
            calls.append(name)
            if name == "c" and fail_c:
                raise KeyboardInterrupt  # killed mid-stage
            path = os.path.join(out, name)
            with open(path, "w") as f:
                f.write(name)
            return {"wrote": name}

        return run

    return [
        Stage("a", work("a"), {"x": 1}, (), (os.path.join(out, "a"),)),
        Stage("b", work("b"), spec_b or {"lr": 0.1, "nested": {"k": 1}}, ("a",), (os.path.join(out, "b"),)),
        Stage("c", work("c"), {"y": 2}, ("b",), (os.path.join(out, "c"),)),
        Stage("d", work("d"), {"z": 3}, ("a",), (os.path.join(out, "d"),)),
    ]


def test_skip_resume_stale_and_redo(tmp_path):
    calls = []
    with pytest.raises(KeyboardInterrupt):
        StageRunner(str(tmp_path), make(tmp_path, calls, fail_c=True), log=lambda m: None).run()
    assert calls == ["a", "b", "c"]
    with open(tmp_path / "stages" / "c.json") as f:
        assert json.load(f)["status"] == "running"
    assert not (tmp_path / "stages" / "d.json").exists()

    calls.clear()  # the re-run skips a and b, resumes c, runs d
    res = StageRunner(str(tmp_path), make(tmp_path, calls), log=lambda m: None).run()
    assert calls == ["c", "d"] and res["a"] == {"wrote": "a"} and res["d"] == {"wrote": "d"}

    calls.clear()  # nothing left to do
    StageRunner(str(tmp_path), make(tmp_path, calls), log=lambda m: None).run()
    assert calls == []

    calls.clear()  # b's config changed: refused before anything runs, naming the key; c (downstream) too
    changed = make(tmp_path, calls, spec_b={"lr": 0.2, "nested": {"k": 1}})
    with pytest.raises(StaleStage) as e:
        StageRunner(str(tmp_path), changed, log=lambda m: None).run()
    assert "lr: 0.1 -> 0.2" in str(e.value) and "c (done)" in str(e.value) and "--redo=b" in str(e.value)
    assert calls == []
    rows = {r["stage"]: r["state"] for r in StageRunner(str(tmp_path), changed).status()}
    assert rows == {"a": "done", "b": "stale", "c": "stale", "d": "done"}

    (tmp_path / "b").write_text("old")
    StageRunner(str(tmp_path), changed, redo=["b"], log=lambda m: None).run()
    assert calls == ["b", "c"]  # b and its downstream c re-ran; a and d (not downstream of b) did not
    assert (tmp_path / "b").read_text() == "b"


def test_a_redo_killed_midway_still_reruns_what_it_had_not_reached(tmp_path):
    """--redo=a re-runs a and everything after it (b, c, d); killed in c, a plain re-run resumes c and still re-runs
    d, which the killed run never reached (its old output deleted first). --until bounds the redo: what comes after
    the stop keeps its finished state."""
    calls = []
    StageRunner(str(tmp_path), make(tmp_path, calls), log=lambda m: None).run()
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        StageRunner(str(tmp_path), make(tmp_path, calls, fail_c=True), redo=["a"], log=lambda m: None).run()
    assert calls == ["a", "b", "c"]
    rows = {r["stage"]: r["state"] for r in StageRunner(str(tmp_path), make(tmp_path, [])).status()}
    assert rows == {"a": "done", "b": "done", "c": "running", "d": "redo"}
    (tmp_path / "d").write_text("old")
    calls.clear()
    StageRunner(str(tmp_path), make(tmp_path, calls), log=lambda m: None).run()
    assert calls == ["c", "d"] and (tmp_path / "d").read_text() == "d"
    calls.clear()
    StageRunner(str(tmp_path), make(tmp_path, calls), redo=["a"], log=lambda m: None).run(until="b")
    assert calls == ["a", "b"]
    calls.clear()
    StageRunner(str(tmp_path), make(tmp_path, calls), log=lambda m: None).run()
    assert calls == []


def test_a_stage_that_reads_more_stages_runs_again(tmp_path):
    """The report reads every evaluation: when one is added (same configuration, another dependency set) the report
    re-runs by itself, with what follows it; a changed configuration downstream is still refused."""
    calls = []

    def st(name, deps, spec=None):
        return Stage(name, lambda: calls.append(name) or {}, spec or {"k": name}, deps, ())

    def plan(evals, export_spec=None):
        return [
            st("train", ()),
            *[st(e, ("train",)) for e in evals],
            st("report", tuple(evals)),
            st("export", ("report",), export_spec),
        ]

    StageRunner(str(tmp_path), plan(["eval-a"]), log=lambda m: None).run()
    assert calls == ["train", "eval-a", "report", "export"]
    calls.clear()
    logs = []
    StageRunner(str(tmp_path), plan(["eval-a", "eval-b"]), log=logs.append).run()
    assert calls == ["eval-b", "report", "export"]  # eval-a and train are kept
    assert any("report: reads other stages now (+eval-b)" in m for m in logs)
    calls.clear()
    StageRunner(str(tmp_path), plan(["eval-a", "eval-b"]), log=lambda m: None).run()
    assert calls == []
    with pytest.raises(StaleStage, match="export"):  # export's own configuration changed: refused, not re-run
        StageRunner(str(tmp_path), plan(["eval-a"], {"k": "other"}), log=lambda m: None).run()
    assert calls == []


def test_fingerprints_follow_dependencies():
    s = [Stage("a", lambda: {}, {"x": 1}), Stage("b", lambda: {}, {"y": 1}, ("a",)), Stage("c", lambda: {}, {}, ())]
    s2 = [Stage("a", lambda: {}, {"x": 2}), s[1], s[2]]
    f1, f2 = fingerprints(s), fingerprints(s2)
    assert f1["a"] != f2["a"] and f1["b"] != f2["b"] and f1["c"] == f2["c"]
    assert downstream(s, ["a"]) == {"a", "b"}
    with pytest.raises(ValueError, match="unknown stage"):
        downstream(s, ["nope"])
    with pytest.raises(ValueError, match="come later or do not exist"):
        fingerprints([s[1], s[0]])


def test_diff_names_nested_changes():
    assert diff({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}}) == ["a.c: 2 -> 3", "a.d: (absent) -> 4"]
    assert diff([1, 2], [1, 2]) == []


def test_a_damaged_input_names_the_stage_that_rewrites_it(tmp_path):
    """A stage failing on a file an earlier stage wrote says which stage and which --redo rewrites it; an error
    about no earlier output stays as it was."""
    out = str(tmp_path)
    shard = os.path.join(out, "data", "shard-0")

    def write():
        os.makedirs(os.path.dirname(shard), exist_ok=True)
        with open(shard, "w") as f:
            f.write('{"ok": 1}')
        return {}

    def read():
        with open(shard) as f:
            try:
                json.load(f)
            except ValueError as e:
                raise ValueError(f"{shard} is not JSON ({e})") from None
        return {}

    def stages():
        return [
            Stage("data", write, {}, (), (os.path.join(out, "data"),)),
            Stage("dat", lambda: {}, {}, (), (os.path.join(out, "dat"),)),  # a prefix of 'data': not named
            Stage("train", read, {}, ("data",), (os.path.join(out, "train"),)),
        ]

    StageRunner(out, stages(), log=lambda m: None).run()
    with open(shard, "w") as f:
        f.write('{"ok": ')  # cut short
    with pytest.raises(DamagedInput) as e:
        StageRunner(out, stages(), redo=["train"], log=lambda m: None).run()
    msg = str(e.value)
    assert shard in msg and "written by stage data" in msg and "--redo=data" in msg
    assert StageRunner(out, stages()).producer(f"{out}/dat/x missing", "train") == ("dat", os.path.join(out, "dat"))
    assert StageRunner(out, stages()).producer("no path here", "train") is None
    # the file the error is about comes first; a configuration value it quotes later is not the damaged file
    msg = f"checkpoint of {out}/dat cannot be read (model.path='{out}/data')"
    assert StageRunner(out, stages()).producer(msg, "train") == ("dat", os.path.join(out, "dat"))
