"""The shop's seeded product catalogue.

The structure (categories, product types, attributes, options, prices, ratings) is drawn from ``random.Random(seed)``
in English terms; the Chinese locale renders the very same structure through ``locale_zh.ZH`` (same ids, prices,
option lists), so ``Catalog(seed, n, "en")`` and ``Catalog(seed, n, "zh")`` differ only in their words.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Mapping, Sequence

from rollout.envs.shop import locale_zh

COLORS = ("black", "white", "blue", "red", "green", "gray", "navy", "pink", "beige", "purple")


@dataclasses.dataclass(frozen=True)
class Leaf:
    """A leaf of the shop's taxonomy (English): breadcrumb, product type, attributes, option pools, price range."""

    path: tuple[str, str, str]  # breadcrumb levels, English
    ptype: str  # product-type phrase, English ("running shoes")
    attrs: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option slug, value pool)
    price: tuple[float, float]


def _leaf(path, ptype, attrs, options, price) -> Leaf:
    return Leaf(tuple(path.split(" › ")), ptype, tuple(attrs), tuple((k, tuple(v)) for k, v in options.items()), price)


SHOE_SIZES = ("6", "7", "8", "9", "10", "11", "12")
CLOTH_SIZES = ("XS", "S", "M", "L", "XL", "XXL")

