"""Observation and command execution against real Chromium (rollout.harness.observe / execute)."""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
import time

import pytest

pytest.importorskip("playwright")

from rollout import browser_path  # noqa: E402
from rollout.core import (
    ActionTimeout,
    Command,
    ErrorInfo,
    InvalidTarget,
    NavigationBlocked,  # noqa: E402
    NoSuchElement,
)
from rollout.harness.execute import Effect, Timeouts, execute  # noqa: E402
from rollout.harness.guards import install_guards, origin_of  # noqa: E402
from rollout.harness.observe import capture_png, install, observe, phash_png, render_observation  # noqa: E402

PAGES = {
    "/": """<!doctype html><html><head><title>Home</title></head><body>
<h1>Welcome</h1>
<p>Some <b>intro</b> text.</p>
<a id="p2" href="/page2?x=1">Second page</a>
<a id="out" href="http://example.com/leak">Leave</a>
<a href="/redirect">Bounce</a>
<button id="grow" onclick="var d=document.createElement('button');\
d.textContent='New '+document.querySelectorAll('button').length;document.body.appendChild(d)">Add button</button>
<span>plain</span>
</body></html>""",
    "/page2": """<!doctype html><html><head><title>Second</title></head><body><h2>Page two</h2>
<a href="/">Home</a> <a href="/page2" aria-current="page">Two</a> <a href="/form" aria-current="false">Form</a>
</body></html>""",
    "/form": """<!doctype html><html><head><title>Form</title></head><body>
<label for="q">Search</label><input id="q" type="text" value="abc">
<label>Size <select id="size"><option>S</option><option selected>M</option>\
<option value="lg">L</option></select></label>
<label><input type="checkbox" id="a" checked> Option A</label>
<input type="checkbox" id="b" aria-label="Option B">
<input type="radio" name="r" id="r1"><label for="r1">Red</label>
<input placeholder="Email address">
<textarea aria-labelledby="nl"></textarea><span id="nl">Notes</span>
<input type="submit" value="Send"><button disabled>Locked</button>
<button title="Close"><span aria-hidden="true">x</span></button>
<img alt="A red shoe" src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" width="20" height="20">
<div style="display:none"><button>Hidden one</button></div>
<div style="visibility:hidden"><button>Hidden two</button> invisible text</div>
<button style="width:0;height:0;padding:0;border:0;overflow:hidden">Zero</button>
<div style="height:0;overflow:hidden"><a href="/">Clipped link</a></div>
<p>Visible paragraph</p>
</body></html>""",
    "/overlay": """<!doctype html><html><head><title>Overlay</title></head><body>
<button id="under" onclick="this.textContent='clicked'">Under</button>
<div style="position:fixed;left:0;top:0;width:100vw;height:100vh;background:rgba(0,0,0,.5)"></div>
</body></html>""",
    "/frames": """<!doctype html><html><head><title>Frames</title></head><body>
<button>Top button</button>
<iframe title="inner" src="/inner" width="300" height="150"></iframe>
<a href="/">after frame</a>
</body></html>""",
    "/inner": """<!doctype html><html><body><button onclick="this.textContent='Pressed'">Press me</button>
<input aria-label="Inner field"></body></html>""",
    # an iframe whose document is served slowly: the main document's DOMContentLoaded comes before its body
    "/slowframes": """<!doctype html><html><head><title>Slow frames</title></head><body>
<iframe title="late" src="/late-inner"></iframe></body></html>""",
    "/to-slow": """<!doctype html><html><body><a href="/slowframes">Slow frames</a></body></html>""",
    "/long": """<!doctype html><html><head><title>Long</title></head><body>"""
    + "".join(f"<p>Paragraph number {i} with some filler words</p>" for i in range(200))
    + """<a href="/">end</a></body></html>""",
    # Sphinx's search page, in small: results appended one by one, then a summary line written above them
    "/growing": """<!doctype html><html><head><title>Growing</title></head><body><p id="summary"></p><ul id="res"></ul>
<script>
function add(n) { const li = document.createElement('li'); const a = document.createElement('a'); a.href = '#';
  a.textContent = 'Result ' + n; a.onclick = () => { window.clicked = a.textContent; \
window.clickedAt = performance.now();
  return false; }; li.appendChild(a); document.getElementById('res').appendChild(li); \
window.adds.push(performance.now()); }
window.adds = []; add(1); let n = 1;
function more() { add(++n); const t = setInterval(() => { add(++n); if (n === 8) { clearInterval(t); setTimeout(() => {
  document.getElementById('summary').textContent = 'Search finished, found 8 pages.';
  window.adds.push(performance.now()); }, 30); } }, 30); }
</script></body></html>""",
    "/ticking": """<!doctype html><html><head><title>Clock</title></head><body><span id="c">0</span>
<button onclick="window.pressed = true">Press</button>
<script>setInterval(() => { const c = document.getElementById('c'); c.textContent = +c.textContent + 1; }, 20);</script>
</body></html>""",
    "/red": """<!doctype html><html><body style="margin:0;background:#c00">
<div style="width:600px;height:300px;background:#fff"></div></body></html>""",
    "/blue": """<!doctype html><html><body style="margin:0;background:#fff">
<div style="margin:200px;width:300px;height:500px;background:#00c"></div><p>Different</p></body></html>""",
}


