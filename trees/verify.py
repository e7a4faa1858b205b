"""Pluggable R_acc verifiers (docs/method.md §3): the built-in checks, or a judge model over before/after screenshots.

A verifier is ``verifier(step, before, after, episode_path) -> bool``: did the step's command produce its
expected interface change? ``before`` / ``after`` are the recorded states s_t / s_{t+1}.
"""
from __future__ import annotations

import base64
import os

from rollout.endpoint import ChatEndpoint, EndpointError

JUDGE_PROMPT = ("You check a web agent's action. The first image is the page before the action, the second the "
                "page after it. The action was: {command}\nDid the action execute and produce the change it was "
                "meant to (a click opened or changed something, typed text is in the field, the option is "
                "selected, …)? Answer with one word: yes or no.")


def builtin_verifier(step: dict, before: dict, after: dict, episode_path: str | None = None) -> bool:
    """The harness's checks at execution time (``effect.expected_change``): CLICK changed the URL or DOM, TYPE
    left the text in the field, SELECT selected the option, SCROLL moved, GOTO/GO_BACK changed the URL."""
    eff = step.get("effect")
    return bool(eff and eff.get("expected_change"))


class JudgeVerifier:
    """Asks a vision model behind an OpenAI-compatible chat endpoint; falls back to the built-in check when a
    screenshot is missing. Answers are cached by (pHash before, pHash after, command)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60,
                 retries: int = 2):
        self.endpoint = ChatEndpoint(base_url, api_key=api_key, timeout_s=timeout_s, retries=retries)
        self.url, self.model = self.endpoint.url, model
        self.cache: dict[tuple, bool] = {}
        self.calls = 0

    def __call__(self, step: dict, before: dict, after: dict, episode_path: str | None = None) -> bool:
        shots = [before.get("screenshot"), after.get("screenshot")]
        if episode_path is None or not all(shots):
            return builtin_verifier(step, before, after)
        paths = [os.path.join(episode_path, s) for s in shots]
        if not all(os.path.exists(p) for p in paths):
            return builtin_verifier(step, before, after)
        key = (before.get("phash"), after.get("phash"), step.get("command"))
        if key not in self.cache:
            target = step.get("target")
            what = (step.get("command") or "") + (f' on {target["role"]} "{target["name"]}"' if target else "")
            self.cache[key] = self._ask(what, paths)
        return self.cache[key]

    def _ask(self, command: str, paths: list[str]) -> bool:
        content = [{"type": "text", "text": JUDGE_PROMPT.format(command=command)}]
        for p in paths:
            with open(p, "rb") as f:
                data = base64.b64encode(f.read()).decode()
            content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
        resp = self.endpoint.post({"model": self.model, "temperature": 0, "max_tokens": 4,
                                   "messages": [{"role": "user", "content": content}]})
        try:
            answer = resp["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise EndpointError(f"judge {self.url} answered without a message: {str(resp)[:300]}") from e
        self.calls += 1
        return str(answer).strip().lower().startswith("yes")
