"""Command execution in the browser (docs/method.md §1) with the expected-change check of docs/method.md §3 (R_acc).

Waits end on events with hard caps, never on fixed sleeps:
- after an action, the page helper's ``settle`` waits until the DOM was quiet for one animation frame and no
  fetch/XHR is pending (capped by ``Timeouts.settle_ms``);
- before an element command, the page helper's ``still`` waits until the main frame's DOM has not changed for
  ``Timeouts.still_ms`` and no request is pending (capped by ``still_cap_ms``): a page still adding content can move
  the target under the click (Sphinx's search page appends its results one by one, then writes its summary line
  above them). A policy that thinks for longer than that finds the page still and waits for nothing; the oracle
  waits ~70 ms a command on the shop;
- if a navigation request started meanwhile, wait for its commit (``framenavigated``) or failure, then for the new
  document's ``domcontentloaded`` (each capped by ``navigation_ms``).

Hermeticity (requests outside the allowed origins) is ``rollout.harness.guards``; ``execute`` watches the main
frame's navigation requests while a command runs and raises NavigationBlocked for one that leaves them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import urllib.parse

from rollout.core import ActionError, ActionTimeout, Command, InvalidTarget, NavigationBlocked, NoSuchElement
from rollout.harness.guards import BLOCKED_FAILURE, is_allowed, norm_origins, origin_of
from rollout.harness.observe import helper_call

_ID = re.compile(r"^(?:(f\d+(?:_\d+)?)\.)?(\d+)$")


@dataclasses.dataclass(frozen=True)
class Effect:
    """What a command did to the page: URL or DOM changed, a navigation happened, whether that is the change the command
    should make, and a short description."""

    url_changed: bool
    dom_changed: bool
    navigated: bool
    expected_change: bool  # the R_acc check of docs/method.md §3 for this command
    detail: str


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Time limits (ms) of an action, a navigation, the page settling after it, and the quiet window before an element
    command."""

    action_ms: int = 5000
    navigation_ms: int = 10000
    settle_ms: int = 2000
    still_ms: int = 100  # quiet window before an element command (0 = none)
    still_cap_ms: int = 500  # a page that never stops changing (a ticking clock) costs at most this


# ---------------------------------------------------------------- element resolution
async def _resolve(page, element_id: str):
    """(frame, locator, element info) of ``[data-tgpo-id=element_id]``; NoSuchElement if no frame holds it.
    Existence and the element's description come back in one round trip per candidate frame."""
    m = _ID.match(element_id or "")
    if not m:
        raise NoSuchElement(f"no element with id [{element_id}] on this page")
    sel = f'[data-tgpo-id="{element_id}"]'
    prefix = m.group(1)
    if prefix is None:
        candidates = [page.main_frame]
    else:
        frames = [f for f in page.frames if f is not page.main_frame and not f.is_detached()]
        idx = int(prefix[1:].split("_")[0])
        first = page.frames[idx] if idx < len(page.frames) else None
        candidates = ([first] if first in frames else []) + [f for f in frames if f is not first]
    for frame in candidates:
        try:
            info = await frame.evaluate(_ELEMENT_INFO_BY_SELECTOR, sel)
        except Exception:
            continue
        if info is not None:
            return frame, frame.locator(sel).first, info
    raise NoSuchElement(f"no element with id [{element_id}] on this page")


