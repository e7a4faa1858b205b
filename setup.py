"""tgpo-jax: train web agents from their own browser experience (TGPO in JAX/Flax)."""

from setuptools import find_packages, setup

# Ranges tested together on these machines (see ../shared/STACK.md).
INSTALL_REQUIRES = [
    "jax>=0.10.2,<0.11",
    "jaxlib>=0.10.2,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "grain>=0.2.18,<0.3",
    "array-record>=0.8.6,<0.9",
    "transformers>=5.23,<6",
    "tokenizers>=0.23,<0.24",
    "safetensors>=0.8,<0.9",
    "sentencepiece>=0.2.3,<0.3",
    "protobuf>=5",
    "gguf>=0.19,<0.20",
    "playwright>=1.65,<1.66",
    "imagehash>=4.3.2,<5",
    "pillow>=10",
    "absl-py>=2.5,<3",
    "ml-collections>=1.1,<2",
    "numpy>=2.0,<3",
    "tqdm>=4.66",
    "jinja2>=3.1",
    "tensorboardX>=2.6,<3",
    "matplotlib>=3.8,<4",  # experiment/report.py plots
    "bm25s>=0.3.16,<0.4",  # the shop's search ranking
    "miniwob>=1.1,<2",  # MiniWoB++ task pages (we serve its HTML; its selenium env is unused)
]
EXTRAS = {
    # torch is pinned: any unpinned torch requirement pulls the CUDA build (several GB).
    # pytest-xdist: the fast tier (the README command) and .ci/run's slow tier run as two processes
    "test": [
        "pytest>=8,<10",
        "pytest-xdist>=3.5,<4",
        "torch==2.13.0",
        "accelerate>=1.15,<2",
        "portpicker>=1.6",
        "psutil>=5.9",
        "pyflakes>=3.2,<4",  # pyflakes: tests/test_static.py
        "ruff==0.17.6",
    ],  # the linter .ci/run runs (ruff.toml); pinned: its rules change between releases
    # launch/plan.py --topology: libtpu compiles for a TPU topology without a TPU (not needed on the CPU route)
    "tpu": ["jax[tpu]>=0.10.2,<0.11"],
    "bench": ["torch==2.13.0", "accelerate>=1.15,<2", "trl>=1.16,<1.17"],  # trl: bench/dpo_step.py (tested 1.16.0)
}

setup(
    name="tgpo-jax",
    version="0.1.0",
    description="Tree-guided preference optimisation for web agents, in JAX/Flax",
    packages=find_packages(
        include=["tgpo_jax*", "rollout*", "trees*", "recipes*", "experiment*", "serving*", "launch*", "configs*"]
    ),
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
)
