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
