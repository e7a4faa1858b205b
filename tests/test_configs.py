"""Config files: every method x preset builds; overrides reach the fields; bad values are clear errors."""

import dataclasses
import importlib

import pytest

from configs import models
from tgpo_jax.data.collate import BASELINES, METHODS, CollateConfig
from tgpo_jax.training.objective import LossConfig


@pytest.mark.parametrize("method", METHODS + BASELINES)
@pytest.mark.parametrize("preset", sorted(models.PRESETS))
def test_every_method_and_preset_builds(method, preset):
    c = importlib.import_module(f"configs.{method}").get_config(preset)
    assert c.method == method and c.preset == preset
    assert c.loss.reference == ("none" if method == "sft" else "live")
    LossConfig(method=c.method, reference=c.loss.reference)  # validates
    if preset == "qwen3-14b":
        assert c.mesh.shape[2] == 4 and c.model.remat and c.distributed.enabled


def _plan(preset: str = "tiny", **over):
    """The pipeline of a preset with config overrides, checked, and its stages by name."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline, validate

    c = get_config(preset)
    c.update(over)
    validate(c)
    p = Pipeline(c, progress=False)
    return p, {s.name: s for s in p.stages()}


def test_unknown_preset_and_bad_values():
    with pytest.raises(ValueError, match="unknown model preset 'gpt9'"):
        importlib.import_module("configs.tgpo").get_config("gpt9")
    with pytest.raises(ValueError, match="method 'ppo'"):
        CollateConfig(method="ppo")
    with pytest.raises(ValueError, match="exceeds max_len"):
        CollateConfig(max_len=64, max_prompt_len=60, max_completion_len=8)
    with pytest.raises(ValueError, match="KL term"):
        LossConfig(method="kto", reference="behaviour")
    with pytest.raises(ValueError, match="dpo_loss_type"):
        LossConfig(method="dpo", dpo_loss_type="square")
    with pytest.raises(ValueError, match="focal_gamma=2.0: .* SFT setting"):
        LossConfig(method="dpo", focal_gamma=2.0)
    with pytest.raises(ValueError, match="focal_gamma=-1"):
        LossConfig(method="sft", reference="none", focal_gamma=-1.0)
    with pytest.raises(ValueError, match="rpo_alpha=1.0: .* DPO / TGPO setting"):
        LossConfig(method="kto", rpo_alpha=1.0)
    with pytest.raises(ValueError, match="rpo_alpha=-0.5"):
        LossConfig(method="tgpo", rpo_alpha=-0.5)


def test_pipeline_gives_miniwob_a_seed_per_task():
    """MiniWoB tasks are (task, seed) pairs: the pipeline asks for as many seeds as it selects tasks, so
    num_train tasks of one task family are num_train distinct problems, disjoint from the held-out seeds."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline

    c = get_config("tiny")
    c.env.name = "miniwob"
    c.tasks.update(families=("click-button",), num_train=70, num_test=30)
    p = Pipeline(c, progress=False)
    train, test = p.tasks("train"), p.tasks("test")
    assert len(train) == 70 and len(test) == 30
    assert not {t.goal["seed"] for t in train} & {t.goal["seed"] for t in test}
    assert p._env is not None and p._env.name == "miniwob"
    p.close()


