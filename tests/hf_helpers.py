"""Random-weight transformers (PyTorch) models of each supported family, the independent reference."""

import numpy as np

FAMILIES = {
    # name: (model_type, extra HF config)
    "llama": ("llama", {}),
    "llama_tied": ("llama", {"tie_word_embeddings": True}),
    "llama3_rope_bias": (
        "llama",
        {
            "attention_bias": True,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
    ),
    "qwen2": ("qwen2", {}),
    "qwen2_tied": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {}),
    "qwen3_tied": ("qwen3", {"tie_word_embeddings": True}),
}


def hf_config(model_type, **extra):
    import transformers

    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[
        model_type
    ]
    kw = dict(
        vocab_size=257,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    if model_type == "qwen3":
        kw["head_dim"] = 24  # Qwen3 decouples head_dim from hidden_size / heads
    rope_scaling = extra.pop("rope_scaling", None)
    kw.update(extra)
    cfg = cls(**kw)
    theta = 50000.0
    cfg.rope_parameters = dict(rope_scaling or {"rope_type": "default"}, rope_theta=theta)
    return cfg


def random_hf_model(family: str, seed: int = 0):
    """A transformers model with every weight (norms and biases too) randomised, in eval mode."""
    import torch
    import transformers

    model_type, extra = FAMILIES[family]
    cfg = hf_config(model_type, **dict(extra))
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))
    return model


def hf_logits(model, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
    import torch

    with torch.no_grad():
        kw = {}
        if attention_mask is not None:
            kw["attention_mask"] = torch.tensor(attention_mask)
        return model(torch.tensor(tokens), **kw).logits.float().numpy()
