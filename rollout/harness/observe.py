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

Set-of-marks screenshots (``observe(marks=True)``, ``HarnessConfig.marks``): the saved screenshot has every element
with an id outlined and labelled ``[id]`` (magenta, ``MARK_RGB``), so a vision-language policy can name elements from
the pixels alone. The text is read first, then one temporary overlay (a ``<tgpo-marks data-tgpo-marks>`` element, its
boxes in a shadow root, fixed, ``pointer-events: none``, topmost z-index) is added to the main document for the one
screenshot and removed in a ``finally``; the harness's own DOM-change counter skips it (page_script.js). Elements in
child frames are drawn at their frame's position in the page (``bounding_box`` of the ``<iframe>`` plus its border
and padding); a frame clipped by a scrolled container of its parent is not clipped here. Only the part of the page in
the viewport is drawn (the screenshot is the viewport). The pHash is computed from an unmarked screenshot taken just
before, so marks never change which states merge (two screenshots per observation when marks are on). The page's own
MutationObservers, if any, do see the overlay come and go.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib

from rollout.core import Element, ErrorInfo, Observation

SCRIPT = (pathlib.Path(__file__).with_name("page_script.js")).read_text()
# Evaluated in a frame: install the helper if the init script did not (about:blank frames, set_content), then run fn.
_ENSURE = "(() => { if (!window.__tgpo) { " + SCRIPT + " } })();"
TRUNCATION_LINE = "… (truncated)"
MARKS_ATTR = "data-tgpo-marks"  # the overlay's host element (page_script.js's change counter skips it)
MARK_RGB = (255, 0, 255)  # outline and label colour: magenta, rare on real pages; label text black
FRAMES_LOAD_MS = 2000  # cap on waiting for a page's iframes before reading it (_frames_loaded)


async def install(context) -> None:
    """Add the helper to every frame of every page the context opens from now on."""
    await context.add_init_script(script=SCRIPT)


def helper_call(body: str, params: str = "arg") -> str:
    """A JS function expression (parameters ``params``) that ensures the helper is present, then runs ``body``."""
    return "(" + params + ") => { " + _ENSURE + " " + body + " }"


async def set_ignored_attributes(page, names) -> None:
    """Attribute names whose mutations do not count as DOM changes in this document (e.g. MiniWoB's
    ``data-tampered``, written on every click)."""
    await page.main_frame.evaluate(helper_call("for (const n of arg) window.__tgpo.ignoreAttrs.add(n);"), list(names))


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
    return Element(
        id=node["id"],
        role=node["role"],
        name=node.get("name", ""),
        value=node.get("value"),
        options=tuple(node.get("options") or ()),
        checked=node.get("checked"),
        disabled=bool(node.get("disabled")),
        current=bool(node.get("current")),
        href=node.get("href") or None,
        interactive=bool(node.get("interactive")),
    )


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


async def capture_png(page, fast: bool = True) -> bytes:
    """The viewport as a PNG. ``fast``: Chromium's ``Page.captureScreenshot`` with ``optimizeForSpeed`` over a CDP
    session kept on the page. Its PNG is compressed less (about twice the bytes), so Chromium encodes it and the pHash
    decodes it in about half the time, and it skips the caret-hiding
    ``<style>`` that ``page.screenshot`` adds to the page and removes for each shot: the helper's style sheet hides the
    caret instead (page_script.js, adopted by every snapshot). Same pixels as ``page.screenshot``
    (tests/test_harness_page.py). Falls back to ``page.screenshot`` where there is no CDP session (a browser other than
    Chromium) or a capture fails."""
    if fast:
        cdp = getattr(page, "_tgpo_cdp", None)
        if cdp is None:
            try:
                cdp = await page.context.new_cdp_session(page)
            except Exception:
                cdp = False  # not Chromium: Playwright's screenshot from now on
            page._tgpo_cdp = cdp
        if cdp:
            try:
                shot = await cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
                return base64.b64decode(shot["data"])
            except Exception:  # one capture in the default's 1,770 failed (cause unseen): Playwright's shot for
                page._tgpo_cdp = None  # this one, a new session for the next
    return await page.screenshot(type="png")


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