def test_adding_a_model_to_evaluate_keeps_the_other_evaluations():
    """eval.models picks what is evaluated; one model's evaluation stage does not depend on it, so a finished
    evaluation stays valid when another model is added (the report, whose inputs change, does not)."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline, validate
    from experiment.stages import fingerprints

    def prints(models):
        c = get_config("tiny")
        c.eval.models = models
        validate(c)
        return fingerprints(Pipeline(c, progress=False).stages())

    few, more = prints(("sft", "tgpo")), prints(("sft", "tgpo", "kto"))
    assert "eval-kto" in more and "eval-kto" not in few
    assert few["eval-sft"] == more["eval-sft"] and few["eval-tgpo"] == more["eval-tgpo"]
    assert few["report"] != more["report"]
    c = get_config("tiny")
    c.eval.max_steps += 1  # a setting of the evaluation itself still changes every evaluation
    assert fingerprints(Pipeline(c, progress=False).stages())["eval-sft"] != few["eval-sft"]


def test_the_default_curves_follow_the_evaluated_methods():
    """The default preset draws no success-vs-steps curves unless asked (no snapshots kept, no curve stages); with
    eval.curve_methods '*' it plots each method it trains and evaluates: only those first-seed models keep
    snapshots, adding a method adds its curve alone, and a named curve method that is not trained is an error."""
    from experiment.stages import fingerprints

    p0, st0 = _plan("default")
    assert not [n for n in st0 if n.startswith("curve-")] and "report" in st0
    assert p0.train_config("sft", "sft", "base", 1).train.curve_points == 0
    curves = dict(curve_methods=("*",))
    p, st = _plan("default", eval=curves)
    assert [n for n in st if n.startswith("curve-")] == ["curve-sft", "curve-tgpo"]
    assert st["curve-tgpo"].deps == ("tgpo",) and "curve-tgpo" in st["report"].deps
    assert p.train_config("sft", "sft", "base", 1).train.curve_points == 4
    p2, more = _plan("default", methods=("sft", "dpo", "tgpo"), eval=dict(models=("sft", "dpo", "tgpo"), **curves))
    assert [n for n in more if n.startswith("curve-")] == ["curve-sft", "curve-dpo", "curve-tgpo"]
    assert fingerprints(p2.stages())["curve-sft"] == fingerprints(p.stages())["curve-sft"]
    assert p2.train_config("dpo", "dpo", "sft", 1).train.curve_points == 4
    p3, some = _plan("default", methods=("sft", "dpo"), eval=dict(models=("sft",), **curves))
    assert [n for n in some if n.startswith("curve-")] == ["curve-sft"]
    assert "dpo" in some and p3.train_config("dpo", "dpo", "sft", 1).train.curve_points == 0  # no snapshots kept
    with pytest.raises(ValueError, match=r"eval.curve_methods \['tgpo'\]: expected trained methods"):
        _plan("default", methods=("sft",), eval=dict(models=("sft",), curve_methods=("tgpo",)))


@pytest.mark.parametrize("preset", ["default", "tiny", "large", "smollm2", "miniwob"])
def test_every_pipeline_preset_is_valid(preset):
    from configs.pipeline import get_config
    from experiment.pipeline import validate

    c = get_config(preset)
    validate(c)
    # the shop presets that train the copy model write ids after names, others as rendered
    assert c.page_ids == ("after" if preset in ("default", "large") else "before")
    # the copy model's presets word the oracle's thoughts for its circuit (its recipe's), the pretrained one plainly
    assert c.thoughts == ("plain" if preset == "smollm2" else "scratch_copy")
    assert c.page_cut == ("text_first" if preset in ("default", "large", "smollm2") else "end")
    # one shop for every model: multi_cart's items named "second item [..]" whatever the preset trains
    assert c.env.item_names == "ordinal"
    assert c.sft.model.get("circuit_trigram", 0.0) == (0.5 if preset in ("default", "large") else 0.0)
    # SFT on the shop presets imitates the shortest successful branches, not the noisy oracle's undone wrong clicks
    assert c.sft.data.sft_shortest == (preset in ("default", "large", "smollm2"))
    # the preference pairs' distance rules, agree and strict, on the shop presets
    for m in ("dpo", "tgpo"):
        assert c[m].data.distance_agree == (preset in ("default", "large", "smollm2"))
        assert c[m].data.distance_strict == (preset in ("default", "large", "smollm2"))
    # the pretrained preset trains its model's top 10 layers (of SmolLM2-135M's 30), the others every layer
    assert {c[m].model.get("train_layers", 0) for m in ("sft", "dpo", "tgpo")} == {10 if preset == "smollm2" else 0}
    c.page_ids, thoughts, c.thoughts = "middle", c.thoughts, "nope"
    with pytest.raises(ValueError, match="page_ids"):
        validate(c)
    c.page_ids = "before"
    known = r"\['page_counted', 'page_first', 'plain', 'scratch_copy'\]"
    with pytest.raises(ValueError, match=rf"thoughts='nope': expected one of {known}"):
        validate(c)
    c.thoughts = thoughts
    c.page_ids, c.keep_recent = "before", -1
    with pytest.raises(ValueError, match="keep_recent"):
        validate(c)
    c.keep_recent, c.page_cut = 6, "middle"
    with pytest.raises(ValueError, match="page_cut"):
        validate(c)
    c.page_cut, c.tgpo.data.distance_agree, c.tgpo.data.distance_strict = "end", False, True
    with pytest.raises(ValueError, match=r"tgpo\.data: distance_strict refines distance_agree"):
        validate(c)
    margin, c.tgpo.data.distance_strict, c.tgpo.data.margin = c.tgpo.data.margin, False, -0.1  # every pair rule
    with pytest.raises(ValueError, match=r"tgpo\.data: margin must be finite and >= 0"):
        validate(c)
    c.tgpo.data.margin, c.tgpo.data.kto_reachable = margin, True
    with pytest.raises(ValueError, match=r"tgpo\.data\.kto_reachable: a plain-KTO setting"):
        validate(c)
    c.tgpo.data.kto_reachable, c.env.item_names = False, "second"
    with pytest.raises(ValueError, match="env.item_names='second'"):
        validate(c)


def test_later_rounds_collect_their_own_runs_without_touching_round_one():
    """rounds.runs / rounds.tree_tasks give rounds >= 2 K runs per task (the policy's own runs share states, so its
    mistakes get pairs) while round 1's stage spec stays what it was: a finished round 1 is reused, not re-run."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline, validate

    def plan(**rounds):
        c = get_config("tiny")
        c.rounds.update(count=2, **rounds)
        validate(c)
        p = Pipeline(c, progress=False)
        return p, {s.name: s for s in p.stages()}

    base, before = plan()
    p, after = plan(runs=4, tree_tasks=10)
    assert base.runs(2) == base.runs(1) == (base.cfg.collect.runs, base.cfg.collect.tree_tasks)
    assert p.runs(1) == (p.cfg.collect.runs, p.cfg.collect.tree_tasks) and p.runs(2) == (4, 10)
    assert after["collect-r1"].spec == before["collect-r1"].spec
    assert after["collect-r2"].spec["collect"]["runs"] == 4 and after["collect-r2"].spec["collect"]["tree_tasks"] == 10
    assert after["collect-r2"].spec != before["collect-r2"].spec
    c = get_config("tiny")
    c.rounds.update(count=2, runs=-1)
    with pytest.raises(ValueError, match="rounds.runs"):
        validate(c)


