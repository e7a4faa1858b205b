"""The main job end to end (launch/pipeline.py, the 'tiny' preset with two Agent Q rounds) in a fresh process with
real Chromium, the embedded shop, a from-scratch model, Orbax and transformers: every stage runs, every artefact
exists and reloads, the report has every row, a re-run does nothing, a changed stage is refused until --redo; Agent
Q's trajectory DPO, search DPO and search at inference added to a copy of the finished run."""

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
    args = [
        sys.executable,
        "-m",
        "launch.pipeline",
        "--config=configs/pipeline.py:tiny",
        f"--config.out={out}",
        "--config.rounds.count=2",
        "--progress=false",
        *extra,
    ]
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
    stages = [
        "collect-r1",
        "tokenizer",
        "base",
        "dataset-r1",
        "collect-r2",
        "dataset-r2",
        "sft",
        "dpo",
        "kto",
        "kto_tree",
        "tgpo",
        "tgpo-r2",
        "eval-base",
        "eval-sft",
        "eval-kto",
        "eval-kto_tree",
        "eval-dpo",
        "eval-tgpo",
        "eval-tgpo-r2",
        "report",
        "export",
    ]
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
    for name, init in (
        ("sft", "base"),
        ("dpo", "sft"),
        ("kto", "sft"),
        ("kto_tree", "sft"),
        ("tgpo", "sft"),
        ("tgpo-r2", "tgpo"),
    ):
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
    assert saved["page_ids"] == "before" and saved["history_last"] is False and saved["page_cut"] == "end"
    # the shop launch.evaluate / collect default to
    assert saved["shop"] == {"locale": "en", "seed": 0, "item_names": "ordinal"}
    assert saved["evaluation"] == {"constrain": True, "max_tokens": 24, "max_steps": 6, "step_slack": 6}
    with open(os.path.join(model, POLICY_FILE), "w") as f:
        json.dump({**saved, "page_ids": "after", "history_last": True, "page_cut": "text_first"}, f)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    got = str(tmp_path / "c")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.collect",
            "--families=procedure",
            "--num_tasks=1",
            "--runs=1",
            "--contexts=1",
            "--max_steps=1",
            "--max_tokens=16",
            "--policy=model",
            f"--model={model}",
            f"--out={got}",
            "--noscreenshots",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ep,) = list(iter_episodes(got))
    messages = ep.steps[0]["policy_info"]["messages"]
    assert messages[0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT}
    assert '[2] textbox "Search"' in ep.steps[0]["observation"]  # recorded as rendered, prompted as saved
    assert 'textbox "Search"[2]' in messages[1]["content"] and "[2] textbox" not in messages[1]["content"]
    assert messages[1]["content"].index("Current page:") < messages[1]["content"].index("Previous actions:")


def test_evaluate_cli_decodes_a_pipeline_model_as_the_pipeline_did(run, tmp_path):
    """launch.evaluate on a pipeline model takes the decoding and step cap its evaluation used (policy.json's
    "evaluation": the tiny preset's constrained decoding, 24 tokens, 6 steps with slack 6) where no flag is given,
    and a flag given wins (--max_tokens=16)."""
    out, _ = run
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    got = str(tmp_path / "eval")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.evaluate",
            f"--model={os.path.join(out, 'models', 'sft')}",
            "--families=procedure",
            "--num_tasks=1",
            "--seeds=0",
            "--contexts=1",
            "--max_tokens=16",
            f"--out={got}",
            "--noscreenshots",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(got, "eval.json")) as f:
        ev = json.load(f)
    assert ev["episodes"] == 1
    assert (ev["config"]["max_steps"], ev["config"]["step_slack"]) == (6, 6)
    assert (ev["meta"]["constrain"], ev["meta"]["max_tokens"]) == (True, 16)


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
    trees = sorted(os.listdir(os.path.join(out, "report", "trees")))
    views = [t for t in trees if t.endswith(".episodes.html")]  # each tree's episode viewer beside it
    assert len(trees) == 4 and len(views) == 2 and all(t.endswith(".html") for t in trees)
    assert all(f"(trees/{v})" in md for v in views)
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


