"""Browser-side observation (docs/method.md §1): element ids injected into every frame, accessibility-tree text,
screenshot and its perceptual hash.

One ``evaluate`` per frame does all the DOM work (``page_script.js``'s ``__tgpo.snapshot``): it walks the DOM in
document order, gives every interactive element (and images / iframes) a ``data-tgpo-id`` attribute, and returns a
flat JSON list of nodes with their depth. Ids are kept by the element for the life of its document, and new elements
take the next number (a per-document counter kept in ``<html data-tgpo-next>``), so re-observing the same page gives
the same ids and two fresh loads of the same page give identical ids. Main-frame ids are ``1``, ``2``, …; a child
frame's are prefixed with its frame index in ``page.frames`` at the time its document was first observed (``f1.3``);
a child frame's lines are placed under its ``iframe`` line.

Text format, one node per line, two spaces of indent per depth::

    [12] link "Running shoes for men"
    [3] textbox "Search" value=""
    [7] combobox "size" value="M" options=["S","M","L"]
    [9] checkbox "Option A" checked=false
    [4] button "Buy Now" disabled
    [5] link "Sort: Rating" current
    heading "Results"
    text "Showing 1-10 of 50"
"""
from __future__ import annotations

import io
import json
import os
import pathlib

from rollout.core import Element, ErrorInfo, Observation

SCRIPT = (pathlib.Path(__file__).with_name("page_script.js")).read_text()
# Evaluated in a frame: install the helper if the init script did not (about:blank frames, set_content), then run fn.
_ENSURE = "(() => { if (!window.__tgpo) { " + SCRIPT + " } })();"
TRUNCATION_LINE = "… (truncated)"


async def install(context) -> None:
    """Add the helper to every frame of every page the context opens from now on."""
    await context.add_init_script(script=SCRIPT)


def helper_call(body: str, params: str = "arg") -> str:
    """A JS function expression (parameters ``params``) that ensures the helper is present, then runs ``body``."""
    return "(" + params + ") => { " + _ENSURE + " " + body + " }"


async def set_ignored_attributes(page, names) -> None:
    """Attribute names whose mutations do not count as DOM changes in this document (e.g. MiniWoB's
    ``data-tampered``, written on every click)."""
    await page.main_frame.evaluate(helper_call("for (const n of arg) window.__tgpo.ignoreAttrs.add(n);"),
                                   list(names))


def quote(s: str) -> str:
    """A name or value as the observation text quotes it."""
    return json.dumps(s, ensure_ascii=False)



def format_node(node: dict) -> str:
    """One line of tree text (without indent)."""
    role, name = node["role"], node.get("name", "")
    head = f"[{node['id']}] {role}" if node.get("id") else role
    parts = [f"{head} {quote(name)}"]
    if "value" in node and node["value"] is not None:
        parts.append(f"value={quote(node['value'])}")
    if node.get("options"):
        parts.append("options=[" + ",".join(quote(o) for o in node["options"]) + "]")
    if node.get("checked") is not None:
        parts.append(f"checked={'true' if node['checked'] else 'false'}")
    if node.get("disabled"):
        parts.append("disabled")
    if node.get("current"):
        parts.append("current")
    return " ".join(parts)


def _element(node: dict) -> Element:
    return Element(id=node["id"], role=node["role"], name=node.get("name", ""), value=node.get("value"),
                   options=tuple(node.get("options") or ()), checked=node.get("checked"),
                   disabled=bool(node.get("disabled")), current=bool(node.get("current")),
                   href=node.get("href") or None,
                   interactive=bool(node.get("interactive")))


def truncate_text(text: str, max_chars: int) -> tuple[str, bool]:
    """Cut ``text`` at a line boundary so that it plus a final truncation line fits ``max_chars``."""
    if len(text) <= max_chars:
        return text, False
    room = max_chars - len(TRUNCATION_LINE) - 1
    kept = []
    used = 0
    for line in text.split("\n"):
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept + [TRUNCATION_LINE]), True


# 32 x 32 = 1024-bit pHash. The default 8 x 8 (a 32 x 32 thumbnail of the page) cannot tell mostly-white web
# pages apart: the shop's home and cart pages hash equal, and 20 of 21 page pairs are within 4 bits. At 16 x 16
# pages differ but an option change on a product page often does not show (0-4 bits); at 32 x 32 it moves
# 6-26 bits, so a changed form is a new state, as its next correct action differs.
PHASH_SIZE = 32


def phash_png(png: bytes) -> str:
    """imagehash pHash (``PHASH_SIZE``² bits) of a PNG, as hex."""
    import imagehash
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return str(imagehash.phash(im, hash_size=PHASH_SIZE))