def test_sft_can_collect_later_rounds_and_start_a_method_round_one_did_not_train():
    """rounds.behaviour='sft': round 2 collects with the SFT model (decoded as evaluated: rounds.constrain), and a
    round-2 method that round 1 did not train starts from SFT; round 1's collection spec is untouched."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline, validate

    def plan(**over):
        c = get_config("tiny")
        c.rounds.update(count=2)
        c.update(over)
        validate(c)
        return {s.name: s for s in Pipeline(c, progress=False).stages()}

    agent_q = plan()
    assert agent_q["collect-r2"].deps == ("tgpo",) and agent_q["tgpo-r2"].spec["init"] == "tgpo"
    on_sft = plan(methods=("sft",), eval=dict(models=("sft",)), rounds=dict(count=2, behaviour="sft"))
    assert "tgpo" not in on_sft and on_sft["collect-r2"].deps == ("sft",)
    assert on_sft["collect-r2"].spec["policy"] == "model sft" and on_sft["collect-r2"].spec["collect"]["constrain"]
    assert on_sft["tgpo-r2"].spec["init"] == "sft" and "sft" in on_sft["tgpo-r2"].deps
    assert on_sft["collect-r1"].spec == agent_q["collect-r1"].spec
    free = plan(rounds=dict(count=2, constrain=False))
    assert not free["collect-r2"].spec["collect"]["constrain"] and free["collect-r1"].spec == agent_q["collect-r1"].spec
    # rounds.temperature: unset (< 0) round 2 samples at collect.temperature; set, only round 2's spec changes
    assert agent_q["collect-r2"].spec["collect"]["temperature"] == get_config("tiny").collect.temperature > 0
    greedy = plan(rounds=dict(count=2, temperature=0.0))
    assert greedy["collect-r2"].spec["collect"]["temperature"] == 0.0
    assert greedy["collect-r1"].spec == agent_q["collect-r1"].spec
    c = get_config("tiny")
    c.rounds.update(count=2, behaviour="kto")
    with pytest.raises(ValueError, match="rounds.behaviour"):
        validate(c)


def test_the_prompt_layout_changes_the_data_not_the_tokenizer():
    """history_last / keep_recent / page_cut change the dataset (and what follows); the tokenizer trains on untruncated
    prompts in the default order, so its stage (and the initialisation built on it) stays valid."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline, validate
    from experiment.stages import fingerprints

    def prints(**kw):
        c = get_config("tiny")
        c.update(kw)
        validate(c)
        return fingerprints(Pipeline(c, progress=False).stages())

    plain = prints()
    for changed in (prints(history_last=True), prints(keep_recent=2), prints(page_cut="text_first")):
        assert changed["tokenizer"] == plain["tokenizer"] and changed["base"] == plain["base"]
        assert changed["dataset-r1"] != plain["dataset-r1"] and changed["eval-sft"] != plain["eval-sft"]


def test_the_thought_wording_is_in_the_spec_of_what_it_changes():
    """The oracle's wording decides the round-1 collection's thoughts (and the plain wording's ids where page_ids puts
    them), and the valid-argument decoding's rules when a model decodes: a collection made with one wording never
    counts as one made with another. scratch_copy, the wording of every run made before the setting, stays out of
    the specs: those runs keep their stages."""
    from configs.pipeline import get_config
    from experiment.stages import fingerprints

    def stages(preset="tiny", **kw):
        from experiment.pipeline import Pipeline

        c = get_config(preset)
        c.update(kw)
        return {s.name: s for s in Pipeline(c, progress=False).stages()}

    copy, plain, after = stages(), stages(thoughts="plain"), stages(thoughts="plain", page_ids="after")
    assert "thoughts" not in copy["collect-r1"].spec and "thoughts" not in copy["eval-sft"].spec
    assert plain["collect-r1"].spec["thoughts"] == "plain" and plain["collect-r1"].spec["page_ids"] == "before"
    assert after["collect-r1"].spec["page_ids"] == "after" and plain["eval-sft"].spec["thoughts"] == "plain"
    prints = {k: fingerprints(list(v.values())) for k, v in (("copy", copy), ("plain", plain))}
    assert prints["copy"]["collect-r1"] != prints["plain"]["collect-r1"]
    assert prints["copy"]["dataset-r1"] != prints["plain"]["dataset-r1"]  # downstream of the collection
    smollm2 = stages("smollm2")
    assert smollm2["collect-r1"].spec["thoughts"] == "plain"
    assert "thoughts" not in stages("smollm2", thoughts="scratch_copy")["collect-r1"].spec


