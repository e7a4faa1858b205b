"""An OpenAI-compatible HTTP server for the project's own model (stdlib ``ThreadingHTTPServer``).

    POST /v1/chat/completions   messages, max_tokens (max_completion_tokens), temperature, top_p, top_k
                                (extension), stop, seed, logprobs (bool), top_logprobs (0 only), n (1 only)
    POST /v1/completions        prompt (a string or token ids), the same sampling fields, logprobs (int: 0 only
                                returns the sampled tokens' log-probs; top alternatives are not offered)
    GET  /v1/models, GET /health

Requests are served one at a time on the sampler (a lock), over ``rollout.httpd``'s limits (connections at once,
socket timeout, body size). A bind beyond loopback must be asked for (``allow_remote``) and can require an API key
(``Authorization: Bearer <key>``). Log-probs are the model's own (temperature-1) log-probs
of the sampled tokens, EOS included when generation ended with it, so their sum is the behaviour log-prob that
``ModelPolicy`` reports. Unsupported fields get a 400 answer in OpenAI's error shape.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import secrets
import threading
import time
import uuid

from rollout.httpd import BodyError, BoundedHTTPServer, LimitedHandler, is_loopback

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256
_FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


class RequestError(Exception):
    """A request the API refuses: the message, HTTP status and OpenAI error fields (type, param, code)."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        type_: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.message, self.status, self.param, self.type, self.code = message, status, param, type_, code

    def body(self) -> dict:
        """The OpenAI-style error response body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _number(body: dict, key: str, kind, default, lo=None, hi=None):
    v = body.get(key)
    if v is None:
        return default
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
        or (kind is int and not float(v).is_integer())
    ):
        raise RequestError(
            f"'{key}' must be {'an integer' if kind is int else 'a finite number'}, got {v!r}", param=key
        )
    v = kind(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise RequestError(f"'{key}' must be in [{lo}, {hi}], got {v}", param=key)
    return v


class ModelServer:
    """An OpenAI-compatible HTTP server over a ``Sampler``: ``/v1/models``, chat and text completions, with log-probs of
    the sampled tokens. Non-loopback hosts need ``allow_remote`` (``ValueError`` otherwise)."""

    def __init__(
        self,
        sampler,
        tokenizer,
        model_name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        api_key: str | None = None,
        allow_remote: bool = False,
        max_connections: int | None = None,
        socket_timeout: float | None = None,
    ):
        if not is_loopback(host) and not allow_remote:
            raise ValueError(
                f"host={host!r} is reachable from other machines and this server has no TLS: pass "
                "allow_remote=True (launch.serve --allow_remote), ideally with an API key (--api_key)"
            )
        if not is_loopback(host) and not api_key:
            log.warning("serving on %s without an API key: anyone who reaches it can use the model", host)
        self.sampler, self.tokenizer, self.model_name = sampler, tokenizer, model_name
        self.host, self.port = host, port
        self.api_key = api_key or None
        self.max_connections = max_connections
        self.socket_timeout = socket_timeout
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        self._lock = threading.Lock()
        self._httpd: BoundedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_path(
        cls,
        path: str,
        model_name: str | None = None,
        *,
        dtype: str | None = None,
        tokenizer_path: str | None = None,
        **kwargs,
    ) -> "ModelServer":
        """A server for the model saved at ``path`` (a run's model directory or a Hugging Face one), its EOS
        ids taken from the tokenizer; ``kwargs`` as the constructor's."""
        from tgpo_jax.models.loading import load_model, with_tokenizer_eos
        from tgpo_jax.models.sampler import Sampler
        from tgpo_jax.models.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path or path)
        model = with_tokenizer_eos(load_model(path, dtype=dtype), tokenizer)
        return cls(Sampler(model, tokenizer), tokenizer, model_name or path, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def bind(self) -> BoundedHTTPServer:
        """Bind the listening socket (once) and return the HTTP server; port 0 takes a free port."""
        if self._httpd is None:
            server = self

            class Handler(_Handler):
                owner = server
                timeout = server.socket_timeout or _Handler.timeout

            kw = {"max_connections": self.max_connections} if self.max_connections else {}
            self._httpd = BoundedHTTPServer((self.host, self.port), Handler, **kw)
            self.port = self._httpd.server_address[1]
        return self._httpd

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the bound server."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Serve in a background thread; -> the base URL (``http://host:port``; the API lives under /v1)."""
        httpd = self.bind()
        if self._thread is None:
            self._thread = threading.Thread(target=httpd.serve_forever, name="model-server", daemon=True)
            self._thread.start()
        return self.base_url

    def serve_forever(self) -> None:
        """Serve in the calling thread until the server is shut down, then close it."""
        httpd = self.bind()
        log.info("serving %s at %s/v1", self.model_name, self.base_url)
        try:
            httpd.serve_forever()
        finally:
            httpd.server_close()

    def stop(self) -> None:
        """Shut the server down (its thread too, when started with ``start``) and close the socket."""
        if self._httpd is not None:
            if self._thread is not None:  # shutdown() waits for a running serve_forever loop
                self._httpd.shutdown()
                self._thread.join(timeout=10)
            self._httpd.server_close()
        self._httpd = self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------ endpoints
    def models(self) -> dict:
        """The ``/v1/models`` response: the one served model."""
        return {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "created": self.created, "owned_by": "tgpo-jax"}],
        }

    def _common(self, body: dict):
        from tgpo_jax.models.sampler import SamplingParams

        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise RequestError(
                f"The model `{model}` does not exist; this server serves `{self.model_name}`",
                status=404,
                param="model",
                code="model_not_found",
            )
        if _number(body, "n", int, 1) != 1:
            raise RequestError("only n=1 is supported", param="n")
        if _number(body, "best_of", int, 1) != 1:
            raise RequestError("only best_of=1 is supported", param="best_of")
        if body.get("stream"):
            raise RequestError("streaming is not supported", param="stream")
        stop = body.get("stop")
        if stop is None:
            stop = ()
        elif isinstance(stop, str):
            stop = (stop,)
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            stop = tuple(s for s in stop if s)
        else:
            raise RequestError("'stop' must be a string or a list of strings", param="stop")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        context = self.sampler.cfg.max_position_embeddings
        max_tokens = _number({key: max_tokens}, key, int, min(self.default_max_tokens, context), lo=1, hi=context)
        seed = _number(body, "seed", int, None, lo=-(2**63), hi=2**64 - 1)
        params = SamplingParams(
            temperature=_number(body, "temperature", float, 1.0, lo=0.0, hi=2.0),
            top_p=_number(body, "top_p", float, 1.0, lo=1e-9, hi=1.0),
            top_k=max(_number(body, "top_k", int, 0, lo=-1, hi=self.sampler.cfg.vocab_size), 0),  # vLLM's -1 = off
            max_tokens=max_tokens,
            stop=stop,
            seed=(seed & 0x7FFFFFFF) if seed is not None else secrets.randbits(31),
        )
        return params

    def _generate(self, prompt: list[int], params):
        if not prompt:
            raise RequestError("the prompt is empty")
        limit = self.sampler.cfg.max_position_embeddings
        if len(prompt) + params.max_tokens > limit:
            raise RequestError(
                f"the prompt has {len(prompt)} tokens and max_tokens is {params.max_tokens}: "
                f"together more than the model's context of {limit} tokens",
                code="context_length_exceeded",
            )
        with self._lock:
            return self.sampler.generate([prompt], params)[0]

    def _token_texts(self, tokens: list[int]) -> list[str]:
        """Per-token texts that concatenate to the decoded completion where the tokenizer allows."""
        out, prev = [], ""
        for i in range(len(tokens)):
            cur = self.tokenizer.decode(tokens[: i + 1], skip_special_tokens=False)
            if cur.startswith(prev):
                out.append(cur[len(prev) :])
            else:  # a partial UTF-8 sequence resolved: fall back to the token alone
                out.append(self.tokenizer.decode([tokens[i]], skip_special_tokens=False))
            prev = cur
        return out

    def chat(self, body: dict) -> dict:
        """Answer a ``/v1/chat/completions`` body (text messages only); ``RequestError`` for an invalid request."""
        from tgpo_jax.models.tokenizer import chat_ids

        params = self._common(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list", param="messages")
        clean = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise RequestError("each message needs a 'role' and a 'content'", param="messages")
            content = m.get("content")
            if isinstance(content, list):  # content parts: text only
                if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
                    raise RequestError("only text content parts are supported", param="messages")
                content = "".join(p.get("text", "") for p in content)
            if content is None:
                content = ""
            if not isinstance(content, str):
                raise RequestError("message content must be a string or a list of text parts", param="messages")
            clean.append({"role": m["role"], "content": content})
        want_logprobs = body.get("logprobs")
        if want_logprobs is not None and not isinstance(want_logprobs, bool):
            raise RequestError("'logprobs' must be a boolean", param="logprobs")
        if _number(body, "top_logprobs", int, 0):
            raise RequestError(
                "top_logprobs > 0 is not supported (the sampled tokens' log-probs are)", param="top_logprobs"
            )
        try:
            prompt = chat_ids(self.tokenizer, clean)
        except Exception as e:  # noqa: BLE001 - a template that rejects the messages
            raise RequestError(f"the chat template rejected the messages: {e}", param="messages") from e
        c = self._generate(prompt, params)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": _FINISH[c.finish_reason],
            "logprobs": None,
        }
        if want_logprobs:
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                    for t, lp in zip(self._token_texts(c.tokens), c.logprobs)
                ]
            }
        return self._response("chat.completion", "chatcmpl", choice, len(prompt), len(c.tokens))

    def completion(self, body: dict) -> dict:
        """Answer a ``/v1/completions`` request body (one prompt, as text or token ids); ``RequestError`` for an invalid
        request."""
        params = self._common(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            vocab = self.sampler.cfg.vocab_size
            bad = [t for t in prompt if not 0 <= t < vocab]
            if bad:
                raise RequestError(f"token ids must be in [0, {vocab}); got {bad[:5]}", param="prompt")
            ids = list(prompt)
        else:
            raise RequestError("'prompt' must be one string or one list of token ids", param="prompt")
        if body.get("echo"):
            raise RequestError("echo is not supported", param="echo")
        nlp = body.get("logprobs")
        if nlp is not None and (isinstance(nlp, bool) or not isinstance(nlp, int) or nlp < 0):
            raise RequestError("'logprobs' must be a non-negative integer", param="logprobs")
        if nlp:
            raise RequestError(
                "logprobs > 0 (top alternatives) is not supported; use logprobs=0 for the sampled tokens' log-probs",
                param="logprobs",
            )
        c = self._generate(ids, params)
        choice = {"index": 0, "text": c.text, "finish_reason": _FINISH[c.finish_reason], "logprobs": None}
        if nlp is not None:
            texts = self._token_texts(c.tokens)
            offsets, pos = [], 0
            for t in texts:
                offsets.append(pos)
                pos += len(t)
            choice["logprobs"] = {
                "tokens": texts,
                "token_logprobs": list(c.logprobs),
                "top_logprobs": None,
                "text_offset": offsets,
            }
        return self._response("text_completion", "cmpl", choice, len(ids), len(c.tokens))

    def _response(self, obj: str, prefix: str, choice: dict, n_prompt: int, n_completion: int) -> dict:
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": obj,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_completion,
                "total_tokens": n_prompt + n_completion,
            },
        }


