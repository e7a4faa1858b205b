"""HTML of the shop's pages: hermetic (inline CSS, inline event handlers, no script files or external assets), plain
links and GET forms.

Every page has the header: link "Home", the search box (text input, aria-label "Search") with button "Search",
and link "Cart". Names below are the English labels; the ``zh`` locale uses ``locale_zh.LABELS``.
"""

from __future__ import annotations

import json
from html import escape
from urllib.parse import urlencode

from rollout.envs.shop import locale_zh

LABELS_EN = {
    "site": "Web Shop",
    "home": "Home",
    "search": "Search",
    "search_placeholder": "Search products",
    "cart": "Cart",
    "sort_relevance": "Sort: Relevance",
    "sort_price_asc": "Sort: Price low to high",
    "sort_price_desc": "Sort: Price high to low",
    "sort_rating": "Sort: Rating",
    "next": "Next >",
    "prev": "< Prev",
    "page_of": "Page {i} of {n}",
    "results_for": "{n} results for \u201c{q}\u201d",
    "no_results": "No products match \u201c{q}\u201d.",
    "buy_now": "Buy Now",
    "add_to_cart": "Add to cart",
    "back_to_search": "Back to search",
    "price": "Price",
    "rating": "Rating",
    "reviews": "reviews",
    "features": "Features",
    "chosen": "chosen",
    "all_chosen": "all options chosen",
    "sorted": "sorted",
    "description": "Description",
    "added": "Added {title} to your cart",
    "view_cart": "View cart",
    "continue": "Continue shopping",
    "cart_title": "Your cart",
    "cart_empty": "Your cart is empty.",
    "quantity": "Quantity",
    "remove": "Remove",
    "checkout": "Checkout",
    "checkout_title": "Checkout",
    "full_name": "Full name",
    "address": "Address",
    "place_order": "Place order",
    "checkout_error": "Please fill in your full name and address.",
    "order_title": "Order #{n} confirmed",
    "order_thanks": "Thank you for your purchase!",
    "ship_to": "Ship to",
    "back_home": "Back to home",
    "welcome": "Welcome! Search for the product you need.",
    "not_found": "Page not found",
    "bad_request": "Bad request",
    "total": "Total",
    "currency": "$",
}
_CUR = ' aria-current="true"'
SORT_KEYS = {
    "relevance": "sort_relevance",
    "price_asc": "sort_price_asc",
    "price_desc": "sort_price_desc",
    "rating": "sort_rating",
}


def labels(locale: str) -> dict[str, str]:
    """The site's UI strings for ``locale`` (``zh`` or English)."""
    return dict(locale_zh.LABELS) if locale == "zh" else dict(LABELS_EN)


# ---------------------------------------------------------------- URLs (defaults omitted: one URL per page)
def search_url(q: str, sort: str = "relevance", page: int = 1) -> str:
    """The results page URL of query ``q`` in order ``sort`` at page ``page`` (defaults left out)."""
    params = [("q", q)]
    if sort and sort != "relevance":
        params.append(("sort", sort))
    if page and int(page) != 1:
        params.append(("page", str(page)))
    return "/search?" + urlencode(params)


def item_url(pid: int, q: str | None = None, sort: str = "relevance", page: int = 1) -> str:
    """The product page URL of ``pid``, carrying the search it was reached from when ``q`` is given."""
    if q is None:
        return f"/item/{pid}"
    return f"/item/{pid}?" + search_url(q, sort, page).split("?", 1)[1]


def options_query(pid: int, options: dict[str, str], extra: list[tuple[str, str]] | None = None) -> str:
    """The query string of an add / buy request: the item id, its chosen options, then ``extra``."""
    return urlencode([("item", str(pid))] + list(options.items()) + list(extra or []))


# ---------------------------------------------------------------- layout
_CSS = """
body{font-family:sans-serif;margin:0;background:#f6f6f6;color:#222}
header{background:#232f3e;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:bold}
header form{flex:1;display:flex;gap:4px}header input{flex:1;padding:6px;font-size:15px}
button{padding:6px 12px;font-size:14px;cursor:pointer}
main{padding:16px;max-width:960px;margin:auto;background:#fff;min-height:80vh}
.result{border-bottom:1px solid #ddd;padding:8px 0}.result a{font-size:16px;color:#0645ad}
.meta{color:#555;font-size:13px}.price{color:#b12704;font-weight:bold}
.sorts a,.pager a{margin-right:12px}.opt{margin:6px 0}.crumb{color:#555;font-size:13px}
table{border-collapse:collapse}td,th{padding:6px 10px;border-bottom:1px solid #ddd;text-align:left}
.error{color:#b00020}#order-confirmation{font-size:20px;color:#067d62}
"""


def layout(L: dict, title: str, body: str, q: str = "", locale: str = "en") -> str:
    """A whole page: the header (home link, search form, cart link) around ``body``, titled ``title``."""
    return (
        f'<!DOCTYPE html><html lang="{locale}"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<style>{_CSS}</style></head><body><header><a href="/">{escape(L["home"])}</a>'
        f'<form action="/search" method="get" role="search"><input type="text" name="q" '
        f'aria-label="{escape(L["search"])}" placeholder="{escape(L["search_placeholder"])}" '
        f'value="{escape(q)}"><button type="submit">{escape(L["search"])}</button></form>'
        f'<a href="/cart">{escape(L["cart"])}</a></header><main>{body}</main></body></html>'
    )