def test_trajectory_dpo_is_a_stage_on_round_one_episodes_that_leaves_the_other_stages_alone():
    """methods with 'traj_dpo': a trajectory-pair dataset from collect-r1 (the trees' episodes: the same browser
    budget), Trajectory DPO trained on it from SFT, evaluated; the tree dataset and the other methods keep their
    specs, so adding the baseline to a finished run trains only it."""
    from configs.pipeline import get_config
    from experiment.pipeline import validate

    _, plain = _plan(methods=("sft", "dpo"))
    p, with_traj = _plan(methods=("sft", "dpo", "traj_dpo"))
    assert with_traj["dataset-traj-r1"].deps == ("collect-r1", "tokenizer", "base")
    assert with_traj["dataset-traj-r1"].outputs == (p.traj_dataset(1),)
    assert with_traj["traj_dpo"].deps == ("dataset-traj-r1", "sft") and "eval-traj_dpo" in with_traj
    for name in ("collect-r1", "dataset-r1", "sft", "dpo", "eval-sft", "eval-dpo"):
        assert with_traj[name].spec == plain[name].spec and with_traj[name].deps == plain[name].deps, name
    t = p.train_config("traj_dpo", "traj_dpo", "sft", 1)
    assert t.data.train_dir == p.traj_dataset(1) and t.data.layout == "plain"
    assert p.train_config("dpo", "dpo", "sft", 1).data.train_dir == p.dataset(1)
    # the default's baseline is trained as its step-level DPO is: the same beta, anchor and learning rate
    with pytest.raises(ValueError, match="traj_dpo' need collect.runs >= 2"):
        _plan("default", methods=("sft", "dpo", "traj_dpo"), eval=dict(models=()))
    d, _ = _plan("default", methods=("sft", "dpo", "traj_dpo"), eval=dict(models=()), collect=dict(runs=2))
    for key in ("loss.beta", "loss.rpo_alpha", "optim.learning_rate", "train.num_epochs"):
        section, k = key.split(".")
        assert d.cfg.traj_dpo[section][k] == d.cfg.dpo[section][k], key
    c = get_config("tiny")
    c.rounds.update(count=2, methods=("traj_dpo",))
    with pytest.raises(ValueError, match="rounds.methods"):
        validate(c)


def test_search_dpo_searches_with_the_first_seeds_sft_and_trains_dpo_on_its_trees():
    """methods with 'search_dpo': Agent Q's search collection after SFT (its proposer), the search trees' records,
    DPO from SFT on them (pair margin = θ); the tree stages keep their specs."""
    from configs.pipeline import get_config

    _, plain = _plan(methods=("sft", "dpo"))
    p, st = _plan(methods=("sft", "dpo", "search_dpo"), train_seeds=(3, 4))
    assert st["collect-search-r1"].deps == ("sft-s3",) and st["collect-search-r1"].spec["proposer"] == "sft-s3"
    assert st["collect-search-r1"].spec["search"] == dict(get_config("tiny").search)
    assert st["dataset-search-r1"].deps == ("collect-search-r1",)
    assert st["search_dpo-s4"].deps == ("dataset-search-r1", "sft-s4")
    names = [s.name for s in p.stages()]
    assert names.index("sft-s3") < names.index("collect-search-r1") < names.index("search_dpo-s3")
    t = p.train_config("search_dpo-s3", "search_dpo", "sft-s3", 1, 3)
    assert t.method == "dpo" and t.data.train_dir == p.search_dataset(1) and t.data.margin == 0.1
    _, one = _plan(methods=("sft", "dpo", "search_dpo"))
    for name in ("collect-r1", "dataset-r1", "sft", "dpo", "eval-dpo"):
        assert one[name].spec == plain[name].spec, name
    for bad in (dict(k=1), dict(tasks=0), dict(alpha=1.5)):
        with pytest.raises(ValueError, match="search_dpo' need|search: simulations"):
            _plan(methods=("sft", "search_dpo"), search=bad)
    # search at inference: one stage per model, after it; the plain evaluations keep their specs
    _, sa = _plan(methods=("sft", "dpo"), eval=dict(search_models=("sft", "dpo"), search_tasks=5))
    assert sa["search-sft"].deps == ("sft",) and sa["search-sft"].spec["search_tasks"] == 5
    assert {"search-sft", "search-dpo"} <= set(sa["report"].deps)
    assert sa["eval-sft"].spec == plain["eval-sft"].spec
    _, more = _plan(
        methods=("sft", "dpo"), eval=dict(search_models=("sft", "dpo"), search_tasks=5), search=dict(tasks=99)
    )
    assert more["search-sft"].spec == sa["search-sft"].spec  # search.tasks is the collection's, not inference's
    with pytest.raises(ValueError, match="eval.search_models"):
        _plan(methods=("sft", "dpo"), eval=dict(search_models=("tgpo",)))