LATE_S = 0.6  # how late /late-inner's body comes (well under observe's FRAMES_LOAD_MS)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://example.com/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/late-inner":  # the frame's document commits at once and its body comes LATE_S later
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()  # no Content-Length: the body ends when the connection closes (HTTP/1.0)
            self.wfile.write(b"<!doctype html><html><body><p>Loading</p>" + b" " * 2048)
            self.wfile.flush()
            time.sleep(LATE_S)
            self.wfile.write(PAGES["/inner"].split("<body>", 1)[1].encode())
            return
        body = PAGES.get(self.path.split("?")[0])
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


class Harness:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.allowed = (self.origin,)
        self.pw = self.browser = None
        self.run(self._start())

    async def _start(self):
        from playwright.async_api import async_playwright

        self.pw = await async_playwright().start()
        self.browser = await self.pw.chromium.launch(
            executable_path=browser_path.chromium_executable(), args=list(browser_path.CHROMIUM_ARGS)
        )

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    async def page(self, path="/"):
        ctx = await self.browser.new_context(viewport={"width": 800, "height": 600})
        await install(ctx)
        await install_guards(ctx, self.allowed)
        page = await ctx.new_page()
        if path is not None:
            await page.goto(self.origin + path)
        return page

    def close(self):
        async def stop():
            await self.browser.close()
            await self.pw.stop()

        self.run(stop())
        self.loop.close()
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def h():
    harness = Harness()
    yield harness
    harness.close()


def run(fn):
    """Run the async test body on the module's loop."""

    @functools.wraps(fn)
    def wrapper(h):
        h.run(fn(h))

    return wrapper


@run
async def test_ids_stable_and_deterministic(h):
    page = await h.page("/")
    o1 = await observe(page, with_screenshot=False)
    o2 = await observe(page, with_screenshot=False)
    assert o1.text == o2.text and o1.elements == o2.elements
    ids = [e.id for e in o1.elements]
    assert ids == [str(i) for i in range(1, len(ids) + 1)]
    other = await h.page("/")
    o3 = await observe(other, with_screenshot=False)
    assert o3.text == o1.text
    # A new element takes the next number; old ones keep theirs.
    grow = o1.find(role="button", name="Add button")[0]
    eff = await execute(page, Command("CLICK", grow.id), allowed_origins=h.allowed)
    assert eff.dom_changed and eff.expected_change and not eff.url_changed
    o4 = await observe(page, with_screenshot=False)
    assert [e for e in o4.elements if e.id in ids] == list(o1.elements)
    new = [e for e in o4.elements if e.id not in ids]
    assert len(new) == 1 and new[0].id == str(len(ids) + 1) and new[0].role == "button"
    await page.context.close()
    await other.context.close()


