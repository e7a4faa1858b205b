"""The recording format (rollout/episode_format.py): what a writer may write, what a reader accepts from an older
writer, and the errors that name the file, the line and the field."""

import json
import os

import pytest

from episode_records import step_record, summary_record
from rollout.recording import FORMAT, EpisodeWriter, RecordingError, episode_dir, episode_status, iter_episodes


def _episode(out, task="t/1", run=0, status="success"):
    w = EpisodeWriter(out, task, run, screenshots=False)
    w.step(step_record(0))
    w.step(step_record(1, "/cart", "STOP [done]"))
    w.finish(summary_record(task, run, status, steps=2))
    return episode_dir(out, task, run)


def _rewrite(path, edit):
    f = os.path.join(path, "summary.json")
    with open(f) as fh:
        d = json.load(fh)
    edit(d)
    with open(f, "w") as fh:
        json.dump(d, fh)


def test_the_writer_records_its_format_and_a_summary_without_one_reads_as_format_1(tmp_path):
    out = str(tmp_path)
    path = _episode(out)
    with open(os.path.join(path, "summary.json")) as f:
        assert json.load(f)["format"] == FORMAT == 1
    _rewrite(path, lambda d: d.pop("format"))  # written before the field: the same layout
    (ep,) = iter_episodes(out, verify=True)
    assert ep.summary["status"] == "success" and [s["command"] for s in ep.steps] == ["CLICK [1]", "STOP [done]"]


def test_another_format_is_refused_by_name(tmp_path):
    out = str(tmp_path)
    path = _episode(out)
    _rewrite(path, lambda d: d.update(format=2))
    with pytest.raises(RecordingError, match=r"t__1/000/summary.json: episode format 2; this reader knows 1"):
        list(iter_episodes(out))
    assert episode_status(out, "t/1", 0, repair=True) is None  # damaged: set aside, runs again
    assert os.listdir(os.path.join(out, "damaged", "t__1"))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("status"), "the summary has no 'status'"),
        (lambda d: d.update(success="yes"), "'success' should be bool, not str 'yes'"),
        (lambda d: d.update(run=True), "'run' should be int, not bool"),
        (lambda d: d.update(score=float("nan")), "'score' should be number"),
        (lambda d: d.update(status="fine"), "status 'fine', expected one of success, failure, errored"),
        (lambda d: d["final"].pop("norm_url"), "the summary's final state has no 'norm_url'"),
        (lambda d: d.update(family=3), "'family' should be str, not int"),
        (lambda d: d["final"]["check"].update(done=None), "the final state's check: 'done' should be bool"),
    ],
)
def test_a_summary_off_its_format_names_the_file_and_field(tmp_path, edit, message):
    out = str(tmp_path)
    _rewrite(_episode(out), edit)
    with pytest.raises(RecordingError, match="summary.json: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        list(iter_episodes(out))


def test_a_step_off_its_format_names_the_line_and_field(tmp_path):
    out = str(tmp_path)
    path = _episode(out)
    with open(os.path.join(path, "steps.jsonl"), "a") as f:
        f.write(json.dumps({**step_record(2), "format_ok": "true"}) + "\n")
        f.write(json.dumps(step_record(3, thought=None)) + "\n")
    with pytest.raises(RecordingError, match=r"steps.jsonl, line 3: the step: 'format_ok' should be bool, not str"):
        list(iter_episodes(out))  # unsealed reading: the format still holds
    with open(os.path.join(path, "steps.jsonl"), "w") as f:
        f.write(json.dumps(step_record(0, thought=None)) + "\n")
    with pytest.raises(RecordingError, match=r"line 1: the step: 'thought' should be str, not NoneType"):
        list(iter_episodes(out))
    with open(os.path.join(path, "steps.jsonl"), "w") as f:
        f.write(json.dumps(step_record(0, check={"success": True, "score": 1.0, "done": True})) + "\n")
    with pytest.raises(RecordingError, match=r"line 1: the step's check has no 'progress'"):
        list(iter_episodes(out))


def test_the_writer_refuses_records_that_would_not_read_back(tmp_path):
    w = EpisodeWriter(str(tmp_path), "t/1", 0, screenshots=False)
    with pytest.raises(RecordingError, match="step 0 to write: the step has no 'output'"):
        w.step({k: v for k, v in step_record(0).items() if k != "output"})
    w.step(step_record(0))
    with pytest.raises(RecordingError, match="writing the episode: the summary: 'steps' should be int, not str"):
        w.finish(summary_record("t/1", 0, "failure", steps="1"))
    assert episode_status(str(tmp_path), "t/1", 0) is None  # nothing sealed
