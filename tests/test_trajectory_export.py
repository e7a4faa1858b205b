"""The BrowserGym / AgentLab-style trajectory export (rollout/trajectory_export.py, docs/trajectories.md): the
command -> action mapping, an exported hand-made collection read back field by field, the CLI, and the reader's
errors."""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from rollout.core import Command, Task
from rollout.recording import EpisodeWriter, RecordingError, check_collection, write_tasks
from rollout.trajectory_export import SCROLL_PX, command_to_action, export_collection, py_str, to_browsergym
from rollout.trajectory_format import TrajectoryFormatError, iter_trajectories, read_header, validate_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(action: str) -> tuple[str, list]:
    """How a BrowserGym user's Python reads an action string: the function's name and its literal arguments."""
    node = ast.parse(action, mode="eval").body
    assert isinstance(node, ast.Call) and not node.keywords
    return node.func.id, [ast.literal_eval(a) for a in node.args]


@pytest.mark.parametrize(
    "command,name,args",
    [
        ("CLICK [12]", "click", ["12"]),
        ("CLEAR [3]", "clear", ["3"]),
        ("TYPE [2] [blue mug]", "fill", ["2", "blue mug"]),
        ("TYPE [2] []", "fill", ["2", ""]),
        ("SELECT [6] [red]", "select_option", ["6", "red"]),
        ("SCROLL [DOWN]", "scroll", [0, SCROLL_PX]),
        ("SCROLL [UP]", "scroll", [0, -SCROLL_PX]),
        ("GOTO [http://127.0.0.1:8000/s?q='a b'&x=1]", "goto", ["http://127.0.0.1:8000/s?q='a b'&x=1"]),
        ("GO_BACK", "go_back", []),
        ("STOP [42 items]", "send_msg_to_user", ["42 items"]),
        ("STOP []", "send_msg_to_user", [""]),
    ],
)
def test_every_command_kind_maps_to_its_browsergym_action(command, name, args):
    a = to_browsergym(command)
    assert a.ok and a.problem is None
    assert call(a.action) == (name, args)


def test_scroll_pixels_and_exact_strings():
    assert command_to_action(Command("SCROLL", arg="DOWN"), scroll_px=100) == "scroll(0, 100)"
    assert command_to_action(Command("SCROLL", arg="UP"), scroll_px=100) == "scroll(0, -100)"
    assert to_browsergym("CLICK [a5]").action == "click('a5')"  # single quotes, as BrowserGym's own examples
    assert to_browsergym("TYPE [2] [it's]").action == "fill('2', 'it\\'s')"


TEXTS = [
    "it's",
    'say "hi"',
    "back\\slash",
    "trailing\\",
    "\\'",
    "both ' and \" here",
    "two\nlines",
    "cr\r\nlf",
    "tab\there",
    "nul\x00byte",
    "line\u2028sep",
    "café ☕ 東京",
    "[x] y]",
    "  spaces  ",
    "\x7f\x85\u200b",
]


@pytest.mark.parametrize("text", TEXTS)
def test_text_survives_quoting(text):
    """ast.literal_eval of the argument gives back exactly the text: through the recorded command line (render, as
    the harness records it, then parse) and from the parsed command."""
    assert ast.literal_eval(py_str(text)) == text
    for name, fn in (("TYPE", "fill"), ("SELECT", "select_option")):
        a = to_browsergym(Command(name, "7", text).render())
        assert a.ok and call(a.action) == (fn, ["7", text])
    assert call(command_to_action(Command("STOP", arg=text))) == ("send_msg_to_user", [text])
    assert "\n" not in py_str(text) and "\r" not in py_str(text)  # one line: BrowserGym parses it as one call


@pytest.mark.parametrize(
    "command,output,action,problem",
    [
        ("JUMP [3]", "", "JUMP [3]", "unknown_command"),
        ("CLICK", "", "CLICK", "missing_id"),
        ("SCROLL [LEFT]", "", "SCROLL [LEFT]", "malformed_command"),
        (None, "Thought: hmm\nCommand: PRESS [Enter]", "PRESS [Enter]", "no_command"),
        (None, "I would click it\nCLICK the button\n", "CLICK the button", "no_command"),
        (None, "", "", "no_command"),
    ],
)
def test_an_invalid_command_is_kept_and_marked(command, output, action, problem):
    a = to_browsergym(command, output)
    assert (a.action, a.ok, a.problem) == (action, False, problem)


