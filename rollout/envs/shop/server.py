"""The shop's HTTP server: stdlib ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread, state in-process.

URL scheme (all GET):
    /                                   home (search box)
    /search?q=Q[&sort=S][&page=P]       results, 10 a page; S in relevance|price_asc|price_desc|rating
    /item/<id>[?q=Q&sort=S&page=P]      product page (q/sort/page only feed "Back to search")
    /add?item=<id>&<opt>=<v>…[&q=Q]     adds a cart line → 303 /added?item=<id>&<opt>=<v>…[&q=Q]
    /added?item=<id>&<opt>=<v>…         "Added <title> to your cart"
    /buy?item=<id>&<opt>=<v>…           places a one-item order → 303 /order/<n>
    /cart, /remove?line=<i> (→ /cart), /checkout[?error=1], /place_order?name=..&address=.. → 303 /order/<n>
    /order/<n>                          confirmation (id="order-confirmation"); n counts per session from 1
Sessions: cookie ``sid``; a request without a known sid gets a new session (Set-Cookie). A session unused for
``SESSION_TTL`` seconds is freed, and past ``MAX_SESSIONS`` the least recently used go first. The server runs on
``rollout.httpd``'s limits (connections at once, socket timeout, body size).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import threading
import time
from urllib.parse import parse_qs, urlsplit

from rollout.envs.shop import pages
from rollout.envs.shop.search import SORTS
from rollout.httpd import BodyError, BoundedHTTPServer, LimitedHandler

SESSION_TTL = 3600.0  # seconds a session may stay unused (an episode lasts minutes)
MAX_SESSIONS = 20000


@dataclasses.dataclass(frozen=True)
class Line:
    """A cart or order line: product id, chosen options and quantity."""

    item: int
    options: tuple[tuple[str, str], ...]  # (slug, value) in the product's option order
    qty: int = 1

    def key(self) -> str:
        """The line as a canonical string (item, options, quantity)."""
        return f"{self.item}:" + ",".join(f"{k}={v}" for k, v in self.options) + f"x{self.qty}"


@dataclasses.dataclass(frozen=True)
class Order:
    """A placed order: its number, lines, shipping name and address, and whether it came from the cart or Buy Now."""

    n: int
    lines: tuple[Line, ...]
    name: str = ""
    address: str = ""
    via: str = "cart"  # "cart" | "buy_now"


@dataclasses.dataclass
class Session:
    """One session's cart and orders, and when it was last used."""

    cart: list[Line] = dataclasses.field(default_factory=list)
    orders: list[Order] = dataclasses.field(default_factory=list)
    used: float = dataclasses.field(default_factory=time.monotonic)


class ShopState:
    """Sessions by sid, guarded by one lock. ``snapshot`` gives a consistent copy for checks."""

    def __init__(self, ttl: float = SESSION_TTL, max_sessions: int = MAX_SESSIONS):
        self.lock = threading.Lock()
        self.sessions: dict[str, Session] = {}  # insertion order = least recently used first (``touch`` moves)
        self.ttl, self.max_sessions = ttl, max_sessions

    def new(self, sid: str | None = None) -> str:
        """Start an empty session (under ``sid`` when given, replacing any there, else a random id); its id."""
        sid = sid or secrets.token_hex(16)
        with self.lock:
            self._expire()
            self.sessions.pop(sid, None)
            self.sessions[sid] = Session(used=time.monotonic())
        return sid

    def _expire(self) -> None:
        """Drop sessions idle past ``ttl``, then the least recently used down to ``max_sessions - 1`` (lock held)."""
        now = time.monotonic()
        for sid in [k for k, s in self.sessions.items() if now - s.used > self.ttl]:
            del self.sessions[sid]
        while len(self.sessions) >= self.max_sessions:
            del self.sessions[next(iter(self.sessions))]

    def touch(self, sid: str) -> bool:
        """Mark a session used (it moves to the back of the eviction order); False if it is unknown."""
        with self.lock:
            s = self.sessions.pop(sid, None)
            if s is None:
                return False
            s.used = time.monotonic()
            self.sessions[sid] = s
            return True

    def snapshot(self, sid: str) -> tuple[tuple[Line, ...], tuple[Order, ...]]:
        """A consistent copy of session ``sid``'s cart and orders (empty for an unknown session)."""
        with self.lock:
            s = self.sessions.get(sid)
            return ((), ()) if s is None else (tuple(s.cart), tuple(s.orders))

    def add(self, sid: str, line: Line) -> None:
        """Add ``line`` to session ``sid``'s cart, raising the quantity of a line with the same item and options."""
        with self.lock:
            cart = self.sessions[sid].cart
            for i, ln in enumerate(cart):
                if ln.item == line.item and ln.options == line.options:
                    cart[i] = dataclasses.replace(ln, qty=ln.qty + line.qty)
                    return
            cart.append(line)

    def remove(self, sid: str, index: int) -> None:
        """Remove cart line ``index`` of session ``sid`` (an index out of range does nothing)."""
        with self.lock:
            cart = self.sessions[sid].cart
            if 0 <= index < len(cart):
                del cart[index]

    def place(
        self, sid: str, lines: tuple[Line, ...] | None, name: str = "", address: str = "", via: str = "cart"
    ) -> int | None:
        """Place an order of ``lines`` (None = the cart, which is then emptied); returns its number."""
        with self.lock:
            s = self.sessions[sid]
            if lines is None:
                if not s.cart:
                    return None
                lines, s.cart = tuple(s.cart), []
            n = len(s.orders) + 1
            s.orders.append(Order(n, tuple(lines), name, address, via))
            return n


