"""The embedded web shop: catalogue, BM25 search, HTTP pages and sessions, WebShop score, tasks, checks, oracle.

No browser: HTTP goes through urllib, and the oracle runs against a tiny HTML-form driver (``MiniBrowser``) that
builds Observations the way the harness does (links with href, textboxes / comboboxes named by label, buttons).
"""

from __future__ import annotations

import math
import random
import re
import urllib.error
import urllib.request
from html import escape
from urllib.parse import urlencode, urljoin, urlsplit

import numpy as np
import pytest

from rollout.core import Element, Observation, Task
from rollout.envs.shop import ShopEnv
from rollout.envs.shop.catalog import Catalog
from rollout.envs.shop.score import webshop_score
from rollout.envs.shop.search import BM25Index, tokenize
from rollout.envs.shop.tasks import product_split
from thought_cases import PageReader


@pytest.fixture(scope="module")
def env():
    e = ShopEnv()
    e.start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def env_zh():
    e = ShopEnv(locale="zh", num_products=1000, n_train=30, n_test=10)
    e.start()
    yield e
    e.stop()


# ---------------------------------------------------------------- HTTP helpers
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def fetch(url: str, sid: str | None = None, follow: bool = True):
    """(status, final url, body, headers)."""
    handlers = [] if follow else [_NoRedirect()]
    opener = urllib.request.build_opener(*handlers)
    if sid:
        opener.addheaders = [("Cookie", f"sid={sid}")]
    try:
        with opener.open(url, timeout=10) as r:
            return r.status, r.geturl(), r.read().decode(), r.headers
    except urllib.error.HTTPError as err:
        return err.code, url, err.read().decode(), err.headers


def item_ids(html: str) -> list[int]:
    return [int(m) for m in re.findall(r'<div class="result"><a href="/item/(\d+)', html)]


# ---------------------------------------------------------------- a tiny form-driving "browser"
class MiniBrowser:
    """Just enough of a browser for the shop: GET links and forms, a cookie, a history, and Observations of the
    interactive elements (the page read by thought_cases.PageReader)."""

    def __init__(self, origin: str, sid: str):
        self.origin, self.sid, self.history = origin, sid, []
        self.url = self.nodes = None

    def goto(self, url: str) -> None:
        status, final, body, _ = fetch(urljoin(self.origin, url), self.sid)
        if self.url is not None:
            self.history.append(self.url)
        self.url = final
        p = PageReader()
        p.feed(body)
        self.nodes = [n for n in p.nodes if n["kind"] in ("link", "button", "input", "select")]
        for n in self.nodes:
            if n["kind"] in ("input", "select"):
                n["label"] = n.get("aria") or p.labels.get(n.get("id")) or n.get("ph") or ""

    def observe(self) -> Observation:
        els = []
        for i, n in enumerate(self.nodes):
            if n["kind"] == "link":
                els.append(Element(str(i), "link", n["text"].strip(), href=urljoin(self.url, n["href"])))
            elif n["kind"] == "button":
                els.append(Element(str(i), "button", n["text"].strip()))
            elif n["kind"] == "input":
                els.append(Element(str(i), "textbox", n["label"], value=n["value"]))
            elif n["kind"] == "select":
                els.append(Element(str(i), "combobox", n["label"], value=n["value"], options=tuple(n["options"])))
        return Observation(self.url, "", "", tuple(els))

    def do(self, cmd) -> None:
        if cmd.name == "GO_BACK":
            self.goto(self.history.pop())
            self.history.pop()
            return
        n = self.nodes[int(cmd.id)]
        if cmd.name == "TYPE":
            assert n["kind"] == "input"
            n["value"] = cmd.arg
        elif cmd.name == "SELECT":
            assert n["kind"] == "select" and cmd.arg in n["options"]
            n["value"] = cmd.arg
        elif cmd.name == "CLICK" and n["kind"] == "link":
            self.goto(n["href"])
        elif cmd.name == "CLICK" and n["kind"] == "button":
            form = n["form"]
            fields = [(f["name"], f["value"]) for f in form["fields"] if f.get("name")]
            self.goto((n["formaction"] or form["action"]) + "?" + urlencode(fields))
        else:
            raise AssertionError(f"cannot do {cmd}")


