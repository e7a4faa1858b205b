"""The repository's results ledger (results/*.json, copied from a run's report stage): every entry names how it was
measured and what, in the report stage's own schema (experiment/ledger.py)."""

import glob
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_ledger_entry_has_the_keys_and_values_in_range():
    paths = sorted(glob.glob(os.path.join(ROOT, "results", "*.json")))
    assert paths, "results/ holds no ledger entry"
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        name = os.path.basename(path)
        missing = {
            "command",
            "commit",
            "cpu_flags",
            "preset",
            "held_out_tasks",
            "seeds",
            "methods",
            "comparisons",
        } - set(d)
        assert not missing, f"{name}: missing {sorted(missing)}"
        assert "launch." in d["command"] and len(d["commit"] or "") == 40, name
        assert isinstance(d["held_out_tasks"], int) and d["held_out_tasks"] > 0, name
        assert d["methods"] and d["seeds"], name
        for method, m in d["methods"].items():
            assert 0.0 <= m["success_rate"] <= 1.0, (name, method)
            assert m["avg_steps"] > 0 and m["redundant_steps"] >= 0, (name, method)
            for family, rate in m.get("success_by_family", {}).items():
                assert 0.0 <= rate <= 1.0, (name, method, family)


def test_docs_results_page_is_the_ledgers():
    from experiment.ledger_table import load_entries, render

    with open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8") as f:
        page = f.read()
    assert page == render(load_entries(os.path.join(ROOT, "results"))), (
        "docs/results.md is stale: run python -m launch.results_table"
    )


def _entry(**over):
    d = {
        "command": "python -m launch.pipeline --config.out=/tmp/x",
        "commit": "0123456789abcdef" * 2 + "01234567",
        "cpu_flags": "avx2",
        "preset": "default",
        "held_out_tasks": 40,
        "seeds": [0, 1],
        "methods": {
            "tgpo": {"success_rate": 0.575, "avg_steps": 9.0, "redundant_steps": 1.25},
            "sft": {"success_rate": 0.5, "avg_steps": 10.125, "redundant_steps": 2.0},
        },
        "comparisons": [
            {"label": "TGPO − SFT", "metric": "success_rate", "diff": -0.025, "low": -0.1, "high": 0.05, "tasks": 40},
            {"label": "TGPO − SFT", "metric": "redundant_steps", "diff": -0.75, "low": -1.0, "high": 0.0, "tasks": 40},
        ],
    }
    d.update(over)
    return d


def test_the_page_renders_each_method_in_table_order_with_its_paired_success():
    from experiment.ledger_table import render

    page = render({"b-run": _entry(), "a-run": _entry(preset="tiny", seeds=[3])})
    assert page.index("## a-run") < page.index("## b-run")
    b = page[page.index("## b-run") :]
    assert "Preset `default` · commit `01234567` · CPU flags `avx2` · 40 held-out tasks · training seeds 0, 1\n" in b
    # SFT before TGPO (Table 1's order), whatever the ledger's key order
    assert b.index("| SFT | 50.0 | 10.12 | 2.00 |") < b.index("| TGPO | 57.5 | 9.00 | 1.25 |")
    # only the success comparison, in points with its interval
    assert "- TGPO − SFT: −2.5 points [−10.0, +5.0] over 40 tasks" in b
    assert "−75.0" not in b


def test_the_launcher_writes_the_page_and_check_fails_on_a_stale_one(tmp_path):
    import subprocess
    import sys

    res = tmp_path / "results"
    res.mkdir()
    (res / "one.json").write_text(json.dumps(_entry()))
    out = tmp_path / "results.md"
    cmd = [sys.executable, "-m", "launch.results_table", f"--results={res}", f"--out={out}"]
    assert subprocess.run(cmd + ["--check"], cwd=ROOT, capture_output=True).returncode == 1  # no page yet
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    assert "| TGPO | 57.5 |" in out.read_text()
    assert subprocess.run(cmd + ["--check"], cwd=ROOT, capture_output=True).returncode == 0
    (res / "two.json").write_text(json.dumps(_entry(preset="tiny")))
    check = subprocess.run(cmd + ["--check"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 1 and "not the ledger's page" in check.stderr