def test_judge_dpo_samples_with_the_first_seeds_sft_and_trains_dpo_on_the_judged_records():
    """methods with 'judge_dpo': the judge dataset after the first seed's SFT (the sampler), from round 1's
    episodes (no browser steps), DPO from each seed's SFT on it (pair margin just under one score point); the tree
    stages keep their specs; a judge endpoint without its model name, or k too small for DPO-2, is an error."""
    _, plain = _plan(methods=("sft", "dpo"))
    p, st = _plan(methods=("sft", "dpo", "judge_dpo"), train_seeds=(3, 4))
    judge = st["dataset-judge-r1"]
    assert judge.deps == ("collect-r1", "sft-s3") and judge.spec["sampler"] == "sft-s3"
    assert judge.outputs == (p.judge_dataset(1),) and "concurrency" not in judge.spec["judge"]
    assert judge.spec["judge"]["k"] == 10 and judge.spec["judge"]["url"] == ""  # the built-in reference judge
    assert st["judge_dpo-s4"].deps == ("dataset-judge-r1", "sft-s4") and "eval-judge_dpo-s4" in st
    names = [s.name for s in p.stages()]
    assert names.index("sft-s3") < names.index("dataset-judge-r1") < names.index("judge_dpo-s3")
    t = p.train_config("judge_dpo-s3", "judge_dpo", "sft-s3", 1, 3)
    assert t.method == "dpo" and t.data.train_dir == p.judge_dataset(1) and 0.009 < t.data.margin < 0.01
    _, one = _plan(methods=("sft", "dpo", "judge_dpo"))
    for name in ("collect-r1", "dataset-r1", "sft", "dpo", "eval-dpo"):
        assert one[name].spec == plain[name].spec, name
    _, fast = _plan(methods=("sft", "dpo", "judge_dpo"), judge=dict(concurrency=16))
    assert fast["dataset-judge-r1"].spec == one["dataset-judge-r1"].spec  # how fast the judge is asked, not what
    _plan(methods=("sft", "judge_dpo"), judge=dict(k=1, mode="dpo1"))
    for bad in (
        dict(url="http://127.0.0.1:9"),
        dict(model="gpt-4o"),
        dict(k=1),
        dict(tasks=0),
        dict(mode="dpo4"),
        dict(threshold=101.0),
    ):
        with pytest.raises(ValueError, match="judge_dpo' need"):
            _plan(methods=("sft", "judge_dpo"), judge=bad)


def test_the_control_trains_on_from_sft_as_tgpo_does_with_the_sft_loss_alone():
    """methods with 'sft_more': SFT (continued) starts from each seed's SFT, on the tree dataset, with TGPO's learning
    rate, schedule, batch and passes and TGPO's SFT items (shortest successful branches, no copy-swap), the SFT loss
    and no reference; adding it leaves the other stages' specs alone. The large preset trains it on every seed."""
    _, plain = _plan("default", methods=("sft", "tgpo"), eval=dict(models=("sft", "tgpo")))
    p, plan = _plan("default", methods=("sft", "sft_more", "tgpo"), eval=dict(models=("sft", "sft_more", "tgpo")))
    assert plan["sft_more"].deps == ("dataset-r1", "sft") and plan["sft_more"].spec["init"] == "sft"
    assert "eval-sft_more" in plan
    for name in ("collect-r1", "dataset-r1", "sft", "tgpo", "eval-sft", "eval-tgpo"):
        assert plan[name].spec == plain[name].spec and plan[name].deps == plain[name].deps, name
    t, g, s = (p.train_config(n, n, "sft", 1) for n in ("sft_more", "tgpo", "sft"))
    assert t.method == "sft" and t.loss.reference == "none" and t.model.path == p.model_dir("sft")
    assert t.data.train_dir == g.data.train_dir == p.dataset(1)
    assert t.optim.learning_rate == g.optim.learning_rate == 2e-4 != s.optim.learning_rate
    for section, key in (
        ("optim", "schedule"),
        ("optim", "warmup_fraction"),
        ("train", "batch_size"),
        ("train", "num_epochs"),
        ("train", "max_steps"),
        ("data", "sft_shortest"),
    ):
        assert t[section][key] == g[section][key], (section, key)
    assert t.data.copy_swap == 0 < s.data.copy_swap and t.train.num_epochs == 1
    # the large preset leaves the control out for its 3 h budget; named, it follows each seed's SFT there too
    large, lp = _plan("large", methods=("sft", "sft_more", "kto", "kto_tree", "dpo", "tgpo"))
    assert "sft_more" not in _plan("large")[0].cfg.methods
    assert [lp[f"sft_more-s{k}"].deps for k in range(3)] == [("dataset-r1", f"sft-s{k}") for k in range(3)]
    assert {f"eval-sft_more-s{k}" for k in range(3)} <= set(lp)


def test_two_phase_sft_trains_the_control_recipe_on_from_the_first_phase(monkeypatch):
    """sft_continue (the large preset's): the SFT stage trains SFT as configured into <name>-first, then on from
    that model with the control's recipe into <name>, the model the preference methods start from; its spec holds
    the second phase's recipe (a changed recipe retrains SFT) and its outputs both phases; off, SFT's stage is as
    before. SFT's curve with it (the second phase's snapshots alone) is refused."""
    from experiment.pipeline import Pipeline

    assert _plan("large")[0].cfg.sft_continue and not _plan("default")[0].cfg.sft_continue
    _, plain = _plan("large", sft_continue=False)
    p, plan = _plan("large")
    st = plan["sft-s1"]
    assert st.spec["continue"] == p._spec("sft_more") and st.spec["train"] == plain["sft-s1"].spec["train"]
    assert p.path("runs", "sft-s1-first") in st.outputs and p.model_dir("sft-s1-first") in st.outputs
    assert plan["tgpo-s1"].spec["init"] == "sft-s1" and plan["tgpo-s1"].deps == ("dataset-r1", "sft-s1")
    assert "continue" not in plain["sft-s1"].spec and len(plain["sft-s1"].outputs) == 2
    calls = []
    monkeypatch.setattr(Pipeline, "_train_one", lambda self, *a: calls.append(a) or {"steps": len(calls)})
    assert p.train("sft-s1", "sft", 1, "base-s1", 1) == {"steps": 2, "first_phase": {"steps": 1}}
    assert calls == [("sft-s1-first", "sft", 1, "base-s1", 1), ("sft-s1", "sft_more", 1, "sft-s1-first", 1)]
    calls.clear()
    p.train("sft_more-s1", "sft_more", 1, "sft-s1", 1)  # the control itself stays one phase, from SFT
    assert calls == [("sft_more-s1", "sft_more", 1, "sft-s1", 1)]
    _plan("default", sft_continue=True, eval=dict(curve_methods=("tgpo",)))
    with pytest.raises(ValueError, match="sft_continue with SFT's curve"):
        _plan("default", sft_continue=True, eval=dict(curve_methods=("*",)))  # every evaluated method's, SFT's too


