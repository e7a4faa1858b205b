"""Learning, end to end: the `miniwob` pipeline preset collects noisy-oracle episodes on three MiniWoB++
tasks in real Chromium, trains a SentencePiece vocabulary and the from-scratch 'copy' model with SFT, and evaluates
it greedily on held-out seeds. A model that learnt nothing never emits a valid command (the initialisation scores
0 %), so the success floor below fails when collection, the dataset, the loss, the optimiser or the sampler breaks.
The floors sit well under what the preset measured here (BUILD_NOTES.md, "The slow learning test"), so that a
different CPU's float summation order cannot fail the test, and well over what a broken run reaches."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ("focus-text", "click-button", "click-link")
# held-out success floors: pooled, and per task (focus-text is one click on the page's only text box; the other two
# need the name in the utterance matched to a page element). Measured three times with 320-token rows: 17 of 30
# (focus-text 10, click-button 4, 2 and 3, click-link 3, 5 and 4 of 10), 4-6 min on 2 cores; then, on one machine:
# 16 of 30 with 320-token rows, 17 of 30 with the 256-token rows now used (click-button 2, click-link 5)
POOLED_FLOOR = 0.40
FOCUS_FLOOR = 0.8  # focus-text alone
NAMES_FLOOR = 0.15  # click-button and click-link together (3 of 20): each alone is too few episodes for a floor

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("learning") / "out")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user's run
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.pipeline",
            "--config=configs/pipeline.py:miniwob",
            f"--config.out={out}",
            "--progress=false",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _episodes(directory):
    from rollout.recording import iter_episodes

    return list(iter_episodes(directory))


def test_sft_solves_held_out_miniwob_tasks(run):
    with open(os.path.join(run, "eval", "sft", "eval.json")) as f:
        ev = json.load(f)
    assert ev["errored"] == 0 and ev["episodes"] == 30 and ev["config"]["split"] == "test"
    assert ev["config"]["temperature"] == 0.0  # greedy: the measurement is deterministic given the weights
    episodes = _episodes(os.path.join(run, "eval", "sft", "seed0"))
    by_family = {f: [e.summary["success"] for e in episodes if e.summary["family"] == f] for f in FAMILIES}
    rates = {f: sum(v) / len(v) for f, v in by_family.items()}
    assert all(len(v) == 10 for v in by_family.values()), {f: len(v) for f, v in by_family.items()}
    assert ev["mean"]["success_rate"] == pytest.approx(sum(map(sum, by_family.values())) / 30)
    assert ev["mean"]["success_rate"] >= POOLED_FLOOR, rates
    assert rates["focus-text"] >= FOCUS_FLOOR, rates
    assert (rates["click-button"] + rates["click-link"]) / 2 >= NAMES_FLOOR, rates


def test_held_out_seeds_are_disjoint_from_training(run):
    train = {e.task_id for e in _episodes(os.path.join(run, "episodes", "round1"))}
    test = {e.task_id for e in _episodes(os.path.join(run, "eval", "sft", "seed0"))}
    assert len(train) == 90 and len(test) == 30 and not train & test
    seed = lambda task_id: int(task_id.rsplit("/", 1)[1])  # noqa: E731  miniwob/<task>/<seed>
    assert max(map(seed, train)) < min(map(seed, test))


def test_training_loss_fell(run):
    with open(os.path.join(run, "runs", "sft", "metrics.jsonl")) as f:
        losses = [json.loads(line)["train/loss"] for line in f if '"train/loss"' in line]
    with open(os.path.join(run, "runs", "sft", "summary.json")) as f:
        assert json.load(f)["final_step"] == len(losses) == 150
    assert sum(losses[-10:]) / 10 < 0.1 * losses[0], (losses[0], losses[-10:])
