"""Every launch entry point imports and defines its flags: a flag definition that fails at import (a wrong argument,
a name not imported) breaks the command before any test of its work runs, and only the slow tier ran most of them."""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTRIES = sorted(
    os.path.basename(p)[:-3]
    for p in glob.glob(os.path.join(ROOT, "launch", "*.py"))
    if os.path.basename(p) not in ("__init__.py", "entry.py", "browser_flags.py")
)


@pytest.mark.parametrize("name", ENTRIES)
def test_entry_point_lists_its_flags(name):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [sys.executable, "-m", f"launch.{name}", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-3000:]
    assert f"launch.{name}" in out or "flags:" in out.lower(), out[-3000:]


_COMPILE = """
import sys
if sys.argv[1] == "after":  # jax imported before prepare: the settings go into its config
    import jax
from launch.entry import prepare
prepare(["x"])  # else they go into the environment jax reads at import
import jax, jax.monitoring, jax.numpy as jnp
events = []
jax.monitoring.register_event_listener(lambda event, **kw: events.append(event))
print(float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).sum()))
print(sum(e.endswith("/cache_hits") for e in events), sum(e.endswith("/cache_misses") for e in events))
"""


def _compile_in_a_new_process(tmp_path, order, **env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    env.update(HOME=str(tmp_path), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", **env_overrides)
    r = subprocess.run(
        [sys.executable, "-c", _COMPILE, order], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    value, counts = r.stdout.strip().splitlines()[-2:]
    return float(value), tuple(map(int, counts.split()))


@pytest.mark.parametrize("order", ["before", "after"])
def test_entry_points_keep_compiled_programs_between_runs(tmp_path, order):
    """launch.entry.prepare turns on the persistent XLA cache (~/.cache/tgpo-jax/xla by default): a second process
    loads what the first compiled; JAX_COMPILATION_CACHE_DIR moves it and '' turns it off."""
    default = tmp_path / ".cache" / "tgpo-jax" / "xla"
    v1, (hits1, misses1) = _compile_in_a_new_process(tmp_path, order)
    assert hits1 == 0 and misses1 > 0 and any(p.name.endswith("-cache") for p in default.iterdir())
    v2, (hits2, misses2) = _compile_in_a_new_process(tmp_path, order)
    assert (hits2, misses2) == (misses1, 0) and v2 == v1
    moved = tmp_path / "elsewhere"
    _, (hits3, misses3) = _compile_in_a_new_process(tmp_path, order, JAX_COMPILATION_CACHE_DIR=str(moved))
    assert hits3 == 0 and misses3 == misses1 and any(moved.iterdir())
    entries = sorted(p.name for p in default.iterdir())
    _, counts = _compile_in_a_new_process(tmp_path, order, JAX_COMPILATION_CACHE_DIR="")
    assert counts == (0, 0) and sorted(p.name for p in default.iterdir()) == entries


# ---------------------------------------------------------------- MiniWoB++ task selection (docs/miniwob.md)
# One process parses each argument list in turn (the launchers' flags, browser_flags.env_and_tasks) and prints what
# it selected, or the usage error.
_SELECT = """
import json, sys
from absl import app, flags
from launch import browser_flags
browser_flags.define(split="test", runs=1, runs_help="", temperature=0.0, temperature_help="", screenshots=False,
                     out="", out_help="")
for args in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["select", *args])
    try:
        env, tasks = browser_flags.env_and_tasks()
        print(json.dumps({"families": sorted({t.family for t in tasks}), "tasks": len(tasks)}))
    except app.UsageError as e:
        print(json.dumps({"error": str(e)}))
"""


def _selected(*arg_lists):
    import json

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [sys.executable, "-c", _SELECT, json.dumps(arg_lists)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.strip().splitlines()[-len(arg_lists) :]]


def test_miniwob_families_select_any_registered_task():
    from rollout.envs.miniwob import SUPPORTED, registered_tasks

    n = len(registered_tasks())
    default, every, named, by_id, unknown, mixed = _selected(
        ["--env=miniwob"],
        ["--env=miniwob", "--families=all", f"--num_tasks={n}"],
        ["--env=miniwob", "--families=click-tab,enter-text-2"],
        ["--env=miniwob", "--task_ids=miniwob/drag-box/10001"],
        ["--env=miniwob", "--families=click-tabz"],
        ["--env=miniwob", "--families=all,click-tab"],
    )
    assert default["families"] == sorted(SUPPORTED)  # the default: the oracle's tasks, as before
    assert every == {"families": sorted(registered_tasks()), "tasks": n}  # --num_tasks interleaves: one seed each
    assert named["families"] == ["click-tab", "enter-text-2"]
    assert by_id == {"families": ["drag-box"], "tasks": 1}
    assert "did you mean click-tab" in unknown["error"] and "give it alone" in mixed["error"]


@pytest.mark.parametrize(
    "entry, extra, message",
    [
        (
            "collect",
            ["--env=miniwob", "--families=click-tab,click-button", "--policy=oracle"],
            "click-tab have no scripted oracle",
        ),
        (
            "evaluate",
            ["--env=miniwob", "--families=click-tab,click-button", "--model=oracle", "--split=train"],
            "click-tab have no scripted oracle",
        ),
        (
            "evaluate",
            ["--env=tasks", "--tasks={tasks}", "--model=oracle", "--split=train"],
            "task(s) bare have no plan",
        ),
    ],
)
def test_oracle_on_a_task_without_a_plan_stops_before_any_episode(tmp_path, entry, extra, message):
    import http.server
    import json
    import threading

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "id": "bare",
                "start_url": f"http://127.0.0.1:{httpd.server_address[1]}/",
                "instruction": "x",
                "check": {"url": "x"},
            }
        )
        + "\n"
    )
    out = tmp_path / "c"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    try:
        r = subprocess.run(
            [sys.executable, "-m", f"launch.{entry}", *(a.format(tasks=tasks) for a in extra), f"--out={out}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert message in r.stderr and "model" in r.stderr.split(message, 1)[1], r.stderr[-2000:]  # and what to use
    assert not out.exists()  # refused before the output directory was made


def test_the_shop_follows_the_model_unless_a_flag_says_otherwise(tmp_path, caplog):
    """The shop launch.evaluate / collect build (catalogue locale and seed, multi_cart's wording): each from its flag,
    else the model's policy.json (written by the pipeline; older files hold item_names alone), else the default; a
    flag that differs from the model's is logged (another seed is another catalogue, and nothing else would say so)."""
    import json
    import logging

    from absl import app

    from launch.browser_flags import shop_settings

    default = {"locale": "en", "seed": 0, "item_names": "ordinal"}
    # the settings the pipeline records for its models (policy.json's shop) are the ones read back here
    from configs.pipeline import get_config
    from experiment.pipeline_config import shop_kwargs
    from rollout.envs.shop.env import SHOP_SETTINGS

    assert tuple(shop_kwargs(get_config("default"))) == SHOP_SETTINGS == tuple(default)
    model = tmp_path / "sft"
    model.mkdir()
    assert shop_settings({}, str(model)) == default  # no policy.json
    assert shop_settings({}, None) == default and shop_settings({}, "bundled") == default
    (model / "policy.json").write_text(json.dumps({"prompt_style": "compact", "item_names": "number"}))  # older
    assert shop_settings({}, str(model)) == {**default, "item_names": "number"}  # its tasks' wording re-created
    trained = {"locale": "zh", "seed": 3, "item_names": "ordinal"}
    (model / "policy.json").write_text(json.dumps({"prompt_style": "compact", "shop": trained}))
    assert shop_settings({}, str(model)) == trained
    with caplog.at_level(logging.WARNING):
        assert shop_settings({"seed": 0, "item_names": "ordinal"}, str(model)) == {**trained, "seed": 0}
    assert "--shop_seed=0, but" in caplog.text and "seed=3" in caplog.text and "item_names" not in caplog.text
    (model / "policy.json").write_text(json.dumps({"prompt_style": "terse"}))  # not a known prompt: a usage error
    with pytest.raises(app.UsageError, match="prompt_style 'terse'"):
        shop_settings({}, str(model))


def test_evaluate_builds_the_shop_its_model_trained_on(tmp_path):
    """End to end through the flags: a model whose policy.json names another catalogue seed and locale gets that
    shop (its tasks are that catalogue's), and --shop_seed still overrides."""
    import json

    model = tmp_path / "m"
    model.mkdir()
    (model / "policy.json").write_text(
        json.dumps({"prompt_style": "compact", "shop": {"locale": "zh", "seed": 5, "item_names": "number"}})
    )
    code = _SELECT.replace("browser_flags.env_and_tasks()", "browser_flags.env_and_tasks(%r)" % str(model)).replace(
        '"tasks": len(tasks)}',
        '"tasks": len(tasks), "seed": env.seed, "locale": env.locale, "first": tasks[0].instruction}',
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = [["--num_tasks=1"], ["--num_tasks=1", "--shop_seed=0", "--locale=en"]]
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    saved, flagged = (json.loads(line) for line in r.stdout.strip().splitlines()[-2:])
    assert (saved["seed"], saved["locale"]) == (5, "zh") and (flagged["seed"], flagged["locale"]) == (0, "en")
    assert saved["first"] != flagged["first"]  # another catalogue: another task


def test_evaluation_decodes_as_the_pipeline_did_unless_a_flag_is_given():
    """launch.evaluate on a pipeline model: each of constrain / max_tokens / max_steps / step_slack comes from the
    command line if given there, else from the model's policy.json ("evaluation"), else the flag's default."""
    from launch.browser_flags import EVALUATION_FLAGS, evaluation_settings

    defaults = {"constrain": False, "max_tokens": 128, "max_steps": 30, "step_slack": 0}
    saved = {"constrain": True, "max_tokens": 64, "max_steps": 40, "step_slack": 6}
    assert set(EVALUATION_FLAGS) == set(defaults)
    assert evaluation_settings({}, {}, defaults) == defaults  # a model from elsewhere
    assert evaluation_settings(saved, {}, defaults) == saved
    given = {"constrain": False, "max_steps": 30}  # given as the defaults' values: still given
    assert evaluation_settings(saved, given, defaults) == {
        "constrain": False,
        "max_tokens": 64,
        "max_steps": 30,
        "step_slack": 6,
    }
    assert evaluation_settings({"max_tokens": 32}, {}, defaults) == {**defaults, "max_tokens": 32}