def test_the_control_makes_as_many_updates_as_tgpo(tmp_path):
    """TGPO's pass goes over every node with a pair or an SFT item, the control's data are SFT items: the
    control's steps are TGPO's (its nodes // batch × passes, counted here from the records) unless set."""
    from tgpo_jax.data import examples as ex
    from tgpo_jax.data.io import write_dataset
    from tgpo_jax.data.synthetic import synthetic_nodes

    p, _ = _plan("default", methods=("sft", "sft_more", "tgpo"), out=str(tmp_path))
    # + single-branch nodes whose one step no successful run took: no pair, no SFT item, not in TGPO's pass
    failed = [
        dataclasses.replace(n, branches=[dataclasses.replace(b, n_success=0) for b in n.branches])
        for n in synthetic_nodes(30, seed=4, num_branches=1)
    ]
    nodes = synthetic_nodes(40, seed=3) + failed
    write_dataset(nodes, p.dataset(1))
    pc = ex.PairConfig(sft_shortest=True)
    usable = sum(1 for n in nodes if ex.preference_pairs(n, pc) or ex.sft_items(n, pc))
    assert p.cfg.tgpo.train.batch_size == 8 and p.cfg.tgpo.train.num_epochs == 1 and usable < len(nodes)
    assert p.planned_steps("tgpo", 1) == usable // 8 != len(nodes) // 8
    p.cfg.tgpo.train.max_steps = 7
    assert p.planned_steps("tgpo", 1) == 7


def test_pair_rules_are_in_a_stage_spec_only_when_on():
    """``data.distance_agree`` (and ``distance_strict``, KTO's ``kto_reachable``): off, a training stage's spec is
    the one runs made before the option recorded (no key), so they stay done; on for one method, only its stage (and
    what depends on it) changes, and its collation applies the rule."""
    from tgpo_jax.training.loop import collate_config

    p, off = _plan(methods=("sft", "dpo", "tgpo"))
    assert all("distance_agree" not in off[m].spec["train"]["data"] for m in ("sft", "dpo", "tgpo"))
    c = p.cfg
    c.tgpo.data.distance_agree = True
    q, on = _plan(methods=("sft", "dpo", "tgpo"), tgpo=c.tgpo)
    assert on["tgpo"].spec["train"]["data"]["distance_agree"] is True
    assert on["sft"].spec == off["sft"].spec and on["dpo"].spec == off["dpo"].spec
    assert collate_config(q.train_config("tgpo", "tgpo", "sft", 1)).pairs.distance_agree
    assert not collate_config(q.train_config("dpo", "dpo", "sft", 1)).pairs.distance_agree
    assert "distance_strict" not in on["tgpo"].spec["train"]["data"]  # off: the spec runs before it recorded
    c.tgpo.data.distance_strict = True
    r, strict = _plan(methods=("sft", "dpo", "tgpo"), tgpo=c.tgpo)
    assert strict["tgpo"].spec["train"]["data"]["distance_strict"] is True and strict["dpo"].spec == off["dpo"].spec
    assert collate_config(r.train_config("tgpo", "tgpo", "sft", 1)).pairs.distance_strict
    # plain KTO's kto_reachable the same way
    k, kto_off = _plan(methods=("sft", "kto"))
    assert "kto_reachable" not in kto_off["kto"].spec["train"]["data"]
    k.cfg.kto.data.kto_reachable = True
    k2, kto_on = _plan(methods=("sft", "kto"), kto=k.cfg.kto)
    assert kto_on["kto"].spec["train"]["data"]["kto_reachable"] is True and kto_on["sft"].spec == kto_off["sft"].spec
    assert collate_config(k2.train_config("kto", "kto", "sft", 1)).pairs.kto_reachable


