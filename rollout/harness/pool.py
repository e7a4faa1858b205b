"""One Chromium, many contexts: launch, recycle, and relaunch after a crash.

Each episode gets a fresh browser context (its own cookies, so its own shop session). After
``recycle_after`` episodes the browser is retired: new contexts go to a fresh browser while the old
one finishes its running episodes and is then closed. A browser that died (crash, killed process)
is noticed by ``is_connected()`` and replaced on the next request; its running episodes fail with
Playwright errors, which the runner records as errored.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from playwright.async_api import async_playwright

from rollout.browser_path import CHROMIUM_ARGS, chromium_executable

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Slot:
    browser: object
    active: int = 0
    episodes: int = 0
    retiring: bool = False


class BrowserPool:
    """One Chromium at a time, shared by episode contexts, relaunched after ``recycle_after`` episodes or a crash (an
    async context manager)."""

    def __init__(self, *, recycle_after: int = 100, viewport: tuple[int, int] = (1024, 768), headless: bool = True):
        if recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1, got {recycle_after}")
        self.recycle_after = recycle_after
        self.viewport = viewport
        self.headless = headless
        self.launches = 0  # browsers launched (first launch + recycles + crash restarts)
        self.crashes = 0
        self._pw = None
        self._slot: _Slot | None = None
        self._lock = asyncio.Lock()
        self._owner: dict[int, _Slot] = {}  # id(context) -> slot

    async def __aenter__(self) -> "BrowserPool":
        self._pw = await async_playwright().start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _launch(self) -> _Slot:
        exe = chromium_executable(self.headless)
        browser = await self._pw.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS), headless=self.headless)
        self.launches += 1
        log.info("launched chromium #%d (%s)", self.launches, exe or "playwright's own")
        return _Slot(browser)

    async def new_context(self, *, init=None):
        """A fresh context on a live browser; ``init(context)`` installs scripts / guards."""
        async with self._lock:
            slot = self._slot
            if slot is not None and not slot.browser.is_connected():
                self.crashes += 1
                log.warning("chromium is gone (crash or killed); relaunching")
                slot = self._slot = None
            if slot is not None and slot.episodes >= self.recycle_after:
                slot.retiring = True
                if slot.active == 0:
                    await _quiet_close(slot.browser)
                slot = self._slot = None
            if slot is None:
                slot = self._slot = await self._launch()
            slot.active += 1
            slot.episodes += 1
        try:
            context = await slot.browser.new_context(viewport={"width": self.viewport[0], "height": self.viewport[1]})
            if init is not None:
                await init(context)
        except BaseException:
            await self._release_slot(slot)
            raise
        self._owner[id(context)] = slot
        return context

    async def release(self, context) -> None:
        """Close ``context`` and release its browser slot (a retired browser closes with its last context)."""
        await _quiet_close(context)
        slot = self._owner.pop(id(context), None)
        if slot is not None:
            await self._release_slot(slot)

    async def _release_slot(self, slot: _Slot) -> None:
        async with self._lock:
            slot.active -= 1
            if slot.retiring and slot.active == 0:
                await _quiet_close(slot.browser)

    async def close(self) -> None:
        """Close the browser and stop Playwright."""
        if self._slot is not None:
            await _quiet_close(self._slot.browser)
            self._slot = None
        if self._pw is not None:
            with contextlib.suppress(Exception):
                await self._pw.stop()
            self._pw = None


async def _quiet_close(obj) -> None:
    """Close a context / browser that may already be dead, without hanging on it."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(obj.close(), timeout=10)