def run_oracle(env, task: Task, key: str, mistake_rng=None, max_steps: int = 60, commands: list | None = None):
    sid = env.new_session(key)
    b = MiniBrowser(env.origin, sid)
    b.goto(task.start_path)
    memory, steps, mistaken = {}, 0, False
    while steps < max_steps:
        obs = b.observe()
        cmd = None
        if mistake_rng is not None and not mistaken:
            cmd = env.mistake(task, obs, memory, mistake_rng)
            mistaken = cmd is not None
        cmd = cmd or env.oracle(task, obs, memory)
        if commands is not None:
            commands.append(cmd)
        steps += 1
        if cmd.name == "STOP":
            break
        b.do(cmd)
        if env.check_session(task, sid).done:
            break
    return env.check_session(task, sid), steps, mistaken


# ---------------------------------------------------------------- catalogue
def test_catalog_deterministic_unique_and_sized():
    a, b = Catalog(0, 1200), Catalog(0, 1200)
    assert len(a) == 1200 and a.products == b.products
    assert len({p.title for p in a.products}) == 1200
    assert Catalog(1, 1200).products != a.products
    for p in a.products:
        assert len(p.category) == 3 and p.ptype and p.attributes and p.price > 0 and 0 <= p.rating <= 5
        assert 0 <= len(p.options) <= 3 and all(2 <= len(v) <= 6 for _, v in p.options)
    assert any(len(p.options) == 3 for p in a.products) and any(not p.options for p in a.products)
    z = Catalog(0, 1200, "zh")
    assert [(p.id, p.price, len(p.options)) for p in z.products] == [
        (p.id, p.price, len(p.options)) for p in a.products
    ]
    assert len({p.title for p in z.products}) == 1200 and re.search(r"[\u4e00-\u9fff]", z.products[0].title)


# ---------------------------------------------------------------- search
def test_title_query_ranks_the_product_first(env):
    rng = random.Random(0)
    for p in rng.sample(env.catalog.products, 40):
        assert env.search(p.title).ids[0] == p.id


