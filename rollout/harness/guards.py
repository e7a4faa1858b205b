"""Hermetic browsing: which origins a page may reach. ``install_guards`` routes every http(s) request whose origin
is not allowed (a regex the Playwright driver matches itself):
sub-resources are aborted (``net::ERR_BLOCKED_BY_CLIENT``), navigation requests are answered
``204 No Content`` so that the tab keeps its current document (an aborted navigation would commit Chrome's error
page). ``execute`` watches the main frame's navigation requests while a command runs; one to a disallowed origin
raises NavigationBlocked after the page is back on the site. ``GOTO`` is checked before navigating (scheme
http/https and an allowed origin). Limitation: Playwright routes only the first request of a redirect chain, so an
allowed URL that redirects out is not answered by the guard; ``execute`` detects the hop, goes back from the error
(or foreign) page and raises NavigationBlocked, but on a machine with network the hop's request itself has left —
launch Chromium with ``--host-resolver-rules="MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"`` where that matters. Popups are
prevented by the page helper (``target=_blank`` links open in the same page; ``window.open`` navigates it).
"""

from __future__ import annotations

import re
import urllib.parse

BLOCKED_ERROR = "blockedbyclient"
BLOCKED_FAILURE = "net::ERR_BLOCKED_BY_CLIENT"
BLOCKED_HEADER = "x-tgpo-blocked"


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` lower-cased with the default port dropped; None for non-http(s) URLs."""
    try:
        u = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return None
    scheme = (u.scheme or "").lower()
    if scheme not in ("http", "https") or not u.hostname:
        return None
    host = u.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = u.port
    except ValueError:
        return None
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def norm_origins(allowed_origins) -> set[str]:
    """The normalised origins of ``allowed_origins`` (entries that are not http(s) URLs dropped)."""
    out = set()
    for o in allowed_origins:
        n = origin_of(o)
        if n:
            out.add(n)
    return out


def is_allowed(url: str, allowed_origins) -> bool:
    """Whether ``url``'s origin is one of ``allowed_origins``."""
    o = origin_of(url)
    return o is not None and o in norm_origins(allowed_origins)


async def install_guards(context, allowed_origins) -> None:
    """Abort every http(s) request whose origin is not in ``allowed_origins`` (data:/about:/blob: pass)."""
    await context.route(blocked_pattern(allowed_origins), _abort)


def blocked_pattern(allowed_origins) -> re.Pattern:
    """A regex matching http(s) URLs outside the allowed origins. A regex (not a Python callable) lets the
    Playwright driver match requests itself, so allowed requests never round-trip through Python."""
    alts = "|".join(re.escape(o) for o in sorted(norm_origins(allowed_origins)))
    guard = f"(?!(?:{alts})(?:[/?#]|$))" if alts else ""
    return re.compile(f"^{guard}https?://", re.IGNORECASE)


async def _abort(route):
    try:
        if route.request.is_navigation_request():
            # A 204 answer keeps the current document (an aborted navigation would commit Chrome's error page).
            await route.fulfill(status=204, body="", headers={BLOCKED_HEADER: "1"})
        else:
            await route.abort(BLOCKED_ERROR)
    except Exception:  # page closed meanwhile
        pass