TAXONOMY: tuple[Leaf, ...] = (
    _leaf(
        "Clothing › Shoes › Running shoes",
        "running shoes",
        ["waterproof", "breathable", "lightweight", "non slip", "cushioned", "wide fit"],
        {"size": SHOE_SIZES, "color": COLORS, "width": ("regular", "wide", "extra wide")},
        (35, 140),
    ),
    _leaf(
        "Clothing › Shoes › Hiking boots",
        "hiking boots",
        ["waterproof", "insulated", "leather", "non slip", "ankle support"],
        {"size": SHOE_SIZES, "color": COLORS[:6]},
        (60, 220),
    ),
    _leaf(
        "Clothing › Tops › T-shirts",
        "t-shirt",
        ["cotton", "slim fit", "short sleeve", "moisture wicking", "machine washable"],
        {"size": CLOTH_SIZES, "color": COLORS, "count": ("1 pack", "2 pack", "3 pack", "5 pack")},
        (8, 35),
    ),
    _leaf(
        "Clothing › Outerwear › Rain jackets",
        "rain jacket",
        ["waterproof", "hooded", "packable", "windproof", "lightweight"],
        {"size": CLOTH_SIZES, "color": COLORS},
        (30, 180),
    ),
    _leaf(
        "Clothing › Bottoms › Yoga pants",
        "yoga pants",
        ["high waist", "stretchy", "moisture wicking", "with pockets", "slim fit"],
        {"size": CLOTH_SIZES, "color": COLORS},
        (15, 70),
    ),
    _leaf(
        "Electronics › Audio › Headphones",
        "headphones",
        ["wireless", "noise cancelling", "over ear", "bluetooth", "foldable", "long battery life"],
        {"color": COLORS[:6]},
        (20, 350),
    ),
    _leaf(
        "Electronics › Audio › Bluetooth speakers",
        "bluetooth speaker",
        ["waterproof", "portable", "wireless", "long battery life", "bass boost"],
        {"color": COLORS[:7]},
        (18, 200),
    ),
    _leaf(
        "Electronics › Computer accessories › Keyboards",
        "keyboard",
        ["wireless", "mechanical", "backlit", "ergonomic", "compact"],
        {"color": COLORS[:4], "layout": ("US", "UK", "DE", "FR")},
        (20, 180),
    ),
    _leaf(
        "Electronics › Computer accessories › Computer mice",
        "mouse",
        ["wireless", "ergonomic", "rechargeable", "silent click", "bluetooth"],
        {"color": COLORS[:6]},
        (9, 90),
    ),
    _leaf(
        "Electronics › Phone accessories › Phone cases",
        "phone case",
        ["shockproof", "slim", "clear", "magnetic", "leather"],
        {
            "color": COLORS,
            "model": ("phone 12", "phone 13", "phone 14", "phone 15", "phone 16"),
            "count": ("1 pack", "2 pack"),
        },
        (8, 45),
    ),
    _leaf(
        "Electronics › Phone accessories › Chargers",
        "charger",
        ["fast charging", "usb c", "foldable plug", "compact"],
        {"wattage": ("20W", "30W", "45W", "65W"), "count": ("1 pack", "2 pack", "3 pack")},
        (10, 60),
    ),
    _leaf(
        "Grocery › Beverages › Green tea",
        "green tea",
        ["organic", "decaf", "gluten free", "non gmo", "loose leaf"],
        {"flavor": ("jasmine", "mint", "lemon", "honey", "original"), "count": ("20 bags", "50 bags", "100 bags")},
        (4, 30),
    ),
    _leaf(
        "Grocery › Beverages › Coffee beans",
        "coffee beans",
        ["organic", "dark roast", "fair trade", "whole bean", "low acid"],
        {"flavor": ("vanilla", "hazelnut", "caramel", "original"), "size": ("12 oz", "1 lb", "2 lb", "5 lb")},
        (8, 60),
    ),
    _leaf(
        "Grocery › Snacks › Protein bars",
        "protein bars",
        ["gluten free", "low sugar", "vegan", "high protein", "keto friendly", "non gmo"],
        {
            "flavor": ("chocolate", "peanut butter", "vanilla", "berry", "cookie dough"),
            "count": ("6 pack", "12 pack", "24 pack"),
        },
        (10, 50),
    ),
    _leaf(
        "Grocery › Snacks › Mixed nuts",
        "mixed nuts",
        ["unsalted", "roasted", "organic", "gluten free", "vegan"],
        {"size": ("8 oz", "16 oz", "32 oz"), "flavor": ("sea salt", "honey roasted", "original")},
        (6, 40),
    ),
    _leaf(
        "Grocery › Pantry › Olive oil",
        "olive oil",
        ["extra virgin", "organic", "cold pressed", "non gmo"],
        {"size": ("250 ml", "500 ml", "1 l", "3 l")},
        (7, 55),
    ),
    _leaf(
        "Home & Kitchen › Bedding › Pillows",
        "pillow",
        ["memory foam", "hypoallergenic", "cooling", "machine washable", "firm"],
        {"size": ("standard", "queen", "king"), "count": ("1 pack", "2 pack", "4 pack")},
        (15, 90),
    ),
    _leaf(
        "Home & Kitchen › Bedding › Bed sheets",
        "bed sheets",
        ["cotton", "deep pocket", "wrinkle free", "breathable", "machine washable"],
        {"size": ("twin", "full", "queen", "king"), "color": COLORS},
        (20, 120),
    ),
    _leaf(
        "Home & Kitchen › Kitchen › Water bottles",
        "water bottle",
        ["stainless steel", "insulated", "leak proof", "bpa free", "dishwasher safe"],
        {"size": ("12 oz", "20 oz", "32 oz", "40 oz"), "color": COLORS, "count": ("1 pack", "2 pack", "4 pack")},
        (9, 45),
    ),
    _leaf(
        "Home & Kitchen › Kitchen › Frying pans",
        "frying pan",
        ["non stick", "dishwasher safe", "induction compatible", "oven safe", "granite coated"],
        {"size": ("8 inch", "10 inch", "12 inch")},
        (15, 110),
    ),
    _leaf(
        "Home & Kitchen › Lighting › Desk lamps",
        "desk lamp",
        ["led", "dimmable", "usb charging", "eye caring", "foldable"],
        {"color": COLORS[:5]},
        (14, 80),
    ),
    _leaf(
        "Beauty & Personal Care › Skin care › Face moisturizer",
        "face moisturizer",
        ["fragrance free", "for sensitive skin", "spf 30", "hyaluronic acid", "oil free", "vegan"],
        {"size": ("1.7 oz", "2.5 oz", "4 oz")},
        (8, 65),
    ),
    _leaf(
        "Beauty & Personal Care › Hair care › Shampoo",
        "shampoo",
        ["sulfate free", "paraben free", "for dry hair", "natural", "vegan"],
        {"size": ("8 oz", "12 oz", "16 oz"), "scent": ("lavender", "coconut", "unscented", "citrus")},
        (6, 40),
    ),
    _leaf(
        "Sports & Outdoors › Fitness › Yoga mats",
        "yoga mat",
        ["non slip", "extra thick", "eco friendly", "with carrying strap", "lightweight"],
        {"color": COLORS, "thickness": ("4 mm", "6 mm", "8 mm", "10 mm")},
        (15, 90),
    ),
    _leaf(
        "Sports & Outdoors › Camping › Tents",
        "tent",
        ["waterproof", "easy setup", "lightweight", "windproof"],
        {"capacity": ("2 person", "3 person", "4 person", "6 person"), "color": COLORS[:5]},
        (40, 400),
    ),
)