class _Handler(LimitedHandler):
    owner: ModelServer

    def log_message(self, fmt, *args):  # quiet: through logging, not stderr
        log.debug("%s - " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: RequestError) -> None:
        self._send(e.status, e.body())

    def _authorised(self) -> bool:
        key = self.owner.api_key
        if key is None:
            return True
        given = self.headers.get("Authorization") or ""
        if hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return True
        self.close_connection = True
        self._error(
            RequestError(
                "a valid API key is required (Authorization: Bearer <key>)", status=401, code="invalid_api_key"
            )
        )
        return False

    def do_GET(self):
        if not self._authorised():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok", "model": self.owner.model_name})
        elif path == "/v1/models":
            self._send(200, self.owner.models())
        else:
            self._error(RequestError(f"no route GET {path}", status=404, code="not_found"))

    def do_POST(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        route = {"/v1/chat/completions": self.owner.chat, "/v1/completions": self.owner.completion}.get(path)
        try:
            try:
                raw = self.read_body()
            except BodyError as e:
                raise RequestError(e.message, status=e.status) from None
            if not self._authorised():
                return
            if route is None:
                raise RequestError(f"no route POST {path}", status=404, code="not_found")
            try:
                body = json.loads(raw or b"null")
            except ValueError as e:
                raise RequestError(f"the body is not valid JSON: {e}") from e
            except RecursionError:
                raise RequestError("the body's JSON is nested too deeply") from None
            self._send(200, route(body))
        except RequestError as e:
            self._error(e)
        except ValueError as e:  # the sampler's own checks (sampling parameters, lengths)
            self._error(RequestError(str(e)))
        except Exception as e:  # noqa: BLE001
            log.exception("request failed")
            self._error(RequestError(f"internal error: {type(e).__name__}: {e}", status=500, type_="server_error"))
