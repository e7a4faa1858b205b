"""Write the evaluation report (TGPO Table 1 / Table 2, dataset statistics, training curves) as Markdown + HTML.

  python -m launch.report --out=reports/main --title="TGPO on the shop" \
      --eval=base=evals/base.json --eval=SFT=evals/sft.json --eval=TGPO=evals/tgpo.json \
      --dataset_manifest=data/datasets/train/manifest.json \
      --run=SFT=runs/sft --run=TGPO=runs/tgpo --tree=shop/train/0003=trees/t3.html
Rows appear in the order of the ``--eval`` flags. ``--tree`` paths are relative to ``--out``.
``--compare=A:B`` (repeatable) adds A − B in success and redundant steps, paired over the held-out tasks both
evaluations ran, pooled and per task family: e.g. two SFT runs of an ablation, each evaluated on the same tasks.
Prints the written paths as JSON.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from launch.entry import prepare

F = flags.FLAGS
flags.DEFINE_string("out", "report", "output directory")
flags.DEFINE_string("title", "tgpo-jax evaluation report", "report title")
flags.DEFINE_multi_string("eval", [], "name=path/to/eval.json (repeatable; one Table 1 row each, in order)")
flags.DEFINE_string("dataset_manifest", None, "dataset manifest.json (or its directory); its 'extra' is the summary")
flags.DEFINE_multi_string("run", [], "name=run_dir: training curves from run_dir/metrics.jsonl (repeatable)")
flags.DEFINE_multi_string("tree", [], "task_id=relative/path/to/tree.html (repeatable)")
flags.DEFINE_string("notes", "", "free-form notes (text, or @path to read them from a file)")
flags.DEFINE_multi_string("compare", [], "A:B: A − B paired over the tasks both --eval files ran (repeatable)")
flags.DEFINE_bool("reference", True, "include the TGPO paper's reference numbers")


def parse_pairs(values, flag: str) -> dict[str, str]:
    """Parse ``name=path`` flag values into a dict; ``app.UsageError`` for a malformed or repeated name."""
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise app.UsageError(f"--{flag}={v!r}: expected name=path")
        if name in out:
            raise app.UsageError(f"--{flag}: {name!r} given twice")
        out[name] = path
    return out


def parse_compare(values, names) -> list[tuple[str, str]]:
    """Parse ``A:B`` flag values into pairs of ``--eval`` names; ``app.UsageError`` for a malformed pair or an unknown
    name."""
    out = []
    for v in values:
        a, sep, b = v.partition(":")
        if not sep or not a or not b:
            raise app.UsageError(f"--compare={v!r}: expected A:B, two --eval names")
        for n in (a, b):
            if n not in names:
                raise app.UsageError(f"--compare={v!r}: {n!r} is not an --eval name (have {sorted(names)})")
        out.append((a, b))
    return out


def paired(models: dict[str, dict], pairs: list[tuple[str, str]]) -> tuple[list, dict]:
    """``pairs`` compared over the tasks both evaluations ran, each evaluation one training seed: success and
    redundant steps pooled, and success per task family where there are several."""
    from experiment import results

    groups = {name: {0: ev} for name, ev in models.items()}
    try:
        pooled = [
            results.compare(groups, a, b, metric) for a, b in pairs for metric in ("success_rate", "redundant_steps")
        ]
    except ValueError as e:
        raise app.UsageError(f"--compare: {e} (an evaluation without per-episode rows, or on other tasks)")
    by_family = results.family_comparisons(groups, pairs)
    return pooled, by_family


def load_dataset_summary(path: str) -> dict:
    """The ``extra`` summary of a dataset manifest, given the manifest or the directory holding it."""
    if os.path.isdir(path):
        path = os.path.join(path, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    return dict(manifest.get("extra") or {})


def main(argv):
    """Read the evaluations, training curves and dataset summary and write the report; print the written paths."""
    prepare(argv)
    from experiment.report import write_report

    models = {}
    for name, path in parse_pairs(F.eval, "eval").items():
        with open(path) as f:
            models[name] = json.load(f)
    pairs = parse_compare(F.compare, models)
    comparisons, by_family = paired(models, pairs) if pairs else (None, None)
    curves = {}
    if F.run:
        from tgpo_jax.training.metrics import read_metrics

        for name, run_dir in parse_pairs(F.run, "run").items():
            if not os.path.isdir(run_dir):
                raise app.UsageError(f"--run={name}={run_dir}: no such directory")
            curves[name] = read_metrics(run_dir)
    dataset = load_dataset_summary(F.dataset_manifest) if F.dataset_manifest else None
    notes = F.notes
    if notes.startswith("@"):
        with open(notes[1:]) as f:
            notes = f.read()
    paths = write_report(
        F.out,
        title=F.title,
        models=models,
        dataset=dataset,
        curves=curves or None,
        trees=parse_pairs(F.tree, "tree") or None,
        notes=notes,
        reference=F.reference,
        comparisons=comparisons,
        family_comparisons=by_family or None,
    )
    print(json.dumps(paths, indent=1))


if __name__ == "__main__":
    app.run(main)
