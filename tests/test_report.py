"""The evaluation report: Table 1 / Table 2 Markdown, the HTML page, the PNG plots and the CLI."""

import html.parser
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from experiment.report import write_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (success, ci), (avg steps, ci), (redundant, ci); ci None = no CI. Bold: TGPO success, DPO steps, TGPO redundant.
ROWS = {
    "base": ((0.367, 0.021), (14.28, 0.5), (4.95, 0.31)),
    "SFT": ((0.703, 0.03), (10.1, 0.42), (2.1, 0.2)),
    "KTO": ((0.729, None), (9.87, None), (1.9, None)),
    "KTO-Tree": ((0.776, 0.025), (9.02, 0.33), (1.21, 0.15)),
    "DPO": ((0.721, 0.028), (8.5, 0.39), (1.5, 0.11)),
    "TGPO": ((0.786, 0.021), (8.66, 0.41), (0.97, 0.12)),
}
EXPECTED = [
    "| base | 36.7 ± 2.1 | 14.28 ± 0.50 | 4.95 ± 0.31 | 300 (3 seeds) |",
    "| SFT | 70.3 ± 3.0 | 10.10 ± 0.42 | 2.10 ± 0.20 | 300 (3 seeds) |",
    "| KTO | 72.9 | 9.87 | 1.90 | 300 (3 seeds) |",
    "| KTO-Tree | 77.6 ± 2.5 | 9.02 ± 0.33 | 1.21 ± 0.15 | 300 (3 seeds) |",
    "| DPO | 72.1 ± 2.8 | **8.50 ± 0.39** | 1.50 ± 0.11 | 300 (3 seeds) |",
    "| TGPO | **78.6 ± 2.1** | 8.66 ± 0.41 | **0.97 ± 0.12** | 300 (3 seeds) |",
]
KEYS = ("success_rate", "avg_steps", "redundant_steps")


def make_eval(name, row):
    mean = {k: v for k, (v, _) in zip(KEYS, row)}
    per_seed = [
        {"seed": s, **{k: v + d for k, v in mean.items()}, "episodes": 100} for s, d in enumerate((-0.01, 0.0, 0.01))
    ]
    ci = {k: c for k, (_, c) in zip(KEYS, row)}
    if name in ("SFT", "TGPO"):  # experiment.evaluate's shape: {"low", "high", "half_width"} | None
        ci = {
            k: None if c is None else {"low": mean[k] - c, "high": mean[k] + c, "half_width": c} for k, c in ci.items()
        }
    return {"per_seed": per_seed, "mean": mean, "ci95": ci, "episodes": 300, "policy": f"model:{name}", "tasks": 100}


DATASET = {
    "tasks": 50,
    "episodes": 400,
    "successful_episodes": 180,
    "success_rate": 0.45,
    "steps": 5200,
    "states": 5200,
    "nodes": 3100,
    "merge_ratio": 0.596,
    "pairs": 812,
    "records": 3100,
    "redundant_steps_per_episode": 2.35,
    "label_conflict_rate": 0.1234,
    "broken_episodes": [],
    "label_conflict_by_family": {"multi_cart": 0.2, "procedure": 0.0125},
    "episodes_dir": "/data/episodes/train",
}


def metrics(n, scale):
    rows = []
    for s in range(1, n + 1):
        rows.append(
            {
                "step": s,
                "time": 0.0,
                "train/loss": scale / s,
                "train/rewards/accuracies": 1 - 0.5 / s,
                "train/grad_norm": 1.0,
            }
        )
        if s % 5 == 0:
            rows.append({"step": s, "time": 0.0, "eval/loss": scale / s + 0.1})
    return rows


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.links, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        if tag == "a":
            self.links.append(a["href"])


def parse_html(path):
    p = _Parser()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    p.close()
    return p


def check_png(path):
    assert os.path.getsize(path) > 0
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 100 and im.size[1] > 100
        im.verify()


