"""WebShop's purchase reward (``web_agent_site/engine/goal.py: get_reward``), as a pure function.

    total = (n_attr_matched + n_option_matched + r_price) / (len(goal_attrs) + len(goal_options) + 1) * r_type

- ``r_price`` = 1 if the purchased price ≤ ``goal["price_upper"]`` (0 if above; a goal without a bound counts 1).
- An attribute matches when it equals one of the product's attributes (case-insensitive; WebShop uses a fuzzy
  token-set ratio > 85, our attribute words are canonical so equality is the same test) or occurs in the product's
  title or description (as WebShop also checks).
- An option matches when a goal option *value* equals one of the chosen option values (case-insensitive), whatever
  its option type, as in WebShop (which compares value lists).
- ``r_type`` (WebShop's rules): ``title_score`` = share of the goal product's type words found among the purchased
  product's type words; ``match`` = query match (the products' type phrases are equal — WebShop compares the search
  query each product was scraped under) or category match (≥ 2 breadcrumb levels shared, order ignored) or
  ``title_score > 0.2``. r_type = 1 if match, else 0.5; then 0.1 if title_score < 0.1, and 0 if title_score == 0.
  **Our choice:** WebShop takes the type words to be the title's nouns (spaCy POS tags); we use our own
  product-type vocabulary instead — the type words of a title are the catalogue's product-type phrases it contains
  (English: matched as whole words; Chinese: as substrings), so no tagger is needed and the result is exact.
  A goal whose title has no type word gets title_score 0.2, as in WebShop.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class Score:
    """WebShop's reward of a purchase (``total``) and its parts: type and price rewards, matched attributes and options,
    title score, and whether the query and category match."""

    total: float
    r_type: float
    r_price: float
    n_attr: int
    n_option: int
    title_score: float
    query_match: bool
    category_match: bool


def type_words(title: str, vocab: Iterable[str]) -> set[str]:
    """The product-type phrases of ``vocab`` that occur in ``title`` (whole words for Latin text)."""
    t = title.lower()
    out = set()
    for phrase in vocab:
        p, word = _phrase(phrase)
        if word is not None:
            if word.search(t):
                out.add(p)
        elif p in t:
            out.add(p)
    return out


@functools.lru_cache(maxsize=None)
def _phrase(phrase: str) -> tuple[str, re.Pattern | None]:
    """A vocabulary phrase lower-cased, with its whole-word pattern when it has Latin letters or digits (compiled
    once: task generation scores thousands of goals against the same vocabulary)."""
    p = phrase.lower()
    return p, re.compile(r"(?<![a-z0-9])" + re.escape(p) + r"(?![a-z0-9])") if re.search(r"[a-z0-9]", p) else None


def _norm(s: str) -> str:
    return " ".join(str(s).lower().split())


def type_reward(purchased: Mapping, goal: Mapping, vocab: Iterable[str]) -> tuple[float, float, bool, bool]:
    """WebShop's type reward of ``purchased`` against ``goal``: (r_type, title score, query match, category match)."""
    vocab = list(vocab)
    query_match = _norm(purchased.get("query", "")) == _norm(goal.get("query", "")) and bool(goal.get("query"))
    pc = {x.strip() for x in purchased["product_category"].split("›")}
    gc = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(pc & gc) >= 2
    desired = type_words(goal["name"], vocab)
    got = type_words(purchased["name"], vocab)
    title_score = 0.2 if not desired else len(desired & got) / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score, query_match, category_match


def webshop_score(purchased: Mapping, chosen_options: Mapping[str, str], goal: Mapping, vocab: Iterable[str]) -> Score:
    """WebShop's reward of buying ``purchased`` (``Product.to_score_dict()``) with ``chosen_options``
    ({option type: value}) against ``goal`` (name, product_category, query, attributes, goal_options, price_upper)."""
    r_type, title_score, qm, cm = type_reward(purchased, goal, vocab)
    bound = goal.get("price_upper")
    r_price = 1.0 if (not bound or bound <= 0 or float(purchased["price"]) <= float(bound)) else 0.0
    p_attrs = {_norm(a) for a in purchased.get("Attributes", ())}
    text = _norm(
        purchased.get("Title", purchased["name"])
        + " "
        + " ".join(purchased.get("BulletPoints", ()))
        + " "
        + purchased.get("Description", "")
    )
    g_attrs = list(goal.get("attributes", ()))
    n_attr = sum(1 for a in g_attrs if _norm(a) in p_attrs or _norm(a) in text)
    g_opts = goal.get("goal_options", {})
    g_vals = list(g_opts.values()) if isinstance(g_opts, Mapping) else list(g_opts)
    chosen = {_norm(v) for v in chosen_options.values()}
    n_opt = sum(1 for v in g_vals if _norm(v) in chosen)
    total = (n_attr + n_opt + r_price) / (len(g_attrs) + len(g_vals) + 1) * r_type
    return Score(total, r_type, r_price, n_attr, n_opt, title_score, qm, cm)
