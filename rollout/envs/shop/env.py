"""``ShopEnv``: the embedded web shop (the project's default website) as a rollout ``Environment``."""

from __future__ import annotations

import hashlib
import inspect
from typing import Mapping, Sequence

from rollout.core import CheckResult, Command, Environment, Observation, Task
from rollout.envs.shop.catalog import OPTION_NAMES, Catalog
from rollout.envs.shop.plan import Planner
from rollout.envs.shop.search import SearchPage, ShopSearch
from rollout.envs.shop.server import ShopServer
from rollout.envs.shop.tasks import TaskMaker, check_state, progress_key, typed_strings


class ShopEnv(Environment):
    """A seeded shop of ``num_products`` products served on 127.0.0.1 (``start()`` picks a free port).

    ``catalog``, ``search()`` and ``tasks()`` work without a server or browser; ``reset`` / ``check`` need
    ``start()``. One server serves every episode: an episode's state is the session whose ``sid`` cookie is
    derived from its ``episode_key``.
    """

    name = "shop"

    def __init__(
        self,
        seed: int = 0,
        num_products: int = 1200,
        locale: str = "en",
        n_train: int = 2000,
        n_test: int = 200,
        max_results: int = 50,
        item_names: str = "ordinal",
    ):
        self.seed, self.locale = seed, locale
        self.catalog = Catalog(seed, num_products, locale)
        self.searcher = ShopSearch(self.catalog, max_results=max_results)
        self._maker = TaskMaker(self.catalog, self.searcher, seed, n_train, n_test, item_names)
        self._tasks: dict[str, list[Task]] = {}
        self._server: ShopServer | None = None
        self._planner = Planner(self)

    # -------------------------------------------------------------- serving
    def start(self) -> str:
        """Start the shop's server (idempotent); the origin."""
        if self._server is None:
            self._server = ShopServer(self.catalog, self.searcher, self.locale)
        return self._server.origin

    def stop(self) -> None:
        """Stop the server."""
        if self._server is not None:
            self._server.close()
            self._server = None

    @property
    def origin(self) -> str:
        """The server's origin; ``RuntimeError`` before ``start``."""
        if self._server is None:
            raise RuntimeError("ShopEnv is not started; call start() first")
        return self._server.origin

    @property
    def server(self) -> ShopServer:
        """The running ``ShopServer``; ``RuntimeError`` before ``start``."""
        if self._server is None:
            raise RuntimeError("ShopEnv is not started; call start() first")
        return self._server

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -------------------------------------------------------------- catalogue
    def search(self, query: str, sort: str = "relevance", page: int = 1) -> SearchPage:
        """One page of search results for ``query`` in the given order, as the site shows it."""
        return self.searcher.page(query, sort, page)

    # -------------------------------------------------------------- tasks
    def tasks(self, split: str) -> list[Task]:
        """The tasks of ``split`` (made once, then cached); ``ValueError`` for another split."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        if split not in self._tasks:
            self._tasks[split] = self._maker.make(split)
        return list(self._tasks[split])

    # -------------------------------------------------------------- episodes
    @staticmethod
    def session_id(episode_key: str) -> str:
        """The session id of the episode ``episode_key`` (stable: the same key, the same session)."""
        return hashlib.sha1(f"shop-session:{episode_key}".encode()).hexdigest()

    def new_session(self, episode_key: str) -> str:
        """A fresh, empty session for ``episode_key`` (old state under the same key is dropped)."""
        return self.server.state.new(self.session_id(episode_key))

    async def reset(self, context, page, task: Task, episode_key: str) -> None:
        """A fresh session for the episode, its cookie set in ``context``, and ``page`` at the task's start."""
        sid = self.new_session(episode_key)
        await context.add_cookies([{"name": "sid", "value": sid, "url": self.origin}])
        await page.goto(self.origin + task.start_path, wait_until="domcontentloaded")

    def check_session(self, task: Task, sid: str) -> CheckResult:
        """The task check on session ``sid``'s cart and orders."""
        cart, orders = self.server.state.snapshot(sid)
        return check_state(self, task, cart, orders)

    async def check(self, page, task: Task, episode_key: str) -> CheckResult:
        """The task check on the episode's session."""
        return self.check_session(task, self.session_id(episode_key))

    def progress(self, sid: str) -> str:
        """The progress key of session ``sid``'s cart and orders."""
        return progress_key(*self.server.state.snapshot(sid))

    # -------------------------------------------------------------- plans
    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        """The next command of the task's optimal plan (``Planner.oracle``)."""
        return self._planner.oracle(task, obs, memory)

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A realistic wrong choice at this state, or None (``Planner.mistake``)."""
        return self._planner.mistake(task, obs, memory, rng)

    def wrong_button(self, task: Task, obs: Observation, memory: dict, undo: bool) -> Command | None:
        """A press of the other settling button, or None (``Planner.wrong_button``)."""
        return self._planner.wrong_button(task, obs, memory, undo)

    def wrong_sort(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A click on a sort link where the task asks for no order, or None (``Planner.wrong_sort``)."""
        return self._planner.wrong_sort(task, obs, memory, rng)

    def typed_strings(self, task: Task) -> dict[str, str]:
        """The strings the task's solution types or names, with their kinds."""
        return typed_strings(task, self.catalog)

    def essential_query_params(self) -> Mapping[str, Sequence[str]]:
        """Query parameters that identify a page, per path ("*" matches one path segment):
        ``/search``: q, sort, page (defaults relevance / 1 are omitted from the shop's own links);
        ``/added``: item and the option slugs (q there only feeds "Continue shopping");
        ``/checkout``: error (the form shown again with an error message);
        ``/item/<id>``: none (q/sort/page there only feed "Back to search"); other pages: none."""
        return {
            "/": [],
            "/search": ["q", "sort", "page"],
            "/item/*": [],
            "/added": ["item", *OPTION_NAMES],
            "/cart": [],
            "/checkout": ["error"],
            "/order/*": [],
        }


# The settings that make one shop (``ShopEnv`` kwargs): another seed is another catalogue and other tasks, another
# locale or multi_cart wording other pages and instructions. A run records them (policy.json's ``shop``), so a later
# evaluation or collection rebuilds the shop its model trained on.
SHOP_SETTINGS = ("locale", "seed", "item_names")


def shop_defaults() -> dict:
    """``ShopEnv``'s defaults of ``SHOP_SETTINGS``, read from its signature so that no copy of them can drift."""
    params = inspect.signature(ShopEnv.__init__).parameters
    return {k: params[k].default for k in SHOP_SETTINGS}
