"""The project's own model as a policy: concurrent ``act`` calls are batched into one ``Sampler.generate``.

A background task waits for the first request, yields to the event loop once so that every coroutine that is ready
can enqueue its own, then takes everything queued (up to ``max_batch``) and runs one generate call in a worker
thread. Requests that arrive meanwhile form the next batch. No fixed sleeps anywhere.

The behaviour log-prob of an output is the sum of the sampler's per-token log-probs over the tokens kept (EOS
included when the model ended with it: the trainer scores actions with their EOS too). Generation ends at EOS,
a stop string of ``params.stop``, or ``max_tokens``; with ``stop_after_command`` (default) an output that runs on
past its ``Command:`` line is cut after that line's newline token, and only the tokens up to it are counted.
With ``constrain`` every bracketed group is one the step offers (``constrain.py``; ``thoughts``, the wording the model's
thoughts were trained on, says which rules hold them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time

from rollout.core import PolicyOutput, PolicyRequest
from rollout.policies.http import PolicyError
from rollout.policies.prompt import PromptConfig, build_messages, command_end, kept_text

log = logging.getLogger(__name__)


def cut_after_command(completion, tokenizer):
    """The completion ended after its ``Command:`` line (tokens, log-probs and text), or itself unchanged.

    Keeps the shortest token prefix whose text covers the newline ending the command line (like a stop string:
    that token is kept and counted, the newline is not in the text)."""
    from tgpo_jax.models.sampler import Completion

    cut = command_end(completion.text)
    if cut is None:
        return completion
    want = kept_text(completion.text, cut)
    for n in range(1, len(completion.tokens) + 1):
        if tokenizer.decode(completion.tokens[:n], skip_special_tokens=False).startswith(want):
            break
    else:
        return completion  # the token texts do not line up with the text: leave it whole
    return Completion(completion.tokens[:n], completion.logprobs[:n], completion.text[:cut], "stop")


def request_seed(base: int, request) -> int:
    """A sampling seed from one request (episode key, step, collection seed): the same step of the same episode
    samples the same whatever else is in its batch (a resumed collection batches differently), and different
    steps never share a seed by accident."""
    h = hashlib.sha256(f"{base}|{request.episode_key}:{request.step}:{request.seed}".encode())
    return int.from_bytes(h.digest()[:4], "little") & 0x7FFFFFFF


@dataclasses.dataclass
class _Pending:
    request: PolicyRequest
    future: asyncio.Future


class ModelPolicy:
    """The project's own model as a policy: concurrent ``act`` calls batched into one sampling call (see the module
    docstring)."""

    def __init__(
        self,
        sampler,
        tokenizer,
        *,
        params,
        prompt: PromptConfig = PromptConfig(),
        max_batch: int = 8,
        name: str = "model",
        stop_after_command: bool = True,
        constrain: bool = False,
        thoughts: str = "plain",
    ):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.params = params
        self.prompt = prompt  # how each step's prompt is laid out and cut (as the model was trained)
        self.max_batch = max_batch
        self.name = name
        self.stop_after_command = stop_after_command
        self.constrain = constrain  # valid-argument decoding (constrain.py)
        self.thoughts = thoughts  # the thought wording the model trained on: the decoding's rules for it
        if constrain:
            from rollout.policies.thoughts import thoughts as registered

            registered(thoughts)  # an unknown wording fails here, not at the first step
        self.generate_calls = 0  # batches run so far
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._loop = None
        self._closed = False

    @classmethod
    def from_path(
        cls,
        path: str = "bundled",
        *,
        params,
        dtype: str | None = None,
        tokenizer_path: str | None = None,
        mesh=None,
        **kw,
    ) -> "ModelPolicy":
        """Load the model and its tokenizer from one path (HF directory, .gguf, or 'bundled')."""
        from tgpo_jax.models.loading import load_model, with_tokenizer_eos
        from tgpo_jax.models.sampler import Sampler
        from tgpo_jax.models.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path or path)
        model = with_tokenizer_eos(load_model(path, dtype=dtype, mesh=mesh), tokenizer)
        return cls(Sampler(model, tokenizer), tokenizer, params=params, **kw)

    # ------------------------------------------------------------------ Policy protocol
    async def act(self, request: PolicyRequest) -> PolicyOutput:
        """Queue the request for the next batch and wait for its output; ``PolicyError`` once closed."""
        if self._closed:
            raise PolicyError(f"policy {self.name!r} is closed")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._run(), name=f"{self.name}-batcher")
        fut = loop.create_future()
        self._queue.put_nowait(_Pending(request, fut))
        return await fut

    async def close(self) -> None:
        """Stop the batcher; requests still queued fail with ``PolicyError``."""
        self._closed = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):
                pass
        self._worker = None
        while self._queue is not None and not self._queue.empty():
            p = self._queue.get_nowait()
            if not p.future.done():
                p.future.set_exception(PolicyError(f"policy {self.name!r} closed before answering"))

    # ------------------------------------------------------------------ batching
    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            await asyncio.sleep(0)  # let every ready coroutine enqueue before the batch is taken
            batch = [first]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            batch = [p for p in batch if not p.future.done()]  # cancelled callers
            if not batch:
                continue
            try:
                outputs = await asyncio.to_thread(self._generate, [p.request for p in batch])
            except asyncio.CancelledError:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(PolicyError(f"policy {self.name!r} closed before answering"))
                raise
            except Exception as e:  # noqa: BLE001 - every waiting caller gets the error, none hangs
                log.exception("generation failed for a batch of %d", len(batch))
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            for p, out in zip(batch, outputs):
                if not p.future.done():
                    p.future.set_result(out)

    def _generate(self, requests) -> list[PolicyOutput]:
        from tgpo_jax.models.tokenizer import chat_ids

        t0 = time.perf_counter()
        messages = [build_messages(r, self.prompt, tokenizer=self.tokenizer) for r in requests]
        prompts = [chat_ids(self.tokenizer, m) for m in messages]
        params = self.params
        seeds = [request_seed(params.seed, r) for r in requests]
        self.generate_calls += 1
        if self.constrain:
            from rollout.policies.constrain import constraints_for

            eos = self.sampler.cfg.eos_token_ids or ()
            completions = self.sampler.generate(
                prompts,
                params,
                row_seeds=seeds,
                constraints=constraints_for(requests, self.tokenizer, eos, self.thoughts),
            )
        else:
            completions = self.sampler.generate(prompts, params, row_seeds=seeds)
        dt = time.perf_counter() - t0
        outs = []
        for m, prompt, c, seed in zip(messages, prompts, completions, seeds):
            raw_reason = c.finish_reason
            if self.stop_after_command:
                c = cut_after_command(c, self.tokenizer)
            outs.append(
                PolicyOutput(
                    text=c.text,
                    logprob=float(sum(c.logprobs)),
                    num_tokens=len(c.tokens),
                    info={
                        "finish_reason": c.finish_reason,
                        "prompt_tokens": len(prompt),
                        "cut_after_command": c.finish_reason == "stop" and raw_reason != "stop",
                        "batch_size": len(requests),
                        "seed": seed,
                        "latency_s": dt,
                        "messages": m,
                    },
                )
            )
        return outs
