"""The main job end to end (launch/pipeline.py, the 'tiny' preset with two Agent Q rounds) in a fresh process with
real Chromium, the embedded shop, a from-scratch model, Orbax and transformers: every stage runs, every artefact
exists and reloads, the report has every row, a re-run does nothing, a changed stage is refused until --redo."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ("base", "SFT", "KTO", "KTO-Tree", "DPO", "TGPO", "TGPO (round 2)")


def pipeline(out, *extra, timeout=900):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user's run
    args = [sys.executable, "-m", "launch.pipeline", "--config=configs/pipeline.py:tiny", f"--config.out={out}",
            "--config.rounds.count=2", "--progress=false", *extra]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)

# the whole main job end to end in a browser (collect, train, evaluate, export, report): the slow tier
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pipeline") / "out")
    proc = pipeline(out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc


def test_every_stage_ran(run):
    out, proc = run
    stages = ["collect-r1", "tokenizer", "base", "dataset-r1", "collect-r2", "dataset-r2", "sft", "dpo", "kto",
              "kto_tree", "tgpo", "tgpo-r2", "eval-base", "eval-sft", "eval-kto", "eval-kto_tree", "eval-dpo",
              "eval-tgpo", "eval-tgpo-r2", "report", "export"]
    have = sorted(f[:-5] for f in os.listdir(os.path.join(out, "stages")) if f.endswith(".json"))
    assert have == sorted(stages)
    for s in stages:
        with open(os.path.join(out, "stages", f"{s}.json")) as f:
            assert json.load(f)["status"] == "done", s
    summary = json.loads(proc.stdout)
    assert summary["stages"] == len(stages) and os.path.isdir(summary["export"]["dir"])


def test_episodes_and_datasets_reload(run):
    from rollout.recording import iter_episodes
    from tgpo_jax.data.io import DatasetReader, read_manifest

    out, _ = run
    for r in (1, 2):
        eps = list(iter_episodes(os.path.join(out, "episodes", f"round{r}")))
        assert len(eps) == 3 * 3 and {e.summary["split"] for e in eps} == {"train"}
        ds = os.path.join(out, "datasets", f"round{r}")
        manifest = read_manifest(ds)
        records = list(DatasetReader(ds))
        assert len(records) == manifest.num_records > 0
        assert manifest.extra["episodes"] == 9 * r  # round 2's trees hold rounds 1 and 2 (rounds.accumulate)
    with open(os.path.join(out, "episodes", "round2", "collection.json")) as f:
        meta = json.load(f)  # Agent Q round 2: collected by round 1's TGPO model
    assert meta["behaviour"] == os.path.join(out, "models", "tgpo") and meta["policy"].startswith("model:")


def test_runs_reload_and_round_two_starts_from_round_one(run):
    from rollout.policies.prompt import saved_prompt
    from tgpo_jax.training.restore import load_run_config, restore_checkpoint

    out, _ = run
    for name, init in (("sft", "base"), ("dpo", "sft"), ("kto", "sft"), ("kto_tree", "sft"), ("tgpo", "sft"),
                       ("tgpo-r2", "tgpo")):
        run_dir = os.path.join(out, "runs", name)
        cfg = load_run_config(run_dir)
        assert cfg.model.path == os.path.join(out, "models", init), name  # the reference is this model (live)
        assert cfg.loss.reference == ("none" if name == "sft" else "live")
        restored = restore_checkpoint(run_dir)
        assert restored.step == (150 if name == "sft" else 3)
        # a checkpoint of the run is prompted as its model is (launch.step_accuracy --model=<run dir> --step=N)
        assert saved_prompt(run_dir) == saved_prompt(os.path.join(out, "models", name)) != {}


def test_exports_load_in_transformers_and_match(run):
    import torch
    from transformers import AutoModelForCausalLM

    from tgpo_jax.models.loading import load_model

    out, proc = run
    best = json.loads(proc.stdout)["export"]["best"]
    with open(os.path.join(out, "export", "tgpo_pipeline.json")) as f:
        assert json.load(f)["model"] == best
    ids = np.array([[5, 17, 42, 99, 3, 250]])
    hf = AutoModelForCausalLM.from_pretrained(os.path.join(out, "export"), torch_dtype=torch.float32)
    with torch.no_grad():
        want = hf.eval()(torch.tensor(ids)).logits.numpy()
    ours = np.asarray(load_model(os.path.join(out, "models", best), dtype="float32")(ids)[0])
    np.testing.assert_allclose(ours, want, atol=2e-4, rtol=2e-4)


def test_collect_cli_prompts_a_pipeline_model_as_it_was_trained(run, tmp_path):
    """launch.collect loads policies through the same loader as evaluation: a pipeline model's policy.json
    (the compact system text, its history setting, where page lines put ids) is honoured, not the full grammar."""
    import shutil

    from rollout.policies.prompt import COMPACT_SYSTEM_PROMPT, POLICY_FILE
    from rollout.recording import iter_episodes

    out, _ = run
    model = str(tmp_path / "sft")
    shutil.copytree(os.path.join(out, "models", "sft"), model)
    with open(os.path.join(model, POLICY_FILE)) as f:
        saved = json.load(f)
    assert saved["page_ids"] == "before"
    with open(os.path.join(model, POLICY_FILE), "w") as f:
        json.dump({**saved, "page_ids": "after"}, f)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    got = str(tmp_path / "c")
    proc = subprocess.run([sys.executable, "-m", "launch.collect", "--families=procedure", "--num_tasks=1", "--runs=1",
                           "--contexts=1", "--max_steps=1", "--max_tokens=16", "--policy=model",
                           f"--model={model}", f"--out={got}", "--noscreenshots"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ep,) = list(iter_episodes(got))
    messages = ep.steps[0]["policy_info"]["messages"]
    assert messages[0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT}
    assert '[2] textbox "Search"' in ep.steps[0]["observation"]  # recorded as rendered, prompted as saved
    assert 'textbox "Search"[2]' in messages[1]["content"] and "[2] textbox" not in messages[1]["content"]


def test_eval_and_report_have_every_row(run):
    out, _ = run
    for name in ("base", "sft", "kto", "kto_tree", "dpo", "tgpo", "tgpo-r2"):
        with open(os.path.join(out, "eval", name, "eval.json")) as f:
            ev = json.load(f)
        assert ev["episodes"] + ev["errored"] == 2 and ev["tasks"] == 2
        assert set(ev["mean"]) >= {"success_rate", "avg_steps", "redundant_steps"}
    with open(os.path.join(out, "report", "report.md")) as f:
        md = f.read()
    table = md.split("## Table 1")[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip().strip("*") for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows == list(ROWS)
    assert "Table 2" in md and "Label-conflict rate" in md
    for png in ("success.png", "steps.png"):
        assert os.path.getsize(os.path.join(out, "report", png)) > 1000
    trees = os.listdir(os.path.join(out, "report", "trees"))
    assert len(trees) == 2 and all(t.endswith(".html") for t in trees)
    assert os.path.exists(os.path.join(out, "report", "report.html"))


def test_rerun_skips_and_changed_config_is_refused(run):
    out, _ = run
    again = pipeline(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("skipped") == 21 and "running" not in again.stderr
    changed = pipeline(out, "--config.tgpo.loss.beta=0.5")
    assert changed.returncode == 2
    assert "tgpo (done): train.loss.beta: 0.1 -> 0.5" in changed.stderr and "--redo=tgpo" in changed.stderr
    listing = pipeline(out, "--config.tgpo.loss.beta=0.5", "--list")
    states = dict(line.split()[:2] for line in listing.stdout.splitlines())
    assert states["tgpo"] == "stale" and states["tgpo-r2"] == "stale" and states["sft"] == "done"


def test_faults_name_the_damaged_file_or_end_in_the_same_artefacts(run):
    """Fault injection on the finished run (last in this module: it re-runs SFT): a cut stage marker and a damaged
    shard are refused with the file named; the SFT stage killed at a random step, then resumed, ends with the losses
    of the undisturbed run."""
    import glob
    import random
    import signal
    import time

    out, _ = run
    before = [r["train/loss"] for r in _rows(out, "sft")]  # the undisturbed run's losses
    assert len(before) > 1
    marker = os.path.join(out, "stages", "sft.json")
    good = open(marker).read()
    with open(marker, "w") as f:
        f.write(good[:25])  # a kill mid-write
    p = pipeline(out)
    assert p.returncode == 2 and "stages/sft.json is unreadable" in p.stderr and "--redo=sft" in p.stderr
    with open(marker, "w") as f:
        f.write(good)

    shard = sorted(glob.glob(os.path.join(out, "datasets", "round1", "*.array_record")))[0]
    intact = open(shard, "rb").read()
    flipped = bytearray(intact)
    flipped[len(flipped) // 2] ^= 0xFF
    with open(shard, "wb") as f:
        f.write(flipped)
    p = pipeline(out, "--redo=sft")
    assert p.returncode == 2 and os.path.basename(shard) in p.stderr and "sha256" in p.stderr, p.stderr[-2000:]
    with open(shard, "wb") as f:
        f.write(intact)

    kill_at = random.Random(os.getpid()).randrange(1, len(before))  # a random step of the run
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = [sys.executable, "-m", "launch.pipeline", "--config=configs/pipeline.py:tiny", f"--config.out={out}",
            "--config.rounds.count=2", "--progress=false", "--redo=sft"]
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600

    def running() -> bool:  # the redo has removed the old run and marked the stage running
        try:
            return json.load(open(marker)).get("status") == "running"
        except ValueError:
            return False

    while proc.poll() is None and time.monotonic() < deadline and not running():
        time.sleep(0.05)
    while proc.poll() is None and time.monotonic() < deadline and len(_rows(out, "sft")) < kill_at:
        time.sleep(0.05)
    assert proc.poll() is None, "the SFT stage ended before the kill: nothing was tested"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = pipeline(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "sft: resuming" in again.stderr, (kill_at, again.stderr[-2000:])
    after = [r["train/loss"] for r in _rows(out, "sft")]
    np.testing.assert_allclose(after, before, rtol=1e-6, err_msg=f"killed at step {kill_at}")


def _rows(out, run_name):
    path = os.path.join(out, "runs", run_name, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    for line in open(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "train/loss" in row:
            rows.append(row)
    return rows
