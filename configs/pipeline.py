"""The main job's configuration (launch/pipeline.py). Presets after ':':

  default  the embedded default: local shop (all three task families), the from-scratch 'copy' model (3.8M
           parameters with a planted copy circuit, its own SentencePiece vocabulary), SFT and TGPO, CPU, made for
           30 minutes on 2 cores (the bundled SmolLM2-135M does not fit that budget on a CPU)
  tiny     the same stages in a few minutes (CI's end-to-end test)
  large    the learning-result configuration: 400 training tasks, trees on 100, the paper's five methods, three
           training seeds, 100 held-out tasks, SFT in two phases (about 2.25 h of stages on 2 cores)
  smollm2  the bundled SmolLM2-135M-Instruct (its own tokenizer and chat template), its top 10 layers fine-tuned, on
           the shop's three families: the compact prompt at 512 of its tokens, SFT then DPO and TGPO, 100 held-out
           tasks (the base model's row with --config.eval.models=base,sft,dpo,tgpo); float32 on CPUs without bf16
           units (model.dtype 'auto')
  miniwob  learning in minutes: SFT of the 'copy' model on three MiniWoB++ tasks (focus-text, click-button,
           click-link), evaluated on held-out seeds (the slow learning test, tests/test_learning.py)
What each preset measured is in results/ (the report stage's ledger entries); the comments below say why a setting
is what it is.
The shop is the same whatever model a preset trains, its tasks' wording included (env.item_names "ordinal"); what
only the from-scratch 'copy' model needs (its planted circuit and the circuit's freeze, element ids as tokenizer
pieces, the noisy oracle's thoughts worded for the circuit) is its recipe, recipes/scratch_copy, which the default,
large, tiny and miniwob presets select (model.init / model.freeze copy_circuit, tokenizer.id_pieces, thoughts
scratch_copy).
Any preset runs on your own site with ``--config.env.name=tasks --config.env.tasks=FILE.jsonl`` (docs/tasks.md):
the task families and title it picks for its own environment, and the shop's env.item_names, then do not apply.

Every field can be overridden: ``--config.collect.runs=8 --config.tgpo.loss.beta=0.2 --config.rounds.count=2``.
The training sections (sft, dpo, kto, kto_tree, tgpo, and the baselines trained when ``methods`` names them:
Agent Q's traj_dpo, trajectory-level DPO, and search_dpo, DPO on a search collection's pairs; the computer-use
recipe's judge_dpo, DPO on judge-scored samples) are whole launch.train configs (configs/<method>.py; search_dpo's
and judge_dpo's are configs/dpo.py); the pipeline fills in their model path, dataset and output directory.
"""

import importlib
from typing import Callable, NamedTuple

import ml_collections

from rollout.policies.prompt import KEEP_RECENT
from experiment.names import MODEL_KINDS, SECTION_METHOD
from experiment.pipeline_config import SHOP_TITLE
from tgpo_jax.data.collate import METHODS, PREFERENCE

# the baselines: preference methods from SFT on other pairs than the tree's (Agent Q's two and the judge recipe's)
BASELINES = ("traj_dpo", "search_dpo", "judge_dpo")


