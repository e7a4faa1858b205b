"""Serve a policy model over an OpenAI-compatible API (chat and text completions, log-probs of sampled tokens).

  python -m launch.serve                                   # the bundled SmolLM2-135M-Instruct on 127.0.0.1:8000
  python -m launch.serve --model=runs/tgpo/export --port=8001 --served_model_name=tgpo
  curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"model": "bundled", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "logprobs": true}'
"""

from __future__ import annotations

import logging
import os
import time

from absl import app, flags

from launch.entry import prepare

_MODEL = flags.DEFINE_string("model", "bundled", "HF directory, .gguf file, or 'bundled' (SmolLM2-135M-Instruct)")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "tokenizer path (default: the model's)")
_SERVED_NAME = flags.DEFINE_string("served_model_name", None, "model id clients send (default: --model)")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "address to bind (loopback by default; others need --allow_remote)")
_ALLOW_REMOTE = flags.DEFINE_bool("allow_remote", False, "allow a --host other machines can reach (plain http)")
_API_KEY = flags.DEFINE_string("api_key", None, "require 'Authorization: Bearer <key>' (default: $TGPO_API_KEY)")
_PORT = flags.DEFINE_integer("port", 8000, "port to bind (0 = any free port)")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype")
_MAX_TOKENS = flags.DEFINE_integer("default_max_tokens", 256, "max_tokens when a request gives none")


def main(argv):
    """Load the model and serve it over HTTP until interrupted."""
    prepare(argv)
    from rollout.httpd import is_loopback

    if not is_loopback(_HOST.value) and not _ALLOW_REMOTE.value:
        raise app.UsageError(
            f"--host={_HOST.value} is reachable from other machines over plain http: add "
            "--allow_remote (and --api_key or $TGPO_API_KEY), or keep the loopback default"
        )
    from serving.serve import ModelServer

    t0 = time.perf_counter()
    server = ModelServer.from_path(
        _MODEL.value,
        _SERVED_NAME.value or _MODEL.value,
        dtype=_DTYPE.value,
        tokenizer_path=_TOKENIZER.value or None,
        host=_HOST.value,
        port=_PORT.value,
        default_max_tokens=_MAX_TOKENS.value,
        api_key=_API_KEY.value or os.environ.get("TGPO_API_KEY"),
        allow_remote=_ALLOW_REMOTE.value,
    )
    cfg = server.sampler.cfg
    logging.info(
        "loaded %s (%s, %d layers) in %.1fs", _MODEL.value, cfg.model_type, cfg.num_layers, time.perf_counter() - t0
    )
    server.bind()
    print(f"serving {server.model_name} at {server.base_url}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    app.run(main)