# ---------------------------------------------------------------- a hand-made collection
TASKS = [
    Task("shop/train/0001", "shop", "webshop", "Buy the 'red' mug", "/", 3, "train"),
    Task("shop/train/0002", "shop", "webshop", "Find the cheapest lamp", "/", 2, "train"),
]
TYPED = 'it\'s "red"\\ mug'


def state(url, title, score=0.0, success=False, shot=None, obs_error=None):
    return {
        "url": url,
        "norm_url": url.split("?")[0],
        "title": title,
        "observation": f"URL: {url}\nTitle: {title}",
        "truncated": False,
        "screenshot": shot,
        "phash": "ab" * 8,
        "obs_error": obs_error,
        "check": {"success": success, "score": score, "progress": f"p{score}", "done": False},
    }


def step(t, st, output, thought, command, error=None, timings=(0.5, 0.25, 2.0, 0.125), tokens=10):
    observe, check, policy, execute = timings
    return {
        "step": t,
        **st,
        "output": output,
        "thought": thought,
        "command": command,
        "command_name": command.split(" ")[0] if command else None,
        "target": None,
        "format_ok": command is not None,
        "error": error,
        "effect": None,
        "logprob": -1.5,
        "num_tokens": tokens,
        "policy_info": {"k": t},
        "timings": {"observe_s": observe, "check_s": check, "policy_s": policy, "execute_s": execute},
    }


NO_EL = {"kind": "no_such_element", "message": "no element [2] on this page"}
BAD = {"kind": "malformed_command", "message": "no 'Command:' line in the output"}


def make_collection(root) -> str:
    out = str(root / "coll")
    check_collection(out, {"env": "shop", "runs": 2, "seed": 7, "policy": "oracle"})
    write_tasks(out, TASKS)
    w = EpisodeWriter(out, TASKS[0].task_id, 0)
    for name in ("000", "002"):  # 001's screenshot is missing: its path is exported as null
        with open(w.screenshot_path(name)[0], "wb") as f:
            f.write(b"png")
    s0, s1 = state("/", "Home", shot="screens/000.png"), state("/mugs", "Mugs", shot="screens/001.png")
    s2 = state("/mugs", "Mugs", shot="screens/002.png", obs_error=NO_EL)
    w.step(step(0, s0, "Thought: open mugs\nCommand: CLICK [1]", "open mugs", "CLICK [1]"))
    w.step(
        step(
            1,
            s1,
            f"Thought: type\nCommand: TYPE [2] [{TYPED}]",
            "type",
            f"TYPE [2] [{TYPED}]",
            NO_EL,
            (0.25, 0.125, 1.0, 0.5),
            tokens=14,
        )
    )
    w.step(
        step(
            2,
            s2,
            "Thought: done\nCommand: STOP [red mug]",
            "done",
            "STOP [red mug]",
            timings=(1.0, 0.5, 4.0, 0.0),
            tokens=6,
        )
    )
    w.finish(
        {
            "task_id": TASKS[0].task_id,
            "run": 0,
            "episode_key": "shop/train/0001/0",
            "env": "shop",
            "family": "webshop",
            "split": "train",
            "policy": "oracle",
            "seed": 7,
            "optimal_steps": 3,
            "status": "success",
            "success": True,
            "score": 1.0,
            "steps": 3,
            "end_reason": "stop",
            "final": state("/mugs", "Mugs", 1.0, True, "screens/002.png", NO_EL),
            "error": None,
            "duration_s": 9.5,
            "started_at": 1000.0,
        }
    )
    w = EpisodeWriter(out, TASKS[1].task_id, 0, screenshots=False)
    w.step(step(0, state("/", "Home"), "I would click it\nCLICK the button", "", None, BAD))
    w.step(step(1, state("/", "Home", obs_error=BAD), "Thought: look\nCommand: SCROLL [UP]", "look", "SCROLL [UP]"))
    w.finish(
        {
            "task_id": TASKS[1].task_id,
            "run": 0,
            "env": "shop",
            "family": "webshop",
            "split": "train",
            "policy": "oracle",
            "seed": 7,
            "optimal_steps": 2,
            "status": "failure",
            "success": False,
            "score": 0.25,
            "steps": 2,
            "end_reason": "max_steps",
            "final": state("/", "Home", 0.25),
            "error": None,
            "duration_s": 3.0,
            "started_at": 2000.0,
        }
    )
    w = EpisodeWriter(out, TASKS[1].task_id, 1, screenshots=False)
    w.step(step(0, state("/", "Home"), "Thought: go\nCommand: GO_BACK", "go", "GO_BACK"))
    w.finish(
        {
            "task_id": TASKS[1].task_id,
            "run": 1,
            "env": "shop",
            "family": "webshop",
            "split": "train",
            "policy": "oracle",
            "seed": 7,
            "optimal_steps": 2,
            "status": "errored",
            "success": False,
            "score": 0.0,
            "steps": 1,
            "end_reason": "error",
            "final": None,
            "duration_s": 1.0,
            "started_at": 3000.0,
            "error": {"type": "BrowserCrashed", "message": "page crashed", "traceback": "Traceback: here"},
        }
    )
    return out