def test_the_baselines_join_the_finished_run(run, tmp_path):
    """The baselines in the main job: Agent Q's trajectory-level DPO on round 1's own episodes and DPO on a search
    collection proposed in by the SFT model, and the judge recipe's DPO on SFT's samples at the successful steps,
    scored by a judge endpoint; each trained from SFT, evaluated, and in the report's rows, comparisons and budget
    notes; and SFT with search at inference beside its plain evaluation. They join a copy of the finished run (the
    stages are incremental: round 1's collection, SFT and its evaluation are not run again), not a second run from
    scratch: CI time (BUILD_NOTES.md, "Agent Q's pipeline test joins the finished tiny run")."""
    import shutil

    from chat_server import ChatServer, listed
    from rollout.recording import iter_episodes
    from tgpo_jax.data.io import DatasetReader
    from trees.trajectory_records import pair_episodes

    def cmd(line):  # a one-line output: "Thought: … | Command: CLICK [1]"
        return line.rsplit("Command:", 1)[-1].strip()

    def judge(text):  # the reference's command 100; any other 20, 40 or 60 by its place in the list
        ref = cmd(text.split("Reference action (correct):\n", 1)[1].split("\n", 1)[0])
        return json.dumps(
            {
                "scores": [
                    100 if cmd(c) == ref else 20 * (1 + i % 3) for i, c in enumerate(listed(text, "Candidates:\n"))
                ]
            }
        )

    out = str(tmp_path / "out")
    shutil.copytree(run[0], out)
    server = ChatServer(judge)
    try:
        proc = pipeline(
            out,
            "--config.rounds.count=1",
            "--config.methods=sft,traj_dpo,search_dpo,judge_dpo",
            "--config.eval.models=sft,traj_dpo,search_dpo,judge_dpo",
            "--config.eval.search_models=sft",
            "--config.eval.search_tasks=2",
            f"--config.judge.url={server.url}",
            "--config.judge.model=judge",
            "--config.judge.k=3",
        )
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-4000:]
    for stage in ("collect-r1", "tokenizer", "base", "dataset-r1", "sft", "eval-sft"):  # round 1's, as they were
        assert f"{stage}: done earlier" in proc.stderr, proc.stderr[-4000:]

    # trajectory pairs: as many as the round-1 episodes allow (failure i of a task against success i mod n, <= 4)
    by_task = {}
    for ep in iter_episodes(os.path.join(out, "episodes", "round1")):
        by_task.setdefault(ep.task_id, []).append(ep)
    possible = sum(len(pair_episodes(eps, 4)) for eps in by_task.values())
    traj = _result(out, "dataset-traj-r1")
    assert possible >= 1 and sum(traj["trajectory_pairs"].values()) == possible
    recs = list(DatasetReader(os.path.join(out, "datasets", "traj-round1")))
    assert {r.value_source for r in recs} == {"trajectory"} and len(recs) == traj["records"]
    assert len({r.meta["pair"] for r in recs}) == traj["trajectory_pairs"]["pairs"]

    # the search: the 3 training tasks x 8 simulations, its trees' nodes as records, its browser steps counted
    search = _result(out, "collect-search-r1")
    assert search["searched"] == 3 and search["simulations"] == 24 and search["diverged"] == 0
    steps = sum(len(e.steps) for e in iter_episodes(os.path.join(out, "episodes", "search-round1")))
    assert search["browser_steps"] == steps > 0
    trees = [f for f in os.listdir(os.path.join(out, "episodes", "search-round1", "search")) if f != "settings.json"]
    assert len(trees) == 3
    srecs = list(DatasetReader(os.path.join(out, "datasets", "search-round1")))
    built = _result(out, "dataset-search-r1")
    assert srecs and {r.value_source for r in srecs} == {"mcts"} and len(srecs) == built["records"]
    assert 1 <= built["nodes_with_pairs"] <= built["records"]

    # the judge: every step of round 1's successful training episodes, 3 samples each, judged once per distinct
    # (prompt, candidates): two runs of a task that sampled alike at a step ask the judge once
    good = [
        e
        for e in iter_episodes(os.path.join(out, "episodes", "round1"))
        if e.summary["success"] and e.summary["split"] == "train"
    ]
    judged = _result(out, "dataset-judge-r1")
    assert judged["steps"] == sum(len(e.steps) for e in good) == judged["judge_calls"] + judged["judge_cache_hits"]
    assert judged["judge_calls"] == len(server.prompts) == len(set(server.prompts)) >= 1
    assert judged["tasks"] == len({e.task_id for e in good}) and judged["unscored"] == judged["judge_malformed"] == 0
    with open(os.path.join(out, "datasets", "judge-round1.judge.jsonl")) as f:
        assert sum(1 for _ in f) == judged["judge_calls"]  # the answers, for a resumed stage
    jrecs = list(DatasetReader(os.path.join(out, "datasets", "judge-round1")))
    assert jrecs and {r.value_source for r in jrecs} == {"judge"} and len(jrecs) == judged["records"]
    for r in jrecs:
        qs = [b.q for b in r.branches]
        if r.meta["judge"] == "dpo1":  # the recorded action against the candidates the judge scored under 80
            assert qs[0] == 1.0 and set(qs[1:]) == {0.0} and len(qs) >= 2
        else:  # the distinct candidates at their (merged) scores / 100, at least two of them apart
            assert r.meta["judge"] == "dpo2" and len(set(qs)) >= 2 and all(0.2 <= q <= 1.0 for q in qs)

    for name in ("traj_dpo", "search_dpo", "judge_dpo"):
        assert _result(out, name)["steps"] >= 1
        with open(os.path.join(out, "eval", name, "eval.json")) as f:
            assert json.load(f)["tasks"] == 2
    with open(os.path.join(out, "report", "report.md")) as f:
        md = f.read()
    table = md.split("## Table 1")[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip().strip("*") for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows == ["SFT", "Trajectory DPO", "DPO (search)", "DPO (judge)"]
    for comparison in ("Trajectory DPO − SFT", "DPO (search) − SFT", "DPO (judge) − SFT"):
        assert f"| {comparison} | success rate |" in md
    assert f"{steps} browser steps, beside round 1's" in md
    assert f"Trajectory DPO: {traj['trajectory_pairs']['pairs']} pairs" in md
    assert (
        f"DPO (judge): 3 samples of the first seed's SFT at each of {judged['steps']} steps" in md
        and f"judged by judge: {judged['records']} DPO-3 records" in md
    )

    # search at inference: SFT on the first 2 held-out tasks, beside its plain evaluation on the same tasks
    with open(os.path.join(out, "eval-search", "sft", "eval.json")) as f:
        ev = json.load(f)
    with open(os.path.join(out, "eval", "sft", "eval.json")) as f:
        plain = json.load(f)
    rows = ev["tasks_table"]
    assert len(rows) == 2 and ev["counts"]["simulations"] == 2 * 8
    assert [r["task_id"] for r in rows] == plain["task_ids"][:2]
    for r in rows:
        assert r["success"] >= r["first_success"] and r["browser_steps"] > 0
    won = {e["task_id"]: e["success"] for e in plain["per_seed"][0]["episodes_table"]}
    line = next(x for x in md.splitlines() if x.startswith("| SFT | 2 | 8 |"))
    cells = [c.strip().strip("*") for c in line.split("|")[1:-1]]
    assert float(cells[3]) == pytest.approx(100 * sum(won[r["task_id"]] for r in rows) / 2, abs=0.05)
    assert float(cells[5]) == pytest.approx(100 * sum(r["success"] for r in rows) / 2, abs=0.05)
    assert float(cells[6]) == pytest.approx(sum(r["browser_steps"] for r in rows) / 2, abs=0.05)


def test_killed_in_every_kind_of_stage_resumes_to_the_undisturbed_outputs(run):
    """Each kind of stage run again on the finished run (``--redo=S --until=S``: collection, the tokenizer, a
    dataset, training, evaluation, the export), its process group SIGKILLed inside
    the stage, then resumed (``--until=S``): the stage says it resumes and ends with the undisturbed run's episodes,
    tokenizer, shards, losses, evaluation and exported weights. (Resuming from a checkpoint inside a run, step for
    step: tests/test_train.py.) Where a stage shows its progress (steps recorded, training rows written) the kill
    comes after a random number of them short of the undisturbed run's total, so it lands inside the stage however
    busy the machine is (the slow tier runs two test files at once); the others are killed at a random fraction of
    their duration in the undisturbed run and may end first (the tokenizer, dataset and export stages take seconds).
    One stage at a time, not a second whole pipeline, and one collection (round 2's, by round 1's model: the same
    stage code as the oracle's round 1, with the model's prompts besides): the slow tier's time."""
    import hashlib
    import random
    import signal
    import time

    out, _ = run
    seconds = {
        f[:-5]: json.load(open(os.path.join(out, "stages", f))).get("seconds", 0)
        for f in os.listdir(os.path.join(out, "stages"))
    }

    def files(d):
        return {
            f: hashlib.sha256(open(os.path.join(out, d, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(os.path.join(out, d)))
        }

    read = {
        "tokenizer": lambda: files("tokenizer"),
        "dataset-r1": lambda: _shards(out, 1),
        "collect-r2": lambda: _episodes(out, 2),
        "tgpo-r2": lambda: [r["train/loss"] for r in _rows(out, "tgpo-r2")],
        "eval-sft": lambda: json.load(open(os.path.join(out, "eval", "sft", "eval.json")))["mean"],
        "export": lambda: files("export"),
    }  # what each stage decides
    undisturbed = {stage: f() for stage, f in read.items()}  # read before any stage runs again
    rng = random.Random(os.getpid())
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    landed = {}
    for stage in undisturbed:
        marker = os.path.join(out, "stages", f"{stage}.json")
        total = _progress(out, stage)
        args = [
            sys.executable,
            "-m",
            "launch.pipeline",
            "--config=configs/pipeline.py:tiny",
            f"--config.out={out}",
            "--config.rounds.count=2",
            "--progress=false",
            f"--redo={stage}",
            f"--until={stage}",
        ]
        proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )  # its own process group: the browsers die with it
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline and _status(marker) != "running":
            time.sleep(0.02)
        if total is None:
            time.sleep(rng.uniform(0.1, 0.8) * seconds[stage])
        else:  # after k units, with at least two left: one finishing at the same poll still leaves the stage running
            k = rng.randrange(1, max(total - 1, 2))
            while proc.poll() is None and time.monotonic() < deadline and _progress(out, stage) < k:
                time.sleep(0.02)
        landed[stage] = _status(marker)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # the stages that show progress are killed inside; the others, at a fraction of their undisturbed time, may
        # have ended first on a busier or idler machine
        assert landed[stage] == "running" or total is None, (stage, landed[stage])
        assert landed[stage] != "running" or proc.returncode == -signal.SIGKILL, (stage, proc.returncode)
        done = pipeline(out, f"--until={stage}")
        assert done.returncode == 0, done.stderr[-3000:]
        if landed[stage] == "running":
            assert f"{stage}: resuming" in done.stderr, done.stderr[-3000:]
        if stage == "tgpo-r2":  # trained again from the same records: the same losses
            np.testing.assert_allclose(read[stage](), undisturbed[stage], rtol=1e-6, err_msg=stage)
        else:
            assert read[stage]() == undisturbed[stage], f"{stage} differs after the kill ({landed[stage]})"
    again = pipeline(out)  # the run is whole again: nothing left to do
    assert again.returncode == 0 and again.stderr.count("skipped") == 21, again.stderr[-3000:]


def test_faults_name_the_damaged_file_or_end_in_the_same_artefacts(run):
    """Fault injection on the finished run (last in this module: it leaves stages to re-run): a cut stage marker and
    a damaged shard are refused with the file named; a changed episode is collected again (the same shards); a
    damaged exported model, evaluation, manifest and final checkpoint are refused naming the stage that rewrites
    them. (A training stage killed and resumed is in the kill test above.)"""
    import glob

    out, _ = run
    # a flipped letter in a sealed episode's page text (valid JSON still): the dataset stage sets the episode aside,
    # collects it again, and builds the undisturbed shards
    shards, episodes = _shards(out, 1), _episodes(out, 1)
    victim = sorted(glob.glob(os.path.join(out, "episodes", "round1", "episodes", "*", "*", "steps.jsonl")))[0]
    text = open(victim, encoding="utf-8").read()
    i = text.index('"observation": "URL: /') + len('"observation": "URL: /')
    open(victim, "w", encoding="utf-8").write(text[:i] + "#" + text[i + 1 :])
    p = pipeline(out, "--redo=dataset-r1", "--until=dataset-r1")
    assert p.returncode == 0 and "changed after the episode was sealed" in p.stderr, p.stderr[-2000:]
    assert _episodes(out, 1) == episodes and _shards(out, 1) == shards
    assert glob.glob(os.path.join(out, "episodes", "round1", "damaged", "*", "*", "steps.jsonl"))

    # a damaged file in the final checkpoint of the run the export reads (the best model's)
    best = json.load(open(os.path.join(out, "stages", "export.json")))["result"]["best"]
    steps = glob.glob(os.path.join(out, "runs", best, "checkpoints", "*", "state", "_METADATA"))
    meta = max(steps, key=lambda f: int(f.split(os.sep)[-3]))
    intact = open(meta, "rb").read()
    open(meta, "wb").write(intact[: len(intact) // 2])
    p = pipeline(out, "--redo=export")
    step_dir = os.path.dirname(os.path.dirname(meta))
    assert p.returncode == 2 and f"a damaged file in {step_dir}" in p.stderr and f"--redo={best}" in p.stderr, p.stderr[
        -2000:
    ]
    open(meta, "wb").write(intact)

    # a damaged file another stage reads: refused naming the file and the stage that writes it again
    for path, redo, writer in (
        (os.path.join(out, "models", "sft", "model.safetensors"), "dpo", "sft"),
        (os.path.join(out, "eval", "dpo", "eval.json"), "report", "eval-dpo"),
        (os.path.join(out, "datasets", "round1", "manifest.json"), "sft", "dataset-r1"),
    ):
        intact = open(path, "rb").read()
        open(path, "wb").write(intact[: len(intact) // 2])
        p = pipeline(out, f"--redo={redo}", f"--until={redo}")
        assert p.returncode == 2 and path in p.stderr and f"--redo={writer}" in p.stderr, p.stderr[-2000:]
        open(path, "wb").write(intact)

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


def _result(out, stage):
    with open(os.path.join(out, "stages", f"{stage}.json")) as f:
        marker = json.load(f)
    assert marker["status"] == "done", stage
    return marker["result"]


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


def _progress(out, stage) -> int | None:
    """Steps recorded so far by a collection or evaluation stage, training rows written by a training stage; None
    for a stage that shows no progress."""
    import glob

    where = {
        "collect-r1": "episodes/round1/episodes",
        "collect-r2": "episodes/round2/episodes",
        "eval-sft": "eval/sft/seed0/episodes",
    }.get(stage)
    if where is not None:
        n = 0
        for path in glob.glob(os.path.join(out, where, "*", "*", "steps.jsonl")):
            with open(path, "rb") as f:
                n += f.read().count(b"\n")
        return n
    return len(_rows(out, stage)) if stage in ("sft", "tgpo-r2") else None


def _status(marker: str) -> str | None:
    try:
        return json.load(open(marker)).get("status")
    except (OSError, ValueError):
        return None


def _episodes(out, r):
    """(task, run) -> status and per step the page, the output and the command: what a collection decides."""
    from rollout.recording import iter_episodes

    return {
        (e.task_id, e.summary["run"]): (
            e.summary["status"],
            [(s["norm_url"], s["observation"], s["output"], s["command"]) for s in e.steps],
        )
        for e in iter_episodes(os.path.join(out, "episodes", f"round{r}"))
    }


def _shards(out, r):
    with open(os.path.join(out, "datasets", f"round{r}", "manifest.json")) as f:
        return [s["sha256"] for s in json.load(f)["shards"]]
