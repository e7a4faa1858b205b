"""Base training config. Method files (sft.py, dpo.py, ...) start from it; the part after ':' picks a
model preset from configs/models.py, e.g. ``--config=configs/tgpo.py:smollm2-135m``. Every field can be
overridden on the command line: ``--config.optim.learning_rate=3e-6 --config.data.margin=0.1``.
"""

import ml_collections

from configs import models


def get_config(preset: str = "smollm2-135m") -> ml_collections.ConfigDict:
    """The base training config with the model preset ``preset`` (configs/models.py) applied; method files start from
    it."""
    c = ml_collections.ConfigDict()
    c.method = "tgpo"  # sft | dpo | tgpo | kto | kto_tree

    c.model = ml_collections.ConfigDict(
        dict(
            path="bundled",  # HF directory, .gguf, 'bundled', or '' for a from-scratch model (model.scratch)
            tokenizer="",  # default: the model's own
            dtype="auto",  # compute: float32 | bfloat16 | auto (bf16 on accelerators and CPUs with bf16 units)
            param_dtype="float32",  # master weights
            remat=True,  # rematerialise each layer in the backward pass: on CPU both faster and far smaller
            train_layers=0,  # > 0: train only the top N layers (those below run without a backward pass); 0 = all
            attention="auto",  # dense | blocked | cudnn | xla | auto (cuDNN's fused kernel on a GPU in bf16,
            #                    blocked elsewhere)
            lora_rank=0,
            lora_alpha=16.0,
            lora_seed=0,
            scratch="",  # from-scratch size (tgpo_jax.models.config.SCRATCH_PRESETS: 'tiny', 'small')
            init_seed=0,
            init="normal",  # from-scratch initialiser: normal | copy_circuit (registered by recipes/scratch_copy)
            freeze="",  # '' | copy_circuit: leave the planted circuit's entries untouched while training
            circuit_recency=0.0,  # copy_circuit: gated recency amplitude (0 = off; recipes/scratch_copy/circuit.py)
            circuit_recency_after=r"\[\d+\]|CLICK|TYPE|SELECT|CLEAR|HOVER|SCROLL",  # pieces that turn it on
            circuit_bigram=0.6,  # copy_circuit: weight of the second-previous-token match (0 = one-token match)
            circuit_trigram=0.0,  # copy_circuit: weight of the third-previous-token match (0 = off)
        )
    )
    c.data = ml_collections.ConfigDict(
        dict(
            train_dir="",  # ArrayRecord node dataset (manifest.json inside)
            eval_dir="",  # held-out node dataset; '' = no evaluation
            layout="packed",  # packed (prompt once + branches, segment mask) | plain (prompt + branch rows)
            max_len=1024,
            max_prompt_len=768,
            max_completion_len=128,
            max_branches=4,
            max_pairs=6,
            max_items=8,
            kl_slot=True,
            margin=0.0,
            weight_eps=1e-6,
            weight_clip=0.0,  # 0 = no clip
            weight_sigma="branch",  # TGPO's sigma: branch (std of the node's Qs) | occurrence (of all its returns; §4)
            distance_agree=False,  # a pair also needs the chosen branch no farther from a goal (docs/method.md §5)
            distance_strict=False,  # with distance_agree: branches equally far from a goal make no pair (§5)
            weight_norm="none",  # none | dataset_mean
            kto_repeat_cap=0,
            sft_repeat=False,  # 0 = no cap
            kto_reachable=False,  # plain KTO: no items at nodes from which no successful end is reachable (§6)
            sft_shortest=False,  # SFT imitates only the successful branches nearest a goal (drops undone detours)
            copy_swap=0.0,  # probability of swapping each copied string per draw (tgpo_jax/data/augment.py; 0 = off)
            family_balance=False,  # SFT: every task family weighs alike in the loss (data/pipeline.py:family_weights)
            shuffle_seed=0,
        )
    )
    c.loss = ml_collections.ConfigDict(
        dict(
            beta=0.1,
            dpo_loss_type="sigmoid",
            label_smoothing=0.0,
            reference="live",  # live | precomputed | behaviour | none (SFT)
            reference_cache="",  # sidecar directory for precomputed reference log-probs ('' = <output>/reference)
            kto_weights="auto",  # auto (from the class ratio) | fixed (desirable_weight / undesirable_weight)
            desirable_weight=1.0,
            undesirable_weight=1.0,
            focal_gamma=0.0,  # SFT only: -(1-p)^gamma log p per token (0 = plain NLL; tgpo_jax/losses.py sft_loss)
            rpo_alpha=0.0,  # DPO / TGPO: + alpha * token-mean NLL of the chosen actions (RPO; losses.chosen_nll)
            # DPO / TGPO: a pair's log-ratios over this many tokens from where its two actions first differ (the
            # decision), not the whole actions (0 = whole; docs/method.md §7 "Decision window")
            decision_window=0,
            # DPO / TGPO: False = a pair's log-ratios over its decision tokens only, the copies
            # (tgpo_jax/data/decisions.py) left out of the margin on both actions (docs/method.md §7 "Copies out of
            # the margin"; True = every token; measured, not kept)
            margin_copies=True,
            # DPO / TGPO / KTO / KTO-Tree: + sft_alpha * token-mean NLL of every successful step of the batch's nodes
            # (the SFT items, on nodes with or without pairs), to hold the states the pairs do not cover (0 = off;
            # docs/method.md §7)
            sft_alpha=0.0,
        )
    )
    c.optim = ml_collections.ConfigDict(
        dict(
            optimizer="adamw",  # adamw | sgd
            learning_rate=1e-5,
            warmup_steps=0,
            warmup_fraction=0.1,
            schedule="cosine",
            end_lr_fraction=0.0,
            weight_decay=0.0,
            b1=0.9,
            b2=0.999,
            eps=1e-8,
            clip_norm=1.0,
            grad_accum=1,
        )
    )
    c.train = ml_collections.ConfigDict(
        dict(
            output_dir="runs/default",
            batch_size=8,  # nodes (examples) per optimizer step, global
            num_epochs=2,
            max_steps=0,  # 0 = num_epochs over the data
            seed=0,
            chunk=128,
            log_every=1,
            eval_every=0,
            eval_batches=0,  # eval_every 0 = at the end only; eval_batches 0 = all
            save_every=50,
            keep=3,
            async_checkpoint=True,
            progress=True,
            restart=False,  # True: a run directory with another configuration's checkpoints is moved aside, not resumed
            curve_points=0,  # > 0: also save and keep a checkpoint every total/curve_points steps (learning curves)
        )
    )
    c.mesh = ml_collections.ConfigDict(dict(shape=(1, -1, 1)))  # (data, fsdp, tensor); -1 takes the rest
    c.distributed = ml_collections.ConfigDict(
        dict(enabled=False, coordinator="", num_processes=1, process_id=-1, local_device_count=0)
    )
    models.apply(c, preset)
    return c
