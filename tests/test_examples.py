"""Pairs and labels from one node (docs/method.md §5–§6), against numbers worked out by hand."""

import dataclasses
import math

import pytest

from tgpo_jax.data.collate import CollateConfig
from tgpo_jax.data.examples import (
    Pair,
    PairConfig,
    class_counts,
    kto_items,
    kto_tree_items,
    label_conflict,
    node_sigma,
    normalise_weights,
    pair_config,
    preference_pairs,
    sft_items,
)
from tgpo_jax.data.schema import Branch, NodeRecord, SchemaError

SQRT6 = 2.449489742783178  # 1 / sigma for Q = [1, .5, 0]: sigma^2 = (.25 + 0 + .25) / 3 = 1/6


def node(*branches):
    """branches: (q, n_success, n_failed) or (q, n_success, n_failed, reaches_success)."""
    bs = []
    for k, spec in enumerate(branches):
        q, s, f = spec[:3]
        reaches = spec[3] if len(spec) > 3 else s > 0
        bs.append(
            Branch(
                action=f"Thought.\nCLICK [b{k}]",
                command=f"CLICK [b{k}]",
                q=q,
                rewards={"r": q},
                n_total=s + f,
                n_success=s,
                n_failed=f,
                on_success_path=s > 0,
                reaches_success=reaches,
            )
        )
    return NodeRecord(task_id="t", node_id="n", prompt=[{"role": "user", "content": "go"}], branches=bs).validate()


THREE = node((1.0, 2, 1), (0.5, 0, 3), (0.0, 1, 0))


def test_pairs_weights_by_hand():
    assert preference_pairs(THREE, PairConfig()) == [
        Pair(0, 1, pytest.approx(0.5 * SQRT6), 0.5),  # 1.2247448713915890
        Pair(0, 2, pytest.approx(SQRT6), 1.0),  # 2.449489742783178
        Pair(1, 2, pytest.approx(0.5 * SQRT6), 0.5),
    ]
    assert preference_pairs(THREE)[0].weight == pytest.approx(1.224744871391589, abs=1e-12)


def test_margin_is_strict():
    assert preference_pairs(THREE, PairConfig(margin=0.6)) == [Pair(0, 2, pytest.approx(SQRT6), 1.0)]
    # dQ = 0.5 exactly is not > 0.5
    assert [(p.chosen, p.rejected) for p in preference_pairs(THREE, PairConfig(margin=0.5))] == [(0, 2)]
    assert preference_pairs(THREE, PairConfig(margin=1.0)) == []


def test_weight_clip():
    ws = [p.weight for p in preference_pairs(THREE, PairConfig(weight_clip=2.0))]
    assert ws == pytest.approx([1.224744871391589, 2.0, 1.224744871391589])


def test_distance_agree_drops_pairs_whose_chosen_branch_is_the_longer_way():
    """Q = [1, .5, 0] with goal distances [3, 1, None]: (0, 1) prefers the branch two steps farther from a goal, so
    distance_agree drops it; (0, 2) and (1, 2) reject a branch with no goal reachable and stay, their weights still
    over all three branches' sigma. Without goal distances every pair stays."""
    far = dataclasses.replace(
        THREE, branches=[dataclasses.replace(b, goal_distance=d) for b, d in zip(THREE.branches, (3, 1, None))]
    )
    assert preference_pairs(far, PairConfig(distance_agree=True)) == [
        Pair(0, 2, pytest.approx(SQRT6), 1.0),
        Pair(1, 2, pytest.approx(0.5 * SQRT6), 0.5),
    ]
    assert len(preference_pairs(far)) == 3  # off by default (the specification's pairs)
    assert preference_pairs(THREE, PairConfig(distance_agree=True)) == preference_pairs(THREE)  # none known


