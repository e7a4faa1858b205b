"""Where the Chromium that Playwright drives lives: Debian's package, or Playwright's own download."""

from __future__ import annotations

import glob
import os

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Debian's chromium-headless-shell: the same engine without the browser's UI layer. Headless, it does the same steps
# for about half the CPU (bench/harness_overhead.py: 4.3 -> 8.0 steps/s with 4 contexts), and on 2 cores the browser is
# most of an evaluation's CPU. Headed runs need the full browser.
SYSTEM_HEADLESS_SHELL = ("/usr/bin/chromium-headless-shell",)
# Flags for a headless Chromium on a machine without network or GPU (see ../shared/STACK.md).
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def playwright_chromium() -> str | None:
    """Playwright's own downloaded Chromium, if any."""
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or os.path.expanduser("~/.cache/ms-playwright")
    found = sorted(glob.glob(os.path.join(root, "chromium*-*", "chrome-linux*", "chrome")))
    return found[-1] if found else None


def chromium_executable(headless: bool = True) -> str | None:
    """The executable to launch: TGPO_CHROMIUM, then the system package (its headless shell first when headless);
    None lets Playwright choose its own (which also takes its headless shell when headless)."""
    env = os.environ.get("TGPO_CHROMIUM")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"TGPO_CHROMIUM={env} does not exist")
        return env
    for path in (SYSTEM_HEADLESS_SHELL if headless else ()) + SYSTEM_CHROMIUM:
        if os.path.exists(path):
            return path
    if playwright_chromium():
        return None
    raise FileNotFoundError(
        "no Chromium found: run `bash scripts/setup.sh` (installs Debian's chromium as root, "
        "Playwright's otherwise) or set TGPO_CHROMIUM"
    )
