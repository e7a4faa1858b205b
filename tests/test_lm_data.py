"""Pretraining records for a from-scratch base (experiment/lm_data.py): windows cover every token of every step's text
exactly once, in order, and the records are valid SFT nodes. Also: build_dataset over two collections merges them
into one tree per task (the pipeline's rounds.accumulate)."""

import pytest

from experiment.lm_data import lm_records, step_texts, windows
from rollout.policies.prompt import COMPACT_SYSTEM_PROMPT
from trees.dataset import BuildConfig, build_dataset
from trees.synthetic import write_synthetic_collection
from tgpo_jax.data.examples import sft_items
from tgpo_jax.models.tokenizer import train_sentencepiece


def test_windows():
    assert windows(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert windows([], 4) == []
    with pytest.raises(ValueError):
        windows([1], 0)


def test_lm_records_cover_the_steps(tmp_path):
    eps = str(tmp_path / "eps")
    write_synthetic_collection(eps, num_tasks=2, runs=2, seed=1)
    texts = list(step_texts(eps, COMPACT_SYSTEM_PROMPT))
    assert texts and all(COMPACT_SYSTEM_PROMPT not in t and "Current page:" in t for _, t in texts)
    tok = train_sentencepiece([t for _, t in texts] * 3, str(tmp_path / "tok"), vocab_size=600)
    from tgpo_jax.models.tokenizer import load_tokenizer

    tok = load_tokenizer(tok)
    recs = lm_records(eps, tok, 16, COMPACT_SYSTEM_PROMPT)
    want = sum(len(windows(tok(t, add_special_tokens=False)["input_ids"], 16)) for _, t in texts)
    assert len(recs) == want  # (no window of this corpus is blank)
    for r in recs:
        r.validate()
        assert sft_items(r) == [0] and r.prompt == [{"role": "system", "content": COMPACT_SYSTEM_PROMPT}]
        # decoding a window and encoding it again may re-segment its edges: the pipeline leaves 25 % slack
        assert len(tok(r.branches[0].action, add_special_tokens=False)["input_ids"]) <= 16 + 16 // 4
    first = [r for r in recs if r.node_id.startswith("lm-0-")]
    assert "".join(r.branches[0].action for r in first).replace(" ", "") == texts[0][1].replace(" ", "")


def test_build_dataset_merges_collections(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_synthetic_collection(a, num_tasks=3, runs=2, seed=5)
    write_synthetic_collection(b, num_tasks=3, runs=2, seed=6)
    one = build_dataset(a, str(tmp_path / "da"), BuildConfig(num_shards=1), progress=False)
    both = build_dataset([a, b], str(tmp_path / "dab"), BuildConfig(num_shards=1), progress=False)
    assert one["episodes"] == 6 and both["episodes"] == 12 and both["tasks"] == 3
    assert (
        both["steps"]
        == one["steps"] + build_dataset(b, str(tmp_path / "db"), BuildConfig(num_shards=1), progress=False)["steps"]
    )
    assert both["episodes_dir"] == [str(tmp_path / "a"), str(tmp_path / "b")]
