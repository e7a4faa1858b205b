"""Tasks the site writes itself (docs/tasks.md, "Tasks the site writes itself"): explore a site, write a task from each
trajectory, keep the ones that execution verifies, and write them as a task file that the rest of the system reads.

1. **Explore**: episodes of a policy from start URLs (``ExplorePolicy``, the noisy oracle or a model), recorded by the
   harness as any collection is. An existing collection on the site works as well.
2. **Describe** each trajectory: its plan is its commands on elements named by role and name (steps that raised an
   error are left out, and so is text typed that the check does not depend on); its instruction is written from the
   plan's typed and chosen values and what sets the final page apart (its title, else its first heading or text
   line that no other explored page shares, else its URL: ``page_label``) by a template (``describe``), or by a
   model on an OpenAI-compatible endpoint (``EndpointDescriber``).
3. **Check** from the final page: its URL (path and query without session, CSRF and tracking parameters; any
   fragment), its ``<title>`` element's text, the heading the instruction names, and the value of each field that
   still holds what the trajectory typed.
4. **Verify** by execution: the clean plan-following oracle replays the plan in a fresh browser context and must
   pass the check; then the plan of an unrelated trajectory (the next candidate with another check) must fail it, and
   so must doing nothing (STOP at the start page). Only tasks that pass all three are kept.

The pure parts (``plan_of``, ``page_label``, ``checked_typing``, ``describe``, ``derive_check``, ``candidates``)
work on recorded episodes; ``verify`` and ``synthesize`` run the browser.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from typing import Iterable, Sequence
from urllib.parse import unquote, unquote_plus, urlsplit

from rollout import urls
from rollout.commands import parse_command
from rollout.core import ActionError
from rollout.envs import checks
from rollout.envs.taskfile import FIELDS, TARGETED

SEPARATORS = (" — ", " – ", " - ", " | ", " · ", " :: ")
FIRST_WORDS = 8  # words of a text line that name a page (``page_label``)
# a session, CSRF or tracking parameter (rollout/urls.py's list) with any value, and one in the path (;jsessionid=…)
_ANY_DROPPED = (
    r"(?:(?i:"
    + "|".join(re.escape(k) for k in sorted(urls.DROPPED_PARAMS))
    + "".join("|" + re.escape(p) + r"[^=&#]*" for p in urls.DROPPED_PREFIXES)
    + r")(?:=[^&#]*)?)"
)
_ANY_PATH_SESSION = r"(?:;(?i:" + "|".join(urls.PATH_SESSION_PARAMS) + r")=[^/;?#]*)?"
_LINE = re.compile(r'^\s*(heading|text) ("(?:[^"\\]|\\.)*")')


# ---------------------------------------------------------------- from a trajectory to a task (pure)
def common_suffix(titles: Iterable[str]) -> str:
    """The site's title suffix (`` — Python 3.11.2 documentation``): the tail starting at a separator that most of
    the distinct titles share (at least two, and at least half of them); the longest such tail on a tie; '' when
    there is none."""
    distinct = sorted({" ".join(t.split()) for t in titles if t and t.strip()})
    counts: Counter = Counter()
    for t in distinct:
        counts.update({t[i:] for sep in SEPARATORS for i in range(len(t)) if t.startswith(sep, i) and i > 0})
    if not counts:
        return ""
    tail, n = max(counts.items(), key=lambda kv: (kv[1], len(kv[0])))
    return tail if n >= 2 and 2 * n >= len(distinct) else ""


def page_name(title: str, suffix: str) -> str:
    """A page's title with whitespace collapsed and the site's title ``suffix`` removed (unless the title is the suffix
    alone)."""
    title = " ".join(title.split())
    return title[: -len(suffix)].strip() if suffix and title.endswith(suffix) and title != suffix else title


def plan_of(steps: Sequence[dict], final: dict | None = None) -> list[dict] | None:
    """The trajectory's commands as plan steps on elements named by role and name (docs/tasks.md). Left out: steps
    that raised an error or did not parse, and with ``final`` (the final state) text typed to no effect — a TYPE whose
    text neither a later URL nor the final page shows (typed into a search box, then a link clicked elsewhere). None
    when a kept step's element has no name to find it by."""
    plan = []
    for k, s in enumerate(steps):
        if s.get("error") or not s.get("command") or s.get("command_name") == "STOP":
            continue
        try:
            cmd = parse_command(s["command"])
        except ActionError:
            continue
        if cmd.name == "TYPE" and final is not None and not _shows(cmd.arg or "", steps[k + 1 :], final):
            continue
        step: dict = {"do": cmd.name}
        if cmd.name in TARGETED:
            target = s.get("target") or {}
            if not target.get("role") or not str(target.get("name", "")).strip():
                return None
            step.update(role=target["role"], name=target["name"])
        if cmd.name == "TYPE":
            step["text"] = cmd.arg
        elif cmd.name == "SELECT":
            step["option"] = cmd.arg
        elif cmd.name == "GOTO":
            step["url"] = cmd.arg
        elif cmd.name == "SCROLL":
            step["direction"] = cmd.arg
        plan.append(step)
    return plan


