"""Whether two pipeline runs of one configuration decided the same things: a restructure's check that behaviour did
not change (run the same preset at the commit before and after, then compare the two output directories).

Compared: every recorded episode (collections and evaluations: each step's page, output, command, effect, error and
check, each summary's outcome), the datasets' shard hashes, every training run's per-step losses and rewards, and
each evaluation's results. Left out, as the machine's and not the run's: wall-clock timings, the model's latency and
how many requests shared its batch, the shop's port, the run's own directory, the summary's format field and seal.

    .venv/bin/python scripts/compare_runs.py /tmp/tiny_before /tmp/tiny_after    # exit 1 on a difference
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

SUMMARY_SKIP = {"duration_s", "started_at", "format", "steps_sha256"}
POLICY_INFO_SKIP = ("latency_s", "batch_size")
PORT = re.compile(r"127\.0\.0\.1:\d+")


def _normal(text: str, root: str) -> str:
    return PORT.sub("PORT", text).replace(root, "RUN")


def episodes(root: str) -> dict:
    """Episode directory -> (summary, steps) with the machine's fields left out."""
    found = glob.glob(os.path.join(root, "episodes", "*", "episodes", "*", "*", "summary.json"))
    found += glob.glob(os.path.join(root, "eval", "*", "*", "episodes", "*", "*", "summary.json"))
    out = {}
    for path in sorted(found):
        d = os.path.dirname(path)
        with open(path, encoding="utf-8") as f:
            summary = {k: v for k, v in json.loads(_normal(f.read(), root)).items() if k not in SUMMARY_SKIP}
        with open(os.path.join(d, "steps.jsonl"), encoding="utf-8") as f:
            steps = [json.loads(line) for line in _normal(f.read(), root).split("\n") if line]
        for s in steps:
            s.pop("timings", None)
            for k in POLICY_INFO_SKIP:
                s.get("policy_info", {}).pop(k, None)
        out[os.path.relpath(d, root)] = (summary, steps)
    return out


def shards(root: str) -> dict:
    """Dataset manifest -> its shards' sha256."""
    out = {}
    for m in sorted(glob.glob(os.path.join(root, "datasets", "*", "manifest.json"))):
        with open(m) as f:
            out[os.path.relpath(m, root)] = [s["sha256"] for s in json.load(f)["shards"]]
    return out


def losses(root: str) -> dict:
    """Training run -> per logged step, its losses, rewards and accuracies."""
    out = {}
    for m in sorted(glob.glob(os.path.join(root, "runs", "*", "metrics.jsonl"))):
        with open(m) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        keep = ("loss", "reward", "acc")
        out[os.path.relpath(m, root)] = [
            (r.get("step"), {k: v for k, v in r.items() if any(w in k for w in keep)}) for r in rows
        ]
    return out


def evaluations(root: str) -> dict:
    """Evaluation -> its means, per-seed results, episode counts and tasks."""
    out = {}
    for e in sorted(glob.glob(os.path.join(root, "eval", "*", "eval.json"))):
        with open(e) as f:
            d = json.load(f)
        out[os.path.relpath(e, root)] = {k: d.get(k) for k in ("mean", "per_seed", "episodes", "errored", "task_ids")}
    return out


def main(a: str, b: str) -> int:
    """Print, per part, whether the runs at ``a`` and ``b`` agree (the first differing item where not); 0 iff all do."""
    same_all = True
    for name, read in (("episodes", episodes), ("shards", shards), ("losses", losses), ("evaluations", evaluations)):
        x, y = read(os.path.abspath(a)), read(os.path.abspath(b))
        same = x == y
        same_all &= same
        print(f"{name}: {('identical' if x else 'none in either') if same else 'DIFFERENT'} ({len(x)} vs {len(y)})")
        if not same:
            first = next((k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)), None)
            print(f"  first difference: {first}")
    return 0 if same_all else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