async def _snapshot_frame(frame, prefix: str, taken: list[str]) -> dict | None:
    try:
        return await frame.evaluate(helper_call("return window.__tgpo.snapshot(arg[0], arg[1]);"), [prefix, taken])
    except Exception:  # detached frame, error page, navigation in between
        return None


async def _snapshot_all(page) -> list[tuple[object, dict]]:
    """[(frame, snapshot)] for every frame that answered, main frame first."""
    frames = page.frames
    main = page.main_frame
    out = []
    snap = await _snapshot_frame(main, "", [])
    if snap is None:
        # The main document was replaced under us (navigation in progress): wait for it once, retry.
        try:
            await page.wait_for_load_state("domcontentloaded", timeout=5000)
        except Exception:
            pass
        snap = await _snapshot_frame(main, "", [])
    if snap is None:
        snap = {"prefix": "", "nodes": [], "url": page.url, "title": ""}
    out.append((main, snap))
    taken = [""]
    for i, frame in enumerate(frames):
        if frame is main or frame.is_detached():
            continue
        if frame.url.startswith("chrome-error:"):
            continue
        wanted = f"f{i}"
        k = 1
        while wanted in taken:
            wanted = f"f{i}_{k}"
            k += 1
        snap = await _snapshot_frame(frame, wanted, taken)
        if snap is None:
            continue
        taken.append(snap["prefix"])
        out.append((frame, snap))
    return out


async def _frame_owner_id(frame) -> str | None:
    """The data-tgpo-id of the <iframe> element hosting ``frame`` (given by the parent's snapshot)."""
    try:
        handle = await frame.frame_element()
        try:
            return await handle.get_attribute("data-tgpo-id")
        finally:
            await handle.dispose()
    except Exception:
        return None


async def observe(page, *, budget_tokens: int = 1024, chars_per_token: int = 4, screenshot_path: str | None = None,
                  error: ErrorInfo | None = None, with_screenshot: bool = True, origin: str = "") -> Observation:
    """Inject ids in every frame and read the page as an Observation (see the module docstring)."""
    snaps = await _snapshot_all(page)
    # Per-frame node lists; child frames are spliced after their iframe node (indented under it).
    per_frame: dict[int, list[dict]] = {}
    owner: dict[int, str | None] = {}
    for idx, (frame, snap) in enumerate(snaps):
        per_frame[idx] = snap["nodes"]
        owner[idx] = None if idx == 0 else await _frame_owner_id(frame)
    children: dict[str, list[int]] = {}
    orphans: list[int] = []
    all_ids = {n["id"] for nodes in per_frame.values() for n in nodes if n.get("id")}
    for idx in range(1, len(snaps)):
        if owner[idx] and owner[idx] in all_ids:
            children.setdefault(owner[idx], []).append(idx)
        else:
            orphans.append(idx)

    lines: list[str] = []
    elements: list[Element] = []
    visited: set[int] = set()

    def emit(idx: int, base_depth: int) -> None:
        if idx in visited:
            return
        visited.add(idx)
        for node in per_frame[idx]:
            depth = base_depth + int(node.get("depth", 0))
            lines.append("  " * depth + format_node(node))
            if node.get("id"):
                elements.append(_element(node))
                for child in children.get(node["id"], ()):
                    emit(child, depth + 1)

    emit(0, 0)
    for idx in orphans:
        frame, snap = snaps[idx]
        lines.append(f"frame {quote(snap.get('title') or '')} url={quote(snap.get('url') or '')}")
        emit(idx, 1)

    text, truncated = truncate_text("\n".join(lines), budget_tokens * chars_per_token)
    main_snap = snaps[0][1]
    title = main_snap.get("title")
    if title is None:
        try:
            title = await page.title()
        except Exception:
            title = ""
    shot_path = phash = None
    if with_screenshot:
        try:
            png = await page.screenshot(type="png")
        except Exception:
            png = None
        if png is not None:
            phash = phash_png(png)
            if screenshot_path:
                os.makedirs(os.path.dirname(os.path.abspath(screenshot_path)), exist_ok=True)
                with open(screenshot_path, "wb") as f:
                    f.write(png)
                shot_path = str(screenshot_path)
    return Observation(url=page.url, title=title or "", text=text, elements=tuple(elements), screenshot=shot_path,
                       phash=phash, error=error, truncated=truncated, origin=origin)


def render_observation(obs: Observation) -> str:
    """The observation as the policy reads it."""
    head = f"URL: {obs.shown_url}\nTitle: {obs.title}\n"
    if obs.error is not None:
        head += f"Last action error ({obs.error.kind}): {obs.error.message}\n"
    return head + obs.text