# ---------------------------------------------------------------- navigation watch
class _NavWatch:
    """Records navigation requests / commits / failures of the page while an action runs."""

    def __init__(self, page, allowed_origins=None):
        self.page = page
        self.allowed = None if allowed_origins is None else norm_origins(allowed_origins)
        self.blocked_url: str | None = None
        self.blocked_redirect = False
        self.started = False
        self.committed = asyncio.Event()
        self.failed: str | None = None
        self.failed_url: str | None = None
        self.done = asyncio.Event()  # committed or failed
        self._reqs = set()

    def _on_request(self, req):
        try:
            if req.is_navigation_request() and req.frame is self.page.main_frame:
                self.started = True
                self._reqs.add(req)
                url = req.url
                if (
                    self.allowed is not None
                    and url[:8].lower().startswith(("http://", "https://"))
                    and origin_of(url) not in self.allowed
                ):
                    self.blocked_url = url
                    if req.redirected_from is None:
                        # install_guards answers it with 204: the page stays; nothing will commit.
                        self.done.set()
                    else:
                        # A redirect hop: Playwright routes only a redirect chain's first request, so the hop is
                        # not answered by the guard; it fails (offline) and Chrome commits its error page.
                        self.blocked_redirect = True
        except Exception:
            pass

    def _on_failed(self, req):
        if req in self._reqs:
            self.failed = req.failure or "failed"
            self.failed_url = req.url
            self.done.set()

    def _on_nav(self, frame):
        if frame is self.page.main_frame:
            self.committed.set()
            self.done.set()

    def __enter__(self):
        self.page.on("request", self._on_request)
        self.page.on("requestfailed", self._on_failed)
        self.page.on("framenavigated", self._on_nav)
        return self

    def __exit__(self, *exc):
        for ev, fn in (
            ("request", self._on_request),
            ("requestfailed", self._on_failed),
            ("framenavigated", self._on_nav),
        ):
            try:
                self.page.remove_listener(ev, fn)
            except Exception:
                pass

    async def finish(self, timeouts: Timeouts) -> None:
        """Wait for a started navigation to commit or fail, then for the new document's DOMContentLoaded."""
        if self.started and not self.done.is_set():
            try:
                await asyncio.wait_for(self.done.wait(), timeouts.navigation_ms / 1000)
            except asyncio.TimeoutError:
                raise ActionTimeout(f"navigation did not commit within {timeouts.navigation_ms} ms")
        if self.committed.is_set():
            try:
                await self.page.wait_for_load_state("domcontentloaded", timeout=timeouts.navigation_ms)
            except Exception as e:
                if _is_timeout(e):
                    raise ActionTimeout(f"page did not load within {timeouts.navigation_ms} ms")
        url = self.blocked_url or (self.failed_url if self.failed and BLOCKED_FAILURE in self.failed else None)
        if url and (not self.committed.is_set() or self._off_site() or self.blocked_redirect):
            await self.restore(timeouts, wait_commit=self.blocked_redirect)
            raise NavigationBlocked(f"navigation to {url} was blocked: its origin is not allowed")

    def _off_site(self) -> bool:
        url = self.page.url
        if url.startswith("chrome-error:"):
            return True
        return (
            self.allowed is not None
            and url[:8].lower().startswith(("http://", "https://"))
            and origin_of(url) not in self.allowed
        )

    async def restore(self, timeouts: Timeouts, wait_commit: bool = False) -> None:
        """If the tab now shows Chrome's error page or a page outside the allowed origins (a redirect hop the
        route could not answer), go back.
        ``wait_commit``: a navigation just failed; its error page commits shortly after (wait, capped)."""
        if wait_commit and not self._off_site():
            self.committed.clear()
            try:
                await asyncio.wait_for(self.committed.wait(), timeouts.settle_ms / 1000)
            except asyncio.TimeoutError:
                pass
        for _ in range(3):  # right after the error page commits, the tab may be "not attached" for a moment
            if not self._off_site():
                return
            try:
                await self.page.go_back(wait_until="domcontentloaded", timeout=timeouts.navigation_ms)
            except Exception:
                try:
                    await self.page.wait_for_load_state("domcontentloaded", timeout=timeouts.settle_ms)
                except Exception:
                    pass


def _is_timeout(e: BaseException) -> bool:
    from playwright.async_api import TimeoutError as PWTimeout

    return isinstance(e, (PWTimeout, asyncio.TimeoutError))


# ---------------------------------------------------------------- state probes
_STATE = helper_call("return window.__tgpo.state();")
_SETTLE = helper_call("return window.__tgpo.settle(arg);")
_STILL = helper_call("return window.__tgpo.still(arg);")


async def _state(frame) -> dict | None:
    try:
        return await frame.evaluate(_STATE, None)
    except Exception:
        return None


async def _settle(frame, timeouts: Timeouts) -> None:
    try:
        await asyncio.wait_for(frame.evaluate(_SETTLE, timeouts.settle_ms), timeouts.settle_ms / 1000 + 1.0)
    except Exception:
        pass  # navigated away, frame detached, or cap: nothing more to wait for here


async def _still(frame, timeouts: Timeouts) -> None:
    if timeouts.still_ms <= 0:
        return
    try:
        await asyncio.wait_for(
            frame.evaluate(_STILL, [timeouts.still_ms, timeouts.still_cap_ms]), timeouts.still_cap_ms / 1000 + 1.0
        )
    except Exception:
        pass  # navigating, frame detached, or cap: the command's own checks take over


def _changed(before: dict | None, after: dict | None) -> bool:
    if before is None or after is None:
        return before is not after  # the document went away or appeared: a change
    return before["mutations"] != after["mutations"] or before["inputs"] != after["inputs"]


def _field_value_js() -> str:
    return "el => (el.isContentEditable && !('value' in el)) ? el.innerText : ('value' in el ? String(el.value) : null)"


