"""Oracle plans and realistic mistakes for the shop's task families, closed loop over an Observation.

What the plans rely on (English names; ``zh`` uses ``locale_zh.LABELS``):
- header on every page: textbox named "Search" (aria-label; placeholder "Search products" accepted too),
  button "Search", links "Home" and "Cart";
- results (``/search``): product links whose ``href`` path is ``/item/<id>``, sort links "Sort: Relevance",
  "Sort: Price low to high", "Sort: Price high to low", "Sort: Rating", pager links "Next >" / "< Prev";
- product page (``/item/<id>``): one combobox per option type named by its label (e.g. "size"; ``value`` = the
  selected option's text, ``options`` = option texts), buttons "Buy Now" and "Add to cart";
- ``/added?item=..``: link "View cart"; ``/cart``: link "Checkout"; ``/checkout``: textboxes "Full name", "Address",
  button "Place order"; ``/order/<n>``: done.

``memory`` holds the plan's commitments: ``item`` / ``options`` (webshop, procedure) or ``items`` + ``added``
(multi_cart). ``mistake`` changes them, and the plan then carries the wrong choice through (a wrong purchase).
"""

from __future__ import annotations

import copy
import re
from urllib.parse import parse_qs, urlsplit

from rollout.core import Command, Observation, Task
from rollout.envs.shop import pages
from rollout.envs.shop.score import webshop_score

STOP = Command("STOP", arg="")


def _url(obs: Observation) -> tuple[str, dict]:
    u = urlsplit(obs.url)
    return u.path, {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}


def _item_of(href: str | None) -> int | None:
    if not href:
        return None
    m = re.fullmatch(r"/item/(\d+)", urlsplit(href).path)
    return int(m.group(1)) if m else None


def _product_links(obs: Observation) -> list:
    return [e for e in obs.elements if e.role == "link" and _item_of(e.href) is not None]


def _one(obs: Observation, role: str, *names: str):
    for n in names:
        found = obs.find(role=role, name=n)
        if found:
            return found[0]
    return None


