"""The shop's task families, seeded, and their checks.

- ``webshop``: a WebShop-style goal drawn from one target product (1–2 of its attributes, a value for each of its
  option types, a price bound above its price). Checked with WebShop's score (``score.py``) on the first line of the
  first order placed; success = score 1; done once an order is placed.
- ``procedure`` (TGPO style): "Search for X, sort by S, and add the k-th item to the cart." Success = the cart's
  set of items is exactly {the k-th result of X under S, by the server's own search}; done stays False (the agent
  STOPs; optimal_steps counts the STOP).
- ``multi_cart``: 2–3 given products with given options, added to the cart, then checkout with a given name and
  address. Success = the first order was placed from the cart and holds exactly those items+options (quantity 1
  each) with that name and address; done once an order is placed.

Splits: a product is a *test* product iff sha1("shop-split-<seed>-<id>") % 6 == 0; a task's target products all
come from its split's products, so test targets never occur as train targets.
"""
from __future__ import annotations

import hashlib
import random
from typing import Sequence

from rollout.core import CheckResult, Task
from rollout.envs.shop import locale_zh
from rollout.envs.shop.score import webshop_score

FAMILIES = ("webshop", "procedure", "multi_cart")
NAMES_EN = ("Alice Brown", "James Carter", "Maria Lopez", "Wei Chen", "Priya Patel", "Tom Walker", "Sara Kim",
            "David Miller", "Emma Wilson", "Omar Haddad", "Lena Fischer", "Noah Davis")
ADDRESSES_EN = ("12 Elm Street, Springfield", "48 Oak Avenue, Riverton", "7 Maple Road, Lakeside",
                "301 Pine Lane, Hillcrest", "95 Cedar Court, Brookfield", "16 Birch Way, Fairview",
                "220 Willow Drive, Greenville", "5 Harbor Place, Bayport")
PRICE_BOUNDS = (10, 20, 30, 40, 50, 60, 70, 80, 100, 120, 150, 200, 250, 300, 400, 500)
ORDINALS_EN = ("first", "second", "third")
ORDINALS_ZH = ("第一件", "第二件", "第三件")
SORT_WORDS_EN = {"price_asc": "sort by price from low to high", "price_desc": "sort by price from high to low",
                 "rating": "sort by rating"}
SORT_WORDS_ZH = {"price_asc": "按价格从低到高排序", "price_desc": "按价格从高到低排序", "rating": "按评分排序"}


def product_split(seed: int, pid: int) -> str:
    h = int(hashlib.sha1(f"shop-split-{seed}-{pid}".encode()).hexdigest(), 16)
    return "test" if h % 6 == 0 else "train"


def n_selects(product, options: dict) -> int:
    """SELECT commands needed on a product page: option types whose wanted value is not the default."""
    return sum(1 for slug, values in product.options if options.get(slug, values[0]) != values[0])


def _price_bound(price: float, rng: random.Random) -> float:
    above = [b for b in PRICE_BOUNDS if b > price * 1.05] or [int(price * 1.5) + 1]
    return float(rng.choice(above[:2]))


def _opt_phrase(catalog, options: dict, zh: bool) -> str:
    sep = "，" if zh else ", "
    colon = "：" if zh else ": "
    return sep.join(f"{catalog.option_label(k)}{colon}{v}" for k, v in options.items())


