"""What every entry point does first: refuse stray arguments, stay offline, log to stderr."""
import logging
import os

from absl import app


def prepare(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models and tokenizers are local: never reach for a hub
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
