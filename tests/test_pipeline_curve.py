"""The report's success-vs-training-steps curve (``eval.curve_methods``) on a real run of the main job: the 'tiny'
preset, SFT alone, in a fresh process with Chromium. The snapshots the training loop keeps are the ones evaluated,
each on the curve's held-out tasks, and the report plots them with the final model's point."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow
POINTS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("curve") / "out")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = [
        sys.executable,
        "-m",
        "launch.pipeline",
        "--config=configs/pipeline.py:tiny",
        f"--config.out={out}",
        "--config.methods=sft",
        "--config.eval.models=sft",
        "--config.eval.curve_methods=sft",
        f"--config.eval.curve_points={POINTS}",
        "--config.eval.curve_tasks=1",
        "--progress=false",
    ]
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_the_curve_evaluates_the_kept_snapshots_and_the_report_plots_them(run):
    from experiment import results
    from rollout.recording import iter_episodes
    from tgpo_jax.training.checkpoint import Checkpointer

    with open(os.path.join(run, "stages", "curve-sft.json")) as f:
        curve = json.load(f)["result"]
    with open(os.path.join(run, "eval", "sft", "eval.json")) as f:
        final_eval = json.load(f)
    ck = Checkpointer(os.path.join(run, "runs", "sft", "checkpoints"))
    kept = ck.all_steps()
    ck.close()
    total = curve["final_step"]
    period = -(-total // POINTS)  # every ceil(total / points) steps (tgpo_jax/training/loop.py), worked out here
    assert curve["steps"] == [*range(period, total, period)] and set(curve["steps"]) < set(kept)
    assert curve["tasks"] == [final_eval["task_ids"][0]]  # the first curve_tasks held-out tasks
    for step in curve["steps"]:
        with open(os.path.join(run, "curves", "sft", f"step{step}", "eval.json")) as f:
            ev = json.load(f)
        assert ev["policy"] == f"model:{os.path.join(run, 'runs', 'sft')}@{step}"  # that snapshot, not the final
        assert ev["task_ids"] == curve["tasks"] and ev["episodes"] + ev["errored"] == 1
        assert curve["success"][str(step)] == ev["mean"]["success_rate"]
    points = results.curve_points(curve, final_eval)
    final = [
        bool(e.summary["success"])
        for e in iter_episodes(os.path.join(run, "eval", "sft", "seed0"))
        if e.task_id == curve["tasks"][0]
    ]  # the final model's point: its full evaluation on the curve's task
    assert [s for s, _ in points] == [*curve["steps"], total] and len(final) == 1 and points[-1][1] == float(final[0])
    with open(os.path.join(run, "report", "report.md")) as f:
        md = f.read()
    assert "## Success vs training steps" in md and "(learning.png)" in md
    assert os.path.getsize(os.path.join(run, "report", "learning.png")) > 1000