@run
async def test_tree_text_roles_names_values(h):
    page = await h.page("/form")
    obs = await observe(page, with_screenshot=False)
    lines = obs.text.splitlines()
    q = obs.find(role="textbox", name="Search")[0]
    assert q.value == "abc" and f'[{q.id}] textbox "Search" value="abc"' in lines
    size = obs.find(role="combobox")[0]
    assert size.name == "Size" and size.value == "M" and size.options == ("S", "M", "L")
    assert f'[{size.id}] combobox "Size" value="M" options=["S","M","L"]' in lines
    a = obs.find(role="checkbox", name="Option A")[0]
    b = obs.find(role="checkbox", name="Option B")[0]
    assert a.checked is True and b.checked is False
    assert f'[{b.id}] checkbox "Option B" checked=false' in lines
    assert obs.find(role="radio", name="Red")[0].checked is False
    assert obs.find(role="textbox", name="Email address")
    assert obs.find(role="textbox", name="Notes")
    assert obs.find(role="button", name="Send")
    assert obs.find(role="button", name="Close")
    img = obs.find(role="img", name="A red shoe")[0]
    assert not img.interactive
    assert 'text "Visible paragraph"' in lines
    # hidden: display:none, visibility:hidden, zero size, clipped by a zero-size overflow box
    for hidden in ("Hidden one", "Hidden two", "invisible text", "Zero", "Clipped link"):
        assert hidden not in obs.text
    assert not obs.find(contains="Hidden")
    # labels are names, not repeated as text
    assert 'text "Option A"' not in lines
    rendered = render_observation(obs.__class__(**{**obs.__dict__, "error": ErrorInfo("timeout", "took too long")}))
    assert rendered.startswith(f"URL: {h.origin}/form\nTitle: Form\nLast action error (timeout): took too long\n")
    await page.context.close()


@run
async def test_links_absolute_and_headings(h):
    page = await h.page("/")
    obs = await observe(page, with_screenshot=False)
    link = obs.find(role="link", name="Second page")[0]
    assert link.href == f"{h.origin}/page2?x=1"
    assert obs.text.splitlines()[0] == 'heading "Welcome"'
    assert 'text "Some intro text."' in obs.text.splitlines()
    await page.context.close()


@run
async def test_aria_current_is_a_state(h):
    """The page's own mark of the active link (a sort, a page, a tab) reaches the policy as ``current``."""
    page = await h.page("/page2")
    obs = await observe(page, with_screenshot=False)
    two, home, form = (obs.find(role="link", name=n)[0] for n in ("Two", "Home", "Form"))
    assert two.current and not home.current and not form.current  # aria-current="false" is not current
    lines = obs.text.splitlines()
    assert f'[{two.id}] link "Two" current' in lines and f'[{form.id}] link "Form"' in lines
    await page.context.close()


@run
async def test_iframe_prefixed_ids_and_click(h):
    page = await h.page("/frames")
    obs = await observe(page, with_screenshot=False)
    press = obs.find(role="button", name="Press me")[0]
    assert press.id.startswith("f1.")
    assert obs.find(role="textbox", name="Inner field")[0].id.startswith("f1.")
    frame_line = [ln for ln in obs.text.splitlines() if "iframe" in ln][0]
    press_line = [ln for ln in obs.text.splitlines() if "Press me" in ln][0]
    assert len(press_line) - len(press_line.lstrip()) > len(frame_line) - len(frame_line.lstrip())
    eff = await execute(page, Command("CLICK", press.id), allowed_origins=h.allowed)
    assert eff.expected_change and eff.dom_changed
    obs2 = await observe(page, with_screenshot=False)
    assert obs2.by_id(press.id).name == "Pressed"
    eff = await execute(page, Command("TYPE", obs.find(name="Inner field")[0].id, "hi"), allowed_origins=h.allowed)
    assert eff.expected_change
    await page.context.close()


