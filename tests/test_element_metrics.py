"""Element-level metrics (experiment/element_metrics.py, docs/tasks.md): token F1 worked by hand, the metrics of
hand-made recorded episodes, their means across seeds and the report's table."""

from __future__ import annotations

import pytest

from experiment.element_metrics import episode_metrics, summarize
from experiment.evaluate import aggregate
from experiment.report import element_rows
from rollout.envs import checks


@pytest.mark.parametrize(
    "answer, reference, f1",
    [
        ("framed text", "framed text 42", 0.8),  # P 2/2, R 2/3
        ("The Heap Queue", "heap queue algorithm", 0.8),  # the article and case do not count
        ("heapq.heappush", "heappush", 2 / 3),  # punctuation splits: P 1/2, R 1
        ("x b b", "b b c", 2 / 3),  # bags: two b's in common, P = R = 2/3
        ("x", "y", 0.0),
        ("", "", 1.0),
        ("the", "answer", 0.0),  # nothing left of the answer
    ],
)
def test_token_f1(answer, reference, f1):
    assert checks.token_f1(answer, reference) == pytest.approx(f1)


def test_expected_answer_is_checked_against_its_pattern():
    leaf = checks.parse_check({"answer": "^4[0-9]$", "expected": "42"})
    assert leaf.expected == "42"
    with pytest.raises(checks.CheckError, match="does not match the answer pattern"):
        checks.parse_check({"answer": "^4[0-9]$", "expected": "7"})
    with pytest.raises(checks.CheckError, match="check.expected: expected the reference answer"):
        checks.parse_check({"answer": "x", "expected": 3})
    with pytest.raises(checks.CheckError, match="unexpected key"):
        checks.parse_check({"answer_from": {"css": "p"}, "expected": "x"})


FORM = checks.parse_check(
    {
        "all": [
            {"element": {"css": "#name"}, "form_value": "^Ada$"},
            {"element": {"css": "#gift"}, "checked": True},
            {"element": {"css": "#size"}, "attribute": "data-size", "value": "M"},
            {"url": "done"},
        ]
    }
)


def step(command, targets=None, progress="0000"):
    name = command.split()[0] if command else None
    check = {"progress": progress, **({"elements": {"targets": targets}} if targets else {})}
    return {"command": command, "command_name": name, "check": check}


def test_localisation_counts_the_targets_shown_and_acted_on():
    steps = [
        step("TYPE [3] [Ada]", {"0": ["3"], "1": ["4"]}),
        step("CLICK [9]", {"0": ["3"], "1": ["4"]}, "1000"),  # a wrong element
        step("CLICK [4]", {"1": ["7"]}, "1000"),  # id 4 was the box before, not here: not acted on
        step("STOP", {"0": ["3"]}, "1000"),
    ]
    m = episode_metrics(steps, {"progress": "1001"}, FORM)
    # targets 0 and 1 were shown (2 of 3; #size never had an id), only 0 acted on; at the end only 0 holds
    assert m == {"localisation": 0.5, "value_match": pytest.approx(1 / 3), "answer_exact": None, "answer_f1": None}
    # no target ever shown: localisation does not apply, the value match still does
    m = episode_metrics([step("STOP")], {"progress": "0110"}, FORM)
    assert m["localisation"] is None and m["value_match"] == pytest.approx(2 / 3)


def test_answers_need_a_stop():
    ask = checks.parse_check(
        {"all": [{"answer_from": {"css": ".note"}}, {"answer": "^42$"}, {"answer": "4", "expected": "42"}]}
    )
    final = {"progress": "011", "elements": {"answer": "42", "f1": {"0": 0.5, "2": 1.0}}}
    m = episode_metrics([step("STOP [42]")], final, ask)
    # exact: 2 of 3 leaves hold; F1 over the two leaves with a reference (the regex-only leaf has none)
    assert m["answer_exact"] == pytest.approx(2 / 3) and m["answer_f1"] == pytest.approx(0.75)
    m = episode_metrics([step("CLICK [1]")], {"progress": "000"}, ask)  # ran out of steps: no answer
    assert (m["answer_exact"], m["answer_f1"], m["localisation"]) == (0.0, 0.0, None)
    assert episode_metrics([], None, ask)["answer_exact"] == 0.0


def test_means_over_episodes_seeds_and_the_report_row():
    rows = [
        {"localisation": 1.0, "value_match": 0.5, "answer_exact": None, "answer_f1": None},
        {"localisation": None, "value_match": 0.0, "answer_exact": 1.0, "answer_f1": 0.6},
    ]
    s = summarize(rows)
    assert (s["localisation"], s["localisation_n"], s["value_match"], s["value_match_n"]) == (1.0, 1, 0.25, 2)
    assert (s["answer_exact"], s["answer_f1"], s["answer_f1_n"]) == (1.0, 0.6, 1)
    seeds = [
        {m: 0.0 for m in ("success_rate", "avg_steps", "redundant_steps", "avg_score")} | {"elements": e}
        for e in (s, summarize([{"localisation": 0.5, "value_match": None, "answer_exact": None, "answer_f1": None}]))
    ]
    mean, ci = aggregate(seeds)
    assert mean["localisation"] == 0.75 and ci["localisation"]["half_width"] > 0
    assert mean["value_match"] == 0.25 and ci["value_match"] is None  # one seed where it applies
    ev = {"mean": mean, "per_seed": seeds}
    rows = element_rows({"SFT": ev, "shop model": {"mean": {"success_rate": 0.5}, "per_seed": []}})
    assert rows == [
        [("SFT", False), ("75.0 (n=2)", False), ("25.0 (n=2)", False), ("100.0 (n=1)", False), ("60.0 (n=1)", False)]
    ]