def test_distance_strict_also_drops_pairs_of_branches_equally_far_from_a_goal():
    """Q = [1, .5, 0, -.5] with goal distances [2, 2, None, None]: (0, 1) joins two ways of one length, so
    distance_strict drops it (distance_agree alone keeps it: 2 <= 2); (0, 2), (0, 3), (1, 2), (1, 3) reject a branch
    with no goal reachable; (2, 3) orders two failures (no goal from either is not a tie) and stays. sigma over all
    four branches: Q mean .25, sigma^2 = (.5625 + .0625 + .0625 + .5625) / 4 = .3125."""
    four = node((1.0, 1, 0), (0.5, 1, 0), (0.0, 0, 1, False), (-0.5, 0, 1, False))
    four = dataclasses.replace(
        four, branches=[dataclasses.replace(b, goal_distance=d) for b, d in zip(four.branches, (2, 2, None, None))]
    )
    inv_sigma = 1 / math.sqrt(0.3125)
    agree = preference_pairs(four, PairConfig(distance_agree=True))
    assert [(p.chosen, p.rejected) for p in agree] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    strict = preference_pairs(four, PairConfig(distance_agree=True, distance_strict=True))
    assert strict == [
        Pair(0, 2, pytest.approx(1.0 * inv_sigma), 1.0),
        Pair(0, 3, pytest.approx(1.5 * inv_sigma), 1.5),
        Pair(1, 2, pytest.approx(0.5 * inv_sigma), 0.5),
        Pair(1, 3, pytest.approx(1.0 * inv_sigma), 1.0),
        Pair(2, 3, pytest.approx(0.5 * inv_sigma), 0.5),
    ]
    with pytest.raises(ValueError, match="distance_agree"):
        PairConfig(distance_strict=True)


def with_returns(rec, *returns):
    """``rec`` with each branch's ``returns`` set (None leaves it without)."""
    return dataclasses.replace(
        rec, branches=[dataclasses.replace(b, returns=r) for b, r in zip(rec.branches, returns)]
    ).validate()


# two branches: one taken by three trajectories whose returns were 1, 1 and .8 (Q = 2.8 / 3), one by a single
# trajectory whose return was .2 (Q = .2)
TWO = with_returns(node((2.8 / 3, 2, 1), (0.2, 0, 1)), (1.0, 1.0, 0.8), (0.2,))


def test_occurrence_sigma_weighs_a_two_branch_node_by_its_returns():
    """Per-branch sigma: {Q_a, Q_b} has sigma |dQ| / 2, so w = 2 whatever the gap. Per-occurrence sigma: the four
    returns pooled, mean (1 + 1 + .8 + .2) / 4 = .75, sigma^2 = (.25^2 + .25^2 + .05^2 + .55^2) / 4
    = (.0625 + .0625 + .0025 + .3025) / 4 = .1075; dQ = 2.8 / 3 - .2 = 2.2 / 3; w = (2.2 / 3) / sqrt(.1075)."""
    dq = 2.2 / 3
    sigma = math.sqrt((0.0625 + 0.0625 + 0.0025 + 0.3025) / 4)
    assert node_sigma(TWO, "occurrence") == pytest.approx(sigma, abs=1e-15)
    assert preference_pairs(TWO, PairConfig(weight_sigma="occurrence")) == [
        Pair(0, 1, pytest.approx(dq / sigma, abs=1e-12), pytest.approx(dq))
    ]
    assert dq / sigma == pytest.approx(2.2366456982115346, abs=1e-12)
    # per-branch sigma (the default): 2 at a two-branch node, with or without returns
    assert [p.weight for p in preference_pairs(TWO)] == pytest.approx([2.0], abs=1e-12)
    assert [p.weight for p in preference_pairs(TWO, PairConfig(weight_sigma="branch"))] == pytest.approx([2.0])
    assert [p.weight for p in preference_pairs(node((0.9, 1, 0), (0.1, 0, 1)))] == pytest.approx([2.0])
    # the same gap paid off less consistently (returns 1.4, 1.4, 0 around the same Q): a larger sigma, a smaller w
    shaky = with_returns(TWO, (1.4, 1.4, 0.0), (0.2,))
    (p,) = preference_pairs(shaky, PairConfig(weight_sigma="occurrence"))
    assert p.weight == pytest.approx(dq / math.sqrt(((0.65**2) * 2 + 0.75**2 + 0.55**2) / 4))
    assert p.weight < dq / sigma
    # clip applies after the sigma, as for branch sigma
    assert [p.weight for p in preference_pairs(TWO, PairConfig(weight_sigma="occurrence", weight_clip=2.0))] == [2.0]


def test_occurrence_sigma_falls_back_to_branch_sigma_without_returns():
    """Records written before returns were stored (or a node with a branch lacking them) weigh as per-branch sigma,
    and round-trip with returns None."""
    occ = PairConfig(weight_sigma="occurrence")
    assert preference_pairs(THREE, occ) == preference_pairs(THREE)
    partial = with_returns(TWO, (1.0, 1.0, 0.8), None)
    assert preference_pairs(partial, occ) == preference_pairs(partial) and node_sigma(
        partial, "occurrence"
    ) == pytest.approx(node_sigma(partial, "branch"))
    back = NodeRecord.from_bytes(THREE.to_bytes())
    assert back == THREE and all(b.returns is None for b in back.branches)
    old = THREE.to_json()  # a record written before the field: no "returns" key at all
    for b in old["branches"]:
        del b["returns"]
    assert NodeRecord.from_json(old) == THREE