@run
async def test_a_page_is_read_once_its_iframes_have_loaded(h):
    # A click that opens a page returns at the new document's DOMContentLoaded; its iframe's document may have
    # committed and still be parsing then. Read at that moment, the frame's elements are there or not by timing (an
    # explorer's random choice among them was not reproducible under load); the observation waits for the page's
    # load event, which waits for every iframe.
    page = await h.page("/to-slow")
    obs = await observe(page, with_screenshot=False)
    t0 = time.monotonic()
    eff = await execute(
        page, Command("CLICK", obs.find(role="link", name="Slow frames")[0].id), allowed_origins=h.allowed
    )
    assert eff.navigated and time.monotonic() - t0 < LATE_S  # the frame was not waited for by the click
    obs = await observe(page, with_screenshot=False)
    assert [e.id for e in obs.find(role="button", name="Press me")] == ["f1.1"]
    await page.context.close()


@run
async def test_budget_truncation(h):
    page = await h.page("/long")
    obs = await observe(page, budget_tokens=100, chars_per_token=4, with_screenshot=False)
    assert obs.truncated and len(obs.text) <= 400
    assert obs.text.splitlines()[-1] == "… (truncated)"
    assert all(ln.startswith("text ") for ln in obs.text.splitlines()[:-1])
    assert obs.find(role="link", name="end")  # elements stay complete
    full = await observe(page, budget_tokens=100_000, with_screenshot=False)
    assert not full.truncated and "end" in full.text
    await page.context.close()


@run
async def test_typed_errors(h):
    page = await h.page("/form")
    obs = await observe(page, with_screenshot=False)
    size = obs.find(role="combobox")[0]
    with pytest.raises(NoSuchElement) as e:
        await execute(page, Command("CLICK", "999"), allowed_origins=h.allowed)
    assert e.value.kind == "no_such_element" and "999" in e.value.message
    with pytest.raises(InvalidTarget) as e:
        await execute(page, Command("SELECT", size.id, "XL"), allowed_origins=h.allowed)
    assert e.value.kind == "invalid_target" and '"S", "M", "L"' in e.value.message
    with pytest.raises(InvalidTarget):
        await execute(
            page, Command("SELECT", obs.find(role="button", name="Send")[0].id, "S"), allowed_origins=h.allowed
        )
    with pytest.raises(InvalidTarget):
        await execute(
            page, Command("TYPE", obs.find(role="checkbox", name="Option A")[0].id, "x"), allowed_origins=h.allowed
        )
    locked = obs.find(role="button", name="Locked")[0]
    assert locked.disabled and f'[{locked.id}] button "Locked" disabled' in obs.text.splitlines()
    with pytest.raises(InvalidTarget):  # at once, not after action_ms
        await execute(page, Command("CLICK", locked.id), allowed_origins=h.allowed)
    for url in ("http://example.com/", "file:///etc/passwd", "javascript:alert(1)", "http://127.0.0.1:1/"):
        with pytest.raises(NavigationBlocked) as e:
            await execute(page, Command("GOTO", arg=url), allowed_origins=h.allowed)
        assert e.value.kind == "navigation_blocked"
    with pytest.raises(NavigationBlocked):  # an allowed URL that redirects out
        await execute(page, Command("GOTO", arg=h.origin + "/redirect"), allowed_origins=h.allowed)
    assert page.url == f"{h.origin}/form"
    with pytest.raises(InvalidTarget):  # fresh tab: nothing of the site to go back to
        await execute(page, Command("GO_BACK"), allowed_origins=h.allowed)
    assert page.url == f"{h.origin}/form"
    await page.goto(h.origin + "/overlay")
    obs = await observe(page, with_screenshot=False)
    under = obs.find(role="button", name="Under")[0]
    with pytest.raises(ActionTimeout) as e:
        await execute(page, Command("CLICK", under.id), allowed_origins=h.allowed, timeouts=Timeouts(action_ms=300))
    assert e.value.kind == "timeout"
    await page.context.close()


@run
async def test_click_leaving_origin_is_blocked(h):
    page = await h.page("/")
    obs = await observe(page, with_screenshot=False)
    with pytest.raises(NavigationBlocked):
        await execute(page, Command("CLICK", obs.find(role="link", name="Leave")[0].id), allowed_origins=h.allowed)
    assert page.url == h.origin + "/"
    with pytest.raises(NavigationBlocked):  # an allowed link that redirects out
        await execute(page, Command("CLICK", obs.find(role="link", name="Bounce")[0].id), allowed_origins=h.allowed)
    assert page.url == h.origin + "/"
    await page.context.close()


