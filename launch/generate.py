"""Answer a prompt with a policy model (default: the bundled SmolLM2-135M-Instruct).

python -m launch.generate --prompt="What is the capital of France?"
python -m launch.generate --model=/path/to/hf_dir --temperature=0.7 --top_p=0.9 --num_samples=4
"""

from __future__ import annotations

import time

from absl import app, flags

from launch.entry import prepare

_MODEL = flags.DEFINE_string("model", "bundled", "HF directory, .gguf file, or 'bundled' (SmolLM2-135M-Instruct)")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "tokenizer path (default: the model's)")
_PROMPT = flags.DEFINE_string(
    "prompt", "Name three things a web shopping agent must check before buying.", "user message"
)
_SYSTEM = flags.DEFINE_string("system", None, "optional system message")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 96, "tokens to generate at most")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "0 = greedy")
_TOP_K = flags.DEFINE_integer("top_k", 0, "0 = off")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "1 = off")
_STOP = flags.DEFINE_multi_string("stop", [], "stop string (repeatable)")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "completions of the same prompt, sampled as one batch")
_SEED = flags.DEFINE_integer("seed", 0, "sampling seed")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype")


def main(argv):
    """Load the model and tokenizer, sample answers to the prompt and print them."""
    prepare(argv)
    from tgpo_jax.models.loading import load_model, with_tokenizer_eos
    from tgpo_jax.models.sampler import Sampler, SamplingParams
    from tgpo_jax.models.tokenizer import chat_ids, load_tokenizer

    t0 = time.perf_counter()
    tokenizer = load_tokenizer(_TOKENIZER.value or _MODEL.value)
    model = load_model(_MODEL.value, dtype=_DTYPE.value)
    with_tokenizer_eos(model, tokenizer)
    print(
        f"loaded {_MODEL.value} ({model.cfg.model_type}, {model.cfg.num_layers} layers) "
        f"in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    messages = [{"role": "system", "content": _SYSTEM.value}] if _SYSTEM.value else []
    messages.append({"role": "user", "content": _PROMPT.value})
    prompt = chat_ids(tokenizer, messages)
    params = SamplingParams(
        temperature=_TEMPERATURE.value,
        top_k=_TOP_K.value,
        top_p=_TOP_P.value,
        max_tokens=_MAX_TOKENS.value,
        stop=tuple(_STOP.value),
        seed=_SEED.value,
    )
    t0 = time.perf_counter()
    completions = Sampler(model, tokenizer).generate([prompt] * _NUM_SAMPLES.value, params)
    dt = time.perf_counter() - t0
    n = sum(len(c.tokens) for c in completions)
    print(f"user: {_PROMPT.value}")
    for i, c in enumerate(completions):
        tag = f"assistant[{i}]" if len(completions) > 1 else "assistant"
        print(
            f"{tag}: {c.text.strip()}\n  ({len(c.tokens)} tokens, finish={c.finish_reason}, "
            f"mean log-prob {sum(c.logprobs) / max(len(c.logprobs), 1):.3f})"
        )
    print(f"generated {n} tokens in {dt:.1f}s (compile included)")


if __name__ == "__main__":
    app.run(main)