def test_returns_round_trip_and_are_validated():
    import json

    data = TWO.to_bytes()
    assert json.loads(data)["branches"][0]["returns"] == [1.0, 1.0, 0.8]
    back = NodeRecord.from_bytes(data)
    assert back == TWO and back.branches[0].returns == (1.0, 1.0, 0.8) and back.branches[1].returns == (0.2,)
    assert preference_pairs(back, PairConfig(weight_sigma="occurrence")) == preference_pairs(
        TWO, PairConfig(weight_sigma="occurrence")
    )
    b = TWO.branches[0]
    for bad in ((1.0, math.nan, 0.8), (1.0, 0.8), (), [1.0, 1.0, 0.8], (1.0, True, 0.8)):
        with pytest.raises(SchemaError, match="returns"):
            dataclasses.replace(b, returns=bad).validate("b")
    bad = json.loads(data)
    bad["branches"][1]["returns"] = [0.2, 0.3]  # two values for one trajectory
    with pytest.raises(SchemaError, match="returns"):
        NodeRecord.from_json(bad)


def test_weight_sigma_config():
    import ml_collections

    from configs.base import get_config

    d = get_config().data
    assert d.weight_sigma == "branch" and pair_config(d).weight_sigma == "branch"
    d.weight_sigma = "occurrence"
    assert pair_config(d).weight_sigma == "occurrence"
    d.weight_sigma = "trajectory"
    with pytest.raises(ValueError, match="weight_sigma must be one of"):
        pair_config(d)
    older = ml_collections.ConfigDict({k: v for k, v in get_config().data.items() if k != "weight_sigma"})
    assert pair_config(older).weight_sigma == "branch"  # a config saved before the field


def test_ties_and_order():
    assert preference_pairs(node((0.3, 1, 0), (0.3, 0, 1))) == []
    # Q = [.3, .3, .9]: mean .5, sigma^2 = (.04 + .04 + .16) / 3 = .08, sigma = .28284271247461906
    pairs = preference_pairs(node((0.3, 1, 0), (0.3, 0, 1), (0.9, 1, 0)))
    assert [(p.chosen, p.rejected) for p in pairs] == [(2, 0), (2, 1)]
    assert [p.weight for p in pairs] == pytest.approx([2.1213203435596424] * 2)
    assert [p.delta_q for p in pairs] == pytest.approx([0.6, 0.6])
    # unsorted Q: the better branch is chosen whatever its index; Q = [0, 2] has sigma = 1
    assert preference_pairs(node((0.0, 0, 1), (2.0, 1, 0))) == [Pair(1, 0, 2.0, 2.0)]


def test_single_branch_and_eps():
    assert preference_pairs(node((5.0, 3, 0))) == []
    # sigma = 5e-10 < eps = 1e-6, so w = 1e-9 / 1e-6 = 1e-3
    (p,) = preference_pairs(node((0.0, 0, 1), (1e-9, 1, 0)))
    assert (p.chosen, p.rejected) == (1, 0) and p.weight == pytest.approx(1e-3)


def test_normalise_weights():
    assert normalise_weights([1.0, 2.0, 3.0]) == pytest.approx([0.5, 1.0, 1.5])
    assert normalise_weights([]) == []
    assert normalise_weights([0.0, 0.0]) == [0.0, 0.0]
    assert math.fsum(normalise_weights([0.2, 7.0, 1.3, 4.4])) == pytest.approx(4.0)


def test_sft_items():
    assert sft_items(THREE, PairConfig()) == [0, 2]
    assert sft_items(THREE, PairConfig(sft_repeat=True)) == [0, 0, 2]
    assert sft_items(node((1.0, 0, 4))) == []


