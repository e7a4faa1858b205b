"""Search: BM25 ranking through the maintained ``bm25s`` library over our own tokens, then sort and paginate.

Tokens: English text → lower-case word tokens (``[a-z0-9]+``) minus a few stop words; Chinese text → for each run
of CJK characters its character unigrams and bigrams, other runs as lower-case word tokens. ``bm25s`` gets the token
lists (``BM25.index(list[list[str]])``, ``BM25.get_scores(list[str])``), Lucene's BM25 variant with k1=1.5, b=0.75.
Relevance results are the documents with a positive score, best first (ties by product id), capped at
``max_results`` (WebShop shows its top 50); the price / rating sorts reorder that same result list (stable, so ties
keep their relevance order).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

import numpy as np

SORTS = ("relevance", "price_asc", "price_desc", "rating")
PAGE_SIZE = 10
STOPWORDS = frozenset(
    {"a", "an", "the", "and", "or", "for", "with", "of", "in", "to", "i", "need", "want", "looking", "am", "is"}
)
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUN = re.compile(rf"[{_CJK}]+|[a-z0-9]+")


def tokenize(text: str, locale: str = "en") -> list[str]:
    """Search tokens of ``text``: lower-case words minus stop words, or for Chinese each CJK run's characters and
    character bigrams."""
    text = text.lower()
    if locale == "zh":
        out: list[str] = []
        for run in _RUN.findall(text):
            if re.match(rf"[{_CJK}]", run):
                out.extend(run)
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
            else:
                out.append(run)
        return out
    return [t for t in re.findall(r"[a-z0-9]+", text) if t not in STOPWORDS]


class BM25Index:
    """BM25 over pre-tokenised documents, scored by ``bm25s``."""

    def __init__(self, docs: Sequence[str], locale: str = "en", k1: float = 1.5, b: float = 0.75):
        import bm25s

        self.locale = locale
        self.n = len(docs)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index([tokenize(d, locale) or [""] for d in docs], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document for ``query`` (zeros when it has no tokens)."""
        toks = tokenize(query, self.locale)
        if not toks:
            return np.zeros(self.n, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(toks), dtype=np.float64)

    def rank(self, query: str, limit: int | None = None) -> list[int]:
        """Document indices with a positive score, best first, ties by index."""
        s = self.scores(query)
        pos = np.nonzero(s > 0)[0]
        if limit and len(pos) > limit:  # only scores near the top can rank: rounding moves a score by <= 5e-7
            kth = np.partition(s[pos], len(pos) - limit)[len(pos) - limit]  # the limit-th largest
            pos = pos[s[pos] >= kth - 1e-5]
        idx = [int(i) for i in pos]
        idx.sort(key=lambda i: (-round(float(s[i]), 6), i))
        return idx[:limit] if limit else idx


@dataclasses.dataclass(frozen=True)
class SearchPage:
    """One page of search results: the query, sort, page number, page count, total results and the product ids shown."""

    query: str
    sort: str
    page: int  # 1-based, clamped to [1, num_pages]
    num_pages: int  # ≥ 1
    total: int  # results over all pages
    ids: tuple[int, ...]  # product ids on this page, in display order


def search_doc(p) -> str:
    """The text a product is indexed under: title, breadcrumb, type and attributes."""
    return " ".join([p.title, " ".join(p.category), p.ptype, " ".join(p.attributes)])


class ShopSearch:
    """The shop's search: BM25 over the catalogue, at most ``max_results`` results, sorted and paged."""

    def __init__(self, catalog, max_results: int = 50):
        self.catalog = catalog
        self.max_results = max_results
        self.index = BM25Index([search_doc(p) for p in catalog.products], catalog.locale)
        self._ids = [p.id for p in catalog.products]

    def results(self, query: str, sort: str = "relevance") -> list[int]:
        """Product ids matching ``query`` in the order ``sort`` (relevance for an unknown sort)."""
        if sort not in SORTS:
            sort = "relevance"
        ids = [self._ids[i] for i in self.index.rank(query, self.max_results)]
        by = self.catalog.by_id
        if sort == "price_asc":
            ids.sort(key=lambda i: by[i].price)
        elif sort == "price_desc":
            ids.sort(key=lambda i: -by[i].price)
        elif sort == "rating":
            ids.sort(key=lambda i: -by[i].rating)
        return ids

    def page(self, query: str, sort: str = "relevance", page: int = 1) -> SearchPage:
        """Page ``page`` (clamped to the pages there are) of the results of ``query`` in the order ``sort``."""
        sort = sort if sort in SORTS else "relevance"
        ids = self.results(query, sort)
        n_pages = max(1, math.ceil(len(ids) / PAGE_SIZE))
        page = min(max(1, int(page)), n_pages)
        return SearchPage(query, sort, page, n_pages, len(ids), tuple(ids[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]))

    def locate(self, query: str, pid: int, sort: str = "relevance") -> tuple[int, int] | None:
        """(page, position on the page, both 1-based) of a product in a query's results, or None."""
        ids = self.results(query, sort)
        if pid not in ids:
            return None
        k = ids.index(pid)
        return k // PAGE_SIZE + 1, k % PAGE_SIZE + 1
