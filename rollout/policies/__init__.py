"""Policies (``rollout.core.Policy``): the project's own model (batched), an OpenAI-compatible endpoint."""

from rollout.policies.http import PolicyError  # noqa: F401