def _training(preset: str) -> dict:
    return {m: importlib.import_module(f"configs.{SECTION_METHOD.get(m, m)}").get_config(preset) for m in MODEL_KINDS}


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
    """The main job's configuration for the preset ``preset`` (``PRESETS``): the defaults, then the preset's
    overrides, then the control's recipe (``_control``)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown pipeline preset {preset!r}; choose from {', '.join(PRESETS)}")
    c = _defaults(preset, PRESETS[preset].model)
    PRESETS[preset].overrides(c)
    # what the preset chose for its own environment: with another env.name (your task file) its task families and
    # title do not apply, unless the command line sets them (experiment/pipeline_config.py:for_environment)
    c.preset_env = ml_collections.ConfigDict(dict(name=c.env.name, families=c.tasks.families, title=c.title))
    _control(c)
    return c


def _defaults(preset: str, model_preset: str) -> ml_collections.ConfigDict:
    """Every field at its default, the training sections for the model preset ``model_preset``."""
    c = ml_collections.ConfigDict()
    c.preset = preset
    c.out = "runs/pipeline"
    c.title = SHOP_TITLE  # with env.name=tasks: "… on <task file>"
    # name: shop | miniwob | tasks (your own site: env.tasks = a JSONL task file, docs/tasks.md; env.origin = where
    # the site is served, for the file's relative start URLs)
    # item_names (shop, en): multi_cart names its items "second item [..]" ("ordinal", the shop's wording for every
    # model); "number" ("item 2 [..]", the wording before it) only re-creates the tasks of runs made with it
    c.env = ml_collections.ConfigDict(dict(name="shop", locale="en", seed=0, tasks="", origin="", item_names="ordinal"))
    c.tasks = ml_collections.ConfigDict(
        dict(
            families=(),  # task families of both splits ('' / () = all: webshop, procedure, multi_cart)
            num_train=30,  # first N training tasks (families interleaved)
            num_test=12,  # first N held-out (test) tasks
        )
    )
    # round 1's behaviour policy: a noisy oracle (its mistakes give the tree its branches; its rates positional,
    # 'oracle:0.15,0.1,0.05,0.02', or named, 'oracle:wrong_choice=0.15,loop=0.1'), 'base', or any launch.evaluate
    # --model value; rounds >= 2 collect with the previous round's policy (rounds.behaviour)
    c.collect = ml_collections.ConfigDict(
        dict(
            policy="oracle:0.15,0.1,0.05,0.02",
            runs=4,
            seed=0,
            contexts=4,
            max_steps=40,
            step_slack=10,
            screenshots=False,
            tree_tasks=0,  # > 0: K runs on the first tree_tasks training tasks (their trees), one run on the others
            temperature=0.7,
            top_p=1.0,
            max_tokens=64,
            max_batch=8,
            budget_tokens=1024,
            constrain=False,  # valid-argument decoding for a collecting model (its stored log-probs stay unconstrained)
            reuse="",  # an existing episodes directory (launch.collect's output) to use as round 1 (ablations)
        )
    )
    # round 1's trained models (preference methods start from sft, so it stays in); 'traj_dpo' adds Agent Q's
    # trajectory-level DPO on the same round-1 episodes (successful vs failed runs of a task: needs collect.runs > 1)
    c.methods = METHODS
    # SFT in two phases: as configured (sft), then on from that model with the control's recipe (sft_more: TGPO's
    # learning rate, schedule and number of updates, the shortest successful branches, no copy-swap); the second
    # phase's model is SFT, and the preference methods start from it (experiment/pipeline.py:Pipeline.train)
    c.sft_continue = False
    # training seeds: each seed initialises its own model and data order; preference methods of seed k start from
    # SFT seed k. Several seeds: Table 1 pools them (mean ± 95 % interval over seeds) and compares methods pairwise
    c.train_seeds = (0,)
    # the policy prompt's budget in the model's tokens (dataset prompts are rebuilt to it)
    c.prompt_tokens = 320
    # system text: 'full' (the grammar, rollout/policies/prompt.py) or 'compact' (one line: from-scratch models)
    c.prompt_style = "full"
    # characters of each earlier step's thought kept in the history (0 = commands only: the command says it)
    c.history_thoughts = 160
    # where page lines put element ids: "before" (as rendered) or "after" the name (rollout/policies/prompt.py)
    c.page_ids = "before"
    # how the noisy oracle words its thoughts (rollout/policies/thoughts.py): "plain" English, elements named as the
    # page shows them, for any model; the from-scratch copy model's presets select its recipe's wording
    # (recipes/scratch_copy/thoughts.py), made for its planted copy circuit. Saved with each model (policy.json): the
    # valid-argument decoding's rules follow it
    c.thoughts = "plain"
    # from-scratch models: trained on round 1; id_pieces > 0: element ids [0]..[n-1] as single pieces (the
    # scratch_copy recipe's, recipes/scratch_copy: what its planted copy circuit matches on)
    c.tokenizer = ml_collections.ConfigDict(dict(vocab_size=2000, id_pieces=0))
    c.dataset = ml_collections.ConfigDict(
        dict(
            merge="either",
            phash_threshold=0,
            guard=True,
            alpha=3.0,
            q_aggregate="mean",
            gamma=0.9,
            l_min="env",
            include_invalid=True,
            num_shards=2,
        )
    )
    # methods with 'traj_dpo': pairs per task (failure i against success i mod n; trees/trajectory_records.py). A pair's
    # steps (the shared ones left out) must fit traj_dpo.data.max_branches, else it is left out
    c.traj = ml_collections.ConfigDict(dict(max_pairs=4))
    # methods with 'search_dpo': Agent Q's search (rollout/search/, docs/method.md §9.1) as a second round-1 collection
    # on the first `tasks` training tasks, the first seed's SFT model proposing k commands per expanded node (sampled
    # at `temperature`, valid-argument decoding when `constrain`), ranked by its own log-probs; UCB1 constant c, value
    # blend alpha. Its browser steps are in the stage's result, beside round 1's
    c.search = ml_collections.ConfigDict(
        dict(tasks=20, simulations=8, k=3, c=1.0, alpha=0.5, temperature=1.0, constrain=True)
    )
    # methods with 'judge_dpo': the computer-use recipe (docs/method.md §9.2) on round 1's successful episodes of the
    # first `tasks` training tasks: at each step k candidates sampled from the first seed's SFT model (served on
    # loopback; T 0.7, top-k 10, top-p 0.9), scored 0-100 by the judge at `url` (an OpenAI-compatible endpoint;
    # `model` its name, the key from $OPENAI_API_KEY) against the recorded action; pairs DPO-1 (`mode` dpo1: the
    # recorded action against candidates under `threshold`), dpo2 (candidate against candidate) or dpo3 (both).
    # url '' = a judge without a model: 100 for the recorded action's command, 0 for any other
    c.judge = ml_collections.ConfigDict(
        dict(url="", model="", k=10, mode="dpo3", threshold=80.0, tasks=20, max_tokens=64, concurrency=4)
    )
    c.rounds = ml_collections.ConfigDict(
        dict(
            count=1,  # Agent Q's Algorithm 1: round r >= 2 collects with the round r-1 policy and uses it as reference
            # trained again in rounds >= 2, each from its own previous-round model (SFT where round 1 did not train it)
            methods=("tgpo",),
            behaviour="tgpo",  # whose previous-round model collects rounds >= 2 ('sft': SFT collects every round)
            accumulate=True,  # round r's trees hold the episodes of rounds 1..r (a replay buffer), else round r's only
            # rounds >= 2: K runs on the first tree_tasks training tasks (0 = collect.runs / collect.tree_tasks):
            # the policy's own runs of one task share states and part where it decides differently, so its mistakes
            # get pairs
            runs=0,
            tree_tasks=0,
            # rounds >= 2: the collecting model decodes as the evaluation does (valid-argument decoding), so the
            # trees hold the mistakes the deployed policy makes, not malformed text that decoding rules out
            constrain=True,
            # rounds >= 2: the collecting model's sampling temperature (< 0: collect.temperature). 0 collects the greedy
            # policy's own mistakes (the ones evaluation sees); > 0 samples around them, more varied but less on-policy
            temperature=-1.0,
        )
    )
    c.eval = ml_collections.ConfigDict(
        dict(
            models=(),  # Table 1's rows; () = base and every trained model (later rounds are added)
            seeds=(0,),
            runs=1,
            contexts=4,
            max_steps=40,
            step_slack=6,
            temperature=0.0,
            top_p=1.0,
            max_tokens=64,
            max_batch=8,
            # valid-argument decoding: every bracketed group is an id, option or quoted string the step offers, a
            # combobox is named as the oracle names it and not set twice on a page (rollout/policies/constrain.py);
            # it lifts the same models' held-out success
            constrain=True,
            redundancy="either",
            # success vs training steps: the first seed's model of each curve method ('*' alone: each trained method
            # Table 1 evaluates), evaluated at curve_points snapshots (the last is the final model) on the first
            # curve_tasks held-out tasks
            curve_methods=(),
            curve_points=4,
            curve_tasks=30,
            # Agent Q's search at inference (the `search` settings): these methods' first-seed models also search
            # each of the first search_tasks held-out tasks (solved = a simulation succeeded), reported beside their
            # plain success on the same tasks with the browser steps spent
            search_models=(),
            search_tasks=20,
        )
    )
    c.trees = 3  # tree pictures of this many training tasks in the report
    # the previous actions after the page, next to the answer cue, and how many of them stay before the page is cut
    # (rollout/policies/prompt.py)
    c.history_last = False
    c.keep_recent = KEEP_RECENT
    # how a page too long for the budget is cut: "end", or "text_first" (its text-only lines go first; prompt.py)
    c.page_cut = "end"
    c.export = ml_collections.ConfigDict(dict(dtype="", select="success_rate"))  # '' = the run's dtype

    c.update(_training(model_preset))
    # from-scratch models: language-model pretraining on the round-1 page text before SFT (experiment/lm_data.py);
    # pretrain_window = tokens per window, 0 = none (the base is the initialisation)
    c.pretrain = importlib.import_module("configs.sft").get_config(model_preset)
    c.pretrain.train.output_dir = "runs/base"
    c.pretrain.data.update(max_prompt_len=32)
    c.pretrain_window = 0  # off by default: 200 steps of it did not teach copying
    for m in MODEL_KINDS + ("pretrain",):
        t = c[m]
        t.train.progress = True
        t.train.save_every = 200
        t.train.async_checkpoint = False  # the next stage reads the checkpoint at once
        t.mesh.shape = (1, -1, 1)
    for m in PREFERENCE + BASELINES:
        c[m].train.num_epochs = 2
    # Agent Q's θ: search_dpo pairs two of a node's edges when their values Q = α·Q̃ + (1 − α)·Q̂ differ by more
    c.search_dpo.data.margin = 0.1
    # DPO-2 pairs candidates whose scores differ by at least min_gap = 1 point: q = score / 100, and pairs need
    # q_i - q_j > margin (trees/judge_pairs.py)
    c.judge_dpo.data.margin = 0.0099

    return c


def _scratch(c) -> None:
    """The from-scratch copy model's recipe (recipes/scratch_copy): the one-line system text, a commands-only history,
    the noisy oracle's thoughts worded for its planted circuit."""
    c.prompt_style, c.history_thoughts, c.thoughts = "compact", 0, "scratch_copy"


