"""Where the Chromium that Playwright drives lives: Debian's package, or Playwright's own download."""
from __future__ import annotations

import glob
import os

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Flags for a headless Chromium on a machine without network or GPU (see BUILD_NOTES.md).
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")


def playwright_chromium() -> str | None:
    """Playwright's own downloaded Chromium, if any."""
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or os.path.expanduser("~/.cache/ms-playwright")
    found = sorted(glob.glob(os.path.join(root, "chromium*-*", "chrome-linux*", "chrome")))
    return found[-1] if found else None


def chromium_executable() -> str | None:
    """The executable to launch: TGPO_CHROMIUM, then the system package; None lets Playwright choose its own."""
    env = os.environ.get("TGPO_CHROMIUM")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"TGPO_CHROMIUM={env} does not exist")
        return env
    for path in SYSTEM_CHROMIUM:
        if os.path.exists(path):
            return path
    if playwright_chromium():
        return None
    raise FileNotFoundError("no Chromium found: run `bash scripts/setup.sh` (installs Debian's chromium as root, "
                            "Playwright's otherwise) or set TGPO_CHROMIUM")
