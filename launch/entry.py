"""What every entry point does first: refuse stray arguments, stay offline, log to stderr, keep compiled programs,
register the recipes (``recipes/``: what only one model needs, e.g. ``model.init=copy_circuit``)."""

import logging
import os
import sys

from absl import app

import recipes

# where compiled XLA programs are kept between runs: a resumed or re-run job (a killed pipeline, the next stage, the
# next sweep point) loads its train and sampling steps instead of compiling them again. JAX_COMPILATION_CACHE_DIR
# overrides it; set to '' it turns the cache off. The key is the program, the jax version, the devices and the XLA
# flags, so an entry is only ever reused for the same computation.
COMPILE_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tgpo-jax", "xla")
COMPILE_CACHE_BYTES = 4 << 30  # least recently used entries go beyond this


def prepare(argv) -> None:
    """Set up a launcher's process: refuse extra arguments, stay offline, log to stderr, turn on the compilation cache
    and register the recipes; ``app.UsageError`` for stray arguments."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models and tokenizers are local: never reach for a hub
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    compile_cache()
    recipes.register_all()  # imports no jax: launch.plan still sets the CPU devices first


def compile_cache() -> str | None:
    """Turn on the persistent compilation cache (before the first compile); its directory, or None when off. jax is
    not imported here (launch.plan sets the number of CPU devices first): the settings go in the environment that
    jax reads at import, or into its config when it is already imported."""
    path = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", COMPILE_CACHE)
    if not path:
        return None
    size = int(os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(COMPILE_CACHE_BYTES)))
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_compilation_cache_max_size", size)
    return path