def _shows(text: str, later: Sequence[dict], final: dict) -> bool:
    """The typed text had an effect: a later state's URL carries it (a GET form, a search) or the final page shows
    it (a field still holding it, a page echoing it)."""
    from urllib.parse import quote_plus

    t = text.strip().casefold()
    if not t:
        return False
    urls = [str(s.get("url") or "") for s in later] + [str(final.get("url") or "")]
    return (
        any(t in u.casefold() or quote_plus(text.strip()).casefold() in u.casefold() for u in urls)
        or t in str(final.get("observation") or "").casefold()
    )


def held_values(plan: Sequence[dict], final_observation: str) -> list[dict]:
    """Form-value leaves for the typed texts that the final page's fields still hold (as its observation shows
    them: ``textbox "Quick search" value="json"``)."""
    from rollout.harness.observe import quote

    leaves = []
    for s in plan:
        if s["do"] == "TYPE" and f"{s['role']} {quote(s['name'])} value={quote(s['text'])}" in final_observation:
            leaves.append(
                {"element": {"role": s["role"], "name": s["name"]}, "form_value": "^" + re.escape(s["text"]) + "$"}
            )
    return leaves


def _raw_path(url: str) -> str:
    """Path and query of a URL (site-relative ones as recorded, or absolute), without the fragment."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _path(url: str) -> str:
    """``_raw_path`` without session, CSRF and tracking parameters (rollout/urls.py: they differ in every session,
    so they neither name a page nor belong in a check); the other parameters as recorded, in their order."""
    parts = urlsplit(url)
    query = "&".join(p for p in parts.query.split("&") if p and not urls.is_dropped(unquote_plus(p.split("=")[0])))
    return (urls.PATH_SESSION.sub("", parts.path or "/") or "/") + (f"?{query}" if query else "")


def url_pattern(url: str) -> str:
    """The URL check's pattern: the site (any, when recorded site-relative), the path and the query parameters that
    identify the page, any fragment. Where the recorded URL carries session, CSRF or tracking parameters, the
    pattern leaves their values out and accepts any of them among the kept parameters (a replay has its own
    session)."""
    parts = urlsplit(url)
    site = re.escape(f"{parts.scheme}://{parts.netloc}") if parts.scheme else r"https?://[^/?#]+"
    clean = _path(url)
    if clean == _raw_path(url):
        return "^" + site + re.escape(clean) + r"(#.*)?$"
    path, _, query = clean.partition("?")
    path_re = (_ANY_PATH_SESSION + "/").join(re.escape(p) for p in path.split("/")) + _ANY_PATH_SESSION
    d = _ANY_DROPPED
    kept = [re.escape(p) for p in query.split("&") if p]
    query_re = rf"\?(?:{d}&)*" + f"(?:&{d})*&".join(kept) + f"(?:&{d})*" if kept else rf"(?:\?(?:{d}(?:&{d})*)?)?"
    return "^" + site + path_re + query_re + r"(#.*)?$"


def url_part(url: str) -> str:
    """A URL as an instruction names the page: path and query without session parameters, an index file left
    out (``/docs/index.html`` → ``/docs/``), decoded."""
    path, sep, query = _path(url).partition("?")
    path = re.sub(r"/index\.[a-z]+$", "/", path)
    return unquote(path + sep + query)


def page_lines(observation: str, role: str) -> list[str]:
    """The names of an observation's lines of one role (``heading "Results"``, ``text "…"``), in page order."""
    out = []
    for line in observation.split("\n"):
        m = _LINE.match(line)
        if m and m.group(1) == role:
            out.append(" ".join(json.loads(m.group(2)).split()))
    return out