def test_full_report(tmp_path):
    out = str(tmp_path / "rep")
    models = {n: make_eval(n, r) for n, r in ROWS.items()}
    os.makedirs(os.path.join(out, "trees"))
    open(os.path.join(out, "trees", "t3.episodes.html"), "w").close()  # t3's episode viewer; t4 has none
    res = write_report(
        out,
        title="TGPO on the shop",
        models=models,
        dataset=DATASET,
        curves={"DPO": metrics(20, 0.7), "TGPO": metrics(20, 0.6)},
        trees={"shop/train/0003": "trees/t3.html", "shop/train/0004": "trees/t4.html"},
        notes="seed 0..2\nsmall model",
    )
    names = {os.path.basename(p) for p in res["plots"]}
    assert names == {
        "success.png",
        "steps.png",
        "curves_loss.png",
        "curves_reward_accuracy.png",
        "curves_eval_loss.png",
    }
    for p in res["plots"]:
        check_png(p)
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]

    md = open(res["markdown"], encoding="utf-8").read()
    assert md.startswith("# TGPO on the shop\n")
    lines = md.splitlines()
    i = lines.index("| Model | Success rate (%) | Avg. steps | Redundant steps | Episodes |")
    assert lines[i + 1] == "|---|---:|---:|---:|---:|"
    assert lines[i + 2 : i + 8] == EXPECTED
    # Reference table (paper numbers), Table 2, dataset stats, curves, trees, notes.
    # the paper's whole Table 1 (METHOD.md §6): C-WebShop, then Online-Mind2Web, success · steps · redundant
    assert "| SFT | 70.3 | 9.73 | 1.26 | 31.8 | 11.73 | 2.76 |" in lines
    assert "| TGPO | 78.6 | 8.66 | 0.97 | 38.4 | 10.71 | 2.52 |" in lines
    assert "| base | 36.7 | 14.28 | 4.95 | 26.8 | 12.79 | 3.31 |" in lines
    assert "| GPT-4o | — | — | — | 30.0 | — | — |" in lines
    assert "Label-conflict rate, ours: 12.34%; TGPO paper: 26.95% (C-WebShop), 38.71% (Online-Mind2Web)." in lines
    assert "| ours | 12.34% |" in lines and "| TGPO paper (C-WebShop) | 26.95% |" in lines
    i = lines.index("| ours | 12.34% |")  # the families below the pooled rate, the paper's rows after them
    assert lines[i + 1 : i + 5] == [
        "| ours: multi_cart | 20.00% |",
        "| ours: procedure | 1.25% |",
        "| TGPO paper (C-WebShop) | 26.95% |",
        "| TGPO paper (Online-Mind2Web) | 38.71% |",
    ]
    assert "| preference pairs | 812 |" in lines and "| label-conflict rate | 12.34% |" in lines
    assert "| redundant steps / episode | 2.35 |" in lines and "| broken episodes | 0 |" in lines
    for png in ("success.png", "steps.png", "curves_loss.png", "curves_eval_loss.png"):
        assert f"]({png})" in md
    assert "- [shop/train/0003](trees/t3.html)" in lines
    assert "- [shop/train/0003: episodes](trees/t3.episodes.html)" in lines
    assert "- [shop/train/0004](trees/t4.html)" in lines and "t4.episodes.html" not in md
    assert "seed 0..2\nsmall model" in md

    page = parse_html(res["html"])
    assert sorted(page.imgs) == sorted(names)
    assert "trees/t3.html" in page.links and "table" in page.tags and "style" in page.tags
    text = open(res["html"], encoding="utf-8").read()
    assert "<strong>78.6 ± 2.1</strong>" in text and "<strong>8.50 ± 0.39</strong>" in text
    assert "12.34%" in text and "26.95%" in text and "<script" not in text


def test_missing_pieces(tmp_path):
    out = str(tmp_path / "bare")
    models = {
        "base": {
            "per_seed": [{"seed": 0, "success_rate": 0.5, "avg_steps": 7.0, "redundant_steps": 1.0, "episodes": 10}],
            "mean": {"success_rate": 0.5, "avg_steps": 7.0, "redundant_steps": 1.0},
            "ci95": {"success_rate": None, "avg_steps": None, "redundant_steps": None},
            "episodes": 10,
        },
        "SFT": None,  # not evaluated (yet)
        "mine": {"mean": {"success_rate": 0.6}, "episodes": 12},  # no steps, no CI
    }
    res = write_report(out, title="partial <&>", models=models, reference=False)
    assert [os.path.basename(p) for p in res["plots"]] == ["success.png", "steps.png"]
    for p in res["plots"]:
        check_png(p)
    md = open(res["markdown"], encoding="utf-8").read()
    assert "| base | 50.0 | **7.00** | **1.00** | 10 |" in md
    assert "| SFT | — | — | — | — |" in md
    assert "| mine | **60.0** | — | — | 12 |" in md
    assert "Label-conflict rate, ours: —; TGPO paper: 26.95% (C-WebShop), 38.71% (Online-Mind2Web)." in md
    assert "No training metrics." in md and "No dataset summary." in md and "Reference" not in md
    page = parse_html(res["html"])
    assert sorted(page.imgs) == ["steps.png", "success.png"]
    assert "partial &lt;&amp;&gt;" in open(res["html"], encoding="utf-8").read()

    # No models at all still writes a report.
    res = write_report(str(tmp_path / "empty"), title="empty", models={})
    assert "No evaluation results." in open(res["markdown"], encoding="utf-8").read()
    parse_html(res["html"])


