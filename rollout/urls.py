"""URL normalisation for state identity (docs/method.md §2, rule 1).

Lower-case scheme and host, no fragment, default ports dropped, tracking, session and CSRF parameters
dropped, remaining query parameters sorted. Which parameters identify a page is a per-site setting:
``essential`` maps a path pattern (``fnmatch`` style, e.g. ``/item/*``) to the parameters to keep.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Mapping, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Parameters that never identify a page: analytics, session and CSRF tokens (they vary per visit or per session).
# State identity drops them, and so do synthesized tasks' URL checks (rollout/synthesis.py): one list for both.
DROPPED_PARAMS = frozenset(
    {
        "sid",
        "session",
        "sessionid",
        "session_id",
        "phpsessid",
        "jsessionid",
        "fbclid",
        "gclid",
        "msclkid",
        "ref",
        "ref_",
        "_ga",
        "mc_cid",
        "mc_eid",
        "yclid",
        "sectok",
        "sesskey",
        "token",
        "_token",
        "csrf",
        "_csrf",
        "csrf_token",
        "_csrf_token",
        "csrftoken",
        "csrfmiddlewaretoken",
        "xsrf",
        "_xsrf",
        "xsrf_token",
        "authenticity_token",
        "form_key",
        "nonce",
        "_wpnonce",
    }
)
DROPPED_PREFIXES = ("utm_",)
PATH_SESSION_PARAMS = ("jsessionid", "phpsessid", "sid", "sessionid")  # ;jsessionid=… in the path
PATH_SESSION = re.compile(r";(?:" + "|".join(PATH_SESSION_PARAMS) + r")=[^/;]*", re.I)


def is_dropped(key: str) -> bool:
    """A query parameter that never identifies a page (``DROPPED_PARAMS``, ``DROPPED_PREFIXES``)."""
    k = key.lower()
    return k in DROPPED_PARAMS or k.startswith(DROPPED_PREFIXES)


def site_relative(url: str, origin: str) -> str:
    """``url`` without ``origin`` when it is on that origin ("/search?q=x"), else unchanged."""
    origin = (origin or "").rstrip("/")
    if not origin or not url.startswith(origin):
        return url
    rest = url[len(origin) :]
    if rest and rest[0] not in "/?#":  # another port or host that merely starts alike (…:8080 vs …:80)
        return url
    return rest if rest.startswith("/") else "/" + rest


def normalize_url(url: str, essential: Mapping[str, Sequence[str]] | None = None) -> str:
    """The URL as a node key: scheme and host lower-cased, default port, fragment and session path parameters dropped,
    tracking and session query parameters dropped (only the ``essential`` ones of the path kept when given), the rest
    sorted."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((scheme == "http" and port == 80) or (scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    path = PATH_SESSION.sub("", parts.path or "/") or "/"  # ;jsessionid=… path parameters
    params = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not is_dropped(k)]
    if essential is not None:
        keep = _essential_for(path, essential)
        if keep is not None:
            params = [(k, v) for k, v in params if k in keep]
    return urlunsplit((scheme, host, path, urlencode(sorted(params)), ""))


def _essential_for(path: str, essential: Mapping[str, Sequence[str]]) -> set[str] | None:
    if path in essential:
        return set(essential[path])
    for pattern, keep in essential.items():
        if fnmatch.fnmatchcase(path, pattern):
            return set(keep)
    return None  # path not listed: keep every non-tracking parameter
