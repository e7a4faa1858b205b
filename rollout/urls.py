"""URL normalisation for state identity (docs/method.md §2, rule 1).

Lower-case scheme and host, no fragment, default ports dropped, tracking and session parameters
dropped, remaining query parameters sorted. Which parameters identify a page is a per-site setting:
``essential`` maps a path pattern (``fnmatch`` style, e.g. ``/item/*``) to the parameters to keep.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Mapping, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Parameters that never identify a page: analytics and session tokens.
DROPPED_PARAMS = frozenset({"sid", "session", "sessionid", "session_id", "phpsessid", "jsessionid", "fbclid",
                            "gclid", "msclkid", "ref", "ref_", "_ga", "mc_cid", "mc_eid", "yclid"})
DROPPED_PREFIXES = ("utm_",)
_PATH_SESSION = re.compile(r";(jsessionid|phpsessid|sid|sessionid)=[^/;]*", re.I)


def site_relative(url: str, origin: str) -> str:
    """``url`` without ``origin`` when it is on that origin ("/search?q=x"), else unchanged."""
    origin = (origin or "").rstrip("/")
    if not origin or not url.startswith(origin):
        return url
    rest = url[len(origin):]
    if rest and rest[0] not in "/?#":  # another port or host that merely starts alike (…:8080 vs …:80)
        return url
    return rest if rest.startswith("/") else "/" + rest


def normalize_url(url: str, essential: Mapping[str, Sequence[str]] | None = None) -> str:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((scheme == "http" and port == 80) or (scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    path = _PATH_SESSION.sub("", parts.path or "/") or "/"  # ;jsessionid=… path parameters
    params = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
              if k.lower() not in DROPPED_PARAMS and not k.lower().startswith(DROPPED_PREFIXES)]
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
