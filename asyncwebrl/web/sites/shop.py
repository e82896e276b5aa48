"""An online shop: categories with pagination, search, product pages, a cart.

Layouts (LAYOUT; a training site mixes those of variants 1 and 2 aspect by aspect): 1
lists products in a table (8 per page, by name) with categories in the top bar; 2 lists
them as a descriptive list (6 per page, by price) with categories in the sidebar; 3
(test) hides categories behind a "Departments" page, shows a compact table (10 per page,
by code) and puts the specifications before the price, with its own wording ("Item
no.", "Add to basket").
"""

from __future__ import annotations

import dataclasses
import random

from asyncwebrl.web import content
from asyncwebrl.web.html import SearchBox, link, pager, render_page, table
from asyncwebrl.web.site import (
    Fact,
    FactGroup,
    NotFound,
    Request,
    Response,
    Site,
    TaskDraft,
    answer,
    click,
    esc,
    note,
    type_into,
)

CATEGORIES = {  # name: (singular noun, code prefix, price range in dollars)
    "Laptops": ("Laptop", "LP", (450, 2400)),
    "Headphones": ("Headphones", "HP", (25, 420)),
    "Cameras": ("Camera", "CM", (180, 2100)),
    "Monitors": ("Monitor", "MN", (120, 1300)),
    "Keyboards": ("Keyboard", "KB", (20, 260)),
    "Backpacks": ("Backpack", "BP", (30, 240)),
    "Tents": ("Tent", "TN", (60, 890)),
    "Blenders": ("Blender", "BL", (35, 520)),
    "Watches": ("Watch", "WT", (60, 1500)),
    "Phones": ("Phone", "PH", (150, 1400)),
}
COLORS = ["Black", "Silver", "Graphite", "Navy", "Forest Green", "White", "Crimson", "Sand"]
SHOP_NAMES = ["Outfitters", "Market", "Supply Co.", "Depot", "Emporium", "Goods"]


@dataclasses.dataclass
class Product:
    name: str
    code: str
    category: str
    price_cents: int
    weight: str  # "1.4 kg"
    color: str
    warranty: str  # "24 months"
    rating: str  # "4.3"
    stock: int

    @property
    def price(self) -> str:
        return content.money(self.price_cents)


@dataclasses.dataclass(frozen=True)
class Wording:
    code: str
    price: str
    add: str
    cart: str  # the navigation label
    cart_noun: str  # the word in sentences
    search: str
    search_button: str
    prev_next: tuple[str, str]
    quantity: str