def _scratch_shop(c) -> None:
    """The copy model on the shop's three families (default and large): many tasks, one run each, its levers."""
    _scratch(c)
    # many distinct tasks, one run each (SFT diversity; the noisy oracle's detours still give trees branches)
    c.tasks.update(num_train=160, num_test=50)
    c.collect.update(runs=1)
    # wrong clicks undone at once (GO_BACK, then the right choice): one run holds the pair at the decision and
    # still succeeds, so more episodes train SFT (wrong buttons, the seventh rate, were measured and not kept)
    c.collect.policy = "oracle:0.15,0.1,0.05,0.02,1.0"
    # the copy model's levers: ids right after names, ids as single pieces, the gated recency term and the
    # two-token match of the planted circuit, SFT on the shortest successful branches. 384-token prompts, in
    # large too: 512 makes an SFT step half as slow again, and with page_cut text_first 384 keeps the command's
    # element
    c.prompt_tokens = 384
    c.page_ids = "after"
    # a page over the budget loses its text-only lines first: multi_cart product pages keep their comboboxes and
    # buttons, which the end cut loses
    c.page_cut = "text_first"
    c.tokenizer.update(vocab_size=2200, id_pieces=200)
    c.sft.data.sft_shortest = True
    # every task family weighs alike in SFT's loss (multi_cart held half the steps, and three "Add to cart" for
    # each "Buy Now", so webshop's "Buy Now" was drowned out; docs/method.md §7). The preference methods' SFT
    # term can take it too (data.family_balance): no change measured there
    c.sft.data.family_balance = True
    # the planted circuit's three-piece match (circuit_trigram), on the shop's "second item [..]" wording of
    # multi_cart's items: after adding an item the oracle's thought copies the task on to the next item or the
    # list's end, which the two-piece match cannot find
    for m in MODEL_KINDS:
        t = c[m]
        t.model.update(circuit_recency=20, circuit_bigram=0.7, circuit_trigram=0.5)
        t.data.update(max_len=c.prompt_tokens + 64, max_prompt_len=c.prompt_tokens, max_completion_len=64)
        t.train.update(batch_size=8)
        t.optim.update(warmup_fraction=0.05, schedule="cosine")
    c.sft.optim.learning_rate = 2e-3
    # more steps kept helping SFT; 750 is what the 30-minute budget leaves
    c.sft.train.max_steps = 750
    c.sft.data.copy_swap = 0.75  # new strings in the copied spans every epoch (tgpo_jax/data/augment.py)
    # 8 browser contexts, so the greedy model decodes batches of up to 8: the same outcomes as with 4, sooner
    c.eval.contexts = 8
    c.pretrain.data.update(max_len=300, max_prompt_len=32, max_completion_len=257)
    c.pretrain.train.update(batch_size=8, num_epochs=1, max_steps=200)
    c.pretrain.optim.update(learning_rate=2e-3, warmup_fraction=0.05, schedule="cosine")
    for m in PREFERENCE + BASELINES:
        c[m].optim.learning_rate = 2e-4
    for m in ("dpo", "tgpo"):
        # β 0.01 and no chosen-branch anchor: chosen among five TGPO variants on `large`'s held-out tasks 0-99,
        # then confirmed on tasks 100-199, which no choice had seen
        c[m].loss.update(beta=0.01, rpo_alpha=0.0)
        # an SFT term over every successful step (the nodes without pairs too), one pass: the pairs alone
        # move the few nodes they sit at and let the rest drift
        c[m].loss.sft_alpha = 1.0
        c[m].data.sft_shortest = True
        c[m].train.num_epochs = 1
        # pairs whose chosen branch is the longer way (an undone detour preferred by the mean) left out
        # (docs/method.md §5). DPO gets it too, so both learn from the same pairs
        c[m].data.distance_agree = True
        # and pairs of branches equally far from a goal (docs/method.md §5): they steadied TGPO across seeds
        # on `large`
        c[m].data.distance_strict = True
        # (data.margin, weight_norm and dataset.q_aggregate stay at their defaults: the alternatives measured
        # no better)
    for m in BASELINES:  # the baselines as our step-level DPO on the trees: its beta and anchor, one pass
        c[m].loss.update(beta=c.dpo.loss.beta, rpo_alpha=c.dpo.loss.rpo_alpha)
        c[m].train.num_epochs = 1