@dataclasses.dataclass(frozen=True)
class SiteText:
    """What pages of the explored site share, so that no instruction names a page by it: the titles' suffix, page
    names (titles less it) and heading or text lines that more than one page has."""

    suffix: str = ""
    titles: frozenset[str] = frozenset()
    lines: frozenset[str] = frozenset()


def site_text(pages: Iterable[dict]) -> SiteText:
    """``SiteText`` of recorded states (url, title, observation: the explorations' final and start pages). Pages are
    told apart by their URL less fragment and session parameters; the same page seen twice shares nothing."""
    pages = [p for p in pages if p and p.get("url")]
    suffix = common_suffix(p.get("title") or "" for p in pages)
    titles: dict[str, set] = {}
    lines: dict[str, set] = {}
    for p in pages:
        key = urls.normalize_url(p["url"])
        name = page_name(p.get("title") or "", suffix)
        if name:
            titles.setdefault(name, set()).add(key)
        obs = p.get("observation") or ""
        for line in set(page_lines(obs, "heading") + page_lines(obs, "text")):
            lines.setdefault(line, set()).add(key)
    return SiteText(
        suffix,
        frozenset(t for t, k in titles.items() if len(k) > 1),
        frozenset(t for t, k in lines.items() if len(k) > 1),
    )


def page_label(final: dict, site: SiteText) -> tuple[str, str]:
    """How an instruction names the final page, and by what: ("title", its title less the site's suffix) where no
    other explored page has that title (the start page included); else ("heading", its first heading that no other
    page shows: a banner with the site's name is on them all); else ("text", the first words of its first such text
    line); else ("url", ``url_part``)."""
    name = page_name(final.get("title") or "", site.suffix)
    if name and name not in site.titles:
        return "title", name
    obs = final.get("observation") or ""
    for kind in ("heading", "text"):
        for line in page_lines(obs, kind):
            if re.search(r"\w", line) and line not in site.lines:
                words = line.split()
                cut = " ".join(words[:FIRST_WORDS]).rstrip(",;:") + " …"
                return kind, line if kind == "heading" or len(words) <= FIRST_WORDS else cut
    return "url", url_part(final.get("url") or "/")


def checked_typing(plan: Sequence[dict], tested: Sequence[str], held: Sequence[dict] = ()) -> list[dict]:
    """The plan without text typed that the check does not depend on (a word typed into a search box, then a link
    clicked): a TYPE stays where a form-value leaf (``held``) holds its text in its field, or where its text is in
    what the check's other leaves test (``tested``: the URL less session parameters, decoded; the title; a
    heading)."""
    fields = {(leaf["element"]["name"], leaf["form_value"]) for leaf in held}
    seen = [t.casefold() for t in tested if t]

    def matters(s: dict) -> bool:
        text = s["text"].strip().casefold()
        return (s["name"], "^" + re.escape(s["text"]) + "$") in fields or bool(text) and any(text in t for t in seen)

    return [s for s in plan if s["do"] != "TYPE" or matters(s)]


def describe(
    plan: Sequence[dict], start_url: str, final_url: str, page: tuple[str, str], held: Sequence[dict] = ()
) -> str | None:
    """The template instruction: what was typed, chosen and ticked, and the page it ended on (``page``,
    ``page_label``'s: by its title or heading, the first words it shows, or its URL); values that the final page's
    fields hold (``held``, ``held_values``' leaves) were entered there, so they come after it. None when the
    trajectory achieved nothing nameable (it stayed where it started)."""
    there = {(leaf["element"]["name"], leaf["form_value"]) for leaf in held}
    before, after = [], []
    for s in plan:
        if s["do"] == "TYPE" and s["text"].strip():
            late = (s["name"], "^" + re.escape(s["text"]) + "$") in there
            (after if late else before).append(f"enter [{s['text']}] in “{s['name']}”")
        elif s["do"] == "SELECT":
            before.append(f"choose “{s['option']}” in “{s['name']}”")
        elif s["do"] == "CLICK" and s["role"] in ("checkbox", "radio", "switch"):
            before.append(f"tick “{s['name']}”")
    kind, name = page
    if _path(final_url) != _path(start_url) and name:
        opened = {"text": f"open the page that shows “{name}”", "url": f"open the page at “{name}”"}.get(
            kind, f"open the page “{name}”"
        )
        parts = before + [opened] + [p + " there" for p in after]
    else:
        parts = before + after
    if not parts:
        return None
    text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return text[0].upper() + text[1:] + "."


