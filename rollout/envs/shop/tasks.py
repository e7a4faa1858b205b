"""The shop's task families, seeded, and their checks.

- ``webshop``: a WebShop-style goal drawn from one target product ('i am looking for [<attributes> <type>] with
  <options>, and price lower than <bound> dollars'). The attributes are shown in the target's title, the bracketed
  phrase is the search query (every string a task makes the agent type is bracketed as the command types it:
  ``typed``), and the target is the first result of that query whose title holds every goal attribute (within the
  first three results), so the goal can be met from what the pages show. Checked with WebShop's score
  (``score.py``) on the first line of the first order placed; success = score 1; done once an order is placed.
- ``procedure`` (TGPO style): "Search for [X], sort by S, and add the k-th item to the cart." X is drawn from
  thousands of queries (type, attribute + type, two attributes + type, brand + type, series + type, brand + attribute
  + type). Success = the cart's set of items is exactly {the k-th result of X under S, by the server's own search};
  done stays False (the agent STOPs; optimal_steps counts the STOP).
- ``multi_cart``: 2–3 given products with given options, added to the cart, then checkout with a given name and
  address ('Buy these items in one order: first item [A] with size [M]; second item [B]. Add them to the cart, then
  check out with full name [N] and address [D] and place the order.'). Success = the first order was placed from
  the cart and holds exactly those items+options (quantity 1 each) with that name and address; done once an order
  is placed.

Splits, disjoint in what an agent must generalise over:
- products: a product is a *test* product iff sha1("shop-split-<seed>-<id>") % 6 == 0; every target product of a
  task comes from its split's products;
- strings the agent types: a search query, a full name or an address belongs to the test split iff
  sha1("shop-string-<seed>-<text>") % 5 == 0 (``string_split``); a task uses only its split's strings. Test queries
  are new combinations of words seen in training, so held-out success needs copying, not memorising.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from typing import Sequence

from rollout.core import CheckResult, Task
from rollout.envs.shop import locale_zh
from rollout.envs.shop.score import webshop_score
from rollout.envs.shop.search import PAGE_SIZE

FAMILIES = ("webshop", "procedure", "multi_cart")
FIRST_NAMES_EN = (
    "Alice",
    "James",
    "Maria",
    "Wei",
    "Priya",
    "Tom",
    "Sara",
    "David",
    "Emma",
    "Omar",
    "Lena",
    "Noah",
    "Grace",
    "Lucas",
    "Mia",
    "Ethan",
    "Chloe",
    "Daniel",
    "Aisha",
    "Leo",
    "Nora",
    "Samuel",
    "Yuki",
    "Ivan",
    "Fatima",
    "Oscar",
    "Hannah",
    "Mateo",
    "Zoe",
    "Felix",
)
LAST_NAMES_EN = (
    "Brown",
    "Carter",
    "Lopez",
    "Chen",
    "Patel",
    "Walker",
    "Kim",
    "Miller",
    "Wilson",
    "Haddad",
    "Fischer",
    "Davis",
    "Nguyen",
    "Rossi",
    "Novak",
    "Okafor",
    "Silva",
    "Tanaka",
    "Kowalski",
    "Berg",
    "Moreau",
    "Singh",
    "Larsen",
    "Costa",
    "Ibrahim",
    "Murphy",
    "Schmidt",
    "Ortiz",
    "Meyer",
    "Young",
)
STREETS_EN = (
    "Elm Street",
    "Oak Avenue",
    "Maple Road",
    "Pine Lane",
    "Cedar Court",
    "Birch Way",
    "Willow Drive",
    "Harbor Place",
    "Lake View",
    "Hill Road",
    "River Street",
    "Park Avenue",
    "Mill Lane",
    "Bay Road",
)
TOWNS_EN = (
    "Springfield",
    "Riverton",
    "Lakeside",
    "Hillcrest",
    "Brookfield",
    "Fairview",
    "Greenville",
    "Bayport",
    "Ashford",
    "Milton",
    "Kingston",
    "Newport",
)
PRICE_BOUNDS = (10, 20, 30, 40, 50, 60, 70, 80, 100, 120, 150, 200, 250, 300, 400, 500)
ORDINALS_EN = ("first", "second", "third")
# how an English multi_cart task names its items: "second item [B]" (ordinal, the shop's wording, as the procedure
# family names its rank: "add the second item"), or "item 2 [B]" (number: the wording before it, kept only to re-create
# the tasks a saved model was trained and evaluated on, its policy.json's item_names)
ITEM_NAMES = ("ordinal", "number")
ORDINALS_ZH = ("第一件", "第二件", "第三件")
SORT_WORDS_EN = {
    "price_asc": "sort by price from low to high",
    "price_desc": "sort by price from high to low",
    "rating": "sort by rating",
}
SORT_WORDS_ZH = {"price_asc": "按价格从低到高排序", "price_desc": "按价格从高到低排序", "rating": "按评分排序"}
WEBSHOP_MAX_RANK = 3  # the target is among the first three results: on screen within any prompt budget


def product_split(seed: int, pid: int) -> str:
    """The split (``train`` or ``test``, about one in six) product ``pid`` belongs to for shop seed ``seed``."""
    h = int(hashlib.sha1(f"shop-split-{seed}-{pid}".encode()).hexdigest(), 16)
    return "test" if h % 6 == 0 else "train"


def string_split(seed: int, text: str) -> str:
    """The split a typed string (query, name, address) belongs to."""
    h = int(hashlib.sha1(f"shop-string-{seed}-{' '.join(text.lower().split())}".encode()).hexdigest(), 16)
    return "test" if h % 5 == 0 else "train"


def n_selects(product, options: dict) -> int:
    """SELECT commands on a product page: the oracle sets every option type the task names that the product has,
    default or not (``Planner.on_item``)."""
    return sum(1 for slug, values in product.options if options.get(slug) in values)


def _price_bound(price: float, rng: random.Random) -> float:
    above = [b for b in PRICE_BOUNDS if b > price * 1.05] or [int(price * 1.5) + 1]
    return float(rng.choice(above[:2]))


def _opt_phrase(catalog, options: dict, zh: bool) -> str:
    """``color [red], size [12 oz]``: each value in the brackets of the ``SELECT [id] [value]`` that chooses it, so
    the task, the oracle's thought and the command hold the value as the same tokens (``color: red`` made ``▁red``
    there and ``red`` after the command's ``[``: nothing a copy could carry over). The label before the bracket
    keeps the values of one item apart for a two-token match."""
    if zh:
        return "，".join(f"{catalog.option_label(k)}：{v}" for k, v in options.items())
    return ", ".join(f"{catalog.option_label(k)} [{v}]" for k, v in options.items())


def _title_attrs(product) -> list[str]:
    """The product's attributes that its title shows (the catalogue puts the first one or two there)."""
    title = product.title.lower()
    return [a for a in product.attributes if a.lower() in title]