def money(L: dict, x: float) -> str:
    """A price with the locale's currency sign and two decimals."""
    return f"{L['currency']}{x:.2f}"


def home(L, locale) -> str:
    """The home page."""
    return layout(L, L["site"], f"<h1>{escape(L['site'])}</h1><p>{escape(L['welcome'])}</p>", locale=locale)


def results(L, locale, catalog, sp) -> str:
    """A search results page: sort links, one entry per product of ``sp`` (a ``SearchPage``) and the pager."""
    q = sp.query
    sorts = "".join(
        f'<a href="{escape(search_url(q, s, 1))}"{_CUR if s == sp.sort else ""}>{escape(L[k])}</a>'
        for s, k in SORT_KEYS.items()
    )
    items = []
    for pid in sp.ids:
        p = catalog[pid]
        items.append(
            f'<div class="result"><a href="{escape(item_url(pid, q, sp.sort, sp.page))}">'
            f'{escape(p.title)}</a><div class="meta"><span class="price">{money(L, p.price)}</span> · '
            f"★ {p.rating:.1f}</div></div>"
        )  # what a choice needs; reviews and breadcrumb cost prompt tokens
    pager = []
    if sp.page > 1:
        pager.append(f'<a href="{escape(search_url(q, sp.sort, sp.page - 1))}">{escape(L["prev"])}</a>')
    pager.append(f"<span>{escape(L['page_of'].format(i=sp.page, n=sp.num_pages))}</span>")
    if sp.page < sp.num_pages:
        pager.append(f'<a href="{escape(search_url(q, sp.sort, sp.page + 1))}">{escape(L["next"])}</a>')
    head = escape(L["results_for"].format(n=sp.total, q=q)) if sp.total else escape(L["no_results"].format(q=q))
    body = f'<p>{head}</p><nav class="sorts">{sorts}</nav>{"".join(items)}<nav class="pager">{" ".join(pager)}</nav>'
    # a sorted list says so in its title: the policy's prompt always keeps the title line, and without a word that
    # only a sorted page has, the SFT model did not tell the page after its sort click from the one before it
    # (the step after the sort fitted on 5 of 47 training steps,
    # then 45 of 47)
    title = f"{L['search']}: {q}" + (f" ({L['sorted']})" if sp.sort != "relevance" else "")
    return layout(L, title, body, q=q, locale=locale)


def item(L, locale, catalog, p, q: str | None, sort: str, page: int) -> str:
    """A product page: its options as comboboxes, the Buy Now and Add to cart buttons, features and description. The
    title says when every option has been set this visit."""
    # the page title says when every combobox has been set this visit (a product without options says so at once):
    # the policy's prompt always keeps the title line, the "chosen" marks are text that a long page loses, and without
    # it the SFT model did not tell the product page after its last SELECT from the one before
    done = f"{p.title} ({L['all_chosen']})"
    mark = (
        f"this.nextElementSibling.textContent={json.dumps(L['chosen'])};"
        f"if([...this.form.querySelectorAll('span.chosen')].every(e=>e.textContent))"
        f"document.title={json.dumps(done)}"
    )
    selects = []
    for slug, values in p.options:
        lab = catalog.option_label(slug)
        opts = "".join(
            f'<option value="{escape(v)}"{" selected" if i == 0 else ""}>{escape(v)}</option>'
            for i, v in enumerate(values)
        )
        selects.append(
            f'<div class="opt"><label for="opt-{slug}">{escape(lab)}</label> '
            f'<select id="opt-{slug}" name="{slug}" aria-label="{escape(lab)}" '
            f'onchange="{escape(mark)}">{opts}</select>'
            '<span class="chosen"></span></div>'
        )
    hidden = f'<input type="hidden" name="item" value="{p.id}">'
    if q is not None:
        hidden += f'<input type="hidden" name="q" value="{escape(q)}">'
    back = (
        f'<p><a href="{escape(search_url(q, sort, page))}">{escape(L["back_to_search"])}</a></p>'
        if q is not None
        else ""
    )
    feats = "".join(f"<li>{escape(a)}</li>" for a in p.attributes)
    body = (
        f'{back}<div class="crumb">{escape(p.breadcrumb)}</div><h1>{escape(p.title)}</h1>'
        f'<p>{escape(L["price"])}: <span class="price">{money(L, p.price)}</span></p>'
        f"<p>{escape(L['rating'])}: ★ {p.rating:.1f} ({p.reviews} {escape(L['reviews'])})</p>"
        f'<form action="/buy" method="get">{"".join(selects)}{hidden}'
        f'<button type="submit" formaction="/buy">{escape(L["buy_now"])}</button> '
        f'<button type="submit" formaction="/add">{escape(L["add_to_cart"])}</button></form>'
        f"<h2>{escape(L['features'])}</h2><ul>{feats}</ul>"
        f"<h2>{escape(L['description'])}</h2><p>{escape(p.description)}</p>"
    )
    return layout(L, p.title if p.options else done, body, q=q or "", locale=locale)