def _default(c) -> None:
    """The 30-minute budget: SFT and TGPO only, evaluated on 50 held-out tasks."""
    _scratch_shop(c)
    c.methods = ("sft", "tgpo")
    c.eval.models = ("sft", "tgpo")
    # the report's success-vs-training-steps plot is an option (--config.eval.curve_methods='*': three
    # snapshots of each evaluated method on the first 30 held-out tasks): its six evaluations do not fit the
    # 30 minutes on CPUs without AVX-512


def _large(c) -> None:
    """The learning result: the paper's five methods, three training seeds, 100 held-out tasks."""
    _scratch_shop(c)
    # the paper's five methods; the control sft_more (the preference methods' extra pass, as SFT) is added
    # with --config.methods=...,sft_more: after the two-phase SFT below it is a third pass, ~0.3 h more
    c.methods = ("sft", "kto", "kto_tree", "dpo", "tgpo")
    c.tasks.update(num_train=400, num_test=100)
    c.collect.update(runs=2, tree_tasks=100)  # K = 2 runs on 100 tasks for trees, one on the rest
    c.train_seeds = (0, 1, 2)  # seed = initialisation + data order; greedy evaluation
    c.sft.train.max_steps = 1000
    # SFT in two phases, the second with the control's recipe (a few minutes a seed): a stronger SFT for
    # every method to start from
    c.sft_continue = True
    # one pass, as DPO and TGPO get (two passes of KTO and KTO-Tree would add ~75 min over three seeds)
    for m in ("kto", "kto_tree"):
        c[m].train.num_epochs = 1


