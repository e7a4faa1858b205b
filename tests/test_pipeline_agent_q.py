"""Agent Q in the main job (the 'tiny' preset, real Chromium): trajectory-level DPO on round 1's own episodes and DPO
on a search collection proposed in by the SFT model, each trained from SFT, evaluated, and in the report's rows,
comparisons and budget notes; and SFT with search at inference beside its plain evaluation."""
import json
import os

import pytest

from test_pipeline import pipeline

pytestmark = pytest.mark.slow  # two browser collections, three trainings, evaluations


def _result(out, stage):
    with open(os.path.join(out, "stages", f"{stage}.json")) as f:
        marker = json.load(f)
    assert marker["status"] == "done", stage
    return marker["result"]


def test_trajectory_and_search_dpo_run_end_to_end(tmp_path):
    from rollout.recording import iter_episodes
    from tgpo_jax.data.io import DatasetReader
    from trees.trajectory_records import pair_episodes

    out = str(tmp_path / "out")
    proc = pipeline(out, "--config.rounds.count=1", "--config.methods=sft,traj_dpo,search_dpo",
                    "--config.eval.models=sft,traj_dpo,search_dpo", "--config.trees=0",
                    "--config.eval.search_models=sft", "--config.eval.search_tasks=2")
    assert proc.returncode == 0, proc.stderr[-4000:]

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
    assert not os.path.exists(os.path.join(out, "stages", "collect-r2.json"))  # one round
    srecs = list(DatasetReader(os.path.join(out, "datasets", "search-round1")))
    built = _result(out, "dataset-search-r1")
    assert srecs and {r.value_source for r in srecs} == {"mcts"} and len(srecs) == built["records"]
    assert 1 <= built["nodes_with_pairs"] <= built["records"]

    for name in ("traj_dpo", "search_dpo"):
        assert _result(out, name)["steps"] >= 1
        with open(os.path.join(out, "eval", name, "eval.json")) as f:
            assert json.load(f)["tasks"] == 2
    with open(os.path.join(out, "report", "report.md")) as f:
        md = f.read()
    table = md.split("## Table 1")[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip().strip("*") for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows == ["SFT", "Trajectory DPO", "DPO (search)"]
    for comparison in ("Trajectory DPO − SFT", "DPO (search) − SFT"):
        assert f"| {comparison} | success rate |" in md
    assert f"{steps} browser steps, beside round 1's" in md
    assert f"Trajectory DPO: {traj['trajectory_pairs']['pairs']} pairs" in md

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