class TaskMaker:
    """Task lists per split: ``counts[split]`` tasks of each family (fewer where the pool runs out), seeded."""

    def __init__(self, catalog, search, seed: int, n_train: int = 2000, n_test: int = 200, item_names: str = "ordinal"):
        if item_names not in ITEM_NAMES:
            raise ValueError(f"item_names={item_names!r}: expected one of {', '.join(ITEM_NAMES)}")
        self.catalog, self.search, self.seed, self.item_names = catalog, search, seed, item_names
        self.zh = catalog.locale == "zh"
        self.counts = {"train": n_train, "test": n_test}
        self.pools = {s: [p for p in catalog.products if product_split(seed, p.id) == s] for s in ("train", "test")}

    def task_id(self, family: str, split: str, i: int) -> str:
        """The id of task ``i`` of ``family`` in ``split`` (with the locale and a non-zero seed in it)."""
        loc = "-zh" if self.zh else ""
        sd = f"-s{self.seed}" if self.seed else ""
        return f"shop{loc}{sd}-{family}-{split}-{i:04d}"

    def in_split(self, text: str, split: str) -> bool:
        """Whether the typed string ``text`` belongs to ``split``."""
        return string_split(self.seed, text) == split

    def make(self, split: str) -> list[Task]:
        """Every task of ``split``, the families interleaved (any prefix is a mix of families)."""
        fams = [getattr(self, f"_{f}")(split) for f in FAMILIES]
        out = []
        for i in range(max(len(f) for f in fams)):  # interleave: any prefix is a mix of families
            out.extend(f[i] for f in fams if i < len(f))
        return out

    # -------------------------------------------------------------- webshop
    def _webshop(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-webshop-{split}")
        candidates = []  # (product, goal attributes, query, its first results page): the target is findable there
        for p in self.pools[split]:
            shown = _title_attrs(p)
            for k in range(1, len(shown) + 1):
                for attrs in itertools.combinations(shown, k):
                    query = " ".join(list(attrs) + [p.ptype])
                    if not self.in_split(query, split):
                        continue
                    res = self.search.results(query)
                    first = [i for i in res[:10] if all(a.lower() in self.catalog[i].title.lower() for a in attrs)][:1]
                    if first == [p.id] and res.index(p.id) < WEBSHOP_MAX_RANK:
                        candidates.append((p, list(attrs), query, res[:PAGE_SIZE]))
        rng.shuffle(candidates)
        out, n, texts = [], self.counts[split], set()
        for p, attrs, query, page in itertools.islice(itertools.cycle(candidates), 4 * n) if candidates else ():
            if len(out) >= n:
                break
            opts = {slug: rng.choice(values) for slug, values in p.options}
            bound = _price_bound(p.price, rng)
            if self.zh:
                text = f"我想买一款“{query}”"
                if opts:
                    text += "，" + _opt_phrase(self.catalog, opts, True)
                text += f"，价格低于{bound:.2f}元"
            else:
                text = f"i am looking for {typed(query)}"
                if opts:
                    text += " with " + _opt_phrase(self.catalog, opts, False)
                text += f", and price lower than {bound:.2f} dollars"
            goal = {
                "target": p.id,
                "name": p.title,
                "product_category": p.breadcrumb,
                "query": p.ptype,
                "attributes": attrs,
                "goal_options": opts,
                "price_upper": bound,
                "search": query,
            }
            if text in texts or not self._has_decision(p, page, goal):
                continue
            texts.add(text)
            steps = 2 + 1 + n_selects(p, opts) + 1  # TYPE, Search, item link, SELECTs, Buy Now
            out.append(Task(self.task_id("webshop", split, len(out)), "shop", "webshop", text, "/", steps, split, goal))
        return out

    def _has_decision(self, p, page: Sequence[int], goal: dict) -> bool:
        """Whether a wrong choice can fail the goal: an option with another value, or a product on the first results
        page (``page``, product ids) whose purchase scores below 1 (a goal every shown product meets teaches no
        choice). A price over the bound zeroes the price term, so such a product scores below 1 without scoring."""
        if any(len(values) > 1 for slug, values in p.options if slug in goal["goal_options"]):
            return True
        for pid in page:
            q = self.catalog[pid]
            if pid != p.id and (
                q.price > goal["price_upper"]
                or webshop_score(q.to_score_dict(), q.default_options(), goal, self.catalog.type_phrases).total < 1.0
            ):
                return True
        return False

    # -------------------------------------------------------------- procedure
    def procedure_queries(self) -> list[str]:
        """Every procedure query (both splits), in a fixed order."""
        from rollout.envs.shop.catalog import BRANDS, SERIES, TAXONOMY

        tr, qs = self.catalog.tr, []
        for leaf in TAXONOMY:
            t = tr(leaf.ptype)
            qs.append(t)
            qs += [f"{tr(a)} {t}" for a in leaf.attrs]
            qs += [f"{tr(a)} {tr(b)} {t}" for a, b in itertools.combinations(leaf.attrs, 2)]
            qs += [f"{tr(b)} {t}" for b in BRANDS] + [f"{tr(s)} {t}" for s in SERIES]
            qs += [f"{tr(b)} {tr(a)} {t}" for b in BRANDS[::3] for a in leaf.attrs]
        return list(dict.fromkeys(qs))

    def _procedure(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-procedure-{split}")
        queries = [q for q in self.procedure_queries() if self.in_split(q, split)]
        rng.shuffle(queries)
        out, n, seen = [], self.counts[split], set()
        # one (sort, position) per query first, so the first tasks cover as many distinct queries as possible
        for q in itertools.chain(queries, queries, queries):
            if len(out) >= n:
                break
            sort, k = rng.choice(tuple(SORT_WORDS_EN)), rng.randint(1, 3)
            if (q, sort, k) in seen:
                continue
            seen.add((q, sort, k))
            res = self.search.results(q, sort)
            if len(res) < max(k, 5) or product_split(self.seed, res[k - 1]) != split:
                continue
            if self.zh:
                text = f"搜索“{q}”，{SORT_WORDS_ZH[sort]}，并将{ORDINALS_ZH[k - 1]}商品加入购物车。"
            else:
                text = (
                    f"Search for {typed(q)}, {SORT_WORDS_EN[sort]}, and add the {ORDINALS_EN[k - 1]} item to the cart."
                )
            goal = {"query": q, "sort": sort, "position": k, "target": res[k - 1]}
            # TYPE, Search, sort link, item link, Add to cart, STOP
            out.append(Task(self.task_id("procedure", split, len(out)), "shop", "procedure", text, "/", 6, split, goal))
        return out

    # -------------------------------------------------------------- multi_cart
    def people(self, split: str) -> tuple[list[str], list[str]]:
        """Full names and addresses of a split (disjoint strings across splits)."""
        if self.zh:
            names = [a + b for a in locale_zh.SURNAMES for b in locale_zh.GIVEN_NAMES]
            addrs = [f"{c}{r}{n}号" for c in locale_zh.CITIES for r in locale_zh.ROADS for n in (8, 12, 36, 88, 100)]
        else:
            names = [f"{a} {b}" for a in FIRST_NAMES_EN for b in LAST_NAMES_EN]
            addrs = [
                f"{n} {s}, {t}" for n in (3, 7, 12, 16, 48, 95, 120, 220, 301) for s in STREETS_EN for t in TOWNS_EN
            ]
        return [x for x in names if self.in_split(x, split)], [x for x in addrs if self.in_split(x, split)]

    def _multi_cart(self, split: str) -> list[Task]:
        rng = random.Random(f"shop-tasks-{self.seed}-multi_cart-{split}")
        pool = [p for p in self.pools[split] if self.search.locate(p.title, p.id) == (1, 1)]
        names, addrs = self.people(split)
        out, n = [], self.counts[split]
        while len(out) < n:
            k = rng.choice((2, 3))
            ps = rng.sample(pool, k)
            items = [{"item": p.id, "title": p.title, "options": {s: rng.choice(v) for s, v in p.options}} for p in ps]
            name, addr = rng.choice(names), rng.choice(addrs)
            if self.zh:
                parts = [
                    f"（{j + 1}）“{it['title']}”"
                    + (f"，{_opt_phrase(self.catalog, it['options'], True)}" if it["options"] else "")
                    for j, it in enumerate(items)
                ]
                text = (
                    f"请在一个订单中购买以下商品：{'；'.join(parts)}。将它们加入购物车后结算，"
                    f"姓名填写“{name}”，地址填写“{addr}”，然后提交订单。"
                )
            else:
                # "second item [B]" (item_names="number", a saved model's older tasks: "item 2 [B]")
                parts = [
                    (f"{ORDINALS_EN[j]} item " if self.item_names == "ordinal" else f"item {j + 1} ")
                    + typed(it["title"])
                    + (f" with {_opt_phrase(self.catalog, it['options'], False)}" if it["options"] else "")
                    for j, it in enumerate(items)
                ]
                text = (
                    f"Buy these items in one order: {'; '.join(parts)}. Add them to the cart, then check out "
                    f"with full name {typed(name)} and address {typed(addr)} and place the order."
                )
            steps = sum(4 + n_selects(p, it["options"]) for p, it in zip(ps, items)) + 5
            goal = {"items": items, "name": name, "address": addr}
            out.append(
                Task(self.task_id("multi_cart", split, len(out)), "shop", "multi_cart", text, "/", steps, split, goal)
            )
        return out


def typed(text: str) -> str:
    """A string the agent must type, as the instruction writes it: in the brackets of the command that types it
    (``TYPE [id] [text]``). The token before the text is then the same in the task, the thought and the command,
    so a copy can start by induction ("what followed this token before?") instead of by a learned search for the
    right quotation mark among the page's many."""
    return f"[{text}]"


def typed_strings(task: Task, catalog=None) -> dict[str, str]:
    """Text -> kind of every string the task's solution types, each quoted in its instruction, and (with the
    ``catalog``) of the name of every option it sets, as the instruction and the combobox write it ("option")."""
    g = task.goal
    opts = (
        [*g.get("goal_options", {})]
        if task.family == "webshop"
        else [k for it in g.get("items", ()) for k in it["options"]]
        if task.family == "multi_cart"
        else []
    )
    names = {catalog.option_label(k): "option" for k in opts} if catalog is not None else {}
    if task.family == "procedure":
        return {g["query"]: "query"}
    if task.family == "webshop":
        return {g["search"]: "query", **names}
    if task.family == "multi_cart":
        return {**{it["title"]: "title" for it in g["items"]}, g["name"]: "name", g["address"]: "address", **names}
    return {}


# ---------------------------------------------------------------- checks
def progress_key(cart: Sequence, orders: Sequence, family: str | None = None) -> str:
    """Canonical key of a session's task-relevant state: cart lines (sorted) and placed orders. With ``family``, only
    what that family's check reads: webshop the orders (a cart line it never buys does not change its outcome),
    procedure the cart (an order does not), multi_cart both. So a state after an undone wrong button (webshop's
    "Add to cart", procedure's "Buy Now") is the same node as before it (docs/method.md §2's merge guard)."""
    c = ";".join(sorted(ln.key() for ln in cart))
    o = ";".join(
        f"#{od.n}:{od.via}[{','.join(sorted(ln.key() for ln in od.lines))}]"
        f"@{' '.join(od.name.split())}|{' '.join(od.address.split())}"
        for od in orders
    )
    if family == "webshop":
        return f"orders=[{o}]"
    if family == "procedure":
        return f"cart=[{c}]"
    return f"cart=[{c}] orders=[{o}]"


def _same(a: str, b: str) -> bool:
    return " ".join(str(a).split()).lower() == " ".join(str(b).split()).lower()


def check_state(env, task: Task, cart: Sequence, orders: Sequence) -> CheckResult:
    """The task check of ``task`` on a session's cart and orders: success, score and progress key; ``ValueError`` for an
    unknown family."""
    goal, key = task.goal, progress_key(cart, orders, task.family)
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
        ok = od.via == "cart" and want == got and _same(od.name, goal["name"]) and _same(od.address, goal["address"])
        return CheckResult(ok, float(ok), key, True)
    raise ValueError(f"unknown shop task family {task.family!r}")