class Planner:
    """The shop's oracle plans and mistakes for its task families, closed loop over observations (see the module
    docstring)."""

    def __init__(self, env):
        self.env = env
        self.L = pages.labels(env.locale)
        self.cat = env.catalog

    # -------------------------------------------------------------- shared steps
    def search(self, obs: Observation, query: str) -> Command:
        """The next step of searching ``query`` from the current page: go home, type the query, or press Search."""
        box = _one(obs, "textbox", self.L["search"], self.L["search_placeholder"])
        if box is None:
            home = _one(obs, "link", self.L["home"])
            return Command("CLICK", home.id) if home else Command("GO_BACK")
        if (box.value or "") != query:
            return Command("TYPE", box.id, query)
        btn = _one(obs, "button", self.L["search"])
        return Command("CLICK", btn.id) if btn else Command("GO_BACK")

    def to_item(self, obs: Observation, query: str, pid: int) -> Command:
        """From anywhere: search ``query`` and open product ``pid`` (paging to it if needed)."""
        path, qs = _url(obs)
        if path == "/search":
            for e in _product_links(obs):
                if _item_of(e.href) == pid:
                    return Command("CLICK", e.id)
            if qs.get("q", "") == query:
                loc = self.env.searcher.locate(query, pid, qs.get("sort", "relevance"))
                page = int(qs.get("page", "1") or 1)
                if loc is not None and loc[0] != page:
                    link = _one(obs, "link", self.L["next"] if loc[0] > page else self.L["prev"])
                    if link is not None:
                        return Command("CLICK", link.id)
        return self.search(obs, query)

    def option_slug(self, pid: int, name: str) -> str | None:
        """The slug of product ``pid``'s option whose label is ``name`` (case-insensitive), or None."""
        for slug, _ in self.cat[pid].options:
            if self.cat.option_label(slug).strip().lower() == name.strip().lower():
                return slug
        return None

    def on_item(self, obs: Observation, pid: int, options: dict, button: str, memory: dict) -> Command:
        """Set every option the task names, in page order, once per visit, even one that already shows the wanted
        value, then press ``button``. Why every one: whether to choose is then a fact of the task and the page (a
        named option, a combobox not yet set this visit), not a comparison of the combobox's value with the task's,
        which a small model did not learn (docs/method.md §1: 3
        of 55 held-out SELECT steps right when the plan set only the options that differed). The page marks each
        combobox set this visit (``text "chosen"``, ``pages.item``), so a SELECT of the shown value is a change of
        state, not a self-loop."""
        chosen = memory.setdefault("chosen", [])
        for e in obs.elements:
            if e.role != "combobox":
                continue
            slug = self.option_slug(pid, e.name)
            want = options.get(slug) if slug else None
            if want is not None and want in e.options and (e.value != want or slug not in chosen):
                chosen.append(slug)
                return Command("SELECT", e.id, want)
        btn = _one(obs, "button", self.L[button])
        return Command("CLICK", btn.id) if btn else Command("GO_BACK")

    def valid_options(self, pid: int, options: dict) -> dict:
        """The wanted options that product ``pid`` offers (the plan keeps the defaults of the others)."""
        return {s: v for s, v in options.items() if v in self.cat[pid].option_values(s)}

    def would_score(self, task: Task, pid: int, options: dict) -> float:
        """WebShop's score of buying product ``pid`` with ``options`` (defaults for the rest) against the goal."""
        p = self.cat[pid]
        chosen = p.default_options() | self.valid_options(pid, options)
        return webshop_score(p.to_score_dict(), chosen, task.goal, self.cat.type_phrases).total

    @staticmethod
    def page_item(obs: Observation) -> int | None:
        """The product id of the product page the observation shows, or None on another page."""
        m = re.fullmatch(r"/item/(\d+)", _url(obs)[0])
        return int(m.group(1)) if m else None

    # -------------------------------------------------------------- memory
    def init(self, task: Task, memory: dict) -> None:
        """Put the task's commitments into ``memory`` (the target item and options, or the items to add) unless already
        there."""
        g = task.goal
        if task.family == "webshop":
            memory.setdefault("item", int(g["target"]))
            memory.setdefault("options", dict(g["goal_options"]))
        elif task.family == "multi_cart":
            memory.setdefault(
                "items",
                [{"item": int(it["item"]), "title": it["title"], "options": dict(it["options"])} for it in g["items"]],
            )
            memory.setdefault("added", [])

    def observe(self, task: Task, obs: Observation, memory: dict) -> None:
        """Record what the observation proves done (multi_cart: an item's "added" page); a new page starts a new
        visit (the options set on a product page are per visit, ``on_item``)."""
        self.init(task, memory)
        path, qs = _url(obs)
        if memory.get("page") != path:
            memory["page"], memory["chosen"] = path, []
        if task.family == "multi_cart" and path == "/added":
            try:
                pid = int(qs.get("item", "-1"))
            except ValueError:
                return
            opts = {slug: qs.get(slug) for slug, _ in self.cat[pid].options} if pid in self.cat.by_id else {}
            if memory.get("last_added_url") == obs.url:
                return  # the same page observed again
            memory["last_added_url"] = obs.url
            for k, it in enumerate(memory["items"]):
                if (
                    k not in memory["added"]
                    and it["item"] == pid
                    and all(opts.get(s) == it["options"].get(s, vals[0]) for s, vals in self.cat[pid].options)
                ):
                    memory["added"].append(k)
                    break

    # -------------------------------------------------------------- oracle
    def oracle(self, task: Task, obs: Observation, memory: dict) -> Command:
        """The next command of the task's optimal plan from this observation (STOP when done)."""
        self.observe(task, obs, memory)
        path, qs = _url(obs)
        g = task.goal
        if memory.get("pressed") and (path == "/added" or path.startswith("/order/")):
            return STOP  # a committed wrong button (``wrong_button``): the run believes the task is done
        if task.family == "webshop":
            if path.startswith("/order/"):
                return STOP
            pid = memory["item"]
            if self.page_item(obs) == pid:
                return self.on_item(obs, pid, memory["options"], "buy_now", memory)
            return self.to_item(obs, g["search"], pid)
        if task.family == "procedure":
            pid = memory.get("item")
            if path == "/added" and pid is not None and qs.get("item") == str(pid):
                return STOP
            if pid is not None and self.page_item(obs) == pid:
                return self.on_item(obs, pid, {}, "add_to_cart", memory)
            if path == "/search" and qs.get("q", "") == g["query"]:
                sort = memory.get("sort", g["sort"])  # a committed wrong sort (``mistake``) is carried through
                if qs.get("sort", "relevance") != sort:
                    link = _one(obs, "link", self.L[pages.SORT_KEYS[sort]])
                    if link is not None:
                        return Command("CLICK", link.id)
                elif int(qs.get("page", "1") or 1) != 1:
                    link = _one(obs, "link", self.L["prev"])
                    if link is not None:
                        return Command("CLICK", link.id)
                else:
                    links = _product_links(obs)
                    k = int(g["position"])
                    if len(links) >= k:
                        memory["item"] = _item_of(links[k - 1].href)
                        return Command("CLICK", links[k - 1].id)
            return self.search(obs, g["query"])
        if task.family == "multi_cart":
            if path.startswith("/order/"):
                return STOP
            items, added = memory["items"], memory["added"]
            todo = [k for k in range(len(items)) if k not in added]
            if not todo:
                if path == "/checkout":
                    for key, val in (("full_name", g["name"]), ("address", g["address"])):
                        box = _one(obs, "textbox", self.L[key])
                        if box is not None and (box.value or "") != val:
                            return Command("TYPE", box.id, val)
                    btn = _one(obs, "button", self.L["place_order"])
                    if btn is not None:
                        return Command("CLICK", btn.id)
                if path == "/cart":
                    link = _one(obs, "link", self.L["checkout"])
                    if link is not None:
                        return Command("CLICK", link.id)
                link = _one(obs, "link", self.L["view_cart"], self.L["cart"])
                return Command("CLICK", link.id) if link else Command("GO_BACK")
            it = items[todo[0]]
            if self.page_item(obs) == it["item"]:
                return self.on_item(obs, it["item"], it["options"], "add_to_cart", memory)
            return self.to_item(obs, it["title"], it["item"])
        raise ValueError(f"unknown shop task family {task.family!r}")

    # -------------------------------------------------------------- mistakes
    def wrong_button(self, task: Task, obs: Observation, memory: dict, undo: bool) -> Command | None:
        """The other of the product page's two buttons where the plan presses its own: "Add to cart" for webshop's
        "Buy Now", "Buy Now" for procedure's and multi_cart's "Add to cart" (the confusion a trained model makes:
        it presses the button of another family). Undoable in
        webshop (its check reads the first order, not the cart) and procedure (it reads the cart, not the orders); not
        in multi_cart, whose check reads the first order. Undone: the page is loaded again after ``GO_BACK`` (the shop's
        pages are ``no-store``), so the plan starts a new visit and sets the options again; committed: the plan stops on
        the page the press leads to."""
        self.observe(task, obs, memory)
        plan = self.oracle(task, obs, copy.deepcopy(memory))
        own = {"webshop": "buy_now"}.get(task.family, "add_to_cart")
        other = "add_to_cart" if own == "buy_now" else "buy_now"
        btn = obs.by_id(plan.id) if plan.name == "CLICK" and plan.id else None
        if btn is None or btn.role != "button" or btn.name != self.L[own]:
            return None
        wrong = _one(obs, "button", self.L[other])
        if wrong is None or (undo and task.family == "multi_cart"):
            return None
        if undo:
            memory["page"] = None  # the page comes back fresh: a new visit (``observe``)
        else:
            memory["pressed"] = other
        return Command("CLICK", wrong.id)

    def wrong_sort(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A sort link where the plan clicks a product on a results page of a task without a sort (webshop,
        multi_cart): undone at once, so the results page holds the product and the sort as two branches (the held-out
        webshop failures of a trained model sort and go back).
        Procedure tasks sort by plan, and their wrong sort is ``mistake``'s."""
        if task.family not in ("webshop", "multi_cart") or _url(obs)[0] != "/search":
            return None
        self.observe(task, obs, memory)
        plan = self.oracle(task, obs, copy.deepcopy(memory))
        target = obs.by_id(plan.id) if plan.name == "CLICK" and plan.id else None
        if target is None or _item_of(target.href) is None:
            return None
        current = _url(obs)[1].get("sort", "relevance")
        links = [_one(obs, "link", self.L[key]) for s, key in pages.SORT_KEYS.items() if s != current]
        links = [e for e in links if e is not None]
        return Command("CLICK", rng.choice(links).id) if links else None

    def mistake(self, task: Task, obs: Observation, memory: dict, rng) -> Command | None:
        """A realistic wrong choice at this state (another product or option), committing ``memory`` to it; None where
        the state offers none."""
        self.observe(task, obs, memory)
        path, qs = _url(obs)
        fam, g = task.family, task.goal
        if fam == "webshop":
            cur = {"item": memory["item"], "options": memory["options"]}
        elif fam == "multi_cart":
            todo = [k for k in range(len(memory["items"])) if k not in memory["added"]]
            if not todo:
                return None
            cur = memory["items"][todo[0]]
        elif fam == "procedure":
            sort = memory.get("sort", g["sort"])
            if (
                path == "/search"
                and qs.get("q", "") == g["query"]
                and qs.get("sort", "relevance") != sort
                and "sort" not in memory
                and memory.get("item") is None
            ):  # the sort decision: a wrong sort
                k = int(g["position"])  # only sorts under which the k-th item is another product are mistakes
                wrong = [
                    s
                    for s in pages.SORT_KEYS
                    if s not in (g["sort"], qs.get("sort", "relevance"))
                    and self.env.searcher.results(g["query"], s)[k - 1 : k] != [g["target"]]
                ]
                links = [(s, _one(obs, "link", self.L[pages.SORT_KEYS[s]])) for s in wrong]
                links = [(s, e) for s, e in links if e is not None]
                if not links:
                    return None
                s, e = rng.choice(links)
                memory["sort"] = s
                return Command("CLICK", e.id)
            if (
                path == "/search"
                and qs.get("q", "") == g["query"]
                and qs.get("sort", "relevance") == sort
                and int(qs.get("page", "1") or 1) == 1
                and memory.get("item") is None
            ):
                links = _product_links(obs)
                k = int(g["position"])
                wrong = [
                    e
                    for j, e in enumerate(links)
                    if j != k - 1 and _item_of(e.href) != _item_of(links[k - 1].href if len(links) >= k else None)
                ]
                if not wrong:
                    return None
                e = rng.choice(wrong)
                memory["item"] = _item_of(e.href)
                return Command("CLICK", e.id)
            return None
        else:
            return None
        # webshop / multi_cart: a wrong product on a results page, or a wrong option value on the product page
        if path == "/search":
            links = _product_links(obs)
            if not any(_item_of(e.href) == cur["item"] for e in links):
                return None  # the plan is not choosing among products here
            wrong = [e for e in links if _item_of(e.href) != cur["item"]]
            if fam == "webshop":  # only products whose purchase would not satisfy the goal are mistakes
                wrong = [e for e in wrong if self.would_score(task, _item_of(e.href), cur["options"]) < 1.0]
            if not wrong:
                return None
            e = rng.choice(wrong)
            cur["item"] = _item_of(e.href)
            cur["options"] = self.valid_options(cur["item"], cur["options"])
            if fam == "webshop":
                memory["item"], memory["options"] = cur["item"], cur["options"]
            return Command("CLICK", e.id)
        if self.page_item(obs) == cur["item"]:
            boxes = []
            for e in obs.elements:
                if e.role != "combobox":
                    continue
                slug = self.option_slug(cur["item"], e.name)
                if slug is None:
                    continue
                want = cur["options"].get(slug, e.value)
                bad = [o for o in e.options if o != want and o != e.value]
                if bad:
                    boxes.append((e, slug, bad))
            if not boxes:
                return None
            e, slug, bad = rng.choice(boxes)
            v = rng.choice(bad)
            cur["options"][slug] = v
            memory.setdefault("chosen", []).append(slug)
            if fam == "webshop":
                memory["options"] = cur["options"]
            return Command("SELECT", e.id, v)
        return None