# One round trip before an element command: what the element is, and the frame's change counters.
_ELEMENT_INFO = helper_call(
    """
  const tag = el.tagName, type = (el.getAttribute('type') || '').toLowerCase();
  const NOT_TEXT = ['checkbox','radio','button','submit','reset','image','file','range','color','hidden'];
  return {
    tag: tag, type: type,
    disabled: el.disabled === true,
    editable: (tag === 'INPUT' && !NOT_TEXT.includes(type)) || tag === 'TEXTAREA' || el.isContentEditable,
    readonly: el.readOnly === true,
    options: tag === 'SELECT' ? [...el.options].map((o, i) => ({i: i, value: o.value,
      label: (o.label || o.textContent).replace(/\\s+/g, ' ').trim()})) : [],
    state: window.__tgpo.state(),
  };""",
    params="el",
)


_ELEMENT_INFO_BY_SELECTOR = (
    "(sel) => { const el = document.querySelector(sel); if (!el) return null; return (" + _ELEMENT_INFO + ")(el); }"
)


def _describe(info: dict) -> str:
    return f"<{info['tag'].lower()}{' type=' + info['type'] if info.get('type') else ''}>"


# ---------------------------------------------------------------- execute
async def execute(
    page, command: Command, *, allowed_origins: tuple[str, ...], timeouts: Timeouts = Timeouts()
) -> Effect:
    """Run one command; raises an ActionError subclass on failure, returns its Effect otherwise."""
    name = command.name
    if name == "STOP":
        return Effect(False, False, False, True, "stop")
    try:
        return await _execute(page, command, allowed_origins, timeouts)
    except ActionError:
        raise
    except Exception as e:
        if _is_timeout(e):
            raise ActionTimeout(f"{command.render()} timed out: {_short(e)}") from None
        msg = _short(e)
        if "not an <input>" in msg or "not an <select>" in msg or "Element is not" in msg:
            raise InvalidTarget(f"{command.render()}: {msg}") from None
        raise InvalidTarget(f"{command.render()} failed: {msg}") from None


def _short(e: BaseException) -> str:
    s = str(e).strip().split("\n")[0]
    return s[:300]


