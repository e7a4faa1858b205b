"""Web environments: the embedded shop (default) and MiniWoB++."""
from __future__ import annotations

ENVS = ("shop", "miniwob")


def make_env(name: str, **kwargs):
    """An environment by name; keyword arguments go to its constructor."""
    if name == "shop":
        from rollout.envs.shop.env import ShopEnv
        return ShopEnv(**kwargs)
    if name == "miniwob":
        from rollout.envs.miniwob import MiniWoBEnv
        return MiniWoBEnv(**kwargs)
    raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(ENVS)}")