def _opts_text(catalog, options: dict) -> str:
    return ", ".join(f"{catalog.option_label(k)}: {v}" for k, v in options.items())


def added(L, locale, catalog, p, options: dict, q: str | None) -> str:
    """The page after adding ``p`` to the cart: its options, a link to the cart and one back to the search."""
    cont = search_url(q) if q else "/"
    body = (
        f"<h1>{escape(L['added'].format(title=p.title))}</h1>"
        + (f"<p>{escape(_opts_text(catalog, options))}</p>" if options else "")
        + f'<p><a href="/cart">{escape(L["view_cart"])}</a></p>'
        f'<p><a href="{escape(cont)}">{escape(L["continue"])}</a></p>'
    )
    return layout(L, L["cart_title"], body, locale=locale)


def cart(L, locale, catalog, lines) -> str:
    """The cart page: a row per cart line with a remove button, the total and a checkout link (or a note that the cart
    is empty)."""
    if not lines:
        body = (
            f"<h1>{escape(L['cart_title'])}</h1><p>{escape(L['cart_empty'])}</p>"
            f'<p><a href="/">{escape(L["continue"])}</a></p>'
        )
        return layout(L, L["cart_title"], body, locale=locale)
    rows = []
    total = 0.0
    for i, ln in enumerate(lines):
        p = catalog[ln.item]
        total += p.price * ln.qty
        rows.append(
            f'<tr><td><a href="{item_url(p.id)}">{escape(p.title)}</a></td>'
            f"<td>{escape(_opts_text(catalog, dict(ln.options)))}</td>"
            f"<td>{escape(L['quantity'])}: {ln.qty}</td><td>{money(L, p.price * ln.qty)}</td>"
            f'<td><form action="/remove" method="get"><input type="hidden" name="line" value="{i}">'
            f'<button type="submit">{escape(L["remove"])}</button></form></td></tr>'
        )
    body = (
        f"<h1>{escape(L['cart_title'])}</h1><table>{''.join(rows)}</table>"
        f'<p>{escape(L["total"])}: <span class="price">{money(L, total)}</span></p>'
        f'<p><a href="/checkout">{escape(L["checkout"])}</a></p>'
        f'<p><a href="/">{escape(L["continue"])}</a></p>'
    )
    return layout(L, L["cart_title"], body, locale=locale)


def checkout(L, locale, catalog, lines, error: bool) -> str:
    """The checkout page: the cart's lines and the name / address form (with an error note when ``error``)."""
    if not lines:
        body = (
            f"<h1>{escape(L['checkout_title'])}</h1><p>{escape(L['cart_empty'])}</p>"
            f'<p><a href="/">{escape(L["back_home"])}</a></p>'
        )
        return layout(L, L["checkout_title"], body, locale=locale)
    items = "".join(
        f"<li>{escape(catalog[ln.item].title)}"
        f"{' (' + escape(_opts_text(catalog, dict(ln.options))) + ')' if ln.options else ''}"
        f" × {ln.qty}</li>"
        for ln in lines
    )
    err = f'<p class="error">{escape(L["checkout_error"])}</p>' if error else ""
    body = (
        f"<h1>{escape(L['checkout_title'])}</h1>{err}<ul>{items}</ul>"
        f'<form action="/place_order" method="get">'
        f'<p><label for="name">{escape(L["full_name"])}</label> '
        f'<input type="text" id="name" name="name"></p>'
        f'<p><label for="address">{escape(L["address"])}</label> '
        f'<input type="text" id="address" name="address"></p>'
        f'<button type="submit">{escape(L["place_order"])}</button></form>'
    )
    return layout(L, L["checkout_title"], body, locale=locale)


def order(L, locale, catalog, n: int, order) -> str:
    """The confirmation page of order ``n``."""
    items = "".join(
        f"<li>{escape(catalog[ln.item].title)}"
        f"{' (' + escape(_opts_text(catalog, dict(ln.options))) + ')' if ln.options else ''}"
        f" × {ln.qty}</li>"
        for ln in order.lines
    )
    ship = (
        f"<p>{escape(L['ship_to'])}: {escape(order.name)}, {escape(order.address)}</p>"
        if order.name or order.address
        else ""
    )
    body = (
        f'<div id="order-confirmation">{escape(L["order_title"].format(n=n))}</div>'
        f"<p>{escape(L['order_thanks'])}</p><ul>{items}</ul>{ship}"
        f'<p><a href="/">{escape(L["continue"])}</a></p>'
    )
    return layout(L, L["order_title"].format(n=n), body, locale=locale)


def message(L, locale, title: str, text: str = "") -> str:
    """A page with a heading, a line of text and a link home."""
    return layout(
        L,
        title,
        f'<h1>{escape(title)}</h1><p>{escape(text)}</p><p><a href="/">{escape(L["back_home"])}</a></p>',
        locale=locale,
    )