def test_cli(tmp_path):
    evals = []
    for name in ("base", "TGPO"):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(make_eval(name, ROWS[name])))
        evals.append(f"--eval={name}={p}")
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "manifest.json").write_text(json.dumps({"shards": [], "config": {}, "extra": DATASET}))
    run = tmp_path / "run_tgpo"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics(10, 0.5)))
    out = tmp_path / "rep"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.report",
            f"--out={out}",
            "--title=CLI report",
            *evals,
            f"--dataset_manifest={ds / 'manifest.json'}",
            f"--run=TGPO={run}",
            "--tree=t1=trees/t1.html",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    paths = json.loads(proc.stdout)
    assert os.path.exists(paths["markdown"]) and os.path.exists(paths["html"])
    assert {os.path.basename(p) for p in paths["plots"]} == {
        "success.png",
        "steps.png",
        "curves_loss.png",
        "curves_reward_accuracy.png",
        "curves_eval_loss.png",
    }
    md = open(paths["markdown"], encoding="utf-8").read()
    assert EXPECTED[0] in md
    assert "| TGPO | **78.6 ± 2.1** | **8.66 ± 0.41** | **0.97 ± 0.12** | 300 (3 seeds) |" in md
    assert "Label-conflict rate, ours: 12.34%;" in md and "- [t1](trees/t1.html)" in md

    bad = subprocess.run(
        [sys.executable, "-m", "launch.report", f"--out={out}", "--eval=nopath"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert bad.returncode != 0 and "name=path" in bad.stderr


@pytest.mark.parametrize(
    "value,ci,expected",
    [
        (0.5, 0.0049, "50.0 ± 0.5"),
        (1.0, None, "100.0"),
        (float("nan"), 0.1, "—"),
        (0.786, {"low": 0.765, "high": 0.807, "half_width": 0.021}, "78.6 ± 2.1"),
        (0.786, {"low": 0.765, "high": 0.807}, "78.6 ± 2.1"),
    ],
)
def test_success_format(value, ci, expected):
    from experiment.report import model_cells

    cell = model_cells({"mean": {"success_rate": value}, "ci95": {"success_rate": ci}})["success_rate"]
    assert cell.text() == expected


def test_caption_states_valid_argument_decoding(tmp_path):
    def models(*flags):
        return {n: dict(make_eval(n, ROWS[n]), meta={"constrain": f}) for n, f in zip(("SFT", "TGPO"), flags)}

    def caption(ms, name):
        res = write_report(str(tmp_path / name), title="t", models=ms, reference=False)
        return open(res["markdown"]).read()

    assert "Decoding: valid-argument (" in caption(models(True, True), "all")
    assert "valid-argument for some rows only" in caption(models(True, False), "mixed")
    assert "valid-argument" not in caption(models(False, False), "none")


def test_a_cut_metrics_line_is_skipped_and_named(tmp_path, caplog):
    """The report reads a run killed mid-write: the cut line is skipped with a warning naming file and line."""
    from tgpo_jax.training.metrics import read_metrics

    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "train/loss": 2.0}\n{"step": 2, "train/loss": 1.5}\n{"step": 3, "train/lo'
    )
    with caplog.at_level("WARNING"):
        rows = read_metrics(str(tmp_path))
    assert [r["step"] for r in rows] == [1, 2]
    assert f"{tmp_path / 'metrics.jsonl'} line 3 is not JSON" in caplog.text


def test_paired_comparisons_pooled_and_per_family(tmp_path):
    """The report's comparison sections from ``experiment.results`` on hand-made evaluations: KTO-Tree wins
    webshop on every task (+100, a degenerate interval) and loses half of multi_cart (−50), +25 pooled."""
    from experiment import results

    def ev(success):
        fams = ["multi_cart"] * 10 + ["webshop"] * 10
        rows = [
            {"task_id": f"t{i}", "family": f, "success": s, "steps": 5, "redundant": 0}
            for i, (s, f) in enumerate(zip(success, fams))
        ]
        return {"per_seed": [{"seed": 0, "episodes_table": rows}]}

    groups = {
        "KTO": {s: ev([1] * 10 + [0] * 10) for s in range(3)},
        "KTO-Tree": {s: ev([1, 0] * 5 + [1] * 10) for s in range(3)},
    }
    res = write_report(
        str(tmp_path / "r"),
        title="t",
        models={k: list(v.values()) for k, v in groups.items()},
        rows=results.table(groups),
        comparisons=results.comparisons(groups),
        family_comparisons=results.family_comparisons(groups),
        reference=False,
    )
    lines = open(res["markdown"], encoding="utf-8").read().splitlines()
    i = lines.index("| Comparison | multi_cart (pts) | webshop (pts) |")
    mc = results.family_comparisons(groups)[("KTO-Tree", "KTO")]["multi_cart"]
    assert mc.high < 0
    assert lines[i + 2] == (
        f"| KTO-Tree − KTO | -50.0 [{100 * mc.low:+.1f}, {100 * mc.high:+.1f}] | +100.0 [+100.0, +100.0] |"
    )
    assert any(line.startswith("| KTO-Tree − KTO | success rate | +25.00 pts |") for line in lines)


def test_the_methods_note_names_only_the_papers_methods_left_out():
    from experiment.outputs import methods_note

    assert methods_note(("sft", "tgpo")) == (
        "Trained methods: SFT, TGPO (this preset trains fewer than the full table; not trained: KTO, KTO-Tree, DPO)."
    )
    every = ("sft", "sft_more", "kto", "kto_tree", "dpo", "tgpo")  # the control beside all five: nothing left out
    assert methods_note(every) == "Trained methods: SFT, SFT (continued), KTO, KTO-Tree, DPO, TGPO."
    assert methods_note(every, sft_continue=True).endswith(
        " SFT is trained in two phases: as configured, then on "
        "from that model with SFT (continued)'s recipe "
        "(sft_continue); the preference methods start from the "
        "second phase's model."
    )


def test_gradient_norms_before_the_clip_per_method(tmp_path):
    """Median and clipped share over every logged step of every seed (hand-worked: norms 0.5, 3, 2, 10 -> median
    2.5, 3 of 4 over a clip of 1); a row without the key is skipped, no norms give no row; the report shows them."""
    from experiment import results

    g = results.grad_norms(
        [
            [{"train/grad_norm": 0.5}, {"train/grad_norm": 3.0}],
            [{"train/grad_norm": 2.0}, {"train/loss": 1.0}, {"train/grad_norm": 10.0}],
        ],
        clip=1.0,
    )
    assert (g.median, g.clipped, g.steps, g.clip) == (2.5, 0.75, 4, 1.0)
    assert results.grad_norms([[{"train/grad_norm": 4.0}]], clip=0.0).clipped == 0.0  # no clip: nothing scaled
    assert results.grad_norms([[{"train/loss": 1.0}], []], clip=1.0) is None
    res = write_report(str(tmp_path / "r"), title="t", models={}, grad_rows={"TGPO": g}, reference=False)
    lines = open(res["markdown"], encoding="utf-8").read().splitlines()
    i = lines.index("| Method | Median gradient norm | Updates clipped (%) | Clip | Logged steps |")
    assert lines[i + 2] == "| TGPO | 2.50 | 75 | 1 | 4 |"


def test_reference_table_is_the_papers_whole_table_1(tmp_path):
    """Every cell of the paper's Table 1 as METHOD.md §6 lists it (typed here from it, not from report.py)."""
    paper = {
        "base": "36.7 | 14.28 | 4.95 | 26.8 | 12.79 | 3.31",
        "SFT": "70.3 | 9.73 | 1.26 | 31.8 | 11.73 | 2.76",
        "KTO": "72.9 | 9.42 | 1.40 | 27.1 | 11.94 | 2.90",
        "KTO-Tree": "77.6 | 8.97 | 1.08 | 34.4 | 10.98 | 2.42",
        "DPO": "72.1 | 9.85 | 1.41 | 34.0 | 11.53 | 2.88",
        "TGPO": "78.6 | 8.66 | 0.97 | 38.4 | 10.71 | 2.52",
        "GPT-4o": "— | — | — | 30.0 | — | —",
    }
    res = write_report(str(tmp_path / "r"), title="t", models={})
    lines = open(res["markdown"], encoding="utf-8").read().splitlines()
    i = lines.index(
        "| Model | C-WebShop: Success rate (%) | C-WebShop: Avg. steps | C-WebShop: Redundant steps "
        "| Online-Mind2Web: Success rate (%) | Online-Mind2Web: Avg. steps "
        "| Online-Mind2Web: Redundant steps |"
    )
    assert lines[i + 2 : i + 2 + len(paper)] == [f"| {m} | {v} |" for m, v in paper.items()]


@pytest.mark.parametrize(
    "tasks,episodes,ours", [(30, 30, "not applicable (one run per task)"), (30, 90, "0.00%"), (None, None, "0.00%")]
)
def test_label_conflicts_need_several_runs_per_task(tmp_path, tasks, episodes, ours):
    """One run per task (as many episodes as tasks): no step can be labelled both ways, so the rate reads not
    applicable, in Table 2 and the statistics, with no per-family rows; several runs: 0 % is a measurement; a
    summary that gives no counts keeps the number."""
    dataset = {"label_conflict_rate": 0.0, "label_conflict_by_family": {"a": 0.0, "b": 0.0}}
    if tasks is not None:
        dataset.update(tasks=tasks, episodes=episodes)
    res = write_report(str(tmp_path / "r"), title="t", models={}, dataset=dataset, reference=False)
    lines = open(res["markdown"], encoding="utf-8").read().splitlines()
    assert f"| ours | {ours} |" in lines and f"| label-conflict rate | {ours} |" in lines
    assert f"Label-conflict rate, ours: {ours}; TGPO paper: 26.95% (C-WebShop), 38.71% (Online-Mind2Web)." in lines
    assert ("| ours: a | 0.00% |" in lines) == (ours != "not applicable (one run per task)")
    assert "| TGPO paper (Online-Mind2Web) | 38.71% |" in lines


def test_cli_compares_two_evaluations_over_their_common_tasks(tmp_path):
    """``--compare=A:B``: A − B over the tasks both ran (a task only A ran is left out), pooled and per family."""

    def ev(successes, extra=()):
        rows = [
            {
                "task_id": f"t{i}",
                "family": "webshop" if i < 5 else "procedure",
                "success": s,
                "steps": 6,
                "redundant": 2 * (1 - s),
            }
            for i, s in enumerate(successes)
        ]
        rows += [{"task_id": t, "family": "webshop", "success": 1, "steps": 4, "redundant": 0} for t in extra]
        return {"per_seed": [{"seed": 0, "episodes_table": rows}], "mean": {}, "ci95": {}, "episodes": len(rows)}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(ev([1, 1, 1, 0, 0, 1, 1, 0, 0, 0], extra=("only_a",))))
    b.write_text(json.dumps(ev([1, 0, 0, 0, 0, 1, 0, 0, 0, 0])))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [
        sys.executable,
        "-m",
        "launch.report",
        f"--out={tmp_path / 'rep'}",
        "--reference=false",
        f"--eval=A={a}",
        f"--eval=B={b}",
    ]
    proc = subprocess.run(cmd + ["--compare=A:B"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = open(json.loads(proc.stdout)["markdown"], encoding="utf-8").read()
    # 10 common tasks: A 5 successes, B 2 -> +30 points; redundant steps (2 a failure) 2 * (5 - 8) / 10 = -0.6
    assert "| A − B | success rate | +30.00 pts |" in md and "| 10 | 1 / 1 |" in md
    assert "| A − B | redundant steps | -0.60 |" in md
    # per family: webshop 3 - 1 of 5 = +40, procedure 2 - 1 of 5 = +20
    line = next(x for x in md.splitlines() if x.startswith("| A − B | +"))
    assert line.startswith("| A − B | +20.0 [") and "| +40.0 [" in line
    bad = subprocess.run(cmd + ["--compare=A:C"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert bad.returncode != 0 and "'C' is not an --eval name" in bad.stderr
