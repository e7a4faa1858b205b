"""Serving a trained policy behind an OpenAI-compatible chat endpoint (``serving.serve``)."""
