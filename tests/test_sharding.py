"""The same logits on 1 device and on 8 fake CPU devices with parameters sharded by the rule table."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tgpo_jax import sharding as shd
from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.hf_export import export_hf
from tgpo_jax.models.loading import flat_params, load_model, shard_model
from tgpo_jax.models.transformer import init_model

MESHES = [(8, 1, 1), (2, 2, 2), (1, 4, 2), (1, 2, 4)]


def _cfg():
    # every sharded dimension divides 4, so each mesh above really splits the weights
    return tiny_config(
        "qwen3",
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_heads=8,
        num_kv_heads=4,
        head_dim=16,
        num_layers=2,
        qk_norm=True,
    )


@pytest.fixture(scope="module")
def reference():
    model = init_model(_cfg(), seed=7)
    tokens = np.random.default_rng(0).integers(0, 256, size=(8, 24))
    return model, tokens, np.asarray(model(tokens)[0])


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_sharded_logits_equal_single_device(reference, shape):
    assert len(jax.devices()) == 8, "conftest sets 8 fake CPU devices"
    model, tokens, want = reference
    mesh = shd.make_mesh(shape)
    sharded = shard_model(model, mesh)
    q = sharded.layers.q_proj[...]
    assert q.sharding.spec == P(None, "fsdp", "tensor", None)
    n_split = mesh.shape["fsdp"] * mesh.shape["tensor"]
    assert q.addressable_shards[0].data.size == q.size // n_split  # really split, not replicated
    batch = jax.device_put(tokens, shd.batch_sharding(mesh, 2))
    got = jax.jit(lambda m, t: m(t)[0])(sharded, batch)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)


def test_load_places_parameters_on_mesh(reference, tmp_path):
    model, tokens, want = reference
    out = export_hf(model, str(tmp_path / "m"))
    mesh = shd.make_mesh((2, 2, 2))
    loaded = load_model(out, mesh=mesh)
    for path, v in flat_params(loaded).items():
        assert v.sharding.spec == shd.spec_for(path, v.shape, mesh), path
    assert loaded.embed[...].sharding.spec == P("tensor", "fsdp")
    np.testing.assert_allclose(np.asarray(jax.jit(lambda m, t: m(t)[0])(loaded, tokens)), want, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 2, 4), (2, 4, 1)], ids=lambda s: "x".join(map(str, s)))
def test_lora_factors_are_split_on_every_mesh(reference, shape):
    """Each factor is split over fsdp x tensor whatever the mesh; the adapted
    logits are the single-device ones (B random, so the adapters change them)."""
    import dataclasses

    from tgpo_jax.models.config import LORA_SPLIT
    from tgpo_jax.models.loading import model_from_flat

    _, tokens, base_logits = reference
    cfg = dataclasses.replace(_cfg(), lora_rank=4)
    flat = flat_params(init_model(cfg, seed=7))
    rng = np.random.default_rng(1)
    flat = {
        p: (rng.normal(0, 0.05, v.shape).astype(np.float32) if p.endswith("lora_b") else v) for p, v in flat.items()
    }
    model = model_from_flat(cfg, flat)
    want = np.asarray(model(tokens)[0])
    mesh = shd.make_mesh(shape)
    sharded = shard_model(model, mesh)
    params = flat_params(sharded)
    n = mesh.shape["fsdp"] * mesh.shape["tensor"]
    for name in LORA_SPLIT:
        a, b = params[f"layers/{name}_lora_a"], params[f"layers/{name}_lora_b"]
        assert a.sharding.spec[-1] is None and b.sharding.spec[1] is None, name  # r is never split
        for f in (a, b):  # split over every model axis of the mesh: each device holds 1 / (fsdp x tensor)
            assert f.addressable_shards[0].data.size == f.size // n, (name, f.sharding.spec)
    got = jax.jit(lambda m, t: m(t)[0])(sharded, jax.device_put(tokens, shd.batch_sharding(mesh, 2)))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)
    assert np.abs(want - base_logits).max() > 1e-3  # the adapters count


def test_indivisible_dimension_is_replicated_on_that_axis():
    mesh = shd.make_mesh((1, 2, 4))
    # SmolLM2's 3 kv heads cannot split 4 ways: the head axis is replicated, the hidden axis still split
    assert shd.spec_for("layers/k_proj", (30, 576, 3, 64), mesh) == P(None, "fsdp", None, None)
    # a dimension split over two axes keeps the major one when the pair does not divide it: 12 = 4 x 3
    assert shd.spec_for("layers/down_proj_lora_a", (30, 16, 8), mesh) == P(None, ("tensor", "fsdp"), None)
    assert shd.spec_for("layers/down_proj_lora_a", (30, 12, 8), mesh) == P(None, "tensor", None)
    assert shd.spec_for("layers/down_proj_lora_a", (30, 6, 8), mesh) == P(None, None, None)


def test_mesh_shape_errors():
    with pytest.raises(ValueError, match="needs 12 devices"):
        shd.make_mesh((2, 3, 2))
    assert dict(shd.make_mesh((2, -1, 1)).shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    # -1 must not round down: 8 devices over 3, or 1 device over 2, is an error, not a 0-sized or partial axis
    with pytest.raises(ValueError, match="8 devices do not divide by 3"):
        shd.make_mesh((3, -1, 1))
    with pytest.raises(ValueError, match="1 devices do not divide by 2"):
        shd.make_mesh((2, -1, 1), devices=jax.devices()[:1])
    with pytest.raises(ValueError, match="must be positive"):
        shd.make_mesh((0, -1, 1))
    with pytest.raises(ValueError, match="does not divide"):
        shd.check_batch_divides(6, shd.make_mesh((2, 2, 2)))
