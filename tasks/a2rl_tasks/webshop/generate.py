"""The built-in shop: a seeded catalogue of ~120 products in ten families, and goals written
for them in WebShop's instruction style ("i need a … , and price lower than 40.00 dollars").

Everything comes from `random.Random(seed)`: the same seed gives the same files.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from a2rl_tasks.webshop.sim.catalogue import CATEGORY_SEP, Goal, Product

COLORS = ["black", "white", "navy blue", "grey", "red", "olive green", "beige", "pink"]
PRICE_BUCKETS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0, 150.0, 200.0)
BRANDS = (
    "Alder", "Brightway", "Cobalt & Co", "Dunmore", "Everfield", "Foxglen", "Greyson",
    "Harbor Lane", "Ivory Peak", "Juniper", "Kestrel", "Lumen", "Marlowe", "Northwind",
)  # fmt: skip


def category(*levels: str) -> str:
    return f" {CATEGORY_SEP} ".join(levels)


@dataclass(frozen=True)
class Family:
    query: str
    category: str
    types: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]


FAMILIES: tuple[Family, ...] = (
    Family(
        "hair extensions", category("Beauty & Personal Care", "Hair Care", "Hair Extensions"),
        ("clip in hair extension", "tape in hair extension", "ponytail extension"),
        ("natural looking", "long lasting", "easy to apply", "heat resistant", "tangle free", "human hair"),
        {"color": ("jet black", "dark brown", "medium brown", "honey blonde", "platinum blonde", "auburn"),
         "size": ("14 inch", "18 inch", "22 inch")},
        (15, 60),
    ),
    Family(
        "running shoes", category("Clothing, Shoes & Jewelry", "Shoes", "Athletic", "Running"),
        ("running shoe", "trail running shoe", "walking shoe"),
        ("non slip", "lightweight", "breathable mesh", "memory foam insole", "rubber sole",
         "machine washable"),
        {"color": tuple(COLORS), "size": ("7", "8", "9", "10", "11", "12")},
        (30, 120),
    ),
    Family(
        "t-shirts", category("Clothing, Shoes & Jewelry", "Clothing", "Shirts", "T-Shirts"),
        ("crew neck t-shirt", "v-neck t-shirt", "long sleeve shirt"),
        ("100% cotton", "moisture wicking", "slim fit", "machine wash", "tagless", "relaxed fit"),
        {"color": tuple(COLORS), "size": ("small", "medium", "large", "x-large")},
        (8, 35),
    ),
    Family(
        "coffee", category("Grocery & Gourmet Food", "Beverages", "Coffee"),
        ("ground coffee", "whole bean coffee", "coffee pods"),
        ("organic", "dark roast", "fair trade", "low acid", "decaffeinated", "single origin"),
        {"flavor": ("french vanilla", "hazelnut", "original", "caramel", "mocha"),
         "size": ("12 ounce (pack of 1)", "2 pound (pack of 1)", "12 ounce (pack of 3)")},
        (7, 45),
    ),
    Family(
        "phone cases", category("Cell Phones & Accessories", "Cases, Holsters & Sleeves", "Cases"),
        ("phone case", "wallet phone case", "rugged phone case"),
        ("shockproof", "wireless charging compatible", "slim", "scratch resistant", "kickstand",
         "card holder"),
        {"color": ("black", "clear", "navy blue", "red", "rose gold"),
         "compatible model": ("iphone 13", "iphone 14", "galaxy s22", "pixel 7")},
        (6, 30),
    ),
    Family(
        "candles", category("Home & Kitchen", "Home Decor", "Candles & Holders", "Candles"),
        ("scented candle", "soy wax candle", "candle gift set"),
        ("long burning", "soy wax", "lead free wick", "hand poured", "non toxic", "natural ingredients"),
        {"scent": ("lavender", "vanilla", "eucalyptus", "sea salt", "sandalwood"),
         "size": ("8 oz", "14 oz", "3 pack")},
        (10, 40),
    ),
    Family(
        "headphones", category("Electronics", "Headphones, Earbuds & Accessories", "Headphones"),
        ("wireless headphones", "noise cancelling headphones", "gaming headset"),
        ("active noise cancelling", "long battery life", "bluetooth 5.0", "built in microphone", "foldable",
         "fast charging"),
        {"color": ("black", "white", "navy blue", "rose gold")},
        (20, 150),
    ),
    Family(
        "body lotion", category("Beauty & Personal Care", "Skin Care", "Body", "Moisturizers", "Lotions"),
        ("body lotion", "hand cream", "face moisturizer"),
        ("fragrance free", "sensitive skin", "paraben free", "cruelty free", "hyaluronic acid", "non greasy"),
        {"size": ("1.7 fl oz", "8 fl oz", "16 fl oz"),
         "scent": ("unscented", "shea butter", "coconut", "aloe vera")},
        (5, 35),
    ),
    Family(
        "backpacks", category("Luggage & Travel Gear", "Backpacks", "Laptop Backpacks"),
        ("laptop backpack", "hiking backpack", "travel backpack"),
        ("water resistant", "usb charging port", "anti theft", "padded laptop sleeve", "lightweight",
         "large capacity"),
        {"color": tuple(COLORS)},
        (20, 90),
    ),
    Family(
        "dog food", category("Pet Supplies", "Dogs", "Food", "Dry"),
        ("dry dog food", "puppy food", "dog treats"),
        ("grain free", "high protein", "real chicken", "natural ingredients", "no artificial flavors",
         "small breeds"),
        {"flavor": ("chicken", "beef", "salmon", "lamb"),
         "size": ("4 pound (pack of 1)", "15 pound (pack of 1)", "30 pound (pack of 1)")},
        (12, 70),
    ),
)  # fmt: skip

INSTRUCTIONS = (
    "i need a {type} that is {attrs}{opts}, and price lower than {price:.2f} dollars",
    "i am looking for a {attrs} {type}{opts}, and price lower than {price:.2f} dollars",
    "find me a {type}, {attrs}{opts}, and price lower than {price:.2f} dollars",
    "i want to buy a {attrs} {type}{opts}, and price lower than {price:.2f} dollars",
)


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _product(rng: random.Random, fam: Family, asin: str) -> Product:
    kind = rng.choice(fam.types)
    brand = rng.choice(BRANDS)
    attrs = rng.sample(list(fam.attributes), 3)
    options = {
        name: sorted(rng.sample(list(values), rng.randint(2, min(4, len(values)))), key=list(values).index)
        for name, values in fam.options.items()
    }
    # The leading attribute must not repeat the kind's words ("noise cancelling noise cancelling …").
    kind_words = set(kind.split())
    lead = next((a for a in attrs if not kind_words & set(a.split())), attrs[0])
    rest = [a for a in attrs if a != lead]
    attrs = [lead, *rest]
    title = f"{brand} {attrs[0].title()} {kind.title()} - {attrs[1].capitalize()}, {attrs[2].capitalize()}"
    lo, hi = fam.price
    price = round(rng.uniform(lo, hi), 2)
    return Product(
        asin=asin,
        title=title,
        query=fam.query,
        product_category=fam.category,
        price=price,
        attributes=attrs,
        options=options,
        description=(
            f"The {brand} {kind} is {attrs[0]} and {attrs[1]}. Designed for everyday use; "
            f"available in {', '.join(v for vs in options.values() for v in vs)}."
        ),
        bullet_points=[f"{a.capitalize()}: made with care by {brand}" for a in attrs],
    )


def catalogue(seed: int = 0, per_family: int = 12) -> list[Product]:
    rng = random.Random(f"webshop-catalogue-{seed}")
    taken: set[str] = set()
    return [_product(rng, fam, _asin(rng, taken)) for fam in FAMILIES for _ in range(per_family)]


def secret_products(seed: int, reserved: list[Product], taken: set[str]) -> dict[str, Product]:
    """A new product of the same family for each of `reserved` (by its asin), drawn from `seed`
    with an asin not in `taken`: the built-in shop's held-out targets, which no public catalogue
    holds (`a2rl_tasks.webshop.data.builtin_shop`)."""
    rng = random.Random(f"webshop-heldout-products-{seed}")
    taken = set(taken)
    out: dict[str, Product] = {}
    for p in reserved:
        fam = next(f for f in FAMILIES if (f.query, f.category) == (p.query, p.product_category))
        out[p.asin] = _product(rng, fam, _asin(rng, taken))
    return out


def _kind(product: Product) -> str:
    # The title is "<Brand> <Attr> <Kind> - …": the kind is what the family lists.
    for fam in FAMILIES:
        for kind in fam.types:
            if kind.title() in product.title:
                return kind
    return product.query


def price_upper(price: float) -> float:
    return next((b for b in PRICE_BUCKETS if b > price), float(int(price) + 50))


def goal_for(rng: random.Random, product: Product, goal_id: str) -> Goal:
    attrs = rng.sample(product.attributes, rng.randint(1, 2))
    options = {name: rng.choice(values) for name, values in product.options.items()}
    opts = " and ".join(f"{v} {n}" for n, v in options.items())
    upper = price_upper(product.price)
    text = rng.choice(INSTRUCTIONS).format(
        type=_kind(product), attrs=" and ".join(attrs), opts=f" with {opts}" if opts else "", price=upper
    )
    return Goal(
        id=goal_id, asin=product.asin, instruction=text, attributes=attrs, goal_options=options,
        price_upper=upper,
    )  # fmt: skip