async def _frames_loaded(page) -> None:
    """With child frames, wait (capped by ``FRAMES_LOAD_MS``) for the page's load event, which waits for every
    iframe: the main document's DOMContentLoaded does not, and an iframe read while still loading would make the
    observation (its elements there or not) depend on timing. A frame that never loads is read as it is."""
    if len(page.frames) <= 1:
        return
    try:
        await page.wait_for_load_state("load", timeout=FRAMES_LOAD_MS)
    except Exception:
        pass


async def _snapshot_all(page) -> list[tuple[object, dict]]:
    """[(frame, snapshot)] for every frame that answered, main frame first."""
    await _frames_loaded(page)
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


# In one frame: the viewport rects of the elements whose data-tgpo-id is in ``ids`` (open shadow roots included) that
# are rendered with a non-empty box and at least partly inside the frame's viewport.
_RECTS_JS = """(ids) => {
  const want = new Set(ids), out = [], W = window.innerWidth, H = window.innerHeight;
  const visit = (root) => {
    for (const el of root.querySelectorAll('*')) {
      const id = el.getAttribute('data-tgpo-id');
      if (id !== null && want.has(id)) {
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.height > 0 && r.right > 0 && r.bottom > 0 && r.left < W && r.top < H &&
            getComputedStyle(el).visibility === 'visible') {
          out.push({id: id, x: r.left, y: r.top, w: r.width, h: r.height});
        }
      }
      if (el.shadowRoot) visit(el.shadowRoot);
    }
  };
  visit(document);
  return out;
}"""

# The overlay. Styles go through the CSSOM (el.style), which a page's CSP does not block as it does <style>; the
# boxes sit in a shadow root so the page's CSS cannot restyle them, and the host's inline !important wins over it.
_DRAW_JS = """([boxes, attr, rgb]) => {
  for (const old of document.querySelectorAll('[' + attr + ']')) old.remove();
  const host = document.createElement('tgpo-marks');
  host.setAttribute(attr, '');
  host.style.cssText = 'all: initial !important; display: block !important; position: fixed !important; ' +
    'left: 0 !important; top: 0 !important; width: 0 !important; height: 0 !important; overflow: visible !important; ' +
    'pointer-events: none !important; z-index: 2147483647 !important;';
  const root = host.attachShadow({mode: 'open'});
  const colour = 'rgb(' + rgb.join(',') + ')';
  for (const b of boxes) {
    const box = document.createElement('div');
    box.style.cssText = 'position: absolute; box-sizing: border-box; pointer-events: none; border: 2px solid ' +
      colour + '; left: ' + b.x + 'px; top: ' + b.y + 'px; width: ' + b.w + 'px; height: ' + b.h + 'px;';
    const label = document.createElement('div');
    label.textContent = '[' + b.id + ']';
    // above the box's top-left corner, or inside it when the box touches the top of the viewport
    const top = b.y >= 14 ? b.y - 14 : Math.max(0, b.y);
    label.style.cssText = 'position: absolute; pointer-events: none; background: ' + colour + '; color: #000; ' +
      'font: bold 12px/14px monospace; padding: 0 2px; white-space: nowrap; left: ' + Math.max(0, b.x) +
      'px; top: ' + top + 'px;';
    root.append(box, label);
  }
  (document.documentElement || document.body).appendChild(host);
}"""