def derive_check(final_url: str, final_title: str, values: Sequence[dict] = (), heading: str = "") -> dict:
    """The final page's URL (``url_pattern``: path and the query's identifying parameters, any fragment, on the
    site's own origin when recorded site-relative), its <title> element's text, the ``heading`` the instruction
    names it by (if any), and ``values`` (form-value leaves: what its fields hold)."""
    leaves = [{"url": url_pattern(final_url)}]
    title = " ".join(final_title.split())
    if title:
        leaves.append({"element": {"css": "title"}, "text": "^\\s*" + re.escape(title) + "\\s*$"})
    if heading.endswith("…"):  # clipped by the observation (its names' length cap): the name starts so
        leaves.append({"element": {"role": "heading", "name_regex": "^" + re.escape(heading[:-1])}})
    elif heading:
        leaves.append({"element": {"role": "heading", "name": heading}})
    leaves += list(values)
    return leaves[0] if len(leaves) == 1 else {"all": leaves}


def candidate(ep, start_url: str, site: SiteText) -> tuple[dict | None, str]:
    """(task dict without id / split, "ok") or (None, why not) for one recorded episode. ``site``: what the
    explored pages share (``site_text``), so that the page is named by what sets it apart."""
    final = ep.summary["final"]
    if ep.summary["status"] == "errored" or not final:
        return None, "errored"
    plan = plan_of(ep.steps, final)
    if plan is None:
        return None, "unnamed element"
    if not plan:
        return None, "no action"
    title = final.get("title") or ""
    held = held_values(plan, final.get("observation") or "")
    page = page_label(final, site)
    heading = page[1] if page[0] == "heading" else ""
    plan = checked_typing(plan, (unquote_plus(_path(final["url"])), title, heading), held)
    instruction = describe(plan, start_url, final["url"], page, held) if plan else None
    if instruction is None:
        return None, "nothing achieved"
    check = derive_check(final["url"], title, held, heading)
    return {
        "instruction": instruction,
        "start_url": start_url,
        "check": check,
        "plan": plan + [{"do": "STOP"}],
        "final_url": final["url"],
    }, "ok"


def candidates(
    episodes, start_urls: dict[str, str], family: str = "synth", describer=None, held_out: Sequence = ()
) -> tuple[list[dict], Counter]:
    """Candidate tasks from recorded episodes (``start_urls``: task id of the episode -> its start URL as the task
    file will write it), deduplicated by (start URL, instruction) keeping the shortest plan; and why the others
    were dropped. ``describer``: None for the template, else an object whose ``describe(plan, final)`` writes the
    instruction. ``held_out``: tasks that none may overlap (``overlaps``)."""
    episodes = list(episodes)
    marks = held_out_marks(held_out)
    site = site_text([e.summary["final"] for e in episodes] + [e.steps[0] for e in episodes if e.steps])
    best: dict[tuple[str, str], dict] = {}
    why: Counter = Counter()
    for ep in episodes:
        task, reason = candidate(ep, start_urls[ep.task_id], site)
        if task is None:
            why[reason] += 1
            continue
        if held_out and overlaps(task, marks):
            why["overlaps a held-out task"] += 1
            continue
        if describer is not None:
            task["instruction"] = describer.describe(task["plan"], ep.summary["final"])
        key = (task["start_url"], task["instruction"])
        if key in best:
            why["duplicate"] += 1
            if len(best[key]["plan"]) <= len(task["plan"]):
                continue
        best[key] = task
    out = []
    for i, task in enumerate(sorted(best.values(), key=lambda t: (t["start_url"], t["instruction"]))):
        out.append({"id": f"{family}/{i:04d}", "family": family, **task})
    return out, why


def unrelated_pairs(tasks: Sequence[dict]) -> list[tuple[dict, dict]]:
    """(task, the next task in order whose check differs): whose plan must fail the first one's check."""
    pairs = []
    for i, t in enumerate(tasks):
        for j in range(1, len(tasks)):
            u = tasks[(i + j) % len(tasks)]
            if u["check"] != t["check"]:
                pairs.append((t, u))
                break
    return pairs