def test_weight_sigma_reaches_the_collation_and_is_in_a_stage_spec_only_when_not_branch():
    """``data.weight_sigma`` (TGPO's sigma, docs/method.md §4): at "branch" the training stages' specs are those of
    runs made before the option (no key); "occurrence" for TGPO changes only its stage and reaches its collation; an
    unknown reading is refused by validate, before any stage runs."""
    from experiment.pipeline import validate
    from tgpo_jax.training.loop import collate_config

    p, off = _plan(methods=("sft", "dpo", "tgpo"))
    assert all("weight_sigma" not in off[m].spec["train"]["data"] for m in ("sft", "dpo", "tgpo"))
    assert collate_config(p.train_config("tgpo", "tgpo", "sft", 1)).pairs.weight_sigma == "branch"
    c = p.cfg
    c.tgpo.data.weight_sigma = "occurrence"
    q, on = _plan(methods=("sft", "dpo", "tgpo"), tgpo=c.tgpo)
    assert on["tgpo"].spec["train"]["data"]["weight_sigma"] == "occurrence"
    assert on["sft"].spec == off["sft"].spec and on["dpo"].spec == off["dpo"].spec
    assert collate_config(q.train_config("tgpo", "tgpo", "sft", 1)).pairs.weight_sigma == "occurrence"
    assert collate_config(q.train_config("dpo", "dpo", "sft", 1)).pairs.weight_sigma == "branch"
    c.tgpo.data.weight_sigma = "state"
    with pytest.raises(ValueError, match=r"tgpo\.data: weight_sigma must be one of"):
        validate(c)


def test_family_balance_is_in_a_stage_spec_only_when_on():
    """``data.family_balance`` (SFT): off, SFT's stage spec is the one runs made before the option (no key); on, SFT's
    spec names it and its collation weighs the families."""
    from tgpo_jax.training.loop import collate_config

    p, off = _plan(methods=("sft", "tgpo"))
    assert "family_balance" not in off["sft"].spec["train"]["data"]
    assert not collate_config(p.train_config("sft", "sft", "base", 1)).family_balance
    c = p.cfg
    c.sft.data.family_balance = True
    q, on = _plan(methods=("sft", "tgpo"), sft=c.sft)
    assert on["sft"].spec["train"]["data"]["family_balance"] is True
    assert collate_config(q.train_config("sft", "sft", "base", 1)).family_balance


def test_item_names_change_multi_cart_tasks_only_and_the_stage_specs_tell_the_wordings_apart():
    """The shop words multi_cart's items "second item [..]" (its default, every preset's); "number" re-creates the
    "item 2 [..]" tasks of runs made with it (the same tasks otherwise). A stage's spec names the wording where it
    words tasks and is not "number": runs made before the setting (number) and the default's and large's runs
    (which recorded "ordinal") keep their stages, and a collection made with one wording never counts as one made
    with the other; off the shop, and on the shop without multi_cart, the spec has no such key."""
    from configs.pipeline import get_config
    from experiment.pipeline import Pipeline
    from rollout.envs.shop.env import ShopEnv

    ordinal, number = (ShopEnv(n_train=30, n_test=2, item_names=n).tasks("train") for n in ("ordinal", "number"))
    assert [t.instruction for t in ShopEnv(n_train=30, n_test=2).tasks("train")] == [t.instruction for t in ordinal]
    assert [t.goal for t in number] == [t.goal for t in ordinal]
    for a, b in zip(number, ordinal):
        if a.family != "multi_cart":
            assert a.instruction == b.instruction
            continue
        for j, (nth, it) in enumerate(zip(("first", "second", "third"), a.goal["items"])):
            assert f"item {j + 1} [{it['title']}]" in a.instruction
            assert f"{nth} item [{it['title']}]" in b.instruction
    with pytest.raises(ValueError, match="item_names='2nd'"):
        ShopEnv(item_names="2nd")

    def env_spec(preset="tiny", families=None, **env):
        c = get_config(preset)
        c.env.update(env)
        if families is not None:
            c.tasks.families = families
        return next(s for s in Pipeline(c).stages() if s.name == "collect-r1").spec["env"]

    assert env_spec("default")["item_names"] == "ordinal"  # as the default's runs recorded it
    assert env_spec(families=())["item_names"] == "ordinal"
    assert "item_names" not in env_spec(families=(), item_names="number")  # as runs before the setting
    assert "item_names" not in env_spec()  # the tiny preset's procedure tasks: no item to name


PYDOCS = "docs/pydocs_tasks.jsonl"  # the worked example's task file (docs/tasks.md): one family, 'search'


def _on_task_file(preset: str, **over):
    """A preset on the worked example's task file, with config overrides, as the pipeline checks it (no browser)."""
    from configs.pipeline import get_config
    from experiment.pipeline_config import normalize, validate

    c = get_config(preset)
    c.env.update(name="tasks", tasks=PYDOCS, origin="http://127.0.0.1:8765")
    c.update(over)
    normalize(c)
    validate(c)
    return c


@pytest.mark.parametrize("preset", ["default", "tiny", "large", "smollm2", "miniwob"])
def test_every_pipeline_preset_runs_on_a_task_file(preset):
    """configs/pipeline.py's promise: any preset with env.name=tasks. What a preset chose for its own environment
    (the tiny preset's shop family, the miniwob preset's tasks and title, the shop's item wording) does not apply
    there; the file's tasks are selected as the pipeline selects them."""
    from collections import Counter

    from experiment.pipeline import Pipeline
    from rollout.collect import select_tasks
    from rollout.envs.taskfile import TaskFileEnv

    c = _on_task_file(preset)
    assert c.tasks.families == () and c.env.item_names == "ordinal"
    assert c.title == "tgpo-jax: TGPO on pydocs_tasks.jsonl"
    env = TaskFileEnv(PYDOCS, c.env.origin)  # not started: no site needed to select
    train = select_tasks(env, "train", c.tasks.num_train, (), c.tasks.families)
    assert Counter(t.family for t in train) == {"search": min(45, c.tasks.num_train)}
    stages = {s.name: s for s in Pipeline(c, progress=False).stages()}
    assert "item_names" not in stages["collect-r1"].spec["env"]
    assert stages["collect-r1"].spec["tasks"]["families"] == []