WORDING = {
    1: Wording("Product code", "Price", "Add to cart", "Cart", "cart", "Search products", "Search", ("Previous", "Next"), "Quantity"),
    2: Wording("SKU", "Our price", "Add to cart", "Your cart", "cart", "Find a product", "Go", ("< Back", "More >"), "Qty"),
    3: Wording("Item no.", "Cost", "Add to basket", "Basket", "basket", "Search catalogue", "Find", ("Prev", "Next page"), "Amount"),
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The aspects a training site draws one by one from variant 1 or 2 (Site.layout)."""

    frame: str  # html.FRAMES: where the menu and search sit, colours, fonts
    order: str  # listings sorted by "name" | "price" | "code"
    page_size: int  # products per listing page
    listing: str  # "table" (name, price, rating) | "list" (descriptive) | "coded table" (code first)
    departments_page: bool  # categories behind a "Departments" page rather than in the menu
    specs_first: bool  # a product page shows its specifications before the price and buy form


LAYOUT = {
    1: Layout("topbar", "name", 8, "table", departments_page=False, specs_first=False),
    2: Layout("sidebar", "price", 6, "list", departments_page=False, specs_first=False),
    3: Layout("compact-right", "code", 10, "coded table", departments_page=True, specs_first=True),
}
SORT_KEYS = {"name": lambda p: p.name, "price": lambda p: (p.price_cents, p.name), "code": lambda p: p.code}


class ShopSite(Site):
    kind = "shop"
    domain = "shopping"
    subdomain = "electronics and outdoor"

    def __init__(self, variant: int, seed: int):
        super().__init__(variant, seed)
        rng = self.rng
        self.brand = f"{rng.choice(content.ADJECTIVES)} {rng.choice(SHOP_NAMES)}"
        self.words = self.wording(WORDING)
        self.look = self.layout(LAYOUT)
        used_codes: set[str] = set()
        used_names: set[str] = set()
        self.categories = sorted(rng.sample(list(CATEGORIES), 6))
        self.products: list[Product] = []
        for category in self.categories:
            singular, prefix, (low, high) = CATEGORIES[category]
            for _ in range(rng.randint(10, 17)):
                while True:
                    name = f"{rng.choice(content.ADJECTIVES)} {rng.choice('XSMQRTV')}{rng.randint(2, 99)} {singular}"
                    if name not in used_names:
                        used_names.add(name)
                        break
                self.products.append(
                    Product(
                        name=name,
                        code=content.code(rng, prefix, used_codes),
                        category=category,
                        price_cents=rng.randint(low * 100, high * 100) // 100 * 100 + rng.choice([0, 49, 95, 99]),
                        weight=f"{rng.randint(2, 60) / 10:.1f} kg",
                        color=rng.choice(COLORS),
                        warranty=f"{rng.choice([6, 12, 18, 24, 36])} months",
                        rating=f"{rng.randint(28, 50) / 10:.1f}",
                        stock=rng.randint(0, 40),
                    )
                )
        self.by_code = {p.code: p for p in self.products}

    # -- presentation --------------------------------------------------------------
    def listing_order(self, products: list[Product]) -> list[Product]:
        return sorted(products, key=SORT_KEYS[self.look.order])

    def in_category(self, category: str) -> list[Product]:
        return self.listing_order([p for p in self.products if p.category == category])

    def page_of(self, products: list[Product], product: Product) -> int:
        return products.index(product) // self.look.page_size + 1

    def _page(self, title: str, body: str, query: str = "") -> str:
        if self.look.departments_page:
            nav = [("Departments", self.href("/departments"), "departments"), (self.words.cart, self.href("/cart"), "cart")]
        else:
            nav = [(c, self.href(f"/c/{content.slug(c)}"), f"cat:{content.slug(c)}") for c in self.categories]
            nav.append((self.words.cart, self.href("/cart"), "cart"))
        search = SearchBox(self.href("/search"), self.words.search, self.words.search_button, query)
        return render_page(
            self.look.frame, brand=self.brand, home_href=self.href("/"), title=title, nav=nav, body=body,
            search=search, footer=f"{self.brand} - prices include VAT - free returns within 30 days",
        )

    def _listing(self, products: list[Product], page: int, href_of_page) -> str:
        pages = max(1, -(-len(products) // self.look.page_size))
        page = min(max(page, 1), pages)
        shown = products[(page - 1) * self.look.page_size : page * self.look.page_size]
        w = self.words
        if self.look.listing == "list":
            items = "".join(
                f"<li style='margin-bottom:14px'>{link(p.name, self.href(f'/p/{p.code}'), f'product:{p.code}')}"
                f"<br>{esc(w.price)}: <b>{esc(p.price)}</b> &middot; {esc(p.color)} &middot; rated {esc(p.rating)}</li>"
                for p in shown
            )
            listing = f"<ul>{items}</ul>"
        else:
            plain = self.look.listing == "table"
            headers = ["Product", w.price, "Rating"] if plain else [w.code, "Product", w.price]
            rows = [
                [link(p.name, self.href(f"/p/{p.code}"), f"product:{p.code}"), esc(p.price), esc(p.rating)]
                if plain
                else [esc(p.code), link(p.name, self.href(f"/p/{p.code}"), f"product:{p.code}"), esc(p.price)]
                for p in shown
            ]
            listing = table(headers, rows)
        return listing + pager(page, pages, href_of_page, w.prev_next)

    # -- routes --------------------------------------------------------------------
    def route(self, method: str, path: str):
        parts = [p for p in path.split("/") if p]
        if method == "POST" and parts == ["cart", "add"]:
            return self.cart_add, ()
        if method != "GET":
            raise NotFound(path)
        if not parts:
            return self.home, ()
        if parts == ["search"]:
            return self.search, ()
        if parts == ["cart"]:
            return self.cart, ()
        if parts == ["departments"] and self.look.departments_page:
            return self.departments, ()
        if len(parts) == 2 and parts[0] == "c":
            return self.category, (parts[1],)
        if len(parts) == 2 and parts[0] == "p" and parts[1] in self.by_code:
            return self.product, (self.by_code[parts[1]],)
        raise NotFound(path)

    def home(self, request: Request) -> Response:
        featured = self.listing_order(self.products)[:: max(1, len(self.products) // 5)][:5]
        intro = {
            1: f"Welcome to {self.brand}. Browse our categories or search the catalogue.",
            2: f"{self.brand}: hand-picked gear, shipped in two days.",
            3: "Open a department or search by name or item number.",
        }[self.variant]
        body = (
            f"<h1>{esc(self.brand)}</h1><p>{esc(intro)}</p><h2>Featured</h2>"
            + "<ul>" + "".join(f"<li>{link(p.name, self.href(f'/p/{p.code}'), f'product:{p.code}')} - {esc(p.price)}</li>" for p in featured) + "</ul>"
        )
        return Response(self._page("Home", body))

    def departments(self, request: Request) -> Response:
        rows = [[link(c, self.href(f"/c/{content.slug(c)}"), f"cat:{content.slug(c)}"), str(len(self.in_category(c)))] for c in self.categories]
        return Response(self._page("Departments", "<h1>Departments</h1>" + table(["Department", "Items"], rows)))

    def category(self, request: Request, category_slug: str) -> Response:
        names = {content.slug(c): c for c in self.categories}
        if category_slug not in names:
            raise NotFound(category_slug)
        category = names[category_slug]
        page = _int(request.arg("page"), 1)
        body = f"<h1>{esc(category)}</h1>" + self._listing(
            self.in_category(category), page, lambda n: self.href(f"/c/{category_slug}", page=n)
        )
        return Response(self._page(category, body))

    def search(self, request: Request) -> Response:
        query = request.arg("q").strip()
        needle = query.lower()
        found = self.listing_order([p for p in self.products if needle and (needle in p.name.lower() or needle == p.code.lower())])
        page = _int(request.arg("page"), 1)
        heading = f"<h1>Results for &ldquo;{esc(query)}&rdquo;</h1><p>{len(found)} found</p>"
        body = heading + (self._listing(found, page, lambda n: self.href("/search", q=query, page=n)) if found else "<p>No products match.</p>")
        return Response(self._page("Search", body, query))

    def product(self, request: Request, p: Product) -> Response:
        w = self.words
        specs = table(
            ["Specification", "Value"],
            [[esc(w.code), esc(p.code)], ["Weight", esc(p.weight)], ["Colour" if self.variant != 1 else "Color", esc(p.color)],
             ["Warranty", esc(p.warranty)], ["Rating", f"{esc(p.rating)} / 5"], ["In stock", str(p.stock)]],
        )
        buy = (
            f"<form method='post' action='{esc(self.href('/cart/add'))}'>"
            f"<input type='hidden' name='code' value='{esc(p.code)}'>"
            f"<label>{esc(w.quantity)} <input type='text' name='qty' value='1' size='3' data-oid='qty' aria-label='{esc(w.quantity)}'></label> "
            f"<button type='submit' data-oid='add'>{esc(w.add)}</button></form>"
        )
        price = f"<p style='font-size:22px'>{esc(w.price)}: <b>{esc(p.price)}</b></p>"
        crumbs = link(p.category, self.href(f"/c/{content.slug(p.category)}"), "breadcrumb")
        parts = [f"<p>{crumbs}</p><h1>{esc(p.name)}</h1>", price, buy, "<h2>Details</h2>", specs]
        if self.look.specs_first:
            parts = [parts[0], parts[4], parts[1], parts[2]]
        return Response(self._page(p.name, "".join(parts)))

    def cart(self, request: Request) -> Response:
        lines = request.session.get("cart", {})
        notice = request.session.pop("cart_notice", "")
        rows = [[esc(code), esc(self.by_code[code].name), str(qty), esc(content.money(qty * self.by_code[code].price_cents))] for code, qty in lines.items()]
        total = sum(qty * self.by_code[code].price_cents for code, qty in lines.items())
        body = f"<h1>{esc(self.words.cart)}</h1>"
        if notice:
            body += f"<div class='notice'>{esc(notice)}</div>"
        body += (table([self.words.code, "Product", self.words.quantity, "Subtotal"], rows) + f"<p>Total: <b>{esc(content.money(total))}</b></p>") if rows else "<p>Empty.</p>"
        return Response(self._page(self.words.cart, body))

    def cart_add(self, request: Request) -> Response:
        code = request.field("code")
        if code not in self.by_code:
            raise NotFound(code)
        qty = _int(request.field("qty"), 0)
        if not 1 <= qty <= 20:
            request.session["cart_notice"] = "Quantity must be a whole number from 1 to 20."
        else:
            cart = request.session.setdefault("cart", {})
            cart[code] = cart.get(code, 0) + qty
            request.session["cart_notice"] = f"Added {qty} x {self.by_code[code].name}."
        return Response("", status=303, location=self.href("/cart"))

    # -- tasks ---------------------------------------------------------------------
    def vocabulary(self, name: str) -> list[str]:
        if name == "product_name":
            return [p.name for p in self.products]
        raise KeyError(name)

    def _open_product(self, p: Product, subtask: str) -> list[dict]:
        """Moves from any page to p's product page: by search, the one way a plan takes.
        Demonstrations are imitated, and a teacher that picks at random between equally good
        ways (search or the category) teaches a small model to blend them: measured, a
        "type" aimed at a category link."""
        return [type_into("search", p.name, f'Search for "{p.name}".', subtask),
                click(f"product:{p.code}", f'Open the "{p.name}" result.', subtask)]

    def draft_tasks(self, rng: random.Random) -> list[TaskDraft]:
        drafts = []
        attributes = {  # name: (label, value getter, fact type)
            "price": ("price", lambda p: p.price, "number"),
            "code": ("product code", lambda p: p.code, "code"),
            "weight": ("weight", lambda p: p.weight, "number"),
            "warranty": ("warranty", lambda p: p.warranty, "number"),
            "color": ("colour", lambda p: p.color, "text"),
        }

        def lookup(products: list[Product], names: list[str], template: str) -> TaskDraft:
            groups, plan, parts = [], [], []
            for p in products:
                subtask = f"find_{content.slug(p.name).replace('-', '_')}"
                plan += self._open_product(p, subtask)
                memory = {f"{subtask[5:]}_{n}": attributes[n][1](p) for n in names}
                plan.append(note(memory, subtask))
                groups.append(FactGroup(f"{', '.join(attributes[n][0] for n in names)} of {p.name}",
                                        [Fact(attributes[n][1](p), attributes[n][2]) for n in names]))
                parts.append(f"{p.name}: " + ", ".join(f"{attributes[n][0]} {attributes[n][1](p)}" for n in names))
            asked = " and ".join(attributes[n][0] for n in names)
            what = " and ".join(f'"{p.name}"' for p in products)
            plan.append(answer("; ".join(parts)))
            return TaskDraft(template, f"On {self.brand}, find the {asked} of {what}.", groups, plan)

        for _ in range(6):  # easy: one to three facts about one product
            names = rng.sample(list(attributes), rng.randint(1, 3))
            drafts.append(lookup([rng.choice(self.products)], names, "shop.lookup"))
        for _ in range(3):  # medium: two products, two attributes each
            drafts.append(lookup(rng.sample(self.products, 2), ["code", "price"], "shop.lookup"))
        for _ in range(3):  # hard: four products (8 facts), across categories
            drafts.append(lookup(rng.sample(self.products, 4), ["code", "price"], "shop.lookup"))
        for _ in range(3):
            drafts.append(self._cheapest_task(rng))
        for count in (1, 3, 6):  # 2, 4 and 7 facts
            drafts.append(self._cart_task(rng, count))
        return drafts

    def short_tasks(self, rng: random.Random) -> list[TaskDraft]:
        return [self._short_category(category) for category in rng.sample(self.categories, 4)]

    def _short_category(self, category: str) -> TaskDraft:
        """Open the category the task names (among the menu's or the Departments page's
        category links) and read the first product its listing shows."""
        first, stem = self.in_category(category)[0], content.slug(category).replace("-", "_")
        subtask = f"browse_{stem}"
        plan = [click("departments", "Open the Departments page.", subtask)] if self.look.departments_page else []
        plan.append(click(f"cat:{content.slug(category)}", f'Open the "{category}" category.', subtask))
        plan.append(note({f"{stem}_first": f"{first.name}, {first.price}"}, subtask))
        plan.append(answer(f"{first.name}, price {first.price}"))
        return TaskDraft(
            "shop.short_category",
            f"On {self.brand}, which product does the {category} category list first, and what is its price?",
            [FactGroup(f"the first product of {category} and its price",
                       [Fact(first.name, "text", vocab="product_name"), Fact(first.price, "number")])],
            plan,
        )

    def _cheapest_task(self, rng: random.Random) -> TaskDraft:
        """Compare several products of one category and report the cheapest one's code."""
        category = rng.choice(self.categories)
        candidates = rng.sample(self.in_category(category), 3)
        cheapest = min(candidates, key=lambda p: p.price_cents)
        plan = []
        for p in candidates:
            subtask = f"price_of_{content.slug(p.name).replace('-', '_')}"
            plan += self._open_product(p, subtask)
            plan.append(note({f"{subtask[9:]}_price": p.price}, subtask))
        plan.append(answer(f"{cheapest.name} is the cheapest: product code {cheapest.code}, price {cheapest.price}"))
        names = ", ".join(f'"{p.name}"' for p in candidates)
        return TaskDraft(
            "shop.cheapest",
            f"On {self.brand}, compare {names} in the {category} category. Which is the cheapest? "
            "Give its product code and price.",
            [FactGroup("the cheapest product's code and price", [Fact(cheapest.code, "code"), Fact(cheapest.price, "number")])],
            plan,
        )

    def _cart_task(self, rng: random.Random, count: int) -> TaskDraft:
        """State-changing: put products in the cart with given quantities (checked on the server)."""
        products = rng.sample(self.products, count)
        quantities = [rng.randint(1, 3) for _ in products]
        plan, facts = [], []
        for p, qty in zip(products, quantities):
            subtask = f"add_{content.slug(p.name).replace('-', '_')}"
            plan += self._open_product(p, subtask)
            if qty != 1:
                plan.append(type_into("qty", str(qty), f"Set the quantity to {qty} and add it to the {self.words.cart_noun}.", subtask))
            else:
                plan.append(click("add", f"Add it to the {self.words.cart_noun}.", subtask))
            plan.append(note({f"{subtask[4:]}_added": str(qty)}, subtask))
            facts.append(Fact(str(qty), "number", source="state", key=f"cart.{p.code}"))
        # One fact per product (its line has the right quantity) and one for "nothing else".
        facts.append(Fact(str(count), "number", source="state", key="cart.#"))
        plan.append(answer("done"))
        wanted = ", ".join(f'{q} x "{p.name}"' for p, q in zip(products, quantities))
        return TaskDraft(
            "shop.cart",
            f"On {self.brand}, put exactly these items in the {self.words.cart_noun}: {wanted}. Then answer \"done\".",
            [FactGroup("cart contents", facts)],
            plan,
        )


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