def _tiny(c) -> None:
    """The same stages in a few minutes: CI's end-to-end run."""
    _scratch(c)
    c.prompt_tokens = 256
    c.tasks.update(families=("procedure",), num_train=3, num_test=2)  # short episodes: CI-sized
    c.collect.update(runs=3, max_steps=8, contexts=3)
    c.tokenizer.vocab_size = 1000
    c.eval.update(max_steps=6, contexts=2, max_tokens=24)
    c.trees = 2
    for m in MODEL_KINDS:
        t = c[m]
        t.data.update(max_len=296, max_prompt_len=c.prompt_tokens, max_completion_len=40)
        t.train.update(batch_size=4, num_epochs=1, max_steps=3, progress=False)
        t.optim.update(learning_rate=1e-3, warmup_fraction=0.0, schedule="constant")
    c.pretrain_window = 64
    c.pretrain.data.update(max_len=112, max_prompt_len=32, max_completion_len=65)
    c.pretrain.train.update(batch_size=4, max_steps=5, progress=False)
    # three tasks' searches give a handful of nodes with pairs (3 at 8 simulations): one node per step
    c.search_dpo.train.batch_size = 1
    # enough SFT steps for valid commands, so round 2's model-collected tree has branches worth comparing
    c.sft.train.max_steps = 150
    c.sft.optim.learning_rate = 3e-3
    c.collect.temperature = 0.5


