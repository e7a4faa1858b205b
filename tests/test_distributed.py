"""Two processes (jax.distributed on 127.0.0.1) train to the same losses as one process with as many devices."""

import subprocess

import portpicker
import pytest

from tgpo_jax.training.metrics import read_metrics
from train_helpers import REPO, make_workspace, run_train_cli, train_cli


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("dist"))


def _losses(out):
    return [r["train/loss"] for r in read_metrics(out) if "train/loss" in r]


@pytest.mark.slow  # kill/resume, learning, multi-process or > 1 min: the slow tier
def test_two_processes_match_one(work, tmp_path):
    steps = ["--config.train.max_steps=4", "--config.train.save_every=2", "--config.data.eval_dir="]
    one = run_train_cli(work, "dpo", tmp_path / "one", steps + ["--config.distributed.local_device_count=2"])
    assert one.returncode == 0, one.stderr[-3000:]

    port = portpicker.pick_unused_port()
    procs = []
    for pid in range(2):
        extra = steps + [
            "--config.distributed.enabled=True",
            f"--config.distributed.coordinator=127.0.0.1:{port}",
            "--config.distributed.num_processes=2",
            f"--config.distributed.process_id={pid}",
            "--config.distributed.local_device_count=1",
        ]
        args, env = train_cli(work, "dpo", tmp_path / "two", extra)
        procs.append(
            subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(a) == len(b) == 4
    # same global batches (each process reads its own half of every batch), same mean losses
    assert b == pytest.approx(a, rel=1e-5)
    assert a[-1] != a[0]  # the run really trained
