"""Which Chromium the harness launches: the headless shell for headless runs, the full browser for headed ones."""

import pytest

from rollout import browser_path


@pytest.fixture
def installed(monkeypatch):
    """Pretend exactly these executables exist (and no TGPO_CHROMIUM)."""
    monkeypatch.delenv("TGPO_CHROMIUM", raising=False)
    have: set[str] = set()
    monkeypatch.setattr(browser_path.os.path, "exists", lambda p: p in have)
    monkeypatch.setattr(browser_path, "playwright_chromium", lambda: None)
    return have


def test_headless_runs_take_the_headless_shell_and_headed_runs_the_full_browser(installed):
    installed.update({"/usr/bin/chromium", "/usr/bin/chromium-headless-shell"})
    assert browser_path.chromium_executable() == "/usr/bin/chromium-headless-shell"
    assert browser_path.chromium_executable(headless=False) == "/usr/bin/chromium"


def test_without_the_shell_headless_runs_use_the_full_browser(installed):
    installed.add("/usr/bin/chromium")
    assert browser_path.chromium_executable() == "/usr/bin/chromium"


def test_a_headed_run_with_only_the_shell_is_refused_with_the_way_out(installed):
    installed.add("/usr/bin/chromium-headless-shell")
    with pytest.raises(FileNotFoundError, match="TGPO_CHROMIUM"):
        browser_path.chromium_executable(headless=False)


def test_tgpo_chromium_wins_and_a_missing_one_is_named(installed, monkeypatch):
    installed.update({"/usr/bin/chromium-headless-shell", "/opt/my/chrome"})
    monkeypatch.setenv("TGPO_CHROMIUM", "/opt/my/chrome")
    assert browser_path.chromium_executable() == "/opt/my/chrome"
    monkeypatch.setenv("TGPO_CHROMIUM", "/opt/missing/chrome")
    with pytest.raises(FileNotFoundError, match="/opt/missing/chrome"):
        browser_path.chromium_executable()