BRANDS = (
    "Northwind",
    "Arcwell",
    "Bluepeak",
    "Cedarline",
    "Driftwood",
    "Evergreen",
    "Foxglove",
    "Granite",
    "Harborview",
    "Ironbark",
    "Juniper",
    "Kestrel",
    "Lumen",
    "Mapleton",
    "Nimbus",
    "Oakridge",
    "Pinecrest",
    "Quartzite",
    "Redwood",
    "Sierra",
    "Tidewater",
    "Umbra",
    "Vantage",
    "Willowby",
    "Xenon",
    "Yarrow",
    "Zephyr",
    "Aspenly",
    "Birchwood",
    "Coralis",
)
SERIES = (
    "Classic",
    "Pro",
    "Lite",
    "Max",
    "Air",
    "Flex",
    "Prime",
    "Ultra",
    "Sport",
    "Trail",
    "Urban",
    "Nova",
    "Edge",
    "Core",
    "Plus",
    "Go",
    "Zen",
    "Aero",
    "Pulse",
    "Terra",
)
DESC_TAILS = (
    "Designed for everyday use.",
    "Backed by a one year warranty.",
    "A customer favourite.",
    "Carefully checked before shipping.",
    "Great value for the price.",
    "Makes a thoughtful gift.",
)
OPTION_NAMES = (
    "size",
    "color",
    "flavor",
    "count",
    "layout",
    "model",
    "wattage",
    "scent",
    "thickness",
    "capacity",
    "width",
)


def all_terms() -> set[str]:
    """Every English term the catalogue and tasks print (the Chinese table must cover them)."""
    out: set[str] = set(BRANDS) | set(SERIES) | set(DESC_TAILS) | set(OPTION_NAMES)
    for leaf in TAXONOMY:
        out |= set(leaf.path) | {leaf.ptype} | set(leaf.attrs)
        for _, values in leaf.options:
            out |= set(values)
    return out


@dataclasses.dataclass(frozen=True)
class Product:
    """A catalogue product (localised): title, category, type, attributes, options with their values, price, rating,
    reviews, description and brand."""

    id: int
    title: str
    category: tuple[str, ...]  # breadcrumb levels (localised)
    ptype: str  # product-type phrase (localised); WebShop's product "query"
    attributes: tuple[str, ...]  # localised
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option slug, localised values); first value = default
    price: float
    rating: float
    reviews: int
    description: str
    brand: str
    leaf: int  # index into TAXONOMY

    @property
    def breadcrumb(self) -> str:
        """The category levels joined as a breadcrumb."""
        return " › ".join(self.category)

    def option_values(self, slug: str) -> tuple[str, ...]:
        """The values of option ``slug`` (empty when the product has no such option)."""
        return dict(self.options).get(slug, ())

    def default_options(self) -> dict[str, str]:
        """Option slug -> its default (first) value."""
        return {k: v[0] for k, v in self.options}

    def to_score_dict(self) -> dict:
        """The fields WebShop's score reads, under WebShop's names."""
        return {
            "name": self.title,
            "Title": self.title,
            "product_category": self.breadcrumb,
            "query": self.ptype,
            "Attributes": list(self.attributes),
            "Description": self.description,
            "BulletPoints": [],
            "price": self.price,
        }