class TaskMaker:
    def __init__(self, catalog, search, seed: int, n_train: int = 200, n_test: int = 40):
        self.catalog, self.search, self.seed = catalog, search, seed
        self.zh = catalog.locale == "zh"
        self.counts = {"train": n_train, "test": n_test}
        self.pools = {s: [p for p in catalog.products if product_split(seed, p.id) == s] for s in ("train", "test")}

    def task_id(self, family: str, split: str, i: int) -> str:
        loc = "-zh" if self.zh else ""
        sd = f"-s{self.seed}" if self.seed else ""
        return f"shop{loc}{sd}-{family}-{split}-{i:04d}"

    def make(self, split: str) -> list[Task]:
        fams = [getattr(self, f"_{f}")(split) for f in FAMILIES]
        out = []
        for i in range(max(len(f) for f in fams)):  # interleave: any prefix is a mix of families
            out.extend(f[i] for f in fams if i < len(f))
        return out

    # -------------------------------------------------------------- webshop
    def _webshop(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-webshop-{split}")
        pool = list(self.pools[split])
        rng.shuffle(pool)
        out, n = [], self.counts[split]
        i = 0
        while len(out) < n:
            p = pool[i % len(pool)]
            i += 1
            attrs = rng.sample(p.attributes, rng.randint(1, min(2, len(p.attributes))))
            opts = {slug: rng.choice(values) for slug, values in p.options}
            bound = _price_bound(p.price, rng)
            query = None
            for cand in (" ".join(attrs + [p.ptype]), " ".join(list(p.attributes) + [p.ptype]), p.title):
                loc = self.search.locate(cand, p.id)
                if loc is not None and loc[0] == 1:
                    query = cand
                    break
            if query is None:
                continue
            if self.zh:
                text = f"我想买一款{'、'.join(attrs)}的{p.ptype}"
                if opts:
                    text += "，" + _opt_phrase(self.catalog, opts, True)
                text += f"，价格低于{bound:.2f}元"
            else:
                text = f"i am looking for {', '.join(attrs)} {p.ptype}"
                if opts:
                    text += " with " + _opt_phrase(self.catalog, opts, False)
                text += f", and price lower than {bound:.2f} dollars"
            goal = {"target": p.id, "name": p.title, "product_category": p.breadcrumb, "query": p.ptype,
                    "attributes": attrs, "goal_options": opts, "price_upper": bound, "search": query}
            steps = 2 + 1 + n_selects(p, opts) + 1  # TYPE, Search, item link, SELECTs, Buy Now
            out.append(Task(self.task_id("webshop", split, len(out)), "shop", "webshop", text, "/", steps, split,
                            goal))
        return out

    # -------------------------------------------------------------- procedure
    def _procedure_queries(self) -> list[str]:
        qs = []
        from rollout.envs.shop.catalog import TAXONOMY
        tr = self.catalog.tr
        for leaf in TAXONOMY:
            qs.append(tr(leaf.ptype))
            qs.extend(f"{tr(a)} {tr(leaf.ptype)}" for a in leaf.attrs)
        return qs

    def _procedure(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-procedure-{split}")
        combos = [(q, s, k) for q in self._procedure_queries() for s in SORT_WORDS_EN for k in (1, 2, 3)]
        rng.shuffle(combos)
        out, n = [], self.counts[split]
        for q, sort, k in combos:
            if len(out) >= n:
                break
            res = self.search.results(q, sort)
            if len(res) < max(k, 5) or product_split(self.seed, res[k - 1]) != split:
                continue
            if self.zh:
                text = f"搜索“{q}”，{SORT_WORDS_ZH[sort]}，并将{ORDINALS_ZH[k - 1]}商品加入购物车。"
            else:
                text = f"Search for \"{q}\", {SORT_WORDS_EN[sort]}, and add the {ORDINALS_EN[k - 1]} item to the cart."
            goal = {"query": q, "sort": sort, "position": k, "target": res[k - 1]}
            # TYPE, Search, sort link, item link, Add to cart, STOP
            out.append(Task(self.task_id("procedure", split, len(out)), "shop", "procedure", text, "/", 6, split,
                            goal))
        return out

    # -------------------------------------------------------------- multi_cart
    def _multi_cart(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-multi_cart-{split}")
        pool = [p for p in self.pools[split] if self.search.locate(p.title, p.id) == (1, 1)]
        names, addrs = (locale_zh.NAMES, locale_zh.ADDRESSES) if self.zh else (NAMES_EN, ADDRESSES_EN)
        out, n = [], self.counts[split]
        while len(out) < n:
            k = rng.choice((2, 3))
            ps = rng.sample(pool, k)
            items = [{"item": p.id, "title": p.title, "options": {s: rng.choice(v) for s, v in p.options}}
                     for p in ps]
            name, addr = rng.choice(names), rng.choice(addrs)
            if self.zh:
                parts = [f"（{j + 1}）“{it['title']}”" + (f"，{_opt_phrase(self.catalog, it['options'], True)}"
                                                        if it["options"] else "") for j, it in enumerate(items)]
                text = (f"请在一个订单中购买以下商品：{'；'.join(parts)}。将它们加入购物车后结算，"
                        f"姓名填写“{name}”，地址填写“{addr}”，然后提交订单。")
            else:
                parts = [f"({j + 1}) \"{it['title']}\"" + (f" with {_opt_phrase(self.catalog, it['options'], False)}"
                                                         if it["options"] else "") for j, it in enumerate(items)]
                text = (f"Buy these items in one order: {'; '.join(parts)}. Add them to the cart, then check out "
                        f"with full name \"{name}\" and address \"{addr}\" and place the order.")
            steps = sum(4 + n_selects(p, it["options"]) for p, it in zip(ps, items)) + 5
            goal = {"items": items, "name": name, "address": addr}
            out.append(Task(self.task_id("multi_cart", split, len(out)), "shop", "multi_cart", text, "/", steps,
                            split, goal))
        return out


# ---------------------------------------------------------------- checks
def progress_key(cart: Sequence, orders: Sequence) -> str:
    """Canonical key of a session's task-relevant state: cart lines (sorted) and placed orders."""
    c = ";".join(sorted(ln.key() for ln in cart))
    o = ";".join(f"#{od.n}:{od.via}[{','.join(sorted(ln.key() for ln in od.lines))}]"
                 f"@{' '.join(od.name.split())}|{' '.join(od.address.split())}" for od in orders)
    return f"cart=[{c}] orders=[{o}]"


def _same(a: str, b: str) -> bool:
    return " ".join(str(a).split()).lower() == " ".join(str(b).split()).lower()


def check_state(env, task: Task, cart: Sequence, orders: Sequence) -> CheckResult:
    goal, key = task.goal, progress_key(cart, orders)
    if task.family == "webshop":
        if not orders:
            return CheckResult(False, 0.0, key, False)
        line = orders[0].lines[0]
        p = env.catalog[line.item]
        s = webshop_score(p.to_score_dict(), dict(line.options), goal, env.catalog.type_phrases)
        return CheckResult(abs(s.total - 1.0) < 1e-9, float(s.total), key, True)
    if task.family == "procedure":
        res = env.searcher.results(goal["query"], goal["sort"])
        k = int(goal["position"])
        target = res[k - 1] if len(res) >= k else None
        ok = target is not None and {ln.item for ln in cart} == {target}
        return CheckResult(ok, float(ok), key, False)
    if task.family == "multi_cart":
        if not orders:
            return CheckResult(False, 0.0, key, False)
        od = orders[0]
        want = sorted((int(it["item"]), tuple(sorted(it["options"].items())), 1) for it in goal["items"])
        got = sorted((ln.item, tuple(sorted(ln.options)), ln.qty) for ln in od.lines)
        ok = (od.via == "cart" and want == got and _same(od.name, goal["name"])
              and _same(od.address, goal["address"]))
        return CheckResult(ok, float(ok), key, True)
    raise ValueError(f"unknown shop task family {task.family!r}")