def test_task_families_given_on_a_task_file_are_kept_and_checked():
    """--config.tasks.families on a task file is honoured (unlike the preset's own), and a family the file lacks is
    an error before any work; on the shop the tiny preset keeps its family."""
    from configs.pipeline import get_config
    from experiment.pipeline_config import normalize

    assert _on_task_file("tiny", tasks=dict(families=("search",))).tasks.families == ("search",)
    assert _on_task_file("miniwob", title="mine").title == "mine"
    with pytest.raises(
        ValueError,
        match=r"tasks.families \['webshop'\]: not in docs/pydocs_tasks.jsonl, whose "
        r"families are \['search'\]",
    ):
        _on_task_file("tiny", tasks=dict(families=("search,webshop",)))  # as the command line gives it
    c = get_config("tiny")
    normalize(c)
    assert c.tasks.families == ("procedure",) and c.title == "tgpo-jax: TGPO on the embedded shop"
    c = get_config("default")
    c.env.name = "miniwob"
    normalize(c)
    assert c.env.item_names == "ordinal"  # a shop setting, off the shop: its default


def test_train_layers_is_in_a_stage_spec_only_when_set_and_reaches_the_model():
    """``model.train_layers`` (train the top layers only): at 0 (all layers) the training stages' specs are those of
    runs made before the option; set for SFT it changes SFT's stage and reaches the ModelConfig the run builds."""
    from tgpo_jax.training.loop import model_overrides

    p, off = _plan(methods=("sft", "tgpo"))
    assert all("train_layers" not in off[m].spec["train"]["model"] for m in ("sft", "tgpo"))
    assert model_overrides(p.train_config("sft", "sft", "base", 1).model)["train_layers"] == 0
    c = p.cfg
    c.sft.model.train_layers = 2
    q, on = _plan(methods=("sft", "tgpo"), sft=c.sft)
    assert on["sft"].spec["train"]["model"]["train_layers"] == 2 and on["sft"].spec != off["sft"].spec
    assert model_overrides(q.train_config("sft", "sft", "base", 1).model)["train_layers"] == 2


def test_the_retired_sft_weightings_are_refused_and_runs_made_with_them_keep_their_stages(tmp_path):
    """data.decision_weight, data.head_weight and data.head_words (SFT loss weightings tried for the from-scratch
    model, measured and not kept) are gone: a command line that sets one fails before any work, naming it. The
    training stages' specs still hold them at the one value every run had, so a run whose markers recorded them
    keeps its stages, and one made with another value is reported as changed."""
    import json
    import os
    import subprocess
    import sys

    from experiment.pipeline import SPEC_RETIRED
    from experiment.stages import StageRunner, StaleStage, fingerprints

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.pipeline",
            "--config=configs/pipeline.py:tiny",
            "--config.sft.data.decision_weight=2",
            f"--config.out={tmp_path / 'never'}",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0 and "'decision_weight'" in r.stderr.splitlines()[-1], r.stderr[-2000:]
    assert not (tmp_path / "never").exists()
    p, stages = _plan(methods=("sft", "tgpo"))
    assert not any(k in p.cfg[m].data for m in ("sft", "tgpo") for _, k in SPEC_RETIRED)
    assert SPEC_RETIRED == {("data", "decision_weight"): 1.0, ("data", "head_weight"): 1.0, ("data", "head_words"): 1}
    for m in ("sft", "tgpo"):  # as configs/base.py set them: 1.0, 1.0, 1 (the fingerprint hashes their JSON)
        data = stages[m].spec["train"]["data"]
        assert json.dumps([data["decision_weight"], data["head_weight"], data["head_words"]]) == "[1.0, 1.0, 1]"

    def mark(specs):
        out = [dataclasses.replace(s, spec=specs.get(s.name, s.spec)) for s in stages.values()]
        for s, fp in zip(out, fingerprints(out).values()):
            os.makedirs(tmp_path / "stages", exist_ok=True)
            (tmp_path / "stages" / f"{s.name}.json").write_text(
                json.dumps({"name": s.name, "fingerprint": fp, "spec": s.spec, "deps": list(s.deps), "status": "done"})
            )

    mark({})  # a finished run whose markers hold the fields
    runner = StageRunner(str(tmp_path), list(stages.values()), log=lambda _: None)
    runner.check()
    assert {r["state"] for r in runner.status()} == {"done"}
    spec = json.loads(json.dumps(stages["sft"].spec))
    spec["train"]["data"]["decision_weight"] = 3.0
    mark({"sft": spec})
    with pytest.raises(StaleStage, match=r"sft \(done\): train\.data\.decision_weight: 3\.0 -> 1\.0"):
        StageRunner(str(tmp_path), list(stages.values()), log=lambda _: None).check()
