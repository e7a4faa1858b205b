"""A configuration section as its typed config (tgpo_jax/sections.py): fields read by name, derived values over
them, defaults kept where the section is silent; the training loop's collate, pair, loss and optimiser configs
built that way from configs/base.py, checked against values written out by hand."""

import dataclasses

import ml_collections
import pytest

from configs import base
from tgpo_jax.data.examples import PairConfig, pair_config
from tgpo_jax.sections import from_section
from tgpo_jax.training import loop
from tgpo_jax.training.objective import LossConfig
from tgpo_jax.training.step import OptimConfig


@dataclasses.dataclass(frozen=True)
class Demo:
    a: int
    b: str = "kept"
    c: float = 0.5


def test_from_section_reads_fields_by_name():
    section = ml_collections.ConfigDict(dict(a=3, c=2.0, unrelated="ignored"))
    assert from_section(Demo, section) == Demo(3, "kept", 2.0)
    assert from_section(Demo, section, c=7.0) == Demo(3, "kept", 7.0)
    with pytest.raises(TypeError, match=r"Demo has no field\(s\) \['d'\]"):
        from_section(Demo, section, d=1)
    with pytest.raises(TypeError):
        from_section(Demo, ml_collections.ConfigDict(dict(b="x")))  # a has no default and no value


def test_the_training_configs_from_the_base_config():
    c = base.get_config()
    assert loop.loss_config(c, 2.0, 0.5) == LossConfig(
        method="tgpo", beta=0.1, dpo_loss_type="sigmoid", label_smoothing=0.0, desirable_weight=2.0,
        undesirable_weight=0.5, reference="live", focal_gamma=0.0, rpo_alpha=0.0, decision_window=0,
        margin_copies=True, sft_alpha=0.0,
    )  # fmt: skip
    assert loop.optim_config(c, 50) == OptimConfig(
        optimizer="adamw", learning_rate=1e-5, warmup_steps=5, schedule="cosine", total_steps=50,
        end_lr_fraction=0.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, clip_norm=1.0, grad_accum=1,
    )  # fmt: skip
    assert pair_config(c.data) == PairConfig(
        margin=0.0, weight_eps=1e-6, weight_clip=None, weight_sigma="branch", kto_repeat_cap=None, sft_repeat=False,
        sft_shortest=False, distance_agree=False, distance_strict=False, kto_reachable=False,
    )  # fmt: skip
    cc = loop.collate_config(c)
    assert (cc.method, cc.max_len, cc.max_prompt_len, cc.max_completion_len, cc.layout) == (
        "tgpo",
        1024,
        768,
        128,
        "packed",
    )
    assert (cc.sft_slots, cc.margin_decisions, cc.family_balance) == (False, False, False)


def test_overrides_reach_the_typed_configs():
    c = base.get_config()
    c.loss.update(beta=0.3, margin_copies=False, sft_alpha=1.0)
    c.optim.update(warmup_steps=7, learning_rate=2e-4)
    c.data.update(weight_clip=4.0, kto_repeat_cap=2, weight_sigma="occurrence", max_pairs=3)
    assert loop.loss_config(c).beta == 0.3
    o = loop.optim_config(c, 50)
    assert (o.warmup_steps, o.learning_rate) == (7, 2e-4)
    p = pair_config(c.data)
    assert (p.weight_clip, p.kto_repeat_cap, p.weight_sigma) == (4.0, 2, "occurrence")
    cc = loop.collate_config(c)
    assert (cc.sft_slots, cc.margin_decisions, cc.max_pairs, cc.pairs) == (True, True, 3, p)
    c.data.weight_sigma = "nodes"
    with pytest.raises(ValueError, match="weight_sigma"):
        pair_config(c.data)