def held_out_marks(held_out: Sequence) -> tuple[list[str], set[str]]:
    """What a synthesized task may not share with held-out tasks (``rollout.core.Task``s of a task file): their
    checks' URL patterns, and the texts their instructions quote in brackets (case folded)."""
    urls, quoted = [], set()
    for t in held_out:
        urls += [
            leaf.pattern
            for leaf in checks.leaves(checks.parse_check(t.goal["check"], t.goal["start_url"]))
            if isinstance(leaf, checks.UrlLeaf)
        ]
        quoted |= {q.strip().casefold() for q in re.findall(r"\[([^\]]+)\]", t.instruction)}
    return urls, quoted


def overlaps(task: dict, marks: tuple[list[str], set[str]]) -> bool:
    """Whether a synthesized task would leak a held-out task (``held_out_marks``): it ends on a page that a held-out
    check's URL leaf accepts, or types a text that a held-out instruction quotes."""
    urls, quoted = marks
    final = task["final_url"]
    url = final if urlsplit(final).scheme else "http://site" + _path(final)
    typed = {s["text"].strip().casefold() for s in task["plan"] if s["do"] == "TYPE"}
    return any(re.search(p, url) for p in urls) or bool(typed & quoted)


# ---------------------------------------------------------------- a model writes the instruction
class EndpointDescriber:
    """The instruction written by a model on an OpenAI-compatible endpoint from the plan and the final page."""

    def __init__(self, base_url: str, model: str, max_tokens: int = 64):
        from rollout.endpoint import ChatEndpoint

        self.endpoint, self.model, self.max_tokens = ChatEndpoint(base_url), model, max_tokens

    def describe(self, plan: Sequence[dict], final: dict) -> str:
        """One imperative sentence describing the task that ``plan`` (steps naming elements by role and name) achieved,
        ending on the page ``final``; ``ValueError`` for an empty answer."""
        steps = "\n".join(json.dumps(s, ensure_ascii=False) for s in plan)
        prompt = (
            "A user did these steps on a website (elements named by role and name):\n"
            + steps
            + f"\nThey ended on the page titled {final.get('title')!r} at {final.get('url')!r}.\n"
            "Write the task they achieved as one imperative sentence, with any text they typed in square "
            "brackets. Answer with the sentence only."
        )
        body = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "messages": [{"role": "user", "content": prompt}],
        }
        text = self.endpoint.post(body)["choices"][0]["message"]["content"]
        line = " ".join(str(text).split())
        if not line:
            raise ValueError("the describer's model answered an empty instruction")
        return line


# ---------------------------------------------------------------- the browser: explore and verify
@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """How synthesis explores and verifies: the work directory, exploration runs and steps per start URL, parallel
    contexts, seed, and the family and split of the written tasks; ``ValueError`` for invalid values."""

    work_dir: str  # exploration and verification recordings go here (resumable)
    runs: int = 20  # exploration episodes per start URL
    max_steps: int = 6  # per exploration episode
    contexts: int = 4
    seed: int = 0
    family: str = "synth"
    split: str = "train"
    progress: bool = True

    def __post_init__(self):
        if self.runs < 1 or self.max_steps < 1 or self.contexts < 1:
            raise ValueError(f"invalid synthesis config: {self}")
        if self.split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {self.split!r}")


def write_tasks(path: str, tasks: Sequence[dict]) -> str:
    """Write ``tasks`` as a JSONL task file (the task-file fields only, atomically); ``path``."""
    from tgpo_jax.files import write_text_atomic

    write_text_atomic(
        path, "".join(json.dumps({k: v for k, v in t.items() if k in FIELDS}, ensure_ascii=False) + "\n" for t in tasks)
    )
    return path


def _collect(
    tasks: Sequence[dict], origin: str | None, name: str, policy_of, cfg: SynthConfig, max_steps: int, runs: int = 1
):
    """Run ``tasks`` (written to ``<work_dir>/<name>.jsonl``) ``runs`` times each; -> ({task id: success}, the
    episodes)."""
    from rollout.collect import CollectConfig, collect
    from rollout.envs.taskfile import TaskFileEnv
    from rollout.harness.runner import HarnessConfig
    from rollout.recording import iter_episodes

    path = write_tasks(os.path.join(cfg.work_dir, f"{name}.jsonl"), tasks)
    env = TaskFileEnv(path, origin)
    env.start()
    selected = env.tasks("train") + env.tasks("test")
    out = os.path.join(cfg.work_dir, name)
    collect(
        env,
        selected,
        policy_of(env),
        CollectConfig(
            out_dir=out,
            runs=runs,
            seed=cfg.seed,
            contexts=cfg.contexts,
            progress=cfg.progress,
            harness=HarnessConfig(max_steps=max_steps, screenshots=False),
        ),
    )
    eps = list(iter_episodes(out, include_errored=True))
    return {e.task_id: e.summary["success"] for e in eps}, eps