@run
async def test_effects(h):
    page = await h.page("/form")
    obs = await observe(page, with_screenshot=False)
    q = obs.find(role="textbox", name="Search")[0]
    eff = await execute(page, Command("TYPE", q.id, "running shoes"), allowed_origins=h.allowed)
    assert isinstance(eff, Effect) and eff.expected_change and eff.dom_changed
    assert (await observe(page, with_screenshot=False)).by_id(q.id).value == "running shoes"
    eff = await execute(page, Command("TYPE", q.id, "running shoes"), allowed_origins=h.allowed)
    assert eff.expected_change  # the field holds the text (even if it did before)
    eff = await execute(page, Command("CLEAR", q.id), allowed_origins=h.allowed)
    assert eff.expected_change
    size = obs.find(role="combobox")[0]
    eff = await execute(page, Command("SELECT", size.id, "L"), allowed_origins=h.allowed)
    assert eff.expected_change
    assert (await observe(page, with_screenshot=False)).by_id(size.id).value == "L"
    eff = await execute(page, Command("SELECT", size.id, "s"), allowed_origins=h.allowed)  # case-insensitive label
    assert eff.expected_change
    eff = await execute(page, Command("SELECT", size.id, "lg"), allowed_origins=h.allowed)  # by value
    assert eff.expected_change
    b = obs.find(role="checkbox", name="Option B")[0]
    eff = await execute(page, Command("CLICK", b.id), allowed_origins=h.allowed)
    assert eff.expected_change and eff.dom_changed
    assert (await observe(page, with_screenshot=False)).by_id(b.id).checked is True
    img = obs.find(role="img")[0]
    eff = await execute(page, Command("CLICK", img.id), allowed_origins=h.allowed)
    assert not eff.expected_change and not eff.dom_changed  # an inert click changes nothing
    eff = await execute(page, Command("STOP", arg="done"), allowed_origins=h.allowed)
    assert eff.expected_change

    await page.goto(h.origin + "/long")
    eff = await execute(page, Command("SCROLL", arg="DOWN"), allowed_origins=h.allowed)
    assert eff.expected_change
    eff = await execute(page, Command("SCROLL", arg="UP"), allowed_origins=h.allowed)
    assert eff.expected_change
    eff = await execute(page, Command("SCROLL", arg="UP"), allowed_origins=h.allowed)
    assert not eff.expected_change  # already at the top

    await page.goto(h.origin + "/")
    obs = await observe(page, with_screenshot=False)
    eff = await execute(
        page, Command("CLICK", obs.find(role="link", name="Second page")[0].id), allowed_origins=h.allowed
    )
    assert eff.url_changed and eff.navigated and eff.expected_change
    assert page.url == h.origin + "/page2?x=1" and await page.title() == "Second"
    eff = await execute(page, Command("GO_BACK"), allowed_origins=h.allowed)
    assert eff.url_changed and eff.expected_change and page.url == h.origin + "/"
    eff = await execute(page, Command("GOTO", arg=h.origin + "/page2"), allowed_origins=h.allowed)
    assert eff.expected_change and page.url == h.origin + "/page2"
    eff = await execute(page, Command("GOTO", arg=h.origin + "/page2"), allowed_origins=h.allowed)
    assert eff.navigated and eff.expected_change and not eff.url_changed  # a reload
    # the page's URL is shown site-relative, so a site-relative GOTO opens it on the current origin
    obs = await observe(page, with_screenshot=False, origin=h.origin)
    assert obs.shown_url == "/page2" and render_observation(obs).startswith("URL: /page2\n")
    eff = await execute(page, Command("GOTO", arg="/page2?x=1"), allowed_origins=h.allowed)
    assert eff.url_changed and page.url == h.origin + "/page2?x=1"
    await page.context.close()


