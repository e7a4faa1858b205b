"""The command grammar and output format (docs/method.md §1), URL normalisation, recording files — no browser."""

import json
import os

import pytest

from rollout.commands import format_output, parse_command, parse_output
from rollout.core import Command, MalformedCommand, MissingId, Task, UnknownCommand
from rollout.recording import (
    EpisodeWriter,
    RecordingError,
    check_collection,
    episode_dir,
    episode_status,
    iter_episodes,
    read_tasks,
    write_tasks,
)
from rollout.urls import normalize_url, site_relative
from episode_records import step_record, summary_record

ALL = [
    Command("CLICK", "12"),
    Command("TYPE", "3", "red shoes [size 9]"),
    Command("SELECT", "f1.4", "Large"),
    Command("CLEAR", "7"),
    Command("SCROLL", arg="UP"),
    Command("SCROLL", arg="DOWN"),
    Command("GOTO", arg="http://127.0.0.1:8000/cart"),
    Command("GO_BACK"),
    Command("STOP", arg="42"),
    Command("STOP", arg=""),
    Command("TYPE", "3", ""),
]


@pytest.mark.parametrize("cmd", ALL, ids=lambda c: c.render())
def test_render_parse_round_trip(cmd):
    assert parse_command(cmd.render()) == cmd
    thought, parsed = parse_output(format_output("Because: reasons.\nTwo lines.", cmd))
    assert parsed == cmd and thought == "Because: reasons.\nTwo lines."


@pytest.mark.parametrize(
    "text,error,needle",
    [
        ("JUMP [1]", UnknownCommand, "JUMP"),
        ("Thought: go\nCommand: PRESS [4]", UnknownCommand, "PRESS"),
        ("CLICK", MissingId, "element id"),
        ("CLICK []", MissingId, "element id"),
        ("TYPE [ ] [x]", MissingId, "element id"),
        ("SELECT [3]", MalformedCommand, "bracketed"),
        ("TYPE [3] hello", MalformedCommand, "bracketed"),
        ("CLICK 12", MissingId, "element id"),
        ("CLICK [1 2]", MalformedCommand, "spaces"),
        ("CLICK [1] [2]", MalformedCommand, "unexpected"),
        ("GO_BACK now", MalformedCommand, "unexpected"),
        ("SCROLL [LEFT]", MalformedCommand, "UP"),
        ("GOTO []", MalformedCommand, "url"),
        ("SELECT [3] []", MalformedCommand, "option"),
        ("Thought: I will click", MalformedCommand, "Command:"),
        ("CLICK [1]\nCLICK [2]", MalformedCommand, "Command:"),
        ("Command: CLICK [1]\nand then more", MalformedCommand, "after the command"),
        ("Command:", MalformedCommand, "empty"),
        ("", MalformedCommand, "Command:"),
    ],
)
def test_malformed_outputs_raise_typed_errors(text, error, needle):
    with pytest.raises(error, match=needle) as e:
        parse_output(text)
    assert e.value.info().kind == error.kind


def test_parser_takes_the_last_command_line_and_is_case_tolerant_on_verbs_only():
    assert parse_output("Thought: a\nCommand: CLICK [1]\nAction: click [2]")[1] == Command("CLICK", "2")
    assert parse_output("  STOP  ")[1] == Command("STOP", arg="")
    assert parse_output("TYPE [5] [  spaced  ]")[1].arg == "  spaced  "  # text kept verbatim


def test_normalize_url():
    n = normalize_url
    assert (
        n("HTTP://127.0.0.1:8000/search?sort=price&q=a+b&utm_source=x&sid=3#frag")
        == "http://127.0.0.1:8000/search?q=a+b&sort=price"
    )
    assert n("http://127.0.0.1:8000/item/12?q=shoes", {"/item/*": []}) == "http://127.0.0.1:8000/item/12"
    assert (
        n("http://127.0.0.1:8000/search?q=x&page=2&ref=home", {"/search": ["q", "page"]})
        == "http://127.0.0.1:8000/search?page=2&q=x"
    )
    assert n("https://Example.com:443") == "https://example.com/" and n("http://a.b:80/x") == "http://a.b/x"
    assert n("http://h/p?b=2&a=1") == n("http://h/p?a=1&b=2") != n("http://h/p?a=1&b=3")
    assert n("http://h/shop;jsessionid=A1B2/item?PHPSESSID=9&id=3") == "http://h/shop/item?id=3"  # session ids
    assert n("http://h/a#top") == n("http://h/a#bottom") == "http://h/a"  # fragments


def test_recording_seal_resume_and_errors(tmp_path):
    out = str(tmp_path)
    w = EpisodeWriter(out, "shop/webshop/1", 0)
    w.step(step_record(0))
    assert episode_status(out, "shop/webshop/1", 0) is None  # unsealed = interrupted
    w.finish(summary_record("shop/webshop/1", 0, "success"))
    assert episode_status(out, "shop/webshop/1", 0) == "success"
    w2 = EpisodeWriter(out, "shop/webshop/1", 1)
    w2.finish(summary_record("shop/webshop/1", 1, "errored"))
    assert [e.summary["run"] for e in iter_episodes(out)] == [0]
    assert [e.summary["run"] for e in iter_episodes(out, include_errored=True)] == [0, 1]
    EpisodeWriter(out, "shop/webshop/1", 1)  # a re-run starts from an empty directory
    assert episode_status(out, "shop/webshop/1", 1) is None
    with pytest.raises(ValueError, match="status"):
        EpisodeWriter(out, "t", 0).finish(summary_record("t", 0, "fine"))
    with open(os.path.join(episode_dir(out, "shop/webshop/1", 0), "steps.jsonl"), "a") as f:
        f.write("{broken\n")
    with pytest.raises(RecordingError, match="corrupt step 1"):
        list(iter_episodes(out))
    tasks = [Task("a/1", "shop", "webshop", "buy", "/", 5, "train", {"x": [1, 2]})]
    write_tasks(out, tasks)
    assert read_tasks(out) == [Task("a/1", "shop", "webshop", "buy", "/", 5, "train", {"x": [1, 2]})]
    check_collection(out, {"runs": 2})
    check_collection(out, {"runs": 2})
    with pytest.raises(RecordingError, match="runs: 2 -> 3"):
        check_collection(out, {"runs": 3})
    with open(os.path.join(out, "collection.json")) as f:
        assert json.load(f) == {"runs": 2}


def test_site_relative_urls():
    """The site's own URLs lose their origin (so the run's port never reaches a prompt); others stay whole."""
    o = "http://127.0.0.1:4040"
    assert site_relative(o + "/search?q=a b", o) == "/search?q=a b"
    assert site_relative(o, o) == "/" and site_relative(o + "?x=1", o + "/") == "/?x=1"
    assert site_relative("http://127.0.0.1:40401/", o) == "http://127.0.0.1:40401/"  # another port, same prefix
    assert site_relative("https://example.com/a", o) == "https://example.com/a"
    assert site_relative(o + "/a", "") == o + "/a"
    assert normalize_url(site_relative(o + "/search?utm_source=x&q=b", o)) == "/search?q=b"
