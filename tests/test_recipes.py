"""Recipes: what only one model needs lives in recipes/, registers itself with the library by name, and the
library names none of it (the scratch-copy recipe's planted circuit and freeze are the case in point)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

import recipes
from recipes import scratch_copy
from recipes.scratch_copy import circuit
from tgpo_jax import sharding as shd
from tgpo_jax.models.loading import _flatten, flat_params
from tgpo_jax.training import loop, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_unknown_names_list_the_known_ones_and_say_where_more_come_from():
    recipes.register_all()
    with pytest.raises(
        ValueError,
        match=r"model.init='nope': expected one of \['copy_circuit', 'normal'\]; "
        r"a recipe registers more: recipes.register_all\(\)",
    ):
        registry.init_fn("nope")
    with pytest.raises(
        ValueError,
        match=r"model.freeze='nope': expected '' or one of \['copy_circuit'\]; "
        r"a recipe registers more",
    ):
        registry.freeze_fn("nope")
    with pytest.raises(ValueError, match=r"unknown recipe 'nope': known recipes are \['scratch_copy'\]"):
        recipes.get("nope")


def test_registering_again_is_a_no_op_and_a_taken_name_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "INITS", dict(registry.INITS))
    recipes.register_all()
    recipes.register_all()
    assert registry.INITS["copy_circuit"] is scratch_copy.planted
    with pytest.raises(ValueError, match=r"model.init='normal' is registered already"):
        registry.register_init("normal", scratch_copy.planted)


def test_registering_imports_no_jax():
    """launch.entry.prepare registers the recipes before launch.plan sets the number of CPU devices (jax unimported)."""
    code = "import sys, recipes; recipes.register_all(); print(sorted(m for m in sys.modules if m.startswith('jax')))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_preset_builds_what_the_recipe_builds(spm_tokenizer_dir, spm_tokenizer):
    """The scratch-copy preset selects the recipe; through the loop its model.init gives the very parameters of
    planting the circuit directly (seed, circuit settings and trigger pieces all reach it), and model.freeze the
    circuit's mask."""
    from configs import sft

    recipes.register_all()
    c = sft.get_config("scratch-copy")
    assert (c.model.init, c.model.freeze) == (scratch_copy.NAME, scratch_copy.NAME)
    c.model.update(
        tokenizer=spm_tokenizer_dir,
        init_seed=3,
        circuit_recency=20.0,
        circuit_recency_after=r"[a-z]",
        circuit_trigram=0.5,
    )
    c.mesh.shape = (1, 1, 1)
    model = loop.build_model(c, shd.make_mesh((1, 1, 1)), spm_tokenizer)
    got = flat_params(model)
    triggers = circuit.recency_token_ids(spm_tokenizer, r"[a-z]")
    assert len(triggers) > 5
    want = flat_params(
        circuit.init_planted(
            model.cfg,
            seed=3,
            recency_tokens=triggers,
            c=circuit.CircuitConfig(recency=20.0, bigram=circuit.CircuitConfig.bigram, trigram=0.5),
        )
    )
    assert set(got) == set(want)
    for path in want:
        assert np.array_equal(np.asarray(got[path]), np.asarray(want[path])), path
    assert np.all(np.asarray(got["embed"])[triggers, circuit.CircuitConfig.de + 1] == circuit.CircuitConfig.flag)

    keep = {"/".join(map(str, k)): np.asarray(v) for k, v in _flatten(nnx.to_pure_dict(loop.update_mask(c, model)))}
    frozen = circuit.frozen_mask(model.cfg, circuit.CircuitConfig(recency=20.0, trigram=0.5))
    assert set(keep) == set(frozen)
    for path, mask in frozen.items():
        assert np.array_equal(keep[path], ~mask), path

    c.model.init = "normal"
    plain = flat_params(loop.build_model(c, shd.make_mesh((1, 1, 1)), spm_tokenizer))
    assert not np.array_equal(np.asarray(plain["embed"]), np.asarray(got["embed"]))  # the check can fail