def _miniwob(c) -> None:
    """SFT of the copy model on three MiniWoB++ tasks in minutes: the slow learning test."""
    _scratch(c)
    c.title = "tgpo-jax: SFT on MiniWoB++"
    c.env.name = "miniwob"
    c.tasks.update(families=("focus-text", "click-button", "click-link"), num_train=90, num_test=30)
    c.collect.update(runs=1, max_steps=8, step_slack=4)
    c.methods, c.eval.models = ("sft",), ("sft",)
    c.prompt_tokens, c.history_thoughts = 256, 60
    c.tokenizer.update(vocab_size=1200, id_pieces=200)
    c.eval.update(max_steps=8, step_slack=2)
    t = c.sft
    # the rows measured here: prompt <= 228 tokens, action <= 17, row <= 243; 256 instead of 320 trains the
    # same tokens with less padding
    t.data.update(max_len=256, max_prompt_len=232, max_completion_len=24)
    t.train.update(batch_size=8, max_steps=150)
    t.optim.update(learning_rate=2e-3, warmup_fraction=0.05, schedule="cosine")
    t.model.update(circuit_recency=20, circuit_bigram=0.7)
    c.trees = 1


def _smollm2(c) -> None:
    """The bundled SmolLM2-135M-Instruct on the shop's three families, as a user fine-tunes a pretrained model."""
    # the bundled SmolLM2-135M-Instruct (its own tokenizer and chat template) on the shop's three families, as a
    # user fine-tunes a pretrained model: the shop's default wording, the noisy oracle with undone wrong clicks
    c.tasks.update(num_train=160, num_test=100)
    c.collect.update(runs=1, policy="oracle:0.15,0.1,0.05,0.02,1.0")
    c.methods = ("sft", "dpo", "tgpo")
    # an evaluation of 100 tasks takes as long as SFT on a 2-core CPU: the base model's row is an option
    # (--config.eval.models=base,sft,dpo,tgpo), so the three methods fit the 3-hour budget
    c.eval.models = ("sft", "dpo", "tgpo")
    c.eval.contexts = 8
    # the page cut to the budget text-only lines first (the elements a command acts on stay)
    c.prompt_style, c.history_thoughts, c.page_cut = "compact", 0, "text_first"
    c.prompt_tokens = 512
    # an output of up to 80 of its tokens: a thought that quotes the task's words for a long item name, then the
    # command that types it, takes up to 68 on the shop's tasks
    c.eval.max_tokens = c.collect.max_tokens = 80
    for m in MODEL_KINDS:
        t = c[m]
        t.data.update(max_len=c.prompt_tokens + 80, max_prompt_len=c.prompt_tokens, max_completion_len=80)
        # the top 10 of the 30 layers train: the 20 below run without a backward pass, 2.2x faster a step
        # than full fine-tuning (bench.step_time); without remat, as the backward then keeps 10 layers only
        t.model.update(train_layers=10, remat=False)
        # a step takes 20 s on a 2-core CPU: a checkpoint every 16 steps, so a killed run loses little
        t.train.update(batch_size=8, save_every=16)
        t.optim.update(warmup_fraction=0.05, schedule="cosine")
    c.sft.optim.learning_rate = 2e-4
    c.sft.train.num_epochs = 1
    # SFT imitates each node's shortest successful branches only: the noisy oracle's wrong clicks that its
    # successful runs undid (a wrong result, option or sort, then GO_BACK) are otherwise imitated as well
    c.sft.data.sft_shortest = True
    for m in PREFERENCE + BASELINES:
        c[m].optim.learning_rate = 5e-5
        c[m].train.num_epochs = 1
        # the chosen actions' NLL (RPO) rather than the SFT term over every node: an epoch is then the pair
        # nodes' (22 steps of 8) instead of all SFT's nodes again (156 steps, an hour at 20-30 s a step)
        c[m].loss.update(beta=0.1, **({"sft_alpha": 1.0} if m.startswith("kto") else {"rpo_alpha": 1.0}))
        c[m].data.update(sft_shortest=True, distance_agree=True, distance_strict=True)


