"""One client for OpenAI-compatible chat endpoints (``serving.serve``, vLLM, an API): the HTTP policy and the judge
verifier both post through it. Stdlib HTTP only.

Connection errors, timeouts, 5xx and 429 are retried with exponential backoff, then raised as ``EndpointError``
naming the URL and the cause; other 4xx answers raise at once with the server's own message.

An API key travels only over https or to a loopback address (``allow_insecure_key`` / ``$TGPO_ALLOW_INSECURE_KEY=1``
to send it anyway): a key given explicitly for a plain-http remote URL is an error, one picked up from
``$OPENAI_API_KEY`` is then left out. Redirects are not followed (urllib would carry the key to the new host).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from rollout.httpd import is_loopback

log = logging.getLogger(__name__)


class EndpointError(RuntimeError):
    """A model behind an endpoint could not answer (unreachable, refused the request, invalid answer)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


def chat_url(base_url: str) -> str:
    """``http://host:port`` or ``.../v1`` -> the chat completions URL."""
    base = base_url.rstrip("/")
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def _error_message(body: bytes) -> str:
    try:
        d = json.loads(body)
        err = d.get("error", d)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace")[:500]


def key_safe(url: str) -> bool:
    """https, or plain http to a loopback host: where an API key may travel."""
    u = urlsplit(url)
    return u.scheme == "https" or is_loopback(u.hostname or "")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} not followed", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


class ChatEndpoint:
    """A client for one OpenAI-compatible chat completions endpoint, with retries; ``EndpointError`` when an API key
    would travel over plain http to a remote host."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120,
        retries: int = 3,
        backoff_s: float = 0.5,
        allow_insecure_key: bool | None = None,
    ):
        self.url = chat_url(base_url)
        if allow_insecure_key is None:
            allow_insecure_key = os.environ.get("TGPO_ALLOW_INSECURE_KEY") == "1"
        if api_key and not key_safe(self.url) and not allow_insecure_key:
            raise EndpointError(
                f"refusing to send an API key to {self.url} over plain http (readable on the way): "
                "use https, a loopback address, or allow_insecure_key / TGPO_ALLOW_INSECURE_KEY=1"
            )
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY")
            if api_key and not key_safe(self.url) and not allow_insecure_key:
                log.warning(
                    "$OPENAI_API_KEY is set but %s is plain http to another host: the key is not sent", self.url
                )
                api_key = None
        self.api_key = api_key
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s

    def post_once(self, body: dict) -> dict:
        """One POST; -> the decoded JSON answer."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with _OPENER.open(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            msg = _error_message(e.read() or b"") or str(e.reason)
            retryable = e.code >= 500 or e.code == 429
            raise EndpointError(f"{self.url} answered {e.code}: {msg}", status=e.code, retryable=retryable) from e
        except (urllib.error.URLError, OSError) as e:  # refused, unreachable, timed out
            cause = getattr(e, "reason", e)
            raise EndpointError(f"{self.url} unreachable: {cause}", retryable=True) from e
        try:
            return json.loads(raw)
        except ValueError as e:
            raise EndpointError(f"{self.url} answered with invalid JSON: {raw[:200]!r}") from e

    def _give_up(self, e: EndpointError, attempt: int) -> bool:
        if e.retryable and attempt == self.retries:
            raise EndpointError(f"{self.url}: no answer after {self.retries + 1} attempts: {e}", status=e.status) from e
        return not e.retryable

    def post(self, body: dict) -> dict:
        """POST with retries (blocking)."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return self.post_once(body)
            except EndpointError as e:
                if self._give_up(e, attempt):
                    raise
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def apost(self, body: dict, post_once=None) -> dict:
        """POST with retries, the request in a worker thread so the event loop goes on."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return await asyncio.to_thread(post_once or self.post_once, body)
            except EndpointError as e:
                if self._give_up(e, attempt):
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover
