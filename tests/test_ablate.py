"""launch/ablate: override parsing, the summary table, and a resumable 2-run sweep of the tiny config."""

import csv
import os

import pytest

from conftest import CORPUS
from launch.ablate import (
    OverrideError,
    apply_overrides,
    parse_overrides,
    parse_sweep,
    run_ablation,
    summary_row,
    write_summary,
)

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "tgpo.py")


def test_parse_overrides():
    assert parse_overrides(
        [
            "data.margin=0.1",
            "train.output_dir=/x/y",
            "train.progress=False",
            "mesh.shape=(1, 2, 1)",
            "optim.learning_rate=3e-6",
            "model.path=",
            "data.layout='plain'",
            "train.max_steps=10",
        ]
    ) == {
        "data.margin": 0.1,
        "train.output_dir": "/x/y",
        "train.progress": False,
        "mesh.shape": (1, 2, 1),
        "optim.learning_rate": 3e-6,
        "model.path": "",
        "data.layout": "plain",
        "train.max_steps": 10,
    }
    # several in one item: only a comma that starts the next key=value separates
    assert parse_overrides(["mesh.shape=(1,1,1),train.seed=2,data.train_dir=a,b"]) == {
        "mesh.shape": (1, 1, 1),
        "train.seed": 2,
        "data.train_dir": "a,b",
    }
    assert parse_overrides(["a=1", "a=2", ""]) == {"a": 2}  # later wins; empty items ignored
    assert parse_overrides(["x = [1, 2] "]) == {"x": [1, 2]}
    for bad in ("data.margin", "=1", "1x=2", "a..b=1"):
        with pytest.raises(OverrideError):
            parse_overrides([bad])


def test_parse_sweep():
    assert parse_sweep("alpha3:data.margin=0.0") == ("alpha3", {"data.margin": 0.0})
    assert parse_sweep("clip2:data.weight_clip=2.0,optim.learning_rate=1e-4") == (
        "clip2",
        {"data.weight_clip": 2.0, "optim.learning_rate": 1e-4},
    )
    assert parse_sweep("base:") == ("base", {}) and parse_sweep("base") == ("base", {})
    for bad in (":data.margin=1", "a b:data.margin=1", "../x:data.margin=1"):
        with pytest.raises(OverrideError, match="run name"):
            parse_sweep(bad)


def test_apply_overrides_types_and_unknown_keys():
    from configs import tgpo

    c = tgpo.get_config("tiny")
    apply_overrides(
        c,
        parse_overrides(
            [
                "data.margin=1",
                "model.tokenizer=123",
                "train.progress=false",
                "mesh.shape=[1,1,1]",
                "optim.learning_rate=1e-3",
            ]
        ),
    )
    assert c.data.margin == 1.0 and isinstance(c.data.margin, float)
    assert c.model.tokenizer == "123" and c.train.progress is False and c.mesh.shape == (1, 1, 1)
    assert c.optim.learning_rate == 1e-3
    with pytest.raises(OverrideError, match=r"unknown config key 'data\.margn'.*margin"):
        apply_overrides(c, {"data.margn": 1.0})
    with pytest.raises(OverrideError, match=r"unknown config key 'dat\.margin'"):
        apply_overrides(c, {"dat.margin": 1.0})
    with pytest.raises(OverrideError, match=r"'data\.margin\.x'.*not a section"):
        apply_overrides(c, {"data.margin.x": 1.0})
    with pytest.raises(OverrideError, match=r"'data' is a section"):
        apply_overrides(c, {"data": 1})
    with pytest.raises(OverrideError, match=r"train\.batch_size"):
        apply_overrides(c, {"train.batch_size": "many"})


def test_write_summary(tmp_path):
    rows = [
        summary_row(
            "a",
            {"data.margin": 0.0},
            {
                "final_step": 3,
                "final": {"train/loss": 0.5},
                "eval": {"eval/loss": 0.25, "eval/rewards/accuracies": 1.0},
            },
        ),
        summary_row("b", {"data.weight_clip": 2.0, "train.output_dir": "x|y"}, None, status="failed: boom"),
    ]
    md, path = write_summary(str(tmp_path), rows, common={"train.max_steps": 3})
    with open(path) as f:
        table = list(csv.DictReader(f))
    assert [r["run"] for r in table] == ["a", "b"]
    assert list(table[0])[:5] == ["run", "status", "data.margin", "data.weight_clip", "train.output_dir"]
    assert table[0]["data.margin"] == "0.0" and table[0]["data.weight_clip"] == ""
    assert table[0]["steps"] == "3" and float(table[0]["train/loss"]) == 0.5 and float(table[0]["eval/loss"]) == 0.25
    assert table[0]["eval/rewards/margins"] == "" and table[1]["status"] == "failed: boom"
    text = open(md).read()
    assert "`train.max_steps=3`" in text and "| a | done | 0.0 |  |  | 3 | 1 |" in text and "x\\|y" in text


