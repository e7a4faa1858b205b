"""Model shapes the benchmarks build with random weights (no download needed)."""

# Qwen2.5-0.5B(-Instruct)'s config.json, the fields that shape the computation
QWEN25_05B = dict(
    model_type="qwen2",
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
    use_sliding_window=False,
    hidden_act="silu",
    bos_token_id=151643,
    eos_token_id=151645,
)
TINY = dict(
    QWEN25_05B,
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
