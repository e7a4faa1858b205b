"""The embedded web shop: the project's default website (WebShop-like, with an optional Chinese locale)."""

from __future__ import annotations

from rollout.envs.shop.env import ShopEnv

__all__ = ["ShopEnv"]