def test_export_reads_back_with_exact_values(tmp_path):
    coll = make_collection(tmp_path)
    out = str(tmp_path / "exports" / "a.jsonl")
    assert export_collection(coll, out) == {"out": out, "episodes": 2, "steps": 7}
    header = read_header(out)
    assert (header["schema_version"], header["include_observation"], header["scroll_px"]) == (1, True, SCROLL_PX)
    assert header["collection"]["seed"] == 7
    a, b = list(iter_trajectories(out))

    ep = a.episode
    assert (ep["episode_id"], ep["task_name"], ep["agent_name"], ep["goal"]) == (
        "shop/train/0001/0",
        "shop/train/0001",
        "oracle",
        "Buy the 'red' mug",
    )
    assert (ep["n_steps"], ep["cum_reward"], ep["cum_raw_reward"], ep["terminated"], ep["truncated"]) == (
        3,
        1.0,
        1.0,
        True,
        False,
    )
    assert (ep["err_msg"], ep["stack_trace"]) == (None, None)
    # AgentLab's aggregate: rows (with the final one); sums / maxima of the step stats (step_elapsed 0.75, 0.5, 2.0)
    assert (ep["stats.cum_steps"], ep["stats.cum_step_elapsed"], ep["stats.max_step_elapsed"]) == (4, 3.25, 2.0)
    assert (ep["stats.cum_agent_elapsed"], ep["stats.cum_num_tokens"], ep["stats.max_num_tokens"]) == (7.0, 30, 14)
    assert {k: ep["tgpo"][k] for k in ("status", "end_reason", "score", "seed", "run", "step_lines")} == {
        "status": "success",
        "end_reason": "stop",
        "score": 1.0,
        "seed": 7,
        "run": 0,
        "step_lines": 4,
    }

    s = a.steps
    assert [r["step"] for r in s] == [0, 1, 2, 3]
    assert [r["action"] for r in s] == [
        "click('1')",
        "fill('2', 'it\\'s \"red\"\\\\ mug')",
        "send_msg_to_user('red mug')",
        None,
    ]
    assert call(s[1]["action"]) == ("fill", ["2", TYPED])
    assert [r["reward"] for r in s] == [0.0, 0.0, 0.0, 1.0] and [r["raw_reward"] for r in s] == [0.0, 0.0, 0.0, 1.0]
    assert [(r["terminated"], r["truncated"]) for r in s] == [(False, False)] * 3 + [(True, False)]
    assert [r["obs"]["last_action"] for r in s] == ["", "click('1')", s[1]["action"], s[2]["action"]]
    # the error of the previous action, as BrowserGym shows it; STOP's own row had none
    assert [r["obs"]["last_action_error"] for r in s] == ["", "", NO_EL["message"], ""]
    assert [r["tgpo"]["last_action_error_kind"] for r in s] == [None, None, "no_such_element", None]
    assert [r["agent_info"] for r in s] == [{"think": "open mugs"}, {"think": "type"}, {"think": "done"}, {}]
    assert s[0]["obs"]["goal"] == "Buy the 'red' mug" and s[1]["obs"]["url"] == "/mugs"
    assert s[1]["obs"]["open_pages_urls"] == ["/mugs"] and s[1]["obs"]["open_pages_titles"] == ["Mugs"]
    assert s[2]["obs"]["axtree_txt"] == "URL: /mugs\nTitle: Mugs"
    shots = [r["obs"]["screenshot"] for r in s]
    ep_dir = os.path.join("..", "coll", "episodes", "shop__train__0001", "000", "screens")
    assert shots == [
        os.path.join(ep_dir, "000.png"),
        None,
        os.path.join(ep_dir, "002.png"),
        os.path.join(ep_dir, "002.png"),
    ]
    assert open(os.path.join(os.path.dirname(out), shots[0]), "rb").read() == b"png"
    # step_elapsed = previous execute + observe + check; agent_elapsed = this step's policy time
    assert [r["stats"] for r in s] == [
        {"step_elapsed": 0.75, "agent_elapsed": 2.0, "num_tokens": 10},
        {"step_elapsed": 0.5, "agent_elapsed": 1.0, "num_tokens": 14},
        {"step_elapsed": 2.0, "agent_elapsed": 4.0, "num_tokens": 6},
        None,
    ]
    assert [r["task_info"]["score"] for r in s] == [0.0, 0.0, 0.0, 1.0] and s[3]["task_info"]["success"] is True
    assert s[1]["tgpo"]["command"] == f"TYPE [2] [{TYPED}]" and s[1]["tgpo"]["error"] == NO_EL
    assert s[0]["tgpo"]["policy_info"] == {"k": 0} and s[0]["tgpo"]["logprob"] == -1.5
    assert [r["tgpo"]["final"] for r in s] == [False, False, False, True] and "command" not in s[3]["tgpo"]

    ep, s = b.episode, b.steps
    assert (ep["episode_id"], ep["n_steps"], ep["cum_reward"], ep["terminated"], ep["truncated"]) == (
        "shop/train/0002/0",
        2,
        0.25,
        False,
        True,
    )
    assert [r["action"] for r in s] == ["CLICK the button", "scroll(0, -614)", None]
    assert [(r["tgpo"].get("format_ok"), r["tgpo"].get("action_ok")) for r in s] == [
        (False, False),
        (True, True),
        (None, None),
    ]
    assert s[0]["tgpo"]["action_problem"] == "no_command" and s[0]["agent_info"] == {"think": ""}
    assert [r["obs"]["last_action_error"] for r in s] == ["", BAD["message"], ""]
    assert [r["reward"] for r in s] == [0.0, 0.0, 0.25] and s[2]["truncated"] and not s[2]["terminated"]
    assert [r["obs"]["screenshot"] for r in s] == [None, None, None]