def test_bm25_matches_numpy_reference():
    docs = [
        "red running shoes for men",
        "blue running shoes",
        "organic green tea with jasmine",
        "green running jacket waterproof waterproof",
        "wireless mouse",
    ]
    query = "green running shoes waterproof"
    idx = BM25Index(docs)
    toks = [tokenize(d) for d in docs]
    q = tokenize(query)
    n, avg = len(docs), np.mean([len(t) for t in toks])
    k1, b = 1.5, 0.75
    ref = np.zeros(n)
    for t in set(q):
        df = sum(t in d for d in toks)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(toks):
            tf = d.count(t)
            ref[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
    got = idx.scores(query)
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert idx.rank(query) == [int(i) for i in np.argsort(-ref, kind="stable") if ref[i] > 0]


def test_chinese_search(env_zh):
    p = env_zh.catalog.products[7]
    assert env_zh.search(p.title).ids[0] == p.id
    sp = env_zh.search("防水 跑步鞋")
    assert sp.total > 0 and env_zh.catalog[sp.ids[0]].ptype == "跑步鞋"
    assert tokenize("防水鞋 9", "zh") == ["防", "水", "鞋", "防水", "水鞋", "9"]
    _, _, body, _ = fetch(env_zh.origin + "/search?" + urlencode({"q": "跑步鞋", "sort": "price_asc"}))
    assert "排序：价格从低到高" in body and "下一页 &gt;" in body and "(已排序)</title>" in body


# ---------------------------------------------------------------- HTTP
def test_server_loopback_pagination_and_sort(env):
    assert env.server.server_address[0] == "127.0.0.1" and env.origin.startswith("http://127.0.0.1:")
    q = "running shoes"
    full = env.searcher.results(q)
    assert len(full) == 50
    status, _, body, _ = fetch(env.origin + "/search?" + urlencode({"q": q, "page": 2}))
    assert status == 200 and "Page 2 of 5" in body
    assert item_ids(body) == full[10:20]
    assert "Next &gt;" in body and "&lt; Prev" in body
    assert 'href="/search?q=running+shoes&amp;page=3"' in body
    _, _, body, _ = fetch(env.origin + "/search?q=running+shoes&page=5")
    assert "Next &gt;" not in body and len(item_ids(body)) == 10
    prices = []
    for page in range(1, 6):
        _, _, body, _ = fetch(env.origin + "/search?" + urlencode({"q": q, "sort": "price_asc", "page": page}))
        assert "Sort: Price low to high" in body
        if page < 5:  # sort kept in the pager links
            assert f'href="/search?q=running+shoes&amp;sort=price_asc&amp;page={page + 1}"' in body
        prices += [env.catalog[i].price for i in item_ids(body)]
    assert prices == sorted(prices) and len(prices) == 50
    _, _, body, _ = fetch(env.origin + "/search?" + urlencode({"q": q, "sort": "price_desc"}))
    ps = [env.catalog[i].price for i in item_ids(body)]
    assert ps == sorted(ps, reverse=True)
    _, _, body, _ = fetch(env.origin + "/search?" + urlencode({"q": q, "sort": "rating"}))
    rs = [env.catalog[i].rating for i in item_ids(body)]
    assert rs == sorted(rs, reverse=True)
    assert "<title>Search: running shoes (sorted)</title>" in body  # a sorted list says so in its title
    _, _, body, _ = fetch(env.origin + "/search?" + urlencode({"q": q, "sort": "relevance", "page": 2}))
    assert "<title>Search: running shoes</title>" in body


def _product_with_options(env, n_opts=2):
    return next(p for p in env.catalog.products if len(p.options) == n_opts and len(p.options[0][1]) >= 3)


def test_sessions_cart_checkout_order_flow(env):
    p = _product_with_options(env)
    # a request without a sid gets a new session
    status, _, _, headers = fetch(env.origin + "/")
    assert status == 200 and "sid=" in (headers.get("Set-Cookie") or "")
    a, b = env.new_session("flow/a"), env.new_session("flow/b")
    (s1, v1), (s2, v2) = (p.options[0][0], p.options[0][1][2]), (p.options[1][0], p.options[1][1][1])
    status, _, body, _ = fetch(env.origin + f"/item/{p.id}?q=x", a)
    assert status == 200 and "Buy Now" in body and "Add to cart" in body and "Back to search" in body
    assert f'aria-label="{env.catalog.option_label(s1)}"' in body
    # the title says "all options chosen" once every combobox is set (in the browser), at once without options
    assert f"<title>{escape(p.title)}</title>" in body and body.count("all options chosen") == len(p.options)
    bare = next(q for q in env.catalog.products if not q.options)
    _, _, body, _ = fetch(env.origin + f"/item/{bare.id}", a)
    assert f"<title>{escape(bare.title)} (all options chosen)</title>" in body
    status, _, _, headers = fetch(env.origin + "/add?" + urlencode({"item": p.id, s1: v1, s2: v2}), a, follow=False)
    assert status == 303 and headers["Location"] == "/added?" + urlencode({"item": p.id, s1: v1, s2: v2})
    status, url, body, _ = fetch(env.origin + "/add?" + urlencode({"item": p.id, s1: v1, s2: v2}), a)
    assert urlsplit(url).path == "/added" and f"Added {p.title} to your cart" in body.replace("&#x27;", "'")
    assert "View cart" in body and "Continue shopping" in body
    cart, orders = env.server.state.snapshot(a)
    assert len(cart) == 1 and cart[0].qty == 2 and dict(cart[0].options) == {s1: v1, s2: v2} and not orders
    assert env.server.state.snapshot(b) == ((), ())  # isolation
    _, _, body, _ = fetch(env.origin + "/cart", b)
    assert "Your cart is empty" in body
    _, _, body, _ = fetch(env.origin + "/cart", a)
    assert "Remove" in body and "Checkout" in body and "Quantity: 2" in body
    # a bad option value is refused
    assert fetch(env.origin + "/add?" + urlencode({"item": p.id, s1: "nope"}), a)[0] == 400
    _, _, body, _ = fetch(env.origin + "/checkout", a)
    assert 'for="name">Full name' in body and 'for="address">Address' in body and "Place order" in body
    _, url, _, _ = fetch(env.origin + "/place_order?" + urlencode({"name": "", "address": "x"}), a)
    assert url.endswith("/checkout?error=1")
    _, url, body, _ = fetch(env.origin + "/place_order?" + urlencode({"name": "Ann Lee", "address": "1 Road"}), a)
    assert urlsplit(url).path == "/order/1" and 'id="order-confirmation"' in body and a not in url
    cart, orders = env.server.state.snapshot(a)
    assert not cart and orders[0].name == "Ann Lee" and orders[0].lines[0].qty == 2
    _, url, _, _ = fetch(env.origin + "/buy?" + urlencode({"item": p.id}), a)
    assert urlsplit(url).path == "/order/2"
    assert env.server.state.snapshot(a)[1][1].lines[0].options == tuple((s, v[0]) for s, v in p.options)
    assert fetch(env.origin + "/order/1", b)[0] == 404  # another session cannot see it
    fetch(env.origin + "/add?" + urlencode({"item": p.id}), b)
    fetch(env.origin + "/remove?line=0", b)
    assert env.server.state.snapshot(b)[0] == ()
    env.new_session("flow/a")  # reset clears the state under that key
    assert env.server.state.snapshot(a) == ((), ())


# ---------------------------------------------------------------- WebShop score
def test_webshop_score_hand_worked():
    vocab = ["running shoes", "hiking boots", "t-shirt"]
    prod = {
        "name": "Acme Pro Waterproof Running Shoes",
        "product_category": "Clothing › Shoes › Running shoes",
        "query": "running shoes",
        "Attributes": ["waterproof", "breathable"],
        "Description": "light",
        "price": 50,
    }
    goal = {
        "name": "Acme Pro Waterproof Running Shoes",
        "product_category": "Clothing › Shoes › Running shoes",
        "query": "running shoes",
        "attributes": ["waterproof", "breathable"],
        "goal_options": {"size": "9", "color": "blue"},
        "price_upper": 60,
    }
    s = webshop_score(prod, {"size": "9", "color": "blue"}, goal, vocab)
    assert s.total == 1.0 and s.r_type == 1.0
    # right product, wrong size: (a + (o-1) + 1) / (a + o + 1) = (2 + 1 + 1) / 5
    assert webshop_score(prod, {"size": "10", "color": "blue"}, goal, vocab).total == pytest.approx(4 / 5)
    # over the price bound too: (2 + 1 + 0) / 5
    assert webshop_score(prod | {"price": 70}, {"size": "10", "color": "blue"}, goal, vocab).total == pytest.approx(
        3 / 5
    )
    # a boot with one goal attribute (in the title), no option, same top category only: title_score 0 → r_type 0
    boot = {
        "name": "Acme Waterproof Hiking Boots",
        "product_category": "Clothing › Shoes › Hiking boots",
        "query": "hiking boots",
        "Attributes": ["leather"],
        "Description": "",
        "price": 40,
    }
    s = webshop_score(boot, {}, goal, vocab)
    assert s.n_attr == 1 and s.category_match and s.title_score == 0 and s.r_type == 0 and s.total == 0
    # no query / category match, but 1 of the goal's 2 type words: title_score 0.5 > 0.2 → r_type 1
    goal2 = goal | {"name": "Acme Running Shoes And Hiking Boots Set", "product_category": "A › B › C", "query": "set"}
    s = webshop_score(boot, {"size": "9"}, goal2, vocab)
    assert s.title_score == 0.5 and s.r_type == 1.0
    # 1 of 7 type words (0.1 ≤ title_score ≤ 0.2) and no other match → r_type 0.5
    t6 = ["t-shirt"] + [f"type{i}" for i in range(6)]
    goal3 = goal | {"name": "t-shirt " + " ".join(t6[1:]), "product_category": "A › B › C", "query": "q"}
    s = webshop_score(boot | {"name": "plain t-shirt"}, {}, goal3, t6)
    assert s.title_score == pytest.approx(1 / 7) and s.r_type == 0.5
    # (0 attrs: "waterproof" left the title + 0 options + price 1) / 5 * 0.5
    assert s.n_attr == 0 and s.total == pytest.approx((0 + 0 + 1) / 5 * 0.5)


# ---------------------------------------------------------------- tasks
def test_task_splits(env):
    tr, te = env.tasks("train"), env.tasks("test")
    for fam in ("webshop", "procedure", "multi_cart"):
        assert sum(t.family == fam for t in tr) == 2000 and sum(t.family == fam for t in te) == 200
    assert len({t.task_id for t in tr + te}) == len(tr) + len(te) == 6600
    assert len({t.instruction for t in tr}) == len(tr)  # thousands of distinct goals, none repeated
    assert all(t.env == "shop" and t.start_path == "/" for t in tr + te)

    def targets(ts):
        out = set()
        for t in ts:
            out |= {it["item"] for it in t.goal["items"]} if t.family == "multi_cart" else {t.goal["target"]}
        return out

    assert not targets(tr) & targets(te)
    assert all(product_split(0, i) == "test" for i in targets(te))

    def typed(ts):  # every string a task makes the agent type: queries, titles, names, addresses
        out = set()
        for t in ts:
            g = t.goal
            if t.family == "multi_cart":
                out |= {it["title"] for it in g["items"]} | {g["name"], g["address"]}
            else:
                out.add(g["search"] if t.family == "webshop" else g["query"])
        return out

    assert not typed(tr) & typed(te)
    assert len({t.goal["query"] for t in tr if t.family == "procedure"}) >= 1500
    assert len({t.goal["query"] for t in te if t.family == "procedure"}) >= 150
    for t in [t for t in te if t.family == "webshop"][:40]:  # the target is what the pages point to
        res = env.searcher.results(t.goal["search"])
        shown = [i for i in res if all(a.lower() in env.catalog[i].title.lower() for a in t.goal["attributes"])]
        assert shown[0] == t.goal["target"] and res.index(t.goal["target"]) < 3
        assert t.instruction.startswith(f"i am looking for [{t.goal['search']}]")
    # every wanted option is written as its SELECT writes it: "<label> [<value>]"
    for t in [t for t in te if t.family != "procedure"][:60]:
        opts = (
            t.goal["goal_options"].items()
            if t.family == "webshop"
            else [kv for it in t.goal["items"] for kv in it["options"].items()]
        )
        for slug, value in opts:
            assert f"{env.catalog.option_label(slug)} [{value}]" in t.instruction, (t.instruction, slug, value)
    assert [t.to_json() for t in ShopEnv().tasks("test")] == [t.to_json() for t in te]
    assert all(t.optimal_steps >= 12 for t in tr if t.family == "multi_cart")
    assert all(t.optimal_steps == 6 for t in tr if t.family == "procedure")
    assert all(Task.from_json(t.to_json()) == t for t in te[:5]) is not None


# ---------------------------------------------------------------- checks
def test_checks_success_and_failure(env):
    tr = env.tasks("train")
    ws = next(t for t in tr if t.family == "webshop" and len(t.goal["goal_options"]) >= 1)
    g = ws.goal
    p = env.catalog[g["target"]]
    good = dict(g["goal_options"])
    slug = next(iter(good))
    bad = dict(good) | {slug: next(v for v in p.option_values(slug) if v != good[slug])}
    sid = env.new_session("check/ws-good")
    assert env.check_session(ws, sid) == env.check_session(ws, sid) and not env.check_session(ws, sid).done
    fetch(env.origin + "/buy?" + urlencode({"item": p.id, **good}), sid)
    r = env.check_session(ws, sid)
    assert r.success and r.score == 1.0 and r.done
    sid = env.new_session("check/ws-bad")
    fetch(env.origin + "/buy?" + urlencode({"item": p.id, **bad}), sid)
    r = env.check_session(ws, sid)
    n_a, n_o = len(g["attributes"]), len(g["goal_options"])
    assert not r.success and r.done and r.score == pytest.approx((n_a + n_o - 1 + 1) / (n_a + n_o + 1))

    pr = next(t for t in tr if t.family == "procedure")
    target = env.searcher.results(pr.goal["query"], pr.goal["sort"])[pr.goal["position"] - 1]
    other = env.searcher.results(pr.goal["query"], pr.goal["sort"])[pr.goal["position"] % 3]
    sid = env.new_session("check/pr")
    fetch(env.origin + f"/add?item={target}", sid)
    r = env.check_session(pr, sid)
    assert r.success and not r.done
    fetch(env.origin + f"/add?item={other}", sid)
    r2 = env.check_session(pr, sid)
    assert not r2.success and r2.progress != r.progress

    mc = next(t for t in tr if t.family == "multi_cart")
    for variant in ("good", "wrong_option", "missing_item", "wrong_name"):
        sid = env.new_session(f"check/mc-{variant}")
        items = mc.goal["items"][1:] if variant == "missing_item" else mc.goal["items"]
        for it in items:
            opts = dict(it["options"])
            if variant == "wrong_option":
                pp = env.catalog[it["item"]]
                if pp.options:
                    s0 = pp.options[0][0]
                    opts[s0] = next(v for v in pp.option_values(s0) if v != opts[s0])
            fetch(env.origin + "/add?" + urlencode({"item": it["item"], **opts}), sid)
        name = "Someone Else" if variant == "wrong_name" else mc.goal["name"]
        fetch(env.origin + "/place_order?" + urlencode({"name": name, "address": mc.goal["address"]}), sid)
        r = env.check_session(mc, sid)
        assert r.done
        has_opts = any(env.catalog[it["item"]].options for it in mc.goal["items"])
        assert r.success == (variant == "good") or (variant == "wrong_option" and not has_opts)


def test_progress_keys_differ_for_different_carts(env):
    p, q = env.catalog.products[0], env.catalog.products[1]
    keys = []
    for i, adds in enumerate([[], [(p.id, {})], [(q.id, {})], [(p.id, {}), (p.id, {})], [(p.id, {}), (q.id, {})]]):
        sid = env.new_session(f"progress/{i}")
        for pid, o in adds:
            fetch(env.origin + "/add?" + urlencode({"item": pid, **o}), sid)
        keys.append(env.progress(sid))
    pp = _product_with_options(env)
    for j, v in enumerate(pp.options[0][1][1:3]):
        sid = env.new_session(f"progress/opt{j}")
        fetch(env.origin + "/add?" + urlencode({"item": pp.id, pp.options[0][0]: v}), sid)
        keys.append(env.progress(sid))
    assert len(set(keys)) == len(keys)
    sid = env.new_session("progress/order")
    fetch(env.origin + f"/add?item={p.id}", sid)
    before = env.progress(sid)
    fetch(env.origin + "/place_order?" + urlencode({"name": "A", "address": "B"}), sid)
    assert env.progress(sid) != before and env.progress(sid) != keys[0]


def test_a_familys_progress_key_holds_only_what_its_check_reads(env):
    """The merge guard's key (check_state's progress): webshop's ignores the cart, procedure's the orders."""
    tasks = {f: next(t for t in env.tasks("train") if t.family == f) for f in ("webshop", "procedure", "multi_cart")}
    p = env.catalog.products[0]
    sid = env.new_session("progress/family")
    before = {f: env.check_session(t, sid).progress for f, t in tasks.items()}
    fetch(env.origin + f"/add?item={p.id}", sid)  # a cart line
    after_add = {f: env.check_session(t, sid).progress for f, t in tasks.items()}
    fetch(env.origin + f"/buy?item={p.id}", sid)  # an order
    after_buy = {f: env.check_session(t, sid).progress for f, t in tasks.items()}
    assert after_add["webshop"] == before["webshop"] != after_buy["webshop"]
    assert before["procedure"] != after_add["procedure"] == after_buy["procedure"]
    assert len({before["multi_cart"], after_add["multi_cart"], after_buy["multi_cart"]}) == 3


def test_essential_query_params(env):
    e = env.essential_query_params()
    assert list(e["/search"]) == ["q", "sort", "page"] and "item" in e["/added"] and "size" in e["/added"]
    assert e["/item/*"] == []


# ---------------------------------------------------------------- oracle and mistakes (no browser)
@pytest.mark.parametrize("locale", ["en", "zh"])
def test_oracle_reaches_success_in_optimal_steps(env, env_zh, locale):
    e = env if locale == "en" else env_zh
    for split in ("train", "test"):
        ts = e.tasks(split)
        for fam in ("webshop", "procedure", "multi_cart"):
            for t in [t for t in ts if t.family == fam][:4]:
                r, steps, _ = run_oracle(e, t, f"oracle/{t.task_id}")
                assert r.success, (t.task_id, r)
                assert steps == t.optimal_steps, (t.task_id, steps, t.optimal_steps)


def test_oracle_sets_every_named_option_once_even_a_default(env):
    """The plan chooses each option the task names once per product-page visit, in page order, also when the
    combobox already shows the wanted value (``Planner.on_item``): choosing is then a fact of the task and the page."""
    checked = 0
    for t in [t for t in env.tasks("train") if t.family == "webshop"][:40]:
        p = env.catalog[int(t.goal["target"])]
        opts = t.goal["goal_options"]
        if not any(opts.get(slug) == values[0] for slug, values in p.options):
            continue  # no named option that is already the default
        cmds: list = []
        r, _, _ = run_oracle(env, t, f"every-option/{t.task_id}", commands=cmds)
        assert r.success, t.task_id
        selects = [c.arg for c in cmds if c.name == "SELECT"]
        assert selects == [opts[slug] for slug, values in p.options if opts.get(slug) in values], t.task_id
        assert cmds[-1].name == "CLICK" and cmds[-2].name == "SELECT", t.task_id  # Buy Now right after the last
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("locale", ["en", "zh"])
def test_mistakes_lead_to_failure(env, env_zh, locale):
    e = env if locale == "en" else env_zh
    rng = random.Random(0)
    for fam in ("webshop", "procedure", "multi_cart"):
        for t in [t for t in e.tasks("train") if t.family == fam][:8]:
            r, steps, mistaken = run_oracle(e, t, f"mistake/{t.task_id}", mistake_rng=rng)
            assert mistaken and not r.success, t.task_id
            # the plan carries the mistake through to the end of the episode (a wrong purchase / cart)
            assert steps <= t.optimal_steps + 1 and (r.done or fam == "procedure"), (t.task_id, steps)


# ---------------------------------------------------------------- limits
def test_sessions_expire_when_idle_and_the_least_recently_used_go_past_the_cap(monkeypatch):
    from rollout.envs.shop import server as srv

    clock = [1000.0]
    monkeypatch.setattr(srv.time, "monotonic", lambda: clock[0])
    st = srv.ShopState(ttl=60.0, max_sessions=3)
    a, b = st.new("a"), st.new("b")
    clock[0] += 30
    assert st.touch(a)  # a used at 1030, b last at 1000
    clock[0] += 40  # 1070: b idle 70 s > ttl, a idle 40 s
    st.new("c")
    assert set(st.sessions) == {"a", "c"} and not st.touch(b)
    st.new("d")
    st.new("e")  # the cap: a (least recently used) goes
    assert list(st.sessions) == ["c", "d", "e"]


def test_shop_refuses_bad_bodies_at_once(env):
    import time

    import load_helpers as lh

    host, port = env.server.server_address[:2]
    for length, status in (("-1", 400), ("1000000000000", 413), ("abc", 400)):
        t0 = time.perf_counter()
        assert lh.request(host, port, lh.post("/search?q=x", b"", length)) == status
        assert time.perf_counter() - t0 < 5
    assert lh.request(host, port, lh.post("/search?q=x", b"a=1")) == 200  # a real form body is read and ignored


@pytest.mark.slow  # a load test: the slow tier
def test_shop_under_load_answers_every_request_and_returns_to_baseline(env):
    import threading

    import load_helpers as lh

    host, port = env.server.server_address[:2]
    mix = [
        lh.get("/"),
        lh.get("/search?q=running+shoes&sort=price_asc"),
        lh.get("/item/1"),
        lh.get("/item/999999"),
        lh.get("/add?item=abc"),
        lh.get("/search?page=x"),
        lh.post("/search?q=x", b"", "-1"),
        lh.post("/", b"", "1000000000000"),
        b"GARBAGE\r\n\r\n",
        lh.get("/../../etc/passwd"),
    ]
    lh.hammer(host, port, mix * 5, connections=10)
    threads0, rss0, sessions0 = threading.active_count(), lh.rss_mb(), len(env.server.state.sessions)
    codes = lh.hammer(host, port, (mix * 200)[:2000], connections=50)
    assert sum(codes.values()) == 2000 and set(codes) <= {200, 303, 400, 404, 413}, codes
    assert lh.settle(threads0) <= 0
    assert lh.rss_mb() - rss0 < 100, (rss0, lh.rss_mb())
    assert len(env.server.state.sessions) - sessions0 <= 2000  # one per cookie-less request, freed by expiry
