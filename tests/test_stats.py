"""Intervals, the two-level paired bootstrap and the claim verdicts, against hand-worked and analytic values."""

import math

import numpy as np
import pytest

from experiment import stats


def _outcomes(matrix, tasks=None):
    tasks = tasks or [f"t{i}" for i in range(matrix.shape[1])]
    return {s: dict(zip(tasks, map(float, row))) for s, row in enumerate(matrix)}


def test_t_interval_by_hand():
    mean, hw = stats.t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and hw == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(.975, 2) * sd 1 / sqrt(3)
    assert stats.t_interval([0.5]) == (0.5, None) and stats.t_interval([]) == (None, None)


def test_seed_interval_uses_per_seed_task_means():
    o = _outcomes(np.array([[1, 0, 1, 0], [1, 1, 1, 1]]))  # seed means 0.5 and 1.0
    mean, hw = stats.seed_interval(o)
    assert mean == 0.75 and hw == pytest.approx(12.706205 * (0.5 / math.sqrt(2)) / math.sqrt(2), rel=1e-6)


def test_certain_difference_has_a_degenerate_interval():
    a, b = _outcomes(np.ones((3, 20))), _outcomes(np.zeros((3, 20)))
    c = stats.paired_bootstrap(a, b, names=("A", "B"))
    assert (c.diff, c.low, c.high, c.tasks, c.paired_seeds) == (1.0, 1.0, 1.0, 20, True)


def test_one_seed_matches_the_normal_approximation_of_a_paired_task_bootstrap():
    rng = np.random.default_rng(0)
    t = 600
    a = rng.random(t) < 0.6
    b = rng.random(t) < 0.5
    d = a.astype(float) - b.astype(float)
    c = stats.paired_bootstrap(_outcomes(a[None].astype(float)), _outcomes(b[None].astype(float)))
    se = d.std(ddof=1) / math.sqrt(t)
    assert c.diff == pytest.approx(d.mean())
    assert c.low == pytest.approx(d.mean() - 1.96 * se, abs=0.01)
    assert c.high == pytest.approx(d.mean() + 1.96 * se, abs=0.01)


def test_disagreeing_seeds_widen_the_interval():
    rng = np.random.default_rng(1)
    t = 200
    same = np.stack([(rng.random(t) < 0.5).astype(float)] * 3)
    spread = np.stack([(rng.random(t) < p).astype(float) for p in (0.1, 0.5, 0.9)])
    base = _outcomes(np.zeros((3, t)))
    narrow = stats.paired_bootstrap(_outcomes(same), base)
    wide = stats.paired_bootstrap(_outcomes(spread), base)
    assert (wide.high - wide.low) > 3 * (narrow.high - narrow.low)


def test_only_common_tasks_are_compared_and_unpaired_seeds_are_resampled_apart():
    a = {0: {"x": 1.0, "y": 1.0, "z": 1.0}, 1: {"x": 1.0, "y": 1.0, "z": 0.0}}
    b = {5: {"x": 0.0, "y": 0.0}}
    c = stats.paired_bootstrap(a, b)
    assert c.tasks == 2 and not c.paired_seeds and c.diff == 1.0
    with pytest.raises(ValueError, match="no held-out task"):
        stats.paired_bootstrap({0: {"x": 1.0}}, {0: {"y": 1.0}})


@pytest.mark.parametrize(
    "low,high,gap,higher,expected",
    [
        (0.02, 0.20, 0.065, True, stats.REPRODUCED),
        (-0.20, -0.01, 0.065, True, stats.NOT_REPRODUCED),  # significantly the other way
        (-0.05, 0.02, 0.065, True, stats.NOT_REPRODUCED),  # excludes every gap >= 0.0325
        (-0.05, 0.10, 0.065, True, stats.INCONCLUSIVE),
        (-2.0, -0.5, 1.0, False, stats.REPRODUCED),  # fewer redundant steps: A - B < 0
        (0.1, 0.9, 1.0, False, stats.NOT_REPRODUCED),
    ],
)
def test_verdicts(low, high, gap, higher, expected):
    assert stats.verdict(low, high, gap, higher) == expected


def _ev(success, redundant=0, families=None):
    """An eval.json with one episode per task: ``success`` is a list of 0/1 per task (``families``: one per task,
    else every task 'procedure')."""
    families = families or ["procedure"] * len(success)
    rows = [
        {"task_id": f"t{i}", "family": f, "success": s, "steps": 5, "redundant": redundant}
        for i, (s, f) in enumerate(zip(success, families))
    ]
    return {"per_seed": [{"seed": 0, "episodes_table": rows}]}


