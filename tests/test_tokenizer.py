"""SentencePiece training -> HF tokenizer directory: encodings agree with sentencepiece itself."""

import os

import pytest
import sentencepiece as spm

from conftest import CORPUS
from tgpo_jax.models.tokenizer import TokenizerNotFoundError, chat_ids, load_tokenizer, train_sentencepiece

TEXTS = CORPUS + ["  leading spaces", "new\nlines\n\nand\ttabs", "unseen: ZQX ß ☃ 🙂", "12345"]


def test_hf_encoding_equals_sentencepiece(spm_tokenizer_dir, spm_tokenizer):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(spm_tokenizer_dir, "tokenizer.model"))
    for text in TEXTS:
        ids = spm_tokenizer(text, add_special_tokens=False)["input_ids"]
        # Known difference: HF's Metaspace adds no dummy prefix before leading whitespace
        if text.startswith(" "):
            assert spm_tokenizer.decode(ids).strip() == text.strip()
            continue
        assert ids == sp.encode(text), text
        assert spm_tokenizer.decode(ids) == text  # identity normalisation: exact round trip


def test_chat_template_and_special_tokens(spm_tokenizer):
    ids = chat_ids(spm_tokenizer, [{"role": "user", "content": "buy shoes"}])
    start = spm_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(start) == 2  # the user turn and the generation prompt
    assert spm_tokenizer.decode(ids) == "<|im_start|>user\nbuy shoes<|im_end|>\n<|im_start|>assistant\n"
    assert spm_tokenizer.eos_token_id == spm_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert spm_tokenizer.pad_token_id == 0


def test_too_small_vocab_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="too small"):
        train_sentencepiece(["abc"], str(tmp_path), vocab_size=100)


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerNotFoundError, match="no tokenizer files"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(TokenizerNotFoundError, match="no tokenizer at"):
        load_tokenizer(str(tmp_path / "nowhere"))


def test_extra_pieces_are_single_tokens_and_leave_the_rest_of_the_text_alone(tmp_path):
    """``extra_pieces`` (here element ids, as the scratch_copy recipe gives them) are each one token wherever they
    occur; the free text beside them keeps its own opening bracket and round-trips."""
    corpus = [f'[{i}] button "Buy"\nCommand: SELECT [{i}] [red]\nTYPE [2] [12 oz] then [1x]' for i in range(30)] * 5
    ids = [f"[{i}]" for i in range(50)]
    tok = load_tokenizer(train_sentencepiece(corpus, str(tmp_path / "ids"), vocab_size=400, extra_pieces=ids))
    pieces = tok.convert_ids_to_tokens(tok("SELECT [6] [red]\n[12] button", add_special_tokens=False)["input_ids"])
    assert "[6]" in pieces and "[12]" in pieces  # one token per element id
    assert not any(p.startswith(("[6", "▁[6", "[12", "▁[12")) and p not in ("[6]", "[12]") for p in pieces)
    assert pieces[pieces.index("[6]") + 1] in ("▁[", "▁")  # the free text keeps its own opening bracket
    text = "TYPE [2] [12 oz] then [1x] and [49] [50]"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # round trip
    plain = load_tokenizer(train_sentencepiece(corpus, str(tmp_path / "plain"), vocab_size=340))
    assert "[6]" not in plain.convert_ids_to_tokens(plain("SELECT [6] [red]", add_special_tokens=False)["input_ids"])
    for bad in (["[1]", "[1]"], ["<|im_end|>"], [""]):
        with pytest.raises(ValueError, match="extra_pieces: expected distinct, non-empty symbols"):
            train_sentencepiece(corpus, str(tmp_path / "bad"), vocab_size=400, extra_pieces=bad)