class Catalog:
    """A deterministic list of products: ``Catalog(seed, n, locale)`` is the same every time."""

    def __init__(self, seed: int = 0, num_products: int = 1200, locale: str = "en"):
        if locale not in ("en", "zh"):
            raise ValueError(f"locale must be 'en' or 'zh', not {locale!r}")
        self.seed, self.locale = seed, locale
        self.tr = (lambda s: locale_zh.ZH.get(s, s)) if locale == "zh" else (lambda s: s)
        self.products: list[Product] = self._build(seed, num_products)
        self.by_id = {p.id: p for p in self.products}
        # product-type vocabulary for the WebShop title score (replaces spaCy's noun tagging)
        self.type_phrases: tuple[str, ...] = tuple(dict.fromkeys(self.tr(leaf.ptype) for leaf in TAXONOMY))

    def __len__(self) -> int:
        return len(self.products)

    def __getitem__(self, pid: int) -> Product:
        return self.by_id[pid]

    def option_label(self, slug: str) -> str:
        """The option's label in the catalogue's locale."""
        return self.tr(slug)

    def _build(self, seed: int, n: int) -> list[Product]:
        rng = random.Random(f"shop-catalog-{seed}")
        tr, zh = self.tr, self.locale == "zh"
        combos = [(b, s) for b in range(len(BRANDS)) for s in range(len(SERIES))]
        used: dict[int, set] = {i: set() for i in range(len(TAXONOMY))}
        products, titles = [], set()
        for pid in range(n):
            li = pid % len(TAXONOMY) if pid < len(TAXONOMY) else rng.randrange(len(TAXONOMY))
            leaf = TAXONOMY[li]
            while True:
                bi, si = rng.choice(combos)
                if (bi, si) not in used[li]:
                    used[li].add((bi, si))
                    break
            brand, series = BRANDS[bi], SERIES[si]
            attrs = rng.sample(leaf.attrs, rng.randint(2, min(4, len(leaf.attrs))))
            n_title_attrs = rng.randint(1, min(2, len(attrs)))
            m = min(3, len(leaf.options))
            n_opt = rng.choice([0] + [j for j in range(1, m + 1) for _ in (0, 1)])  # 0 less often
            opt_types = sorted(rng.sample(range(len(leaf.options)), n_opt))
            options = []
            for oi in opt_types:
                slug, pool = leaf.options[oi]
                k = rng.randint(2, min(6, len(pool)))
                picked = sorted(rng.sample(range(len(pool)), k))
                options.append((slug, tuple(tr(pool[j]) for j in picked)))
            lo, hi = leaf.price
            price = round(rng.uniform(lo, hi), 2)
            rating = round(rng.uniform(2.5, 5.0), 1)
            reviews = rng.randint(3, 5000)
            tail = rng.choice(DESC_TAILS)
            if zh:
                title = " ".join([tr(brand), tr(series)] + [tr(a) for a in attrs[:n_title_attrs]] + [tr(leaf.ptype)])
                desc = f"{tr(brand)}{tr(series)}{tr(leaf.ptype)}：" + "、".join(tr(a) for a in attrs) + "。" + tr(tail)
            else:
                title = " ".join([brand, series] + [_cap(a) for a in attrs[:n_title_attrs]] + [_cap(leaf.ptype)])
                desc = f"Features of the {brand} {series} {leaf.ptype}: {_join_en(attrs)}. {tail}"
            assert title not in titles, title
            titles.add(title)
            products.append(
                Product(
                    id=pid,
                    title=title,
                    category=tuple(tr(x) for x in leaf.path),
                    ptype=tr(leaf.ptype),
                    attributes=tuple(tr(a) for a in attrs),
                    options=tuple(options),
                    price=price,
                    rating=rating,
                    reviews=reviews,
                    description=desc,
                    brand=tr(brand),
                    leaf=li,
                )
            )
        return products


def _cap(phrase: str) -> str:
    return " ".join(w if any(c.isupper() for c in w) else w[:1].upper() + w[1:] for w in phrase.split())


def _join_en(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def option_summary(options: Mapping[str, str], tr=lambda s: s, sep: str = ", ") -> str:
    """``name: value`` pairs of chosen options joined by ``sep``, names passed through ``tr``."""
    return sep.join(f"{tr(k)}: {v}" for k, v in options.items())
