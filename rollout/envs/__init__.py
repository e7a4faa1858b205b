"""Web environments: the embedded shop (default), MiniWoB++, and tasks from a file on your own site."""

from __future__ import annotations

ENVS = ("shop", "miniwob", "tasks")


def make_env(name: str, **kwargs):
    """An environment by name; keyword arguments go to its constructor."""
    if name == "shop":
        from rollout.envs.shop.env import ShopEnv

        return ShopEnv(**kwargs)
    if name == "miniwob":
        from rollout.envs.miniwob import MiniWoBEnv

        return MiniWoBEnv(**kwargs)
    if name == "tasks":
        from rollout.envs.taskfile import TaskFileEnv

        return TaskFileEnv(**kwargs)
    raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(ENVS)}")
