"""scripts/compare_runs.py: two runs agree when only the machine's fields differ, and not when a decision does."""

import importlib.util
import json
import os

from episode_records import step_record, summary_record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("compare_runs", os.path.join(ROOT, "scripts", "compare_runs.py"))
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def _run(root, port, latency, output="Thought: go\nCommand: CLICK [1]", loss=0.5):
    d = os.path.join(root, "episodes", "round1", "episodes", "t", "000")
    os.makedirs(d)
    step = step_record(0, f"http://127.0.0.1:{port}/", timings={"policy_s": latency})
    step.update(output=output, policy_info={"latency_s": latency, "batch_size": port % 3, "messages": [root]})
    with open(os.path.join(d, "steps.jsonl"), "w") as f:
        f.write(json.dumps(step) + "\n")
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({**summary_record("t", 0, "success"), "duration_s": latency, "policy": f"model:{root}/m"}, f)
    os.makedirs(os.path.join(root, "runs", "sft"))
    with open(os.path.join(root, "runs", "sft", "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 1, "train/loss": loss, "time/step_s": latency}) + "\n")


def test_the_machine_s_fields_are_left_out_and_a_decision_is_not(tmp_path, capsys):
    a, b, c, d = (str(tmp_path / n) for n in "abcd")
    _run(a, 4001, 1.5)
    _run(b, 5002, 9.25)  # another port, latency, batch and run directory
    assert compare_runs.main(a, b) == 0
    assert "episodes: identical (1 vs 1)" in capsys.readouterr().out
    _run(c, 4001, 1.5, output="Thought: go\nCommand: CLICK [2]")
    assert compare_runs.main(a, c) == 1
    assert "episodes: DIFFERENT" in capsys.readouterr().out
    _run(d, 4001, 1.5, loss=0.25)
    assert compare_runs.main(a, d) == 1
    assert "losses: DIFFERENT" in capsys.readouterr().out
