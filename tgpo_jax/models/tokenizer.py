"""Tokenizers: transformers ``AutoTokenizer`` from a HF directory or a GGUF file (with its chat
template), and SentencePiece training for from-scratch configs.

A trained SentencePiece model is converted once into a Hugging Face tokenizer directory (so every
later stage, and the export, goes through one code path: ``load_tokenizer``).
"""

from __future__ import annotations

import io
import os
from typing import Iterable, Sequence

from tgpo_jax.models.loading import BUNDLED_ALIASES, bundled_smollm2_path

# ChatML, the format SmolLM2 and Qwen use; given to from-scratch tokenizers.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT_SPECIAL = ["<|im_start|>", "<|im_end|>"]


class TokenizerNotFoundError(FileNotFoundError):
    """No tokenizer at the given path."""

    pass


def load_tokenizer(path: str):
    """A transformers tokenizer from a HF directory, a ``.gguf`` file, or the bundled SmolLM2."""
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: everything is local
    if path in BUNDLED_ALIASES:
        path = bundled_smollm2_path()
    if os.path.isfile(path) and path.endswith(".gguf"):
        directory, fname = os.path.split(os.path.abspath(path))
        return AutoTokenizer.from_pretrained(directory, gguf_file=fname)
    if not os.path.isdir(path):
        raise TokenizerNotFoundError(f"no tokenizer at {path!r}: expected a directory or a .gguf file")
    names = set(os.listdir(path))
    if not names & {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json"}:
        raise TokenizerNotFoundError(
            f"no tokenizer files (tokenizer.json / tokenizer.model / tokenizer_config.json) in {path}"
        )
    return AutoTokenizer.from_pretrained(path)


def chat_ids(tokenizer, messages: Sequence[dict], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template")
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def train_sentencepiece(
    texts: Iterable[str],
    out_dir: str,
    vocab_size: int = 1024,
    model_type: str = "bpe",
    extra_pieces: Sequence[str] = (),
) -> str:
    """Train a SentencePiece model on ``texts`` and write it as a HF tokenizer directory.

    Identity normalisation and kept whitespace, so text (observations, newlines in chat turns)
    round-trips exactly; byte fallback, so no input is ever unknown. Ids: 0 pad, 1 bos, 2 eos, 3 unk, then the chat
    symbols, then ``extra_pieces``: user-defined symbols, each always one piece wherever it occurs (what a model's
    recipe needs whole, e.g. element ids ``[0]`` .. ``[n-1]``).
    """
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    texts = list(texts)
    # byte fallback reserves 256 pieces; every distinct character and the special symbols need one more
    special = CHAT_SPECIAL + list(extra_pieces)
    if len(set(special)) != len(special) or not all(special):
        raise ValueError(f"extra_pieces: expected distinct, non-empty symbols other than {CHAT_SPECIAL}")
    needed = 256 + len(set("".join(texts))) + 4 + len(special)
    if vocab_size < needed:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for this corpus: byte fallback and its "
            f"{len(set(''.join(texts)))} distinct characters need at least {needed}"
        )
    os.makedirs(out_dir, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        user_defined_symbols=special,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        minloglevel=2,
    )
    spm_path = os.path.join(out_dir, "tokenizer.model")
    with open(spm_path, "wb") as f:
        f.write(buf.getvalue())
    tok = LlamaTokenizer.from_pretrained(out_dir, add_bos_token=False, add_eos_token=False, legacy=False)
    tok.chat_template = CHATML_TEMPLATE
    tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token = "<pad>", "<s>", "<|im_end|>", "<unk>"
    tok.save_pretrained(out_dir)
    return out_dir