async def _frame_offset(frame) -> tuple[float, float] | None:
    """Where ``frame``'s viewport starts in the main frame's: its <iframe>'s box plus border and padding."""
    try:
        handle = await frame.frame_element()
        try:
            box = await handle.bounding_box()  # relative to the main frame's viewport, at any nesting depth
            inner = await handle.evaluate(
                "e => { const s = getComputedStyle(e); return ["
                "e.clientLeft + (parseFloat(s.paddingLeft) || 0), "
                "e.clientTop + (parseFloat(s.paddingTop) || 0)]; }"
            )
        finally:
            await handle.dispose()
    except Exception:  # detached frame
        return None
    return None if box is None else (box["x"] + inner[0], box["y"] + inner[1])


async def _mark_boxes(page, snaps) -> list[dict]:
    """[{id, x, y, w, h}] in main-viewport pixels for every element the snapshots gave an id, frames included."""
    boxes = []
    for frame, snap in snaps:
        ids = [n["id"] for n in snap["nodes"] if n.get("id")]
        if not ids:
            continue
        offset = (0.0, 0.0) if frame is page.main_frame else await _frame_offset(frame)
        if offset is None:
            continue
        try:
            rects = await frame.evaluate(_RECTS_JS, ids)
        except Exception:  # the frame went away since its snapshot
            continue
        boxes += [r | {"x": r["x"] + offset[0], "y": r["y"] + offset[1]} for r in rects]
    return boxes


async def remove_marks(page) -> None:
    """Take the overlay out of the main document (a no-op when it is not there)."""
    try:
        await page.main_frame.evaluate(
            f"() => {{ for (const e of document.querySelectorAll('[{MARKS_ATTR}]')) e.remove(); }}"
        )
    except Exception:  # navigated away: the overlay went with the old document
        pass


async def marked_screenshot(page, snaps, fast: bool = True) -> bytes | None:
    """A PNG of the viewport with the snapshots' elements outlined and labelled; the page's DOM is left as it was.
    None when the overlay or the screenshot failed (a navigation in between)."""
    boxes = await _mark_boxes(page, snaps)
    try:
        await page.main_frame.evaluate(_DRAW_JS, [boxes, MARKS_ATTR, list(MARK_RGB)])
        return await capture_png(page, fast)
    except Exception:
        return None
    finally:
        await remove_marks(page)


async def observe(
    page,
    *,
    budget_tokens: int = 1024,
    chars_per_token: int = 4,
    screenshot_path: str | None = None,
    error: ErrorInfo | None = None,
    with_screenshot: bool = True,
    origin: str = "",
    marks: bool = False,
    fast_capture: bool = True,
) -> Observation:
    """Inject ids in every frame and read the page as an Observation (see the module docstring). ``marks``: the
    saved screenshot (``screenshot_path``) is a set-of-marks one (``Observation.marked``); when drawing them fails
    the unmarked one is saved and ``marked`` is False. ``fast_capture``: see ``capture_png``."""
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
    marked = False
    if with_screenshot:
        try:
            png = await capture_png(page, fast_capture)
        except Exception:
            png = None
        if png is not None:
            phash = phash_png(png)  # from the unmarked pixels: marks must not change which states merge
            if screenshot_path:
                if marks:
                    with_marks = await marked_screenshot(page, snaps, fast_capture)
                    if with_marks is not None:
                        png, marked = with_marks, True
                os.makedirs(os.path.dirname(os.path.abspath(screenshot_path)), exist_ok=True)
                with open(screenshot_path, "wb") as f:
                    f.write(png)
                shot_path = str(screenshot_path)
    return Observation(
        url=page.url,
        title=title or "",
        text=text,
        elements=tuple(elements),
        screenshot=shot_path,
        phash=phash,
        error=error,
        truncated=truncated,
        origin=origin,
        marked=marked,
    )


def render_observation(obs: Observation) -> str:
    """The observation as the policy reads it."""
    head = f"URL: {obs.shown_url}\nTitle: {obs.title}\n"
    if obs.error is not None:
        head += f"Last action error ({obs.error.kind}): {obs.error.message}\n"
    return head + obs.text