@pytest.fixture
def compile_cache(tmp_path):
    """A persistent XLA cache for this test only: the second run of the sweep compiles the same train step."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla_cache"))
    cc.reset_cache()
    yield
    jax.config.update("jax_compilation_cache_dir", old)
    cc.reset_cache()


@pytest.mark.slow  # a sweep of training runs, killed and resumed: the slow tier
def test_sweep_runs_and_resumes(tmp_path, monkeypatch, compile_cache):
    from tgpo_jax.data.io import write_dataset
    from tgpo_jax.data.synthetic import ITEMS, synthetic_nodes
    from tgpo_jax.models.tokenizer import train_sentencepiece
    from tgpo_jax.training import loop

    tok = train_sentencepiece(CORPUS * 20 + [" ".join(ITEMS)] * 20, str(tmp_path / "tok"), vocab_size=400)
    write_dataset(synthetic_nodes(16, seed=1), str(tmp_path / "train"))
    write_dataset(synthetic_nodes(4, seed=2), str(tmp_path / "test"))
    sets = [
        f"model.tokenizer={tok}",
        f"data.train_dir={tmp_path / 'train'}",
        f"data.eval_dir={tmp_path / 'test'}",
        "train.max_steps=3,train.batch_size=4,train.save_every=3,train.eval_batches=1",
        "train.progress=False",
        "mesh.shape=(1,1,1)",
    ]
    sweeps = ["margin0:data.margin=0.0", "clip2:data.weight_clip=2.0,data.margin=0.5"]
    calls = []
    real_train = loop.train
    monkeypatch.setattr(loop, "train", lambda cfg: calls.append(cfg.train.output_dir) or real_train(cfg))
    out = tmp_path / "ablation"

    # a typo anywhere fails before anything trains
    with pytest.raises(OverrideError, match="data.wieght_clip"):
        run_ablation(f"{CONFIG}:tiny", sweeps + ["bad:data.wieght_clip=1.0"], str(out), sets)
    assert calls == []

    rows = run_ablation(f"{CONFIG}:tiny", sweeps, str(out), sets)
    assert calls == [str(out / "margin0"), str(out / "clip2")]
    assert [r["run"] for r in rows] == ["margin0", "clip2"] and all(r["steps"] == 3 for r in rows)
    with open(out / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["run"] for r in table] == ["margin0", "clip2"]
    assert [r["data.margin"] for r in table] == ["0.0", "0.5"]
    assert [r["data.weight_clip"] for r in table] == ["", "2.0"]
    for r in table:
        assert r["steps"] == "3" and r["status"] == "done"
        for m in ("eval/rewards/accuracies", "eval/rewards/margins", "eval/loss", "train/loss"):
            float(r[m])  # a number in every metric column
    md = (out / "summary.md").read_text()
    assert md.count("| margin0 |") == 1 and md.count("| clip2 |") == 1
    mtimes = {n: os.path.getmtime(out / n / "summary.json") for n in ("margin0", "clip2")}

    # rerun: both runs finished, nothing trains, the table is rebuilt from their summaries
    rows2 = run_ablation(f"{CONFIG}:tiny", sweeps, str(out), sets)
    assert len(calls) == 2
    assert {n: os.path.getmtime(out / n / "summary.json") for n in mtimes} == mtimes
    assert [r["status"] for r in rows2] == ["done (earlier)"] * 2
    assert [r["eval/loss"] for r in rows2] == [r["eval/loss"] for r in rows]
    with open(out / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == 2


def test_cli_fails_fast_on_unknown_key(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(CONFIG))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.ablate",
            f"--config={CONFIG}:tiny",
            f"--out={tmp_path / 'a'}",
            "--set=train.max_steps=1",
            "--sweep=ok:data.margin=0.1",
            "--sweep=typo:data.margn=0.1",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "unknown config key 'data.margn'" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "a" / "ok").exists()  # nothing trained