def test_errored_episodes_only_when_asked_and_observation_optional(tmp_path):
    coll = make_collection(tmp_path)
    out = str(tmp_path / "e.jsonl")
    assert export_collection(coll, out, include_errored=True, include_observation=False)["episodes"] == 3
    trajs = list(iter_trajectories(out))
    c = trajs[2]
    assert (c.episode["err_msg"], c.episode["stack_trace"]) == ("BrowserCrashed: page crashed", "Traceback: here")
    assert (c.episode["terminated"], c.episode["truncated"], c.episode["n_steps"], c.episode["cum_reward"]) == (
        False,
        False,
        1,
        0.0,
    )
    assert [r["action"] for r in c.steps] == ["go_back()"]  # no final row: the crash left no final state
    assert c.episode["tgpo"]["error_type"] == "BrowserCrashed"
    assert all(r["obs"]["axtree_txt"] is None for t in trajs for r in t.steps)
    assert not read_header(out)["include_observation"]


def test_cli_writes_the_same_file(tmp_path):
    coll = make_collection(tmp_path)
    by_fn, by_cli = tmp_path / "fn.jsonl", tmp_path / "cli.jsonl"
    export_collection(coll, str(by_fn))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [sys.executable, "-m", "launch.export_episodes", f"--episodes={coll}", f"--out={by_cli}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == {"out": str(by_cli), "episodes": 2, "steps": 7}
    assert by_cli.read_bytes() == by_fn.read_bytes()

    bad = subprocess.run(
        [sys.executable, "-m", "launch.export_episodes", f"--episodes={tmp_path}", f"--out={tmp_path / 'x.jsonl'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "is not a collection directory" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_a_changed_step_file_stops_the_export_and_writes_nothing(tmp_path):
    coll = make_collection(tmp_path)
    steps = os.path.join(coll, "episodes", "shop__train__0002", "000", "steps.jsonl")
    data = open(steps, encoding="utf-8").read()
    with open(steps, "w", encoding="utf-8") as f:
        f.write(data.replace("SCROLL [UP]", "SCROLL [DOWN]"))
    outdir = tmp_path / "exports"
    with pytest.raises(RecordingError, match="shop__train__0002/000/steps.jsonl was changed after the episode was"):
        export_collection(coll, str(outdir / "a.jsonl"))
    assert os.listdir(outdir) == []  # not the file, nor its temporary
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.export_episodes",
            f"--episodes={coll}",
            f"--out={outdir / 'a.jsonl'}",
            "--noprogress",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "was changed after the episode was sealed" in r.stderr
    assert os.listdir(outdir) == []


def test_export_of_a_synthetic_collection_passes_the_reader(tmp_path):
    from trees.synthetic import write_synthetic_collection

    coll = str(tmp_path / "syn")
    write_synthetic_collection(coll, num_tasks=2, runs=2, seed=3)
    out = str(tmp_path / "syn.jsonl")
    got = export_collection(coll, out)
    assert got["episodes"] == 4 and validate_file(out) == {"episodes": 4, "steps": got["steps"]}
    for t in iter_trajectories(out):
        with open(
            os.path.join(coll, "episodes", t.episode["task_name"], f"{t.episode['tgpo']['run']:03d}", "summary.json"),
            encoding="utf-8",
        ) as f:
            summary = json.load(f)
        assert t.episode["cum_reward"] == summary["score"] and t.episode["n_steps"] == summary["steps"]
        assert len(t.steps) == summary["steps"] + 1 and all(r["action"] for r in t.steps[:-1])


# ---------------------------------------------------------------- the reader's errors
def _rewrite(path, line_no, fn):
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    new = fn(lines[line_no - 1])
    lines[line_no - 1 : line_no] = [] if new is None else [new]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def _set(key, value, sub=None):
    def fn(line):
        obj = json.loads(line)
        (obj[sub] if sub else obj)[key] = value
        return json.dumps(obj) + "\n"

    return fn


@pytest.mark.parametrize(
    "line_no,fn,message",
    [
        (3, lambda line: "{not json\n", "line 3: not a JSON line"),
        (1, lambda line: line.replace('"schema_version": 1', '"schema_version": 99'), "line 1: schema_version 99"),
        (4, _set("reward", "1"), "line 4: step line: 'reward' should be number, not str"),
        (2, _set("n_steps", True), "line 2: episode line: 'n_steps' should be int, not bool"),
        (5, _set("last_action", None, "obs"), "line 5: step line's obs: 'last_action' should be str"),
        (4, lambda line: None, "line 4: step 2 where step 1 of 'shop/train/0001/0' was due"),
        (6, _set("episode_id", "other/0"), "line 6: step of episode 'other/0' inside episode 'shop/train/0001/0'"),
        (
            6,
            _set("reward", 0.5),
            "line 2: episode 'shop/train/0001/0': cum_reward is 1.0 but its steps' rewards add up",
        ),
        (3, _set("action", None), "line 2: episode 'shop/train/0001/0': n_steps is 3 but 2 steps have an action"),
        (6, lambda line: None, "line 2: episode 'shop/train/0001/0': 3 step lines follow it, it announces 4"),
        (8, _set("type", "note"), "line 8: unknown line type 'note'"),
        (3, _set("screenshot", "/abs/000.png", "obs"), "line 3: screenshot path '/abs/000.png' is absolute"),
    ],
)
def test_reader_names_the_bad_line(tmp_path, line_no, fn, message):
    out = str(tmp_path / "a.jsonl")
    export_collection(make_collection(tmp_path), out)
    assert validate_file(out) == {"episodes": 2, "steps": 7}
    _rewrite(out, line_no, fn)
    with pytest.raises(TrajectoryFormatError, match=re.escape(message)):
        validate_file(out)