@run
async def test_an_element_command_waits_until_the_page_is_still(h):
    """The page starts adding results when it has been observed; the click comes on the named link and only once
    the page has not changed for ``still_ms`` (a loaded machine may pause the page's timers longer than that, so
    the test asks for the quiet window before the click, not for the end of the growth). A page that never stops
    costs the cap."""
    page = await h.page("/growing")
    first = (await observe(page, with_screenshot=False)).find(role="link", name="Result 1")[0]
    await page.evaluate("more()")  # a result now, more for ~270 ms
    await execute(page, Command("CLICK", first.id), allowed_origins=h.allowed)
    clicked, at, adds = await page.evaluate("[window.clicked, window.clickedAt, window.adds]")
    before = [t for t in adds if t <= at]
    assert clicked == "Result 1" and len(before) >= 2, (clicked, at, adds)
    assert at - before[-1] >= Timeouts.still_ms * 0.9, (at, adds)

    page2 = await h.page("/ticking")
    button = (await observe(page2, with_screenshot=False)).find(role="button", name="Press")[0]
    t0 = asyncio.get_running_loop().time()
    await execute(page2, Command("CLICK", button.id), allowed_origins=h.allowed)
    waited = asyncio.get_running_loop().time() - t0
    assert await page2.evaluate("window.pressed === true")
    assert Timeouts.still_cap_ms / 1000 * 0.9 <= waited < Timeouts.still_cap_ms / 1000 + 1.5, waited
    await page.context.close()
    await page2.context.close()


@run
async def test_phash_and_screenshot(h):
    import os
    import tempfile

    p1, p2, p3 = await h.page("/red"), await h.page("/red"), await h.page("/blue")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s", "000.png")
        o1 = await observe(p1, screenshot_path=path)
        assert o1.screenshot == path and os.path.getsize(path) > 0
        with open(path, "rb") as f:
            assert phash_png(f.read()) == o1.phash
    o2 = await observe(p2)
    o3 = await observe(p3)
    assert o1.phash == o2.phash
    assert o1.phash != o3.phash and len(o1.phash) == 256  # 1024-bit pHash
    for p in (p1, p2, p3):
        await p.context.close()


@run
async def test_the_fast_capture_has_playwrights_pixels_with_the_caret_hidden(h):
    """capture_png's CDP shot (optimizeForSpeed) against page.screenshot on a page with a blinking caret in a
    text box: before any snapshot the caret shows in some fast shots (so the check can fail); once observe has
    adopted the helper's sheet every fast shot has page.screenshot's pixels and pHash, without a DOM change."""
    import io

    import numpy as np
    from PIL import Image

    def pixels(png):
        with Image.open(io.BytesIO(png)) as im:
            return np.asarray(im.convert("RGBA"))

    page = await h.page("/form")
    await page.focus("#q")

    async def differs() -> bool:  # a fast shot against Playwright's, which hides the caret for its shot
        fast = pixels(await capture_png(page))
        return not np.array_equal(fast, pixels(await page.screenshot(type="png")))

    shown = 0
    for _ in range(10):  # Chromium blinks the caret every ~500 ms
        shown += await differs()
        await asyncio.sleep(0.15)
    assert shown > 0, "the caret never showed: this page cannot tell hidden from shown"

    slow = await observe(page, fast_capture=False)
    for _ in range(10):
        assert (await observe(page)).phash == slow.phash
        assert not await differs()
        await asyncio.sleep(0.15)
    # Playwright's shot adds and removes a <style> in every frame (DOM changes the still wait would wait out); the
    # fast one changes nothing
    before = await page.evaluate("() => window.__tgpo.state().mutations")
    for _ in range(3):
        await observe(page)
    assert await page.evaluate("() => window.__tgpo.state().mutations") == before
    await page.screenshot(type="png")
    assert await page.evaluate("() => window.__tgpo.state().mutations") > before
    assert await page.evaluate("() => document.activeElement.id") == "q"
    await page.context.close()


def test_origin_of():
    assert origin_of("HTTP://Example.COM:80/a?b") == "http://example.com"
    assert origin_of("https://x.org:8443/") == "https://x.org:8443"
    assert origin_of("file:///etc/passwd") is None
    assert origin_of("data:text/html,hi") is None
