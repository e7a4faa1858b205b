"""How an evaluation's episodes end (experiment/failures.py, launch/failures.py): each ending read from hand-made
recordings written as a collection writes them, the counts per family, the loops grouped by command and path, and
the launcher on an evaluation directory of two seeds."""

import json
import os
import subprocess
import sys

import pytest

from experiment.failures import ENDINGS, Ending, ending, render, tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def step(command, url="/", target=None, title="Page"):
    return {
        "step": 0,
        "url": url,
        "norm_url": url,
        "title": title,
        "observation": f"URL: {url}",
        "check": {"success": False, "score": 0.0, "progress": "", "done": False},
        "output": f"Thought: go\nCommand: {command}",
        "thought": "go",
        "command": command,
        "command_name": command.split(" ")[0],
        "format_ok": True,
        "error": None,
        "effect": None,
        "target": target or {},
    }


SORT = {"role": "link", "name": "Sort: Rating"}
CASES = {  # task id -> (summary fields, steps, expected kind, expected repeats)
    "ok": ({"success": True, "end_reason": "done"}, [step("STOP")], "success", ""),
    "wrong": ({"success": False, "end_reason": "done"}, [step("CLICK [8]")], "wrong_result", ""),
    "loop": (
        {"success": False, "end_reason": "max_steps"},
        [step("TYPE [2] [mug]"), *[step("CLICK [7]", "/search?q=mug&sort=rating", SORT)] * 3],
        "loop",
        'CLICK link "Sort: Rating" on /search',
    ),
    # the same command on two pages (the query changed): wandering, not a loop
    "wander": (
        {"success": False, "end_reason": "max_steps"},
        [
            step("CLICK [7]", "/search?q=a", SORT),
            step("CLICK [7]", "/search?q=b", SORT),
            step("CLICK [7]", "/search?q=b", SORT),
        ],
        "step_limit",
        "",
    ),
    "short": ({"success": False, "end_reason": "max_steps"}, [step("CLICK [7]", "/s", SORT)] * 2, "step_limit", ""),
    "stop": ({"success": False, "end_reason": "stop"}, [step("STOP")], "early_stop", ""),
    "crash": (
        {"success": False, "end_reason": "error", "status": "errored", "error": {"message": "browser closed"}},
        [],
        "error",
        "",
    ),
}


@pytest.mark.parametrize("task", sorted(CASES))
def test_each_ending(task):
    fields, steps, kind, repeats = CASES[task]
    e = ending({"task_id": task, "family": "f", "status": "failure", "error": None, **fields}, steps)
    assert (e.kind, e.repeats) == (kind, repeats)


def test_counts_per_family_and_the_commonest_loops():
    ends = [
        Ending("a", "procedure", "loop", 'CLICK link "Sort: Rating" on /search'),
        Ending("b", "procedure", "loop", 'CLICK link "Sort: Rating" on /search'),
        Ending("c", "procedure", "success"),
        Ending("d", "multi_cart", "loop", 'TYPE textbox "Full name" on /checkout'),
        Ending("e", "multi_cart", "wrong_result"),
    ]
    t = tabulate(ends, top=1)
    assert list(t.counts) == ["multi_cart", "procedure", "all"]
    assert t.counts["procedure"] == {**dict.fromkeys(ENDINGS, 0), "loop": 2, "success": 1}
    assert t.counts["all"]["loop"] == 3 and sum(t.counts["all"].values()) == 5
    assert t.loops == [('procedure: CLICK link "Sort: Rating" on /search', 2)]
    page = render(t)
    assert "| procedure | 3 | 1 | 0 | 2 | 0 | 0 | 0 | 0 |" in page and "- 2 × procedure: CLICK" in page


def _write(root, task, fields, steps, family):
    d = os.path.join(root, "episodes", task, "000")
    os.makedirs(d)
    with open(os.path.join(d, "steps.jsonl"), "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in steps)
    status = "success" if fields.get("success") else fields.get("status", "failure")
    summary = {"task_id": task, "env": "shop", "family": family, "split": "test", "run": 0, "score": 0.0}
    summary.update(steps=len(steps), final=None)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"error": None, **summary, **fields, "status": status}, f)


def test_the_launcher_reads_an_evaluation_of_two_seeds(tmp_path):
    for seed, family in ((0, "webshop"), (1, "procedure")):
        for task, (fields, steps, _, _) in CASES.items():
            _write(str(tmp_path / f"seed{seed}"), task, fields, steps, family)
    out = subprocess.run(
        [sys.executable, "-m", "launch.failures", f"--episodes={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # one of each ending per seed, the errored episode included
    assert "| webshop | 7 | 1 | 1 | 1 | 2 | 1 | 1 | 0 |" in out
    assert "| all | 14 | 2 | 2 | 2 | 4 | 2 | 2 | 0 |" in out
    assert '- 1 × procedure: CLICK link "Sort: Rating" on /search' in out
    bad = subprocess.run(
        [sys.executable, "-m", "launch.failures", f"--episodes={tmp_path / 'nothing'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "no episodes/ there" in bad.stderr
