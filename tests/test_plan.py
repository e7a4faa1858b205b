"""launch/plan.py: the real train step compiled on abstract inputs, on simulated CPU devices and a TPU topology.

The planner runs in fresh processes (its device count must be set before jax starts; this process has 8 fake CPU
devices from conftest). What is checked could be wrong: the per-device parameter bytes against a count made here
from the config, and how memory and FLOPs move with batch, sequence length and fsdp.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the library in one process: four plans of the tiny model's TGPO step, trained in full with a live reference
_SCRIPT = """
import json, sys
from configs import tgpo
from tgpo_jax.models.config import tiny_config
from tgpo_jax.training import plan as pl
out = {}
for name, fsdp, batch, seq in [("base", 2, 8, 128), ("batch2", 2, 16, 128), ("seq2", 2, 8, 256), ("fsdp2", 4, 8, 128)]:
    c = tgpo.get_config("tiny")
    c.train.batch_size = batch
    c.data.max_len, c.data.max_prompt_len, c.data.max_completion_len = seq, seq - 32, 32
    out[name] = pl.plan(c, tiny_config(), pl.make_target((1, fsdp, 1), chip="h100"), parts=["train"])
json.dump(out, open(sys.argv[1], "w"))
"""


def _env(devices: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _tiny_param_count():
    """(all parameters, those replicated by the rule table: the norms) of tiny_config(), from its sizes."""
    from tgpo_jax.models.config import tiny_config

    c = tiny_config()
    d, f, v, h, k, dh, n = (
        c.hidden_size,
        c.intermediate_size,
        c.vocab_size,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.num_layers,
    )
    matrices = 2 * v * d + n * (d * h * dh + 2 * d * k * dh + h * dh * d + 3 * d * f)
    norms = n * 2 * d + d
    return matrices + norms, norms


@pytest.fixture(scope="module")
def cpu_plans(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plans.json"
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out)], cwd=REPO, env=_env(4), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def test_parameter_bytes_match_the_config(cpu_plans):
    total, replicated = _tiny_param_count()
    for name, fsdp in (("base", 2), ("fsdp2", 4)):
        p = cpu_plans[name]
        assert p["params"] == total and p["trainable_params"] == total
        got = p["parts"][0]["inputs"]["params"]
        want = total * 4 / fsdp  # float32 master weights split over fsdp; the norms stay whole on every device
        assert want <= got <= want + replicated * 4, (name, got, want)
        # AdamW: two moments per parameter, sharded like it (plus a step counter)
        assert 2 * got <= p["parts"][0]["inputs"]["opt_state"] <= 2 * got + 64
        # live reference of full fine-tuning: a frozen copy of the initial weights, sharded the same way
        assert p["parts"][0]["inputs"]["reference"] == got


def test_memory_grows_with_batch_and_length_and_shrinks_with_fsdp(cpu_plans):
    mem = {k: v["parts"][0]["memory"] for k, v in cpu_plans.items()}
    inp = {k: v["parts"][0]["inputs"] for k, v in cpu_plans.items()}
    assert inp["batch2"]["batch"] == 2 * inp["base"]["batch"]
    assert inp["base"]["batch"] < inp["seq2"]["batch"] < 2 * inp["base"]["batch"]  # rows double, slot fields not
    for bigger in ("batch2", "seq2"):
        assert mem[bigger]["temp"] > mem["base"]["temp"] and mem[bigger]["total"] > mem["base"]["total"], bigger
    state = lambda k: inp[k]["params"] + inp[k]["opt_state"] + inp[k]["reference"]  # noqa: E731
    assert state("fsdp2") < 0.6 * state("base")
    assert mem["fsdp2"]["arguments"] < mem["base"]["arguments"]
    for k, m in mem.items():  # XLA's own argument count holds the state (unused batch fields may be pruned)
        assert state(k) <= m["arguments"] <= state(k) + inp[k]["batch"], k
        assert m["total"] >= m["arguments"] + m["temp"]
        assert cpu_plans[k]["parts"][0]["fits"] is True


def test_counted_flops_scale_with_tokens(cpu_plans):
    f = {k: v["parts"][0]["counted_flops"] for k, v in cpu_plans.items()}
    assert f["batch2"] == pytest.approx(2 * f["base"], rel=0.02)
    assert 2 * f["base"] < f["seq2"] < 3 * f["base"]  # linear in length, plus attention's square term
    assert f["fsdp2"] == pytest.approx(f["base"], rel=1e-6)  # the same global work, split over more devices
    p = cpu_plans["base"]
    # at least 6 N T (forward + backward), and the live reference's forward
    tokens = p["batch"] * p["seq_len"]
    assert f["base"] >= 8 * p["params"] * tokens * 0.5
    # XLA counts the layer scan's body once: the jaxpr count is the larger
    assert f["base"] / p["devices"] >= p["parts"][0]["compiler_flops"] * 0.99


def test_cli_all_parts_with_lora(tmp_path):
    out = tmp_path / "plan.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.plan",
            "--model=tiny",
            "--method=dpo",
            "--lora_rank=4",
            "--cpu_devices=4",
            "--mesh=1,2,2",
            "--batch=4",
            "--seq_len=128",
            "--parts=train,reference,decode",
            f"--json={out}",
        ],
        cwd=REPO,
        env=_env(None),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "train" in r.stdout and "decode" in r.stdout and "TOTAL" in r.stdout
    p = json.loads(out.read_text())
    assert p["devices"] == 4 and p["mesh"] == {"data": 1, "fsdp": 2, "tensor": 2} and p["lora_rank"] == 4
    parts = {x["part"]: x for x in p["parts"]}
    assert set(parts) == {"train", "reference", "decode"}
    train = parts["train"]["inputs"]
    total, replicated = _tiny_param_count()
    # LoRA: the base is frozen (an argument of the step, sharded fsdp x tensor), only the adapters train
    assert train["reference"] == 0 and train["frozen"] >= total * 4 / 4
    assert train["params"] == p["trainable_params"] * 4 / 4  # float32 adapters, split over fsdp x tensor = 4
    assert parts["decode"]["inputs"]["kv_cache"] > 0 and parts["decode"]["counted_flops"] > 0


@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed: pip install -e '.[tpu]' (the TPU route compiles for a topology without a TPU)",
)
def test_tpu_topology_route(tmp_path):
    out = tmp_path / "plan.json"
    env = _env(None)
    env.pop("JAX_PLATFORMS", None)
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # this test process may hold libtpu's lock file already
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.plan",
            "--model=tiny",
            "--method=tgpo",
            "--topology=v5e:2x2",
            "--mesh=1,4,1",
            "--batch=8",
            "--seq_len=128",
            "--parts=train,decode",
            f"--json={out}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    p = json.loads(out.read_text())
    assert p["platform"] == "tpu" and p["chip"] == "v5e" and p["devices"] == 4 and p["hbm_bytes"] == 16 * 1024**3
    total, replicated = _tiny_param_count()
    got = p["parts"][0]["inputs"]["params"]
    assert total * 4 / 4 <= got <= total * 4 / 4 + replicated * 4
    m = p["parts"][0]["memory"]
    assert m["arguments"] >= got and m["temp"] > 0 and p["parts"][0]["fits"] is True
    assert p["parts"][1]["part"] == "decode" and p["parts"][1]["memory"]["total"] > 0