def test_sft_shortest_keeps_the_successful_branches_nearest_a_goal():
    three = dataclasses.replace(
        THREE, branches=[dataclasses.replace(b, goal_distance=d) for b, d in zip(THREE.branches, (3, 1, 5))]
    )
    assert sft_items(three, PairConfig(sft_shortest=True)) == [0]  # branch 1 is nearer but never succeeded
    tie = dataclasses.replace(three, branches=[dataclasses.replace(b, goal_distance=3) for b in three.branches])
    assert sft_items(tie, PairConfig(sft_shortest=True, sft_repeat=True)) == [0, 0, 2]
    assert sft_items(THREE, PairConfig(sft_shortest=True)) == [0, 2]  # records without distances: all successes
    with pytest.raises(ValueError, match="goal_distance"):
        dataclasses.replace(THREE.branches[0], goal_distance=-1).validate("b")
    # a malformed output inside a successful trajectory is not an SFT target
    bad = node((1.0, 1, 0), (0.5, 1, 0))
    bad = dataclasses.replace(
        bad,
        branches=[
            bad.branches[0],
            dataclasses.replace(bad.branches[1], action="Thought.\nCLICK 3", command="INVALID CLICK 3"),
        ],
    )
    assert sft_items(bad) == [0]


def test_kto_plain():
    items = kto_items(THREE, PairConfig())
    assert items == [(0, True), (0, True), (0, False), (1, False), (1, False), (1, False), (2, True)]
    assert class_counts(items) == (3, 4)
    capped = kto_items(THREE, PairConfig(kto_repeat_cap=1))
    assert capped == [(0, True), (0, False), (1, False), (2, True)]
    assert class_counts(capped) == (2, 2)
    assert class_counts([]) == (0, 0)
    # kto_reachable: a node from which nothing succeeded gives no items; one with a branch that reaches a successful
    # end keeps every item, the failed branches' too
    lost = node((0.2, 0, 2, False), (0.1, 0, 1, False))
    assert kto_items(lost) == [(0, False), (0, False), (1, False)]
    assert kto_items(lost, PairConfig(kto_reachable=True)) == []
    assert kto_items(THREE, PairConfig(kto_reachable=True)) == items
    assert kto_items(node((0.2, 0, 2, True), (0.1, 0, 1, False)), PairConfig(kto_reachable=True)) == [
        (0, False),
        (0, False),
        (1, False),
    ]
    with pytest.raises(ValueError, match="kto_reachable is a plain-KTO setting"):
        CollateConfig(method="kto_tree", pairs=PairConfig(kto_reachable=True))


def test_kto_tree():
    # decimal values whose float sum rounds: the middle one is on the mean, not above it
    assert kto_tree_items(node((0.1, 1, 0), (0.2, 1, 0), (0.3, 1, 0))) == [(0, False), (1, False), (2, True)]
    # mean Q = 0.5: branch 1 sits exactly on the mean and is undesirable
    assert kto_tree_items(THREE, PairConfig()) == [(0, True), (1, False), (2, False)]
    assert kto_tree_items(node((0.25, 1, 0), (0.25, 0, 1))) == [(0, False), (1, False)]
    assert kto_tree_items(node((-1.0, 0, 1), (2.0, 1, 0), (0.4, 0, 1), (0.6, 1, 0))) == [  # mean 0.5
        (0, False),
        (1, True),
        (2, False),
        (3, True),
    ]
    # single-branch nodes: reachability decides, not Q or the counts
    assert kto_tree_items(node((9.0, 2, 0, False))) == [(0, False)]
    assert kto_tree_items(node((-3.0, 0, 2, True))) == [(0, True)]
    assert class_counts(kto_tree_items(THREE)) == (1, 2)


def test_label_conflict():
    # branch 0 is taken by 2 successful and 1 failed trajectory: its 3 occurrences conflict; total 3 + 3 + 1
    assert label_conflict(THREE) == (3, 7)
    assert label_conflict(node((1.0, 2, 0), (0.0, 0, 2))) == (0, 4)
    # trajectories counted in n_total but neither successful nor failed carry no label
    b = Branch(
        action="a",
        command="c",
        q=0.0,
        rewards={},
        n_total=5,
        n_success=1,
        n_failed=1,
        on_success_path=True,
        reaches_success=True,
    )
    rec = NodeRecord(task_id="t", node_id="n", prompt=[{"role": "user", "content": "go"}], branches=[b])
    assert label_conflict(rec) == (2, 2)


def test_config_validation():
    for bad in (
        dict(margin=-0.1),
        dict(weight_eps=0.0),
        dict(weight_clip=0.0),
        dict(kto_repeat_cap=0),
        dict(weight_sigma="occurrences"),
    ):
        with pytest.raises(ValueError):
            PairConfig(**bad)