def test_the_recipes_id_pieces_train_the_tokenizer_the_id_option_trained(tmp_path):
    """tokenizer.id_pieces = n through the recipe (``scratch_copy.id_pieces``, the library's ``extra_pieces``) trains
    the very tokenizer the library's own id option did: SentencePiece trained as it trained it (the chat symbols,
    then the ids ``[0]`` .. ``[n-1]`` as user-defined symbols), byte for byte, the ids at 6 .. n + 5."""
    import io

    import sentencepiece as spm

    from tgpo_jax.models.tokenizer import train_sentencepiece

    assert scratch_copy.id_pieces(0) == [] and scratch_copy.id_pieces(3) == ["[0]", "[1]", "[2]"]
    corpus = [f'[{i}] button "Buy"\nCommand: SELECT [{i}] [red]\nTYPE [2] [12 oz] then [1x]' for i in range(30)] * 5
    got = train_sentencepiece(corpus, str(tmp_path / "tok"), vocab_size=360, extra_pieces=scratch_copy.id_pieces(20))
    buf = io.BytesIO()  # the id option's training: its arguments, the ids written out here
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=buf,
        vocab_size=360,
        model_type="bpe",
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        user_defined_symbols=["<|im_start|>", "<|im_end|>"] + ["[%d]" % i for i in range(20)],
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        minloglevel=2,
    )
    with open(os.path.join(got, "tokenizer.model"), "rb") as f:
        assert f.read() == buf.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    assert [sp.id_to_piece(i) for i in range(4, 26)] == ["<|im_start|>", "<|im_end|>"] + [f"[{i}]" for i in range(20)]


LIBRARY_WORDS = (
    "copy_circuit",
    "circuit_recency",
    "circuit_bigram",
    "circuit_trigram",
    "CircuitConfig",
    "init_planted",
    "frozen_mask",
    "recency_token_ids",
    "import recipes",
    "from recipes",
    "id_pieces",
)


def test_the_library_names_nothing_of_the_circuit():
    """tgpo_jax reads model.init / model.freeze only as names to look up; the circuit's own settings
    (model.circuit_*) and its tokenizer's id pieces (tokenizer.id_pieces) are read by the recipe alone, so no library
    file names them, with no exception."""
    found = []
    for base, dirs, files in os.walk(os.path.join(ROOT, "tgpo_jax")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
        for fn in files:
            if fn.endswith((".py", ".md", ".json", ".txt")):
                path = os.path.join(base, fn)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                found += [f"{os.path.relpath(path, ROOT)}: {w}" for w in LIBRARY_WORDS if re.search(re.escape(w), text)]
    assert not found, "\n".join(found)


# the copy wording's own forms and helpers (recipes/scratch_copy/thoughts.py): the task's lead word glued before a
# typed string, the field first, the option's name before its value, the id right after the sort's words or the rank
# word, the results title copied first, the task copied on after an added item
COPY_WORDING = (
    "task_context",
    "done_context",
    "sort_context",
    "item_context",
    "Click to sort by",
    "click the {rank} result",
    "Fill {what} with",
    "to {choose}",
    "{obs.title}. {click}",
    "_HEADING",
)


def test_rollout_holds_none_of_the_copy_wording():
    """The oracle's copy-circuit wording lives in the recipe alone; rollout keeps the plain wording and what any
    wording reads from a task (its sort, its item rank)."""
    from recipes.scratch_copy import thoughts

    found = []
    for base, dirs, files in os.walk(os.path.join(ROOT, "rollout")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
        for fn in files:
            if fn.endswith(".py"):
                path = os.path.join(base, fn)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                found += [f"{os.path.relpath(path, ROOT)}: {w}" for w in COPY_WORDING if w in text]
    assert not found, "\n".join(found)
    with open(thoughts.__file__, encoding="utf-8") as f:
        text = f.read()
    assert all(w in text for w in COPY_WORDING if w not in ("sort_context", "item_context"))
