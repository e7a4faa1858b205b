"""A policy behind an OpenAI-compatible chat endpoint (``rollout.serve``, vLLM, an API), stdlib HTTP only.

Connection errors, timeouts, 5xx and 429 are retried with exponential backoff, then raised as ``PolicyError``
naming the URL and the cause; other 4xx answers raise at once with the server's own message.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import urllib.error
import urllib.request

from rollout.core import PolicyOutput, PolicyRequest
from rollout.policies.prompt import SYSTEM_PROMPT, build_messages, command_end, kept_text


class PolicyError(RuntimeError):
    """A policy could not answer (server unreachable, request refused, policy closed)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


def request_seed(request: PolicyRequest) -> int:
    """A per-step sampling seed: the same episode step samples the same on every run."""
    h = hashlib.sha256(f"{request.seed}|{request.episode_key}|{request.step}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def _error_message(body: bytes) -> str:
    try:
        d = json.loads(body)
        err = d.get("error", d)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace")[:500]


class OpenAIPolicy:
    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, temperature: float = 0.0,
                 max_tokens: int = 256, top_p: float = 1.0, stop=None, timeout_s: float = 120,
                 retries: int = 3, budget_tokens: int = 2048, name: str = "http", backoff_s: float = 0.5,
                 logprobs: bool = True, seed: bool = True, stop_after_command: bool = True,
                 thought_chars: int = 160, extra_body: dict | None = None, system_prompt: str = SYSTEM_PROMPT):
        base = base_url.rstrip("/")
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.temperature, self.max_tokens, self.top_p = temperature, max_tokens, top_p
        self.stop = [stop] if isinstance(stop, str) else (list(stop) if stop else None)
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.budget_tokens, self.thought_chars = budget_tokens, thought_chars
        self.logprobs, self.seed, self.stop_after_command = logprobs, seed, stop_after_command
        self.extra_body = dict(extra_body or {})
        self.system_prompt = system_prompt
        self.name = name

    def payload(self, request: PolicyRequest) -> dict:
        messages = build_messages(request, budget_tokens=self.budget_tokens, thought_chars=self.thought_chars,
                                  system_prompt=self.system_prompt)
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens, "n": 1}
        if self.logprobs:
            body["logprobs"] = True
        if self.stop:
            body["stop"] = self.stop
        if self.seed:
            body["seed"] = request_seed(request)
        return body | self.extra_body

    # ------------------------------------------------------------------ Policy protocol
    async def act(self, request: PolicyRequest) -> PolicyOutput:
        body = self.payload(request)
        t0 = time.perf_counter()
        resp = await self.post(body)
        return self._output(resp, body, time.perf_counter() - t0)

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ HTTP
    async def post(self, body: dict) -> dict:
        """POST ``body`` to the chat endpoint with retries; -> the decoded JSON answer."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return await asyncio.to_thread(self._post_once, body)
            except PolicyError as e:
                if not e.retryable or attempt == self.retries:
                    if e.retryable:
                        raise PolicyError(f"{self.url}: no answer after {self.retries + 1} attempts: {e}",
                                          status=e.status) from e
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _post_once(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            msg = _error_message(e.read())
            retryable = e.code >= 500 or e.code == 429
            raise PolicyError(f"{self.url} answered {e.code}: {msg}", status=e.code, retryable=retryable) from e
        except (urllib.error.URLError, OSError) as e:  # refused, unreachable, timed out
            cause = getattr(e, "reason", e)
            raise PolicyError(f"{self.url} unreachable: {cause}", retryable=True) from e
        try:
            return json.loads(raw)
        except ValueError as e:
            raise PolicyError(f"{self.url} answered with invalid JSON: {raw[:200]!r}") from e

    def _output(self, resp: dict, body: dict, latency_s: float) -> PolicyOutput:
        try:
            choice = resp["choices"][0]
        except (KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"{self.url} answered without choices: {str(resp)[:300]}") from e
        text = (choice.get("message") or {}).get("content") or ""
        usage = resp.get("usage") or {}
        tokens = ((choice.get("logprobs") or {}).get("content")) if self.logprobs else None
        logprob = float(sum(t["logprob"] for t in tokens)) if tokens else None
        num_tokens = usage.get("completion_tokens")
        finish = choice.get("finish_reason")
        cut = command_end(text) if self.stop_after_command else None
        if cut is not None:
            text, logprob, kept = _cut_tokens(text, cut, tokens)
            num_tokens = kept
            finish = "stop"
        return PolicyOutput(text=text, logprob=logprob, num_tokens=num_tokens, info={
            "finish_reason": finish, "prompt_tokens": usage.get("prompt_tokens"),
            "cut_after_command": cut is not None, "model": resp.get("model", self.model),
            "latency_s": latency_s, "seed": body.get("seed"), "messages": body["messages"]})


def _cut_tokens(text: str, cut: int, tokens):
    """-> (text cut at ``cut``, log-prob of the tokens up to there (the newline included) or None, their count
    or None) using the per-token bytes of the answer."""
    want = kept_text(text, cut).encode()
    if not tokens:
        return text[:cut], None, None
    got = b""
    for n, t in enumerate(tokens, 1):
        got += bytes(t["bytes"]) if t.get("bytes") is not None else t["token"].encode()
        if len(got) >= len(want):
            break
    if not got.startswith(want):
        return text[:cut], None, None  # token texts do not line up with the content: log-prob unknown
    return text[:cut], float(sum(t["logprob"] for t in tokens[:n])), n