async def _execute(page, command: Command, allowed_origins, timeouts: Timeouts) -> Effect:
    name = command.name
    main = page.main_frame
    url0 = page.url

    if name == "GOTO":
        url = (command.arg or "").strip()
        if url.startswith("/") and not url.startswith("//"):  # a site-relative URL, as the page's URL is shown
            url = urllib.parse.urljoin(page.url, url)
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise NavigationBlocked(f"GOTO only opens http(s) URLs, not {scheme or 'relative'!r} ones: {url}")
        if not is_allowed(url, allowed_origins):
            raise NavigationBlocked(
                f"GOTO {url}: origin {origin_of(url)} is not allowed "
                f"(allowed: {', '.join(sorted(norm_origins(allowed_origins)))})"
            )
        with _NavWatch(page, allowed_origins) as watch:
            try:
                await page.goto(url, wait_until="domcontentloaded", timeout=timeouts.navigation_ms)
            except Exception as e:
                if _is_timeout(e):
                    raise ActionTimeout(f"GOTO {url}: page did not load within {timeouts.navigation_ms} ms") from None
                if BLOCKED_FAILURE in str(e) or watch.blocked_url:
                    await watch.restore(timeouts, wait_commit=True)
                    raise NavigationBlocked(
                        f"GOTO {url}: redirected to {watch.blocked_url or 'another origin'}, "
                        "outside the allowed origins"
                    ) from None
                await watch.restore(timeouts, wait_commit=True)
                raise InvalidTarget(f"GOTO {url} failed: {_short(e)}") from None
            if watch.blocked_url and not watch.committed.is_set():
                raise NavigationBlocked(f"GOTO {url}: redirected to {watch.blocked_url}, outside the allowed origins")
            await _settle(main, timeouts)
            navigated = watch.committed.is_set()
        url_changed = page.url != url0
        return Effect(url_changed, True, navigated, url_changed or navigated, f"goto {page.url}")

    if name == "GO_BACK":
        with _NavWatch(page, allowed_origins) as watch:
            try:
                resp = await page.go_back(wait_until="domcontentloaded", timeout=timeouts.navigation_ms)
            except Exception as e:
                if _is_timeout(e):
                    raise ActionTimeout(f"GO_BACK: page did not load within {timeouts.navigation_ms} ms") from None
                if BLOCKED_FAILURE in str(e):
                    raise NavigationBlocked("GO_BACK: the previous page's origin is not allowed") from None
                raise InvalidTarget(f"GO_BACK failed: {_short(e)}") from None
            navigated = watch.committed.is_set()
            if resp is None and not navigated and page.url == url0:
                raise InvalidTarget("GO_BACK: there is no previous page in this tab's history")
            await watch.finish(timeouts)
            if not page.url.lower().startswith(("http://", "https://")):
                # Back to the tab's blank start page: not a page of the site; undo and report no history.
                try:
                    await page.go_forward(wait_until="domcontentloaded", timeout=timeouts.navigation_ms)
                except Exception:
                    pass
                raise InvalidTarget("GO_BACK: there is no previous page of the site in this tab's history")
            await _settle(main, timeouts)
        url_changed = page.url != url0
        return Effect(url_changed, True, navigated, url_changed or navigated, f"back to {page.url}")

    if name == "SCROLL":
        before = await _state(main)
        res = await main.evaluate(helper_call("return window.__tgpo.scroll(arg);"), command.arg or "DOWN")
        await _settle(main, timeouts)
        after = await _state(main)
        moved = bool(res.get("changed"))
        return Effect(
            page.url != url0,
            _changed(before, after),
            False,
            moved,
            f"scroll {command.arg} {res.get('target')} {res.get('from')}->{res.get('to')}",
        )

    # ---- element commands
    await _still(main, timeouts)  # before _resolve: the element's "before" counters are then the still page's
    frame, loc, info = await _resolve(page, command.id or "")
    before = [info["state"]] + ([await _state(main)] if frame is not main else [])
    frames = [frame] if frame is main else [frame, main]
    if info["disabled"]:
        raise InvalidTarget(f"{name} [{command.id}]: the element ({_describe(info)}) is disabled")
    with _NavWatch(page, allowed_origins) as watch:
        if name == "CLICK":
            await loc.click(timeout=timeouts.action_ms)
            expected = None
        elif name in ("TYPE", "CLEAR"):
            text = (command.arg or "") if name == "TYPE" else ""
            if not info["editable"]:
                raise InvalidTarget(f"{name} [{command.id}]: the element ({_describe(info)}) is not a text field")
            if info["readonly"]:
                raise InvalidTarget(f"{name} [{command.id}]: the text field is read-only")
            await loc.fill(text, timeout=timeouts.action_ms)
            expected = text
        elif name == "SELECT":
            if info["tag"] != "SELECT":
                raise InvalidTarget(
                    f"SELECT [{command.id}]: the element is {_describe(info)}, not a <select>; "
                    f"CLICK custom dropdowns and their options instead"
                )
            want = (command.arg or "").strip()
            opts = info["options"]
            pick = next((o for o in opts if o["label"] == want), None)
            if pick is None:
                pick = next((o for o in opts if o["label"].lower() == want.lower()), None)
            if pick is None:
                pick = next((o for o in opts if o["value"] == want), None)
            if pick is None:
                listed = ", ".join(json_q(o["label"]) for o in opts)
                raise InvalidTarget(f"SELECT [{command.id}]: no option {json_q(want)}; options are: {listed}")
            await loc.select_option(index=pick["i"], timeout=timeouts.action_ms)
            expected = pick["i"]
        else:
            raise InvalidTarget(f"{name} is not an element command")
        if not watch.started:  # a navigation replaces the document: waiting on the old one's DOM is moot
            await _settle(frame, timeouts)
        await watch.finish(timeouts)
        navigated = watch.committed.is_set()

    url_changed = page.url != url0
    if navigated:
        dom_changed = True
    else:
        after = [await _state(f) for f in frames]
        dom_changed = any(_changed(b, a) for b, a in zip(before, after))
    detail = ""
    if name == "CLICK":
        ok = url_changed or dom_changed or navigated
        detail = "url changed" if url_changed else ("dom changed" if dom_changed else "no visible change")
    elif navigated:  # a TYPE / SELECT that navigated (autosubmit): the field is gone; the page changed
        ok = True
        detail = "navigated"
    elif name in ("TYPE", "CLEAR"):
        try:
            val = await loc.evaluate(_field_value_js(), timeout=timeouts.action_ms)
        except Exception:
            val = None
        ok = val == expected
        detail = f"value={val!r}"
    else:  # SELECT
        try:
            sel = await loc.evaluate("el => el.selectedIndex", timeout=timeouts.action_ms)
        except Exception:
            sel = None
        ok = sel == expected
        detail = f"selectedIndex={sel}"
    return Effect(url_changed, dom_changed, navigated, bool(ok), detail)


def json_q(s: str) -> str:
    """``s`` as a JSON string literal (non-ASCII kept), for quoting in page scripts."""
    return json.dumps(s, ensure_ascii=False)