class Preset(NamedTuple):
    """A preset: a short declaration of what it changes in the defaults."""

    about: str  # what it is for
    model: str  # the training sections' model preset (configs/models.py)
    overrides: Callable[[ml_collections.ConfigDict], None]  # its changes to the defaults


PRESETS = {
    "default": Preset(
        "the embedded default in 30 minutes on 2 cores: the copy model, SFT and TGPO", "scratch-copy", _default
    ),
    "tiny": Preset("the same stages in a few minutes (CI's end-to-end test)", "tiny", _tiny),
    "large": Preset("the learning result: five methods, three seeds, 100 held-out tasks", "scratch-copy", _large),
    "smollm2": Preset(
        "the bundled SmolLM2-135M-Instruct, its top 10 layers trained, SFT, DPO, TGPO", "smollm2-135m", _smollm2
    ),
    "miniwob": Preset(
        "SFT of the copy model on three MiniWoB++ tasks (the slow learning test)", "scratch-copy", _miniwob
    ),
}


def _control(c) -> None:
    """sft_more, the control for the preference methods' SFT term: SFT from SFT with TGPO's learning rate, schedule,
    batch and SFT items (its shortest successful branches, no copy-swap, as TGPO's data), the SFT loss alone; with
    max_steps 0 it makes TGPO's number of updates (experiment/pipeline.py:Pipeline.planned_steps).
    On `large` this control alone once lifted SFT as far as DPO and TGPO went.
    Set here, after the presets: an override of tgpo's schedule on the command line must name sft_more too."""
    t, s = c.tgpo, c.sft_more
    s.optim.update(
        **{k: t.optim[k] for k in ("learning_rate", "warmup_steps", "warmup_fraction", "schedule", "end_lr_fraction")}
    )
    s.train.update(**{k: t.train[k] for k in ("batch_size", "num_epochs", "max_steps")})
    s.data.update(sft_shortest=t.data.sft_shortest, copy_swap=0.0, family_balance=t.data.family_balance)
