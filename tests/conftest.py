"""Shared test set-up: 8 fake CPU devices for mesh tests, offline transformers, common fixtures."""

import os

# Must precede the first jax import: single-process sharding tests run on 8 fake CPU devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One persistent XLA cache for the whole suite and the processes it starts (pipelines, CLIs): a resumed or re-run
# pipeline, a second test building the same train step, and the slow tier after the fast one load the compiled
# programs instead of compiling them again. The key is the
# program, the jax version and the XLA flags, so a stale entry is never used; the directory is git-ignored.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "jax"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import jax  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    # The fast tier (the default `-m "not slow"`) compiles its CPU programs with LLVM's optimiser off: they are tiny
    # and run once or a few times, and compiling them was two thirds of that tier's CPU time. The slow tier keeps the
    # default level: its training runs are bound by running the programs. Set here, not at import, because the tier is
    # known only once
    # pytest has read its options; XLA reads the flags when the backend starts, which is below. Not with an accelerator
    # plugin installed (found as jax finds them: the `jax_plugins` entry points and namespace package): the flag would
    # reach its kernels too.
    import importlib.metadata
    import importlib.util

    flags = os.environ.get("XLA_FLAGS", "")
    plugin = bool(importlib.metadata.entry_points(group="jax_plugins")) or importlib.util.find_spec("jax_plugins")
    if (
        config.option.markexpr.replace(" ", "") == "notslow"
        and "xla_backend_optimization_level" not in flags
        and not plugin
    ):
        os.environ["XLA_FLAGS"] = flags + " --xla_backend_optimization_level=0"
    # GPUs multiply float32 matrices in TF32 by default (measured on an H200: 3e-4 relative error, 3e-7 at
    # 'highest'), above the parity tests' tolerances, which come from float32 numerics; the CPU computes them in
    # float32 anyway
    if jax.default_backend() != "cpu":
        jax.config.update("jax_default_matmul_precision", "highest")


CORPUS = [
    "search for red running shoes under 50 dollars",
    "CLICK [12]\nTYPE [4] [wireless mouse]\nSELECT [7] [large]\nSCROLL [DOWN]\nGO_BACK\nSTOP [done]",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Add the cheapest item to the cart, then check out.  Two  spaces and\ttabs.",
    "Prix: 12,50 € — größe M, café crème, 价格 便宜",
]


@pytest.fixture(scope="session")
def spm_tokenizer_dir(tmp_path_factory):
    """A SentencePiece tokenizer trained here, written as a HF tokenizer directory."""
    from tgpo_jax.models.tokenizer import train_sentencepiece

    out = tmp_path_factory.mktemp("spm")
    return train_sentencepiece(CORPUS * 50, str(out), vocab_size=400)


@pytest.fixture(scope="session")
def spm_tokenizer(spm_tokenizer_dir):
    from tgpo_jax.models.tokenizer import load_tokenizer

    return load_tokenizer(spm_tokenizer_dir)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Playwright's sync API) for tests that open pages the project writes."""
    from playwright.sync_api import sync_playwright

    from rollout import browser_path

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=browser_path.chromium_executable(), args=list(browser_path.CHROMIUM_ARGS)
        )
        yield b
        b.close()