class ShopServer:
    """The shop's HTTP server on a background thread: the pages of ``pages`` over the catalogue, search and session
    state."""

    def __init__(self, catalog, search, locale: str = "en", host: str = "127.0.0.1", port: int = 0):
        self.catalog, self.search, self.locale = catalog, search, locale
        self.L = pages.labels(locale)
        self.state = ShopState()
        shop = self

        class Handler(_Handler):
            server_shop = shop

        self.httpd = BoundedHTTPServer((host, port), Handler, max_connections=256)  # several browsers' pools
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="shop-server", daemon=True)
        self.thread.start()

    @property
    def server_address(self):
        """The bound (host, port)."""
        return self.httpd.server_address

    @property
    def origin(self) -> str:
        """``http://host:port`` of the server."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        """Shut the server down and join its thread."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    # -------------------------------------------------------------- option parsing
    def parse_options(self, p, qs: dict) -> tuple[tuple[str, str], ...] | None:
        """The product's options from the query (missing → default); None if a value is not one of its own."""
        out = []
        for slug, values in p.options:
            v = qs.get(slug, [values[0]])[0]
            if v not in values:
                return None
            out.append((slug, v))
        return tuple(out)


class _Handler(LimitedHandler):
    server_shop: ShopServer
    timeout = 120.0  # a browser's idle keep-alive connection is freed after this
    max_body = 64 << 10  # forms are GET: a POST body is read and ignored

    def log_message(self, *args):  # quiet
        pass

    # -------------------------------------------------------------- plumbing
    def _sid(self) -> tuple[str, bool]:
        st = self.server_shop.state
        for part in (self.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == "sid" and v and st.touch(v):
                return v, False
        return st.new(), True

    def _send(self, status: int, body: str = "", location: str | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if self._new_sid:
            self.send_header("Set-Cookie", f"sid={self._sid_value}; Path=/; HttpOnly; SameSite=Lax")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):  # forms are GET; accept POST the same way (body ignored)
        try:
            self.read_body()
        except BodyError as e:
            self._new_sid = False
            return self._send(e.status, pages.message(self.server_shop.L, self.server_shop.locale, e.message))
        self.do_GET()

    def do_GET(self):
        shop = self.server_shop
        self._sid_value, self._new_sid = self._sid()
        sid = self._sid_value
        L, loc, cat = shop.L, shop.locale, shop.catalog
        u = urlsplit(self.path)
        qs = parse_qs(u.query, keep_blank_values=True)
        g = lambda k, d="": qs.get(k, [d])[0]  # noqa: E731
        path = u.path
        try:
            if path in ("/", "/index.html"):
                return self._send(200, pages.home(L, loc))
            if path == "/search":
                sort = g("sort", "relevance")
                sort = sort if sort in SORTS else "relevance"
                try:
                    page = int(g("page", "1") or 1)
                except ValueError:
                    page = 1
                sp = shop.search.page(g("q"), sort, page)
                return self._send(200, pages.results(L, loc, cat, sp))
            m = re.fullmatch(r"/item/(\d+)", path)
            if m:
                p = cat.by_id.get(int(m.group(1)))
                if p is None:
                    return self._send(404, pages.message(L, loc, L["not_found"]))
                q = qs["q"][0] if "q" in qs else None
                try:
                    page = int(g("page", "1") or 1)
                except ValueError:
                    page = 1
                return self._send(200, pages.item(L, loc, cat, p, q, g("sort", "relevance"), page))
            if path in ("/add", "/buy", "/added"):
                try:
                    p = cat.by_id.get(int(g("item", "-1")))
                except ValueError:
                    p = None
                opts = shop.parse_options(p, qs) if p is not None else None
                if opts is None:
                    return self._send(400, pages.message(L, loc, L["bad_request"]))
                q = g("q") or None
                if path == "/add":
                    shop.state.add(sid, Line(p.id, opts))
                    extra = [("q", q)] if q else []
                    return self._send(303, location="/added?" + pages.options_query(p.id, dict(opts), extra))
                if path == "/buy":
                    n = shop.state.place(sid, (Line(p.id, opts),), via="buy_now")
                    return self._send(303, location=f"/order/{n}")
                return self._send(200, pages.added(L, loc, cat, p, dict(opts), q))
            if path == "/cart":
                cart, _ = shop.state.snapshot(sid)
                return self._send(200, pages.cart(L, loc, cat, cart))
            if path == "/remove":
                try:
                    shop.state.remove(sid, int(g("line", "-1")))
                except ValueError:
                    pass
                return self._send(303, location="/cart")
            if path == "/checkout":
                cart, _ = shop.state.snapshot(sid)
                return self._send(200, pages.checkout(L, loc, cat, cart, error=bool(g("error"))))
            if path == "/place_order":
                name, address = g("name").strip(), g("address").strip()
                if not name or not address:
                    return self._send(303, location="/checkout?error=1")
                n = shop.state.place(sid, None, name, address)
                if n is None:
                    return self._send(303, location="/checkout")
                return self._send(303, location=f"/order/{n}")
            m = re.fullmatch(r"/order/(\d+)", path)
            if m:
                _, orders = shop.state.snapshot(sid)
                n = int(m.group(1))
                if not 1 <= n <= len(orders):
                    return self._send(404, pages.message(L, loc, L["not_found"]))
                return self._send(200, pages.order(L, loc, cat, n, orders[n - 1]))
            return self._send(404, pages.message(L, loc, L["not_found"]))
        except (BrokenPipeError, ConnectionResetError):
            pass