def explore(start_urls: Sequence[str], origin: str | None, cfg: SynthConfig, policy=None):
    """Exploration episodes from each start URL (``cfg.runs`` each); -> (episodes, task id -> start URL)."""
    from rollout.policies.explore import ExplorePolicy

    tasks = [
        {"id": f"explore/{i}", "start_url": u, "instruction": "Explore the site.", "check": {"url": "."}}
        for i, u in enumerate(start_urls)
    ]
    _, eps = _collect(
        tasks, origin, "explore", lambda env: policy or ExplorePolicy(seed=cfg.seed), cfg, cfg.max_steps, runs=cfg.runs
    )
    return eps, {t["id"]: t["start_url"] for t in tasks}


def verify(tasks: Sequence[dict], origin: str | None, cfg: SynthConfig) -> tuple[list[dict], dict]:
    """Keep the tasks whose plan passes their check when replayed in a fresh context, and whose check fails both an
    unrelated task's plan and doing nothing (a task already done where it starts is no task); -> (kept, counts)."""
    from rollout.policies.oracle import OraclePolicy

    if not tasks:
        return [], {"candidates": 0, "replay_passed": 0, "unrelated_failed": 0, "nothing_failed": 0, "kept": 0}
    steps = max(len(t["plan"]) for t in tasks) + 2
    replay, _ = _collect(tasks, origin, "replay", OraclePolicy, cfg, steps)
    others = [{**t, "id": f"{t['id']}~{u['id']}", "plan": u["plan"]} for t, u in unrelated_pairs(tasks)]
    others += [{**t, "id": f"{t['id']}~nothing", "plan": [{"do": "STOP"}]} for t in tasks]
    passed, _ = _collect(others, origin, "unrelated", OraclePolicy, cfg, steps)
    unrelated_failed = {k.split("~")[0] for k, ok in passed.items() if not ok and not k.endswith("~nothing")}
    nothing_failed = {k.split("~")[0] for k, ok in passed.items() if not ok and k.endswith("~nothing")}
    has_unrelated = {k.split("~")[0] for k in passed if not k.endswith("~nothing")}
    kept = [
        t
        for t in tasks
        if replay.get(t["id"])
        and t["id"] in nothing_failed
        and (t["id"] in unrelated_failed or t["id"] not in has_unrelated)
    ]
    counts = {
        "candidates": len(tasks),
        "replay_passed": sum(bool(replay.get(t["id"])) for t in tasks),
        "unrelated_failed": len(unrelated_failed),
        "nothing_failed": len(nothing_failed),
        "kept": len(kept),
    }
    return kept, counts


def synthesize(
    start_urls: Sequence[str],
    origin: str | None,
    out_path: str,
    cfg: SynthConfig,
    policy=None,
    describer=None,
    episodes_dir: str | None = None,
    start_of: dict | None = None,
    held_out: Sequence = (),
) -> dict:
    """Explore (or read ``episodes_dir``, whose task ids ``start_of`` maps to start URLs), write candidates (none
    overlapping ``held_out``), verify them, and write the kept tasks to ``out_path``; returns the counts (also
    ``<work_dir>/synthesis.json``)."""
    from rollout.recording import iter_episodes
    from tgpo_jax.files import write_json_atomic

    os.makedirs(cfg.work_dir, exist_ok=True)
    if episodes_dir is None:
        eps, start_of = explore(start_urls, origin, cfg, policy)
    else:
        eps = list(iter_episodes(episodes_dir, include_errored=True))
        eps = [e for e in eps if e.task_id in start_of]
    found, why = candidates(eps, start_of, cfg.family, describer, held_out)
    kept, counts = verify(found, origin, cfg)
    for t in kept:
        t["split"] = cfg.split
    write_tasks(out_path, kept)
    counts = {"episodes": len(eps), "dropped": dict(why), **counts, "out": out_path}
    write_json_atomic(os.path.join(cfg.work_dir, "synthesis.json"), counts)
    return counts