def test_claims_at_the_floor_are_inconclusive_not_refuted():
    from experiment import results

    zeros = {seed: _ev([0] * 30) for seed in range(3)}
    floor = {m: zeros for m in ("TGPO", "DPO", "KTO", "KTO-Tree")}
    verdicts = {c.text: c.verdict for c in results.claims(floor)}
    assert verdicts["TGPO > DPO in success"] == stats.INCONCLUSIVE  # [0, 0] would otherwise rule out the 6.5 pts
    assert verdicts["KTO-Tree > KTO in success"] == stats.INCONCLUSIVE
    # the same interval [0, 0] with both methods at 50 % does rule the paper's gap out
    half = {seed: _ev([1, 0] * 15) for seed in range(3)}
    verdicts = {c.text: c.verdict for c in results.claims({"TGPO": half, "DPO": half})}
    assert verdicts["TGPO > DPO in success"] == stats.NOT_REPRODUCED


def test_the_control_is_compared_with_sft_and_every_preference_method_but_left_out_of_the_papers_claims():
    """SFT (continued) — SFT trained on for a preference stage's pass — is the baseline that tells a preference
    method's pairs from its SFT term's extra pass: every preference method is compared with it and it with SFT; the
    paper's redundant-steps claim ranges over the paper's methods only, so a control with fewer redundant steps
    than TGPO leaves the claim as it was."""
    from experiment import results

    sft = {s: _ev([1, 0, 0, 0] * 10, redundant=3) for s in range(3)}  # 25 %
    ctl = {s: _ev([1, 1, 0, 0] * 10, redundant=0) for s in range(3)}  # 50 %, no redundant steps
    tgpo = {s: _ev([1, 1, 1, 0] * 10, redundant=1) for s in range(3)}  # 75 %
    groups = {"SFT": sft, results.CONTROL: ctl, "TGPO": tgpo}
    got = {(c.a, c.b, c.metric): c for c in results.comparisons(groups)}
    for key, diff in {
        ("SFT (continued)", "SFT", "success_rate"): 0.25,
        ("TGPO", "SFT (continued)", "success_rate"): 0.25,
        ("TGPO", "SFT", "success_rate"): 0.5,
        ("TGPO", "SFT (continued)", "redundant_steps"): 1.0,
        ("TGPO", "SFT", "redundant_steps"): -2.0,
    }.items():
        assert got[key].diff == pytest.approx(diff), key
    assert ("SFT", "SFT (continued)", "success_rate") not in got
    claim = {c.text: c for c in results.claims(groups)}["TGPO has the fewest redundant steps"]
    assert claim.verdict == stats.REPRODUCED and "continued" not in claim.ours  # fewer than SFT, every task, seed
    without = {c.text: c for c in results.claims({"SFT": sft, "TGPO": tgpo})}["TGPO has the fewest redundant steps"]
    assert without.verdict == claim.verdict and without.ours == claim.ours


def test_learning_curve_points_and_a_method_continued_from_sft():
    """A curve's points: each snapshot's success, then the final model's full evaluation restricted to the curve's
    tasks (here 2 of 3 tasks solved of the first 3, though 1 of the 4 it evaluated is not in the curve); a preference
    method's curve goes on from SFT's last point, its steps shifted by SFT's."""
    from experiment import results

    curve = {"steps": [10, 20], "final_step": 30, "tasks": ["t0", "t1", "t2"], "success": {"20": 0.5, "10": 0.25}}
    pts = results.curve_points(curve, _ev([1, 0, 1, 0]))
    assert pts == [(10, 0.25), (20, 0.5), (30, pytest.approx(2 / 3))]
    tgpo = results.curve_points(
        {**curve, "final_step": 6, "steps": [2, 4], "success": {"2": 0.0, "4": 1.0}}, _ev([1, 1, 1])
    )
    assert results.continued_curve(pts[-1], tgpo) == [(30, pytest.approx(2 / 3)), (32, 0.0), (34, 1.0), (36, 1.0)]


def test_comparisons_within_each_task_family():
    """A method that loses one family and wins another: pooled +25 points, within the families −50 (tasks half lost,
    so the interval has width) and +100 (every task, every seed: a degenerate interval). One family: no table."""
    from experiment import results

    fams = ["multi_cart"] * 10 + ["webshop"] * 10
    kto = {s: _ev([1] * 10 + [0] * 10, families=fams) for s in range(3)}
    tree = {s: _ev([1, 0] * 5 + [1] * 10, families=fams) for s in range(3)}
    groups = {"KTO": kto, "KTO-Tree": tree}
    pooled = {(c.a, c.b): c for c in results.comparisons(groups)}[("KTO-Tree", "KTO")]
    assert pooled.diff == pytest.approx(0.25)
    by_family = results.family_comparisons(groups)
    assert list(by_family) == [("KTO-Tree", "KTO")]
    mc, ws = by_family[("KTO-Tree", "KTO")]["multi_cart"], by_family[("KTO-Tree", "KTO")]["webshop"]
    assert mc.diff == pytest.approx(-0.5) and mc.tasks == 10 and mc.low < -0.5 < mc.high < 0
    assert ws.diff == ws.low == ws.high == pytest.approx(1.0) and ws.tasks == 10
    one = {m: {s: _ev([1, 0] * 5) for s in range(3)} for m in ("KTO", "KTO-Tree")}
    assert results.family_comparisons(one) == {}
