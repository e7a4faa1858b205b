"""The main job as stages: start the shop → collect K episodes per training task with the behaviour
policy → (from-scratch models: train a tokenizer on them, initialise the base) → build the dataset → SFT from the
base → DPO, KTO, KTO-Tree, TGPO from SFT → [rounds ≥ 2: collect with the previous round's policy, build, train
from it with it as the reference] → evaluate every model in the browser on held-out tasks → report → export the
best model to Hugging Face format.

Every stage writes the artefact its separate launcher writes (``launch.collect``'s episodes, ``build_dataset``'s
ArrayRecord shards, ``launch.train``'s Orbax run, ``launch.export``'s HF directory, ``launch.evaluate``'s
``eval.json``, ``launch.report``'s report) under ``cfg.out``:

    episodes/round<r>/  tokenizer/  datasets/round<r>/  runs/<model>/  models/<model>/ (HF, for the next stage and
    evaluation)  eval/<model>/  report/  export/ (the best model)  stages/<stage>.json (resume markers)

Stage bookkeeping (skip / resume / refuse on a changed configuration / --redo) is ``experiment.stages``; the
configuration's checks ``experiment.pipeline_config``, model names ``experiment.names``, the report and export
stages ``experiment.outputs``, Agent Q's stages ``experiment.agent_q``, the judge recipe's
``experiment.judge_dpo``. What stays here is the plan and one method per stage body, so that a stage's spec, inputs
and outputs read in one place.
Model names: ``sft``, ``dpo``, ``kto``, ``kto_tree``, ``tgpo`` for round 1, ``<method>-r<r>`` for round r ≥ 2, and
with several training seeds (``train_seeds``) ``<method>-s<seed>``: seed k initialises its own base (from-scratch
models) or LoRA adapters, shuffles the data with seed k, and its preference methods start from SFT seed k.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys

from experiment import agent_q, judge_dpo, outputs
from experiment.names import MODEL_KINDS, display_name, first_phase, model_name, parse_name
from experiment.pipeline_config import curve_methods, normalize, plain as _plain, prompt_config, shop_kwargs, validate
from experiment.stages import Stage, StageRunner
import recipes
from tgpo_jax.files import write_text_atomic

log = logging.getLogger(__name__)
NOT_IN_SPEC = {
    ("train", "progress"),
    ("train", "output_dir"),
    ("data", "train_dir"),
    ("data", "eval_dir"),
    ("model", "path"),
    ("model", "tokenizer"),
}
# training settings added after runs were made: at these values (their defaults) they stay out of a stage's spec, so
# the runs made before each option keep their stages
SPEC_DEFAULTS = {
    ("loss", "rpo_alpha"): 0,
    ("loss", "decision_window"): 0,
    ("loss", "sft_alpha"): 0,
    ("loss", "margin_copies"): True,
    ("data", "distance_agree"): False,
    ("data", "distance_strict"): False,
    ("data", "family_balance"): False,
    ("data", "kto_reachable"): False,
    ("data", "weight_sigma"): "branch",
    ("model", "train_layers"): 0,
}
# training settings removed from the configs after runs were made, at the value every run had them (the SFT loss
# weightings tried for the from-scratch model and not kept): a
# training stage's spec still names them so, so the runs made while they existed keep their stages (a run made with
# another value is reported changed)
SPEC_RETIRED = {("data", "decision_weight"): 1.0, ("data", "head_weight"): 1.0, ("data", "head_words"): 1}


class Pipeline:
    """The main job over one output directory: its paths, environment, tasks and stages, and the work of each stage."""

    def __init__(self, cfg, *, progress: bool = True):
        recipes.register_all()  # a preset's model.init / model.freeze may name a recipe's (scratch-copy's)
        normalize(cfg)
        validate(cfg)
        self.cfg = cfg
        self.out = os.path.abspath(cfg.out)
        self.progress = progress
        self._env = None
        self.scratch = not cfg.sft.model.path
        self.rounds = int(cfg.rounds.count)
        self.seeds = tuple(cfg.train_seeds)

    # ------------------------------------------------------------ paths
    def path(self, *parts: str) -> str:
        """A path under the run's output directory."""
        return os.path.join(self.out, *parts)

    def episodes(self, r: int) -> str:
        """Round r's episodes directory."""
        return self.path("episodes", f"round{r}")

    def dataset(self, r: int) -> str:
        """Round r's tree dataset directory."""
        return self.path("datasets", f"round{r}")

    def search_episodes(self, r: int) -> str:
        """Round r's search collection (search_dpo's episodes and trees)."""
        return self.path("episodes", f"search-round{r}")

    def search_dataset(self, r: int) -> str:
        """Round r's search dataset (search_dpo's node records from the search trees)."""
        return self.path("datasets", f"search-round{r}")

    def traj_dataset(self, r: int) -> str:
        """Round r's trajectory pairs (traj_dpo's dataset: successful vs failed episodes of a task)."""
        return self.path("datasets", f"traj-round{r}")

    def judge_dataset(self, r: int) -> str:
        """Round r's judge-scored samples (judge_dpo's dataset: DPO-1 / DPO-2 / DPO-3 records)."""
        return self.path("datasets", f"judge-round{r}")

    def model_dir(self, name: str) -> str:
        """The HF directory (or checkpoint name) of a model: the base as configured, else models/<name>.
        ``base`` is the first seed's base."""
        if parse_name(name)[0] == "base" and not self.scratch:
            return self.cfg.sft.model.path
        if name == "base":
            name = self.base_name(self.seeds[0])
        return self.path("models", name)

    def tag(self, seed: int) -> int | None:
        """The seed as it appears in model names: only when several seeds are trained."""
        return seed if len(self.seeds) > 1 else None

    def base_name(self, seed: int) -> str:
        """The model name of the base of training seed ``seed``."""
        return model_name("base", 1, self.tag(seed))

    @property
    def tokenizer(self) -> str:
        """The tokenizer's path: the run's own (from scratch), else the configured one or the model's."""
        if self.scratch:
            return self.path("tokenizer")
        return self.cfg.sft.model.tokenizer or self.cfg.sft.model.path

    @property
    def env(self):
        """The environment the config names, started on first use."""
        if self._env is None:
            from rollout.envs import make_env

            if self.cfg.env.name == "shop":
                kw = shop_kwargs(self.cfg)
            elif self.cfg.env.name == "tasks":
                kw = {"path": self.cfg.env.tasks, "origin": self.cfg.env.origin or None}
            else:  # MiniWoB: a seed per task, enough for num_train / num_test tasks of one task family each
                kw = {"train_seeds": self.cfg.tasks.num_train, "test_seeds": self.cfg.tasks.num_test}
            self._env = make_env(self.cfg.env.name, **kw)
            self._env.start()
        return self._env

    def close(self) -> None:
        """Stop the environment, if started."""
        if self._env is not None:
            self._env.stop()
            self._env = None

    def tasks(self, split: str):
        """The ``split``'s tasks the run uses (the first num_train / num_test of the configured families)."""
        from rollout.collect import select_tasks

        n = self.cfg.tasks.num_train if split == "train" else self.cfg.tasks.num_test
        return select_tasks(self.env, split, n, (), tuple(f for f in self.cfg.tasks.families if f))

    # ------------------------------------------------------------ the plan
    def trained(self) -> list[tuple[str, str, int, int]]:
        """(model name, method, round, seed) of every training stage, in order."""
        out = [
            (model_name(m, 1, self.tag(s)), m, 1, s) for s in self.seeds for m in MODEL_KINDS if m in self.cfg.methods
        ]
        for r in range(2, self.rounds + 1):
            out += [(model_name(m, r), m, r, self.seeds[0]) for m in self.cfg.rounds.methods]
        return out

    def evaluated(self) -> list[str]:
        """Table 1's models: 'base' (the first seed's) and every trained model of the methods in eval.models."""
        wanted = self.cfg.eval.models or ("base", *self.cfg.methods)  # the order is trained()'s: Table 1's
        names = ["base"] if "base" in wanted else []
        for name, method, r, _ in self.trained():
            if method in wanted or r > 1:
                names.append(name)
        return names

    def previous(self, method: str, r: int) -> str:
        """The model of ``method`` that round ``r`` >= 2 starts from (or collects with): its round r-1 model, or the
        first seed's SFT where round r-1 did not train that method (SFT itself is trained in round 1 only)."""
        tag = self.tag(self.seeds[0])
        if method in (self.cfg.methods if r == 2 else self.cfg.rounds.methods):  # 'sft' only in round 1's
            return model_name(method, r - 1, tag if r == 2 else None)
        return model_name("sft", 1, tag)

    def curve_models(self) -> list[str]:
        """The models whose success-vs-steps curve is measured: the first seed's model of each curve method."""
        return [model_name(m, 1, self.tag(self.seeds[0])) for m in curve_methods(self.cfg)]

    def search_models(self) -> list[str]:
        """The models also evaluated with search at inference: the first seed's model of each eval.search_models."""
        return [model_name(m, 1, self.tag(self.seeds[0])) for m in self.cfg.eval.search_models]

    def stages(self) -> list[Stage]:
        """Every stage of the run in dependency order, each with the spec its output depends on."""
        c = self.cfg
        env_spec = {"env": self.env_spec(), "tasks": _plain(c.tasks)}
        collect_spec = {k: v for k, v in _plain(c.collect).items() if k not in ("contexts", "max_batch")}
        prompt_spec = self.prompt_spec()
        # the tokenizer's spec holds the ids' place only, not the layout (train_tokenizer reads untruncated prompts
        # in the default order)
        ids_spec = {"page_ids": c.page_ids} if c.page_ids != "before" else {}
        data_spec = {"dataset": _plain(c.dataset), **prompt_spec}
        out: list[Stage] = []
        tok_deps: tuple[str, ...] = ()
        for r in range(1, self.rounds + 1):
            if r == 1:
                deps, policy = (), c.collect.policy
            else:
                deps = (self.previous(c.rounds.behaviour, r),)
                policy = f"model {deps[0]}"
            spec = {**env_spec, "collect": dict(collect_spec), "policy": policy}
            runs, tree_tasks = self.runs(r)
            if (runs, tree_tasks) != (c.collect.runs, c.collect.tree_tasks):
                spec["collect"].update(runs=runs, tree_tasks=tree_tasks)
            if r > 1:
                spec["collect"]["constrain"] = bool(c.rounds.constrain)
                spec["collect"]["temperature"] = self.temperature(r)  # unset: collect.temperature, as before
            if r > 1 or not policy.startswith("oracle"):  # a model policy: its prompt and sampling matter
                spec.update(prompt_spec, **self.thoughts_spec())
            else:
                for k in ("temperature", "top_p", "max_tokens"):
                    spec["collect"].pop(k)
                spec.update(self.thoughts_spec(oracle=True))
            out.append(
                Stage(
                    f"collect-r{r}",
                    lambda r=r: self.collect(r),
                    spec,
                    deps,
                    (self.episodes(r),),
                    f"{runs} runs x "
                    f"{min(tree_tasks, c.tasks.num_train) if tree_tasks else c.tasks.num_train} training tasks"
                    f"{' (1 run on the rest)' if tree_tasks and runs > 1 else ''}, policy {policy}",
                )
            )
            if r == 1:
                if self.scratch:
                    out.append(
                        Stage(
                            "tokenizer",
                            self.train_tokenizer,
                            {**_plain(c.tokenizer), **ids_spec},
                            ("collect-r1",),
                            (self.tokenizer,),
                            f"SentencePiece, {c.tokenizer.vocab_size} pieces",
                        )
                    )
                    lm = c.pretrain_window > 0
                    bases = [self.base_name(sd) for sd in self.seeds]
                    out.append(
                        Stage(
                            "base",
                            self.init_base,
                            {
                                "model": self._spec("sft")["model"],
                                "prompt_style": c.prompt_style,
                                "pretrain": self._spec("pretrain") if lm else None,
                                "window": c.pretrain_window,
                                "seeds": list(self.seeds),
                            },
                            ("tokenizer",),
                            tuple(self.path("models", b) for b in bases)
                            + tuple(self.path("models", b.replace("base", "init")) for b in bases)
                            + tuple(self.path("runs", b) for b in bases)
                            + (self.path("datasets", "pretrain"),),
                            f"from-scratch '{c.sft.model.scratch}' model, {len(bases)} seed(s)"
                            + (", language-model pretraining on the round-1 page text" if lm else ""),
                        )
                    )
                    tok_deps = ("tokenizer", "base")
                else:
                    tok_deps = ()
            rounds = tuple(range(1, r + 1)) if c.rounds.accumulate else (r,)
            out.append(
                Stage(
                    f"dataset-r{r}",
                    lambda r=r: self.build(r),
                    {**data_spec, "rounds": rounds},
                    tuple(f"collect-r{k}" for k in rounds) + tok_deps,
                    (self.dataset(r),),
                    "merged trees, process rewards, node records",
                )
            )
            if r == 1 and "traj_dpo" in c.methods:  # the same episodes as the trees: the same browser budget
                out.append(
                    Stage(
                        "dataset-traj-r1",
                        lambda: agent_q.build_trajectories(self),
                        {**data_spec, "traj": _plain(c.traj)},
                        ("collect-r1",) + tok_deps,
                        (self.traj_dataset(1),),
                        "trajectory pairs: successful vs failed episodes of a task",
                    )
                )
            out += self._training_stages(r)
        # one model's evaluation does not depend on which others are evaluated: adding a model to eval.models runs
        # its evaluation only (the report and export, which read the evaluations, re-run: experiment.stages)
        eval_cfg = {
            k: v for k, v in _plain(c.eval).items() if not k.startswith(("curve_", "search_")) and k != "models"
        }
        eval_spec = {"eval": eval_cfg, **env_spec, **prompt_spec, **self.thoughts_spec()}
        for name in self.evaluated():
            deps = (name,) if name != "base" or self.scratch else ()
            out.append(
                Stage(
                    f"eval-{name}",
                    lambda n=name: self.evaluate(n),
                    eval_spec,
                    deps,
                    (self.path("eval", name),),
                    f"{display_name(name)} on {c.tasks.num_test} held-out tasks",
                )
            )
        evals = tuple(f"eval-{n}" for n in self.evaluated())
        # (without curve_methods: adding a method's curve runs that curve only)
        curve_spec = {
            **eval_spec,
            "curve": {k: v for k, v in _plain(c.eval).items() if k.startswith("curve_") and k != "curve_methods"},
        }
        curves = tuple(f"curve-{n}" for n in self.curve_models())
        for name in self.curve_models():
            out.append(
                Stage(
                    f"curve-{name}",
                    lambda n=name: self.curve(n),
                    curve_spec,
                    (name,),
                    (self.path("curves", name),),
                    f"{display_name(name)}: success vs training steps on {c.eval.curve_tasks} tasks",
                )
            )
        searches = tuple(f"search-{n}" for n in self.search_models())
        # the search's settings without search.tasks (how many training tasks search_dpo's collection searches)
        search_spec = {
            **eval_spec,
            "search": {k: v for k, v in _plain(c.search).items() if k != "tasks"},
            "search_tasks": c.eval.search_tasks,
        }
        for name in self.search_models():
            out.append(
                Stage(
                    f"search-{name}",
                    lambda n=name: agent_q.search_evaluate(self, n),
                    search_spec,
                    (name,),
                    (self.path("eval-search", name),),
                    f"{display_name(name)} with Agent Q's search at inference on "
                    f"{min(c.eval.search_tasks, c.tasks.num_test)} held-out tasks",
                )
            )
        out.append(
            Stage(
                "report",
                self.report,
                {"title": c.title, "trees": c.trees},
                evals + curves + searches + ("dataset-r1",),
                (self.path("report"),),
                "Markdown + HTML, Table 1 and 2, comparisons, claims, curves, trees",
            )
        )
        out.append(
            Stage(
                "export",
                self.export,
                _plain(c.export),
                evals,
                (self.path("export"),),
                "the best trained model as a Hugging Face directory",
            )
        )
        return out

    def _training_stages(self, r: int) -> list[Stage]:
        out = []
        for name, method, rr, seed in self.trained():
            if rr != r:
                continue
            if method == "search_dpo" and not any(s.name == "collect-search-r1" for s in out):
                out += agent_q.search_stages(self)
            if method == "judge_dpo" and not any(s.name == "dataset-judge-r1" for s in out):
                out += judge_dpo.judge_stages(self)
            if r == 1:
                init = self.base_name(seed) if method == "sft" else model_name("sft", 1, self.tag(seed))
            else:
                init = self.previous(method, r)
            from_base = parse_name(init)[0] == "base"
            data = {
                "traj_dpo": "dataset-traj-r1",
                "search_dpo": "dataset-search-r1",
                "judge_dpo": "dataset-judge-r1",
            }.get(method, f"dataset-r{r}")
            deps = (data,) + (("base",) if from_base and self.scratch else () if from_base else (init,))
            spec, outs = {"train": self._spec(method), "init": init, "seed": seed}, ()
            if self.two_phase(method):  # the second phase's recipe is part of what SFT is
                spec["continue"] = self._spec("sft_more")
                outs = (self.path("runs", first_phase(name)), self.model_dir(first_phase(name)))
            out.append(
                Stage(
                    name,
                    lambda n=name, m=method, r=r, i=init, sd=seed: self.train(n, m, r, i, sd),
                    spec,
                    deps,
                    (self.path("runs", name), self.model_dir(name)) + outs,
                    f"{display_name(name)} from {init}"
                    + (", then a second phase with SFT (continued)'s recipe" if outs else ""),
                )
            )
        return out

    def prompt_spec(self) -> dict:
        """The prompt settings, as the stages that build or read prompts name them (options at their defaults left
        out: runs made before an option keep their stage specs)."""
        from rollout.policies.prompt import KEEP_RECENT

        c = self.cfg
        spec = {
            "prompt_tokens": c.prompt_tokens,
            "prompt_style": c.prompt_style,
            "history_thoughts": c.history_thoughts,
        }
        spec.update({"page_ids": c.page_ids} if c.page_ids != "before" else {})
        spec.update({"history_last": True} if c.history_last else {})
        spec.update({"keep_recent": c.keep_recent} if c.keep_recent != KEEP_RECENT else {})
        spec.update({"page_cut": c.page_cut} if c.page_cut != "end" else {})
        return spec

    def env_spec(self) -> dict:
        """``cfg.env`` as a stage's spec holds it. multi_cart's item wording (``item_names``) is in it where it words
        tasks (the shop, with multi_cart among the families) and differs from "number" ("item 2 [..]"), the wording
        of every run made before the setting: a collection made with one wording never counts as one made with the
        other, and runs of either keep their stages (the default's and large's, "ordinal", recorded it)."""
        c = self.cfg
        env = _plain(c.env)
        families = [f for f in c.tasks.families if f]
        if c.env.name != "shop" or (families and "multi_cart" not in families) or env.get("item_names") == "number":
            env.pop("item_names", None)
        return env

    def thoughts_spec(self, oracle: bool = False) -> dict:
        """The thought wording (``thoughts``), in the spec of a stage that it changes: an oracle collection (its
        thoughts; with ``oracle``, where their ids stand too, ``page_ids``) and a stage that decodes with a model
        (the valid-argument decoding's rules follow the wording). Left out for ``scratch_copy``, the wording of every
        run made before the setting (its ids stand after the name whatever ``page_ids``), so those runs keep their
        stages, and a collection made with another wording never counts as one made with this."""
        c = self.cfg
        if c.thoughts == "scratch_copy":
            return {}
        return {"thoughts": c.thoughts, **({"page_ids": c.page_ids} if oracle else {})}

    def _spec(self, method: str) -> dict:
        t = _plain(self.cfg[method])
        for section, key in NOT_IN_SPEC:
            t.get(section, {}).pop(key, None)
        for (section, key), default in SPEC_DEFAULTS.items():
            if key in t.get(section, {}) and t[section][key] == default:
                t[section].pop(key)
        for (section, key), value in SPEC_RETIRED.items():
            if section in t:
                t[section].setdefault(key, value)
        return t

    def runner(self, redo=()) -> StageRunner:
        """A ``StageRunner`` over the stages, re-running ``redo`` and what depends on it."""
        return StageRunner(self.out, self.stages(), redo)

    def run(self, redo=(), until: str | None = None) -> dict:
        """Run the stages (up to ``until``), after saving the config; each stage's result by name. The environment is
        stopped at the end."""
        os.makedirs(self.out, exist_ok=True)
        write_text_atomic(self.path("pipeline_config.json"), self.cfg.to_json_best_effort(indent=1))
        try:
            return self.runner(redo).run(until)
        finally:
            self.close()

    # ------------------------------------------------------------ stages
    def policy(
        self,
        spec: str,
        temperature: float,
        top_p: float,
        max_tokens: int,
        max_batch: int,
        seed: int,
        step: int | None = None,
        constrain: bool = False,
    ):
        """The policy ``spec`` names (a model directory, the oracle, ...), set up to sample with these settings and
        prompted as the run configures."""
        from experiment.evaluate import load_policy
        from tgpo_jax.models.sampler import SamplingParams

        params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        return load_policy(
            spec,
            params=params,
            prompt=self.prompt_config(),
            max_batch=max_batch,
            env=self.env,
            seed=seed,
            step=step,
            page_ids=self.cfg.page_ids,
            constrain=constrain,
            thoughts=self.cfg.thoughts,
        )

    @staticmethod
    def with_policy(policy, coro):
        """Run the coroutine ``coro`` to completion, then close ``policy``; its result."""

        async def go():
            try:
                return await coro
            finally:
                await policy.close()

        return asyncio.run(go())

    def collect(self, r: int) -> dict:
        """The collection stage of round ``r``: episodes of the training tasks with the round's behaviour policy; the
        outcome counts. ``RuntimeError`` when every episode errored."""
        from rollout.collect import CollectConfig, collect_async
        from rollout.harness.runner import HarnessConfig

        c = self.cfg.collect
        if r == 1 and c.reuse:
            return self.reuse_episodes(c.reuse)
        seed = c.seed + r - 1  # a fresh draw of mistakes / samples each round
        if r == 1:
            spec = self.model_dir("base") if c.policy == "base" else c.policy
            constrain = c.constrain
        else:
            spec = self.model_dir(self.previous(self.cfg.rounds.behaviour, r))
            constrain = self.cfg.rounds.constrain
        temperature = self.temperature(r)
        policy = self.policy(spec, temperature, c.top_p, c.max_tokens, c.max_batch, seed, constrain=constrain)
        harness = HarnessConfig(
            max_steps=c.max_steps, step_slack=c.step_slack, budget_tokens=c.budget_tokens, screenshots=c.screenshots
        )
        runs, tree_tasks = self.runs(r)
        ccfg = CollectConfig(
            out_dir=self.episodes(r),
            runs=runs,
            tree_tasks=tree_tasks,
            seed=seed,
            contexts=c.contexts,
            harness=harness,
            progress=self.progress,
        )
        meta = {
            "split": "train",
            "locale": self.cfg.env.locale,
            "round": r,
            "behaviour": spec,
            "temperature": temperature,
            **(self.thoughts_spec(oracle=True) if spec.startswith("oracle") else {}),
        }
        counts = self.with_policy(policy, collect_async(self.env, self.tasks("train"), policy, ccfg, meta=meta))
        if not counts.get("success", 0) + counts.get("failure", 0) + counts.get("skipped", 0):
            raise RuntimeError(
                f"round {r}: every episode errored ({counts}); the errors are in {self.episodes(r)} and the log above"
            )
        return counts

    def runs(self, r: int) -> tuple[int, int]:
        """(K runs, on the first N tasks: tree_tasks) of round r's collection (``rounds.runs`` for rounds >= 2)."""
        c, rd = self.cfg.collect, self.cfg.rounds
        if r > 1 and rd.runs:
            return int(rd.runs), int(rd.tree_tasks)
        return int(c.runs), int(c.tree_tasks)

    def temperature(self, r: int) -> float:
        """Round r's collection temperature (``rounds.temperature`` for rounds >= 2 when set, i.e. >= 0)."""
        t = self.cfg.rounds.temperature
        return float(t if r > 1 and t >= 0 else self.cfg.collect.temperature)

    def reuse_episodes(self, src: str) -> dict:
        """Round 1 from an earlier collection (its own tasks.jsonl decides the tasks): copied, so this run owns it."""
        from rollout.recording import iter_episodes

        if not os.path.isdir(os.path.join(src, "episodes")):
            raise FileNotFoundError(f"collect.reuse={src!r}: not an episodes directory (no episodes/ inside)")
        tmp = self.episodes(1) + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        shutil.rmtree(self.episodes(1), ignore_errors=True)
        os.replace(tmp, self.episodes(1))
        eps = list(iter_episodes(self.episodes(1)))
        return {
            "reused": os.path.abspath(src),
            "episodes": len(eps),
            "success": sum(e.summary["success"] for e in eps),
        }

    def train_tokenizer(self) -> dict:
        """Train the from-scratch SentencePiece tokenizer on round 1's prompts and outputs and the training
        instructions; the number of texts and the vocabulary size."""
        from rollout.policies.prompt import SYSTEM_PROMPT, SYSTEM_PROMPTS, PromptConfig
        from rollout.recording import iter_episodes, read_tasks
        from trees.dataset import BuildConfig, step_prompt
        from tgpo_jax.models.tokenizer import train_sentencepiece

        tasks = {t.task_id: t for t in read_tasks(self.episodes(1))}
        # every prompt's lines as the policy will see them (system text included, once per step: its real frequency),
        # untruncated and in the default order, so that the layout settings (history_last, keep_recent, page_cut)
        # leave the tokenizer as it is
        system = SYSTEM_PROMPTS[self.cfg.prompt_style]
        whole = PromptConfig(1 << 20, system, self.cfg.history_thoughts, self.cfg.page_ids)
        texts, cfg = [SYSTEM_PROMPT], BuildConfig(prompt=whole)
        for ep in iter_episodes(self.episodes(1)):
            for t, step in enumerate(ep.steps):
                texts += [m["content"] for m in step_prompt(tasks.get(ep.task_id), ep, t, cfg)]
                texts.append(step.get("output") or "")
        # every training task's instruction: the words of strings still to be typed get whole pieces, as they will
        # in held-out tasks (test tasks never enter the corpus)
        texts += [t.instruction for t in self.env.tasks("train")]
        tmp = self.tokenizer + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        # element ids as single pieces: the scratch_copy recipe's (tokenizer.id_pieces), for its copy circuit
        pieces = recipes.get("scratch_copy").id_pieces(self.cfg.tokenizer.get("id_pieces", 0))
        train_sentencepiece(texts, tmp, vocab_size=self.cfg.tokenizer.vocab_size, extra_pieces=pieces)
        shutil.rmtree(self.tokenizer, ignore_errors=True)
        os.replace(tmp, self.tokenizer)
        return {"texts": len(texts), "vocab_size": self.cfg.tokenizer.vocab_size}

    def init_base(self) -> dict:
        """One from-scratch base per training seed (``model.init_seed`` = the seed), optionally pretrained."""
        from tgpo_jax import sharding as shd
        from tgpo_jax.models.hf_export import export_hf
        from tgpo_jax.models.tokenizer import load_tokenizer
        from tgpo_jax.models.transformer import param_count
        from tgpo_jax.training.loop import build_model

        tokenizer = load_tokenizer(self.tokenizer)
        out = {"scratch": self.cfg.sft.model.scratch, "init": self.cfg.sft.model.init, "seeds": list(self.seeds)}
        for seed in self.seeds:
            t = self.cfg.sft.copy_and_resolve_references()
            t.model.path, t.model.tokenizer, t.model.init_seed = "", self.tokenizer, seed
            model = build_model(t, shd.make_mesh(tuple(t.mesh.shape)), tokenizer)
            out["parameters"] = param_count(model)
            name = self.base_name(seed)
            if self.cfg.pretrain_window <= 0:
                export_hf(model, self.path("models", name), tokenizer)
                outputs.save_policy_file(self.cfg, self.path("models", name))
                continue
            init = self.path("models", name.replace("base", "init"))
            export_hf(model, init, tokenizer)
            out[f"pretrain-{name}"] = self.pretrain(tokenizer, init, name, seed)
        return out

    def pretrain(self, tokenizer, init: str, name: str, seed: int) -> dict:
        """Language modelling on the round-1 page text (experiment/lm_data.py) from the initialised model."""
        from experiment.lm_data import lm_records
        from rollout.policies.prompt import SYSTEM_PROMPTS
        from tgpo_jax.data.io import write_dataset
        from tgpo_jax.training.loop import train
        from tgpo_jax.training.restore import export_run

        data = self.path("datasets", "pretrain")
        records = lm_records(
            self.episodes(1), tokenizer, self.cfg.pretrain_window, SYSTEM_PROMPTS[self.cfg.prompt_style]
        )
        write_dataset(
            records,
            data,
            num_shards=1,
            overwrite=True,
            config={"window": self.cfg.pretrain_window},
            extra={"kind": "lm", "windows": len(records)},
        )
        t = self.cfg.pretrain.copy_and_resolve_references()
        t.model.path, t.model.tokenizer, t.model.scratch = init, "", ""
        t.train.seed, t.data.shuffle_seed = seed, seed
        t.data.train_dir, t.data.eval_dir = data, ""
        # + EOS, + 25 %: a decoded window encoded again may re-segment at its edges
        t.data.max_completion_len = max(t.data.max_completion_len, self.cfg.pretrain_window * 5 // 4 + 1)
        t.data.max_len = max(t.data.max_len, t.data.max_prompt_len + t.data.max_completion_len)
        t.train.output_dir = self.path("runs", name)
        t.train.progress = t.train.progress and self.progress
        outputs.save_policy_file(self.cfg, t.train.output_dir)  # creates the run directory
        summary = train(t)
        export_run(self.path("runs", name), self.path("models", name))
        outputs.save_policy_file(self.cfg, self.path("models", name))
        return {
            "windows": len(records),
            "steps": summary.get("final_step"),
            "loss": float((summary.get("final") or {}).get("train/loss", float("nan"))),
        }

    def tree_config(self):
        """The ``TreeConfig`` of the config's dataset section."""
        from trees.build import TreeConfig

        d = self.cfg.dataset
        return TreeConfig(
            merge=d.merge,
            phash_threshold=d.phash_threshold,
            guard=d.guard,
            alpha=d.alpha,
            q_aggregate=d.q_aggregate,
            gamma=d.gamma,
            l_min=d.l_min,
        )

    def prompt_config(self):
        """How the run's models are prompted, in training and in the browser (the run's prompt settings)."""
        return prompt_config(self.cfg)

    def build_config(self):
        """How the datasets' prompts and trees are built: as the policy prompts (the run's prompt settings)."""
        from trees.dataset import BuildConfig

        d = self.cfg.dataset
        return BuildConfig(
            tree=self.tree_config(),
            splits=("train",),
            num_shards=d.num_shards,
            prompt=self.prompt_config(),
            tokenizer=self.tokenizer,
            include_invalid=d.include_invalid,
            overwrite=True,
        )

    def build(self, r: int) -> dict:
        """The dataset stage of round ``r``: repair damaged episodes, then build the tree dataset from the round's
        episodes (all rounds' with ``rounds.accumulate``); its summary."""
        from trees.dataset import build_dataset

        bcfg = self.build_config()
        rounds = range(1, r + 1) if self.cfg.rounds.accumulate else (r,)
        repaired = {k: n for k in rounds if (n := self.repair_episodes(k))}
        pools: dict[str, set] = {}  # every training task's typed strings: what copy-swap augmentation draws from
        for task in self.env.tasks("train"):
            for text, kind in self.env.typed_strings(task).items():
                pools.setdefault(kind, set()).add(text)
        summary = build_dataset(
            [self.episodes(k) for k in rounds],
            self.dataset(r),
            bcfg,
            progress=self.progress,
            typed_strings=self.env.typed_strings,
            copy_pools={k: sorted(v) for k, v in pools.items()},
        )
        summary.pop("copy_pools", None)  # in the manifest; the stage marker keeps the counts only
        summary["broken_episodes"] = len(summary["broken_episodes"])
        if repaired:
            summary["recollected"] = repaired
        return summary

    def repair_episodes(self, r: int) -> int:
        """Round r's damaged episodes (a summary or steps file changed or cut after the episode was sealed) are
        moved to ``episodes/round<r>/damaged/`` and collected again (the collection's resume runs exactly those,
        with their own seeds), so the dataset never silently loses one. -> how many."""
        from rollout.recording import set_aside
        from trees.dataset import load_episodes

        _, broken = load_episodes(self.episodes(r))
        for b in broken:
            set_aside(self.episodes(r), b["path"], b["error"])
        if broken:
            log.warning("round %d: %d damaged episode(s) set aside; collecting them again", r, len(broken))
            self.collect(r)
        return len(broken)

    def train_config(self, name: str, method: str, init: str, r: int, seed: int = 0):
        """The launch.train config of model ``name``: ``method``'s section with the initial model, seed, dataset and
        output directory filled in."""
        t = self.cfg[method].copy_and_resolve_references()
        t.model.path = self.model_dir(init)
        t.model.tokenizer, t.model.scratch = "", ""
        t.model.lora_seed, t.train.seed, t.data.shuffle_seed = seed, seed, seed  # seed = initialisation + data order
        data = {
            "traj_dpo": self.traj_dataset(r),
            "search_dpo": self.search_dataset(r),
            "judge_dpo": self.judge_dataset(r),
        }.get(method, self.dataset(r))
        t.data.train_dir, t.data.eval_dir = data, ""
        t.data.max_prompt_len = self.cfg.prompt_tokens  # the prompts were built to this budget
        t.data.max_len = max(t.data.max_len, t.data.max_prompt_len + t.data.max_completion_len)
        t.train.output_dir = self.path("runs", name)
        t.train.progress = t.train.progress and self.progress
        if name in self.curve_models():  # snapshots for the success-vs-steps curve
            t.train.curve_points = self.cfg.eval.curve_points
        return t

    def planned_steps(self, method: str, r: int) -> int:
        """The updates ``method``'s round-r run makes: its max_steps, else its passes over the nodes of round r's
        dataset that its collation can use, as ``tgpo_jax.training.loop.train`` counts them."""
        from tgpo_jax.data.pipeline import NodeExamples, steps_per_epoch
        from tgpo_jax.training.loop import collate_config

        t = self.cfg[method]
        if t.train.max_steps:
            return int(t.train.max_steps)
        nodes = NodeExamples(self.dataset(r), None, collate_config(t))  # which nodes are usable needs no tokenizer
        return steps_per_epoch(nodes, t.train.batch_size) * int(t.train.num_epochs)

    def two_phase(self, method: str) -> bool:
        """Whether ``method``'s stage trains two phases: SFT with ``sft_continue``."""
        return method == "sft" and bool(self.cfg.sft_continue)

    def train(self, name: str, method: str, r: int, init: str, seed: int = 0) -> dict:
        """The training stage of model ``name`` (both phases where the method has two), its model exported; the run's
        final metrics."""
        if self.two_phase(method):
            # two phases: SFT as configured into <name>-first, then on from it with the control's recipe (sft_more:
            # TGPO's learning rate, schedule and updates on the shortest successful branches, no copy-swap)
            first = self._train_one(first_phase(name), "sft", r, init, seed)
            return {**self._train_one(name, "sft_more", r, first_phase(name), seed), "first_phase": first}
        return self._train_one(name, method, r, init, seed)

    def _train_one(self, name: str, method: str, r: int, init: str, seed: int = 0) -> dict:
        from tgpo_jax.training.restore import export_run
        from tgpo_jax.training.loop import train

        t = self.train_config(name, method, init, r, seed)
        if method == "sft_more" and not t.train.max_steps:
            # the control makes TGPO's number of updates (a pass over its SFT items is not one over TGPO's nodes):
            # the same schedule over the same steps, so what differs is the loss alone
            t.train.max_steps = self.planned_steps("tgpo", r)
        # creates the run directory; its checkpoints are then prompted as trained (launch.* --step)
        outputs.save_policy_file(self.cfg, t.train.output_dir)
        summary = train(t)
        _, line = export_run(self.path("runs", name), self.model_dir(name))
        outputs.save_policy_file(self.cfg, self.model_dir(name))
        log.info(line)
        return json.loads(
            json.dumps(
                {
                    "final": summary.get("final"),
                    "steps": summary.get("final_step"),
                    "per_epoch": summary.get("per_epoch"),
                },
                default=float,
            )
        )

    def _evaluate(self, model: str, out_dir: str, tasks, label: str, step: int | None = None) -> dict:
        from experiment.evaluate import EvalConfig, evaluate_async, format_table

        e = self.cfg.eval
        policy = self.policy(model, e.temperature, e.top_p, e.max_tokens, e.max_batch, 0, step, constrain=e.constrain)
        ecfg = EvalConfig(
            out_dir=out_dir,
            env=self.cfg.env.name,
            split="test",
            num_tasks=len(tasks),
            families=tuple(f for f in self.cfg.tasks.families if f),
            seeds=tuple(e.seeds),
            runs=e.runs,
            contexts=e.contexts,
            max_steps=e.max_steps,
            step_slack=e.step_slack,
            temperature=e.temperature,
            progress=self.progress,
            redundancy=e.redundancy,
        )
        meta = {
            "model": label,
            "top_p": e.top_p,
            "max_tokens": e.max_tokens,
            "prompt_tokens": self.cfg.prompt_tokens,
            "constrain": bool(e.constrain),
        }
        result = self.with_policy(policy, evaluate_async(self.env, tasks, policy, ecfg, meta=meta))
        print(format_table(result), file=sys.stderr)
        if not result["episodes"]:
            raise RuntimeError(
                f"evaluation of {label}: every episode errored ({result['errored']}); the errors are "
                f"in {out_dir} and the log above"
            )
        return result

    def evaluate(self, name: str) -> dict:
        """The evaluation stage of model ``name`` on the held-out tasks: mean, 95% intervals and episode count."""
        result = self._evaluate(self.model_dir(name), self.path("eval", name), self.tasks("test"), name)
        return {"mean": result["mean"], "ci95": result["ci95"], "episodes": result["episodes"]}

    def curve(self, name: str) -> dict:
        """Success of the snapshots of ``name``'s run on the first ``eval.curve_tasks`` held-out tasks."""
        from tgpo_jax.training.checkpoint import Checkpointer
        from tgpo_jax.training.loop import snapshot_period

        ck = Checkpointer(self.path("runs", name, "checkpoints"))
        steps = ck.all_steps()
        ck.close()
        final = max(steps)
        period = snapshot_period(final, self.cfg.eval.curve_points)
        tasks = self.tasks("test")[: self.cfg.eval.curve_tasks]
        points = {}
        # the curve's snapshots only, not the last periodic checkpoints kept beside them; the final model's point
        # comes from its full evaluation (same tasks)
        for step in (s for s in steps if s % period == 0 and s < final):
            out = self.path("curves", name, f"step{step}")
            res = self._evaluate(self.path("runs", name), out, tasks, f"{name}@{step}", step=step)
            points[step] = res["mean"]["success_rate"]
        return {"steps": sorted(points), "final_step": final, "tasks": [t.task_id for t in tasks], "success": points}

    # the run's outputs (experiment/outputs.py)
    def eval_results(self) -> dict[str, dict]:
        """Model name -> evaluation of every evaluated model (``outputs.eval_results``)."""
        return outputs.eval_results(self)

    def best(self) -> str:
        """The trained model to export (``outputs.best``)."""
        return outputs.best(self)

    def groups(self) -> dict[str, dict[int, dict]]:
        """Table 1's rows: method label -> {training seed: evaluation} (``outputs.groups``)."""
        return outputs.groups(self)

    def report(self) -> dict:
        """The report stage (``outputs.report``)."""
        return outputs.report(self)

    def export(self) -> dict:
        """The export stage (``outputs.export``)."""
        return outputs.export(self)
