"""A library catalogue: subjects, a title index, search, author pages, book records.

Layouts (LAYOUT; a training site mixes those of variants 1 and 2 aspect by aspect): 1
puts the subjects in the top bar, lists titles A-Z from the home page, shows listings as
a table sorted by title (10 a page) and a record as a table; 2 has a subject page and an
authors index in the sidebar, lists books as a descriptive list sorted by author (8 a
page) and a record as a list of definitions; 3 (test) speaks of "holdings", "call
number", "published" and "extent", sorts listings in shelf order (12 a page), shows a
record's imprint line and holdings table and has an advanced search with separate
title, author and year fields.
"""

from __future__ import annotations

import dataclasses
import random
import re

from asyncwebrl.web import content
from asyncwebrl.web.html import SearchBox, link, menu_position, pager, render_page, table
from asyncwebrl.web.site import (
    Fact, FactGroup, NotFound, Request, Response, Site, TaskDraft, answer, click, esc, note, type_into,
)

ADJECTIVES = """Silent Hidden Northern Quiet Burning Distant Hollow Restless Golden Scarlet Broken
Patient Narrow Iron Bright Wandering Sleeping Amber Crimson Evening Southern Forgotten Borrowed
Unfinished Painted Drowned Endless Secret Silver Wild""".split()
NOUNS = """River Harbour Orchard Lantern Garden Mountain Archive Compass Island Meadow Tide Bridge
Forest Window Letter Voyage Season Kingdom Signal Shore Market Engine Chorus Atlas Lighthouse
Frontier Cathedral Valley Clockwork Mirror""".split()
PLACES = content.CITIES + "Prague Seville Krakow Trieste Bruges Vilnius Naples Uppsala".split()

# name: (Dewey class, page range, subject words {W}/{W2}, title patterns)
SUBJECTS = {
    "History": ("909", (220, 720), "Empire Republic Guild Revolution Treaty Dynasty", ["{C}: A {A} History", "The {A} {W}", "The {W} of {C}"]),
    "Natural Science": ("508", (180, 560), "Light Water Stone Weather Gravity Seeds Ice Pollen", ["The Secret Life of {W}", "{W} and the {A} {N}", "Field Notes from the {A} {N}"]),
    "Poetry": ("821", (56, 140), "Elegies Psalms Sonnets Ballads Nocturnes Hymns", ["{A} {N}: Poems", "{W} for the {A} {N}", "{W} from {C}"]),
    "Travel": ("914", (160, 420), "Summer Winter Journey Crossing Springtime", ["A {A} {W} in {C}", "Letters from {C}", "The Road to the {A} {N}"]),
    "Cookery": ("641", (120, 380), "Saffron Lemons Rye Chestnuts Fennel Honey Olives Barley Plums Thyme", ["{W} and {W2}", "The {A} Kitchen", "Cooking in {C}: The {A} Table"]),
    "Philosophy": ("100", (140, 460), "Ethics Doubt Freedom Memory Reason Virtue Solitude", ["Reflections upon {W}", "Reflections upon the {A} {N}", "{W} and the {A} Mind"]),
    "Economics": ("330", (200, 640), "Trade Credit Labour Money Debt Tariffs", ["The {A} Economy of {C}", "{W} and the {A} {N}", "The Price of {W} in {C}"]),
    "Art and Design": ("700", (120, 360), "Colour Form Line Ink Clay Glass", ["Painting the {A} {N}", "The {A} Eye: Art in {C}", "{W} and {W2}: Essays on Design"]),
    "Fiction": ("823", (180, 640), "Daughter Keeper Widow Cartographer Stranger Apprentice", ["The {A} {N}", "The {W} of the {A} {N}", "A {W} in {C}"]),
    "Biography": ("920", (240, 700), "Sculptor Sailor Physician Composer Engineer Diplomat", ["The {A} {W}: A Life", "Portrait of a {A} {W}", "A {W} in {C}: Letters and Diaries"]),
    "Architecture": ("720", (150, 480), "Towers Arches Courtyards Stairways Domes", ["{W} of {C}", "Building the {A} {N}", "The {A} House: Notes on Building"]),
}
# name, city, ISBN publisher prefix
PUBLISHERS = [
    ("Harrow & Finch", "London", "204"), ("Lantern House", "Boston", "318"), ("Northgate Press", "Edinburgh", "427"),
    ("Bellwether Editions", "Toronto", "539"), ("Kestrel & Lowe", "Dublin", "246"), ("Tidewater Press", "Halifax", "651"),
    ("Greymoor Books", "Manchester", "372"), ("Albion Row Publishing", "Bristol", "485"), ("Saltmarsh Editions", "Norwich", "593"),
    ("Copperfield & Sons", "New York", "717"), ("Quayside University Press", "Newcastle", "268"), ("Blue Heron Books", "Portland", "834")]
WINGS = ["East", "West", "North", "South"]


@dataclasses.dataclass
class Book:
    record_id: str
    title: str
    author: str
    year: int
    publisher: str
    city: str  # where the publisher is
    pages: int
    subject: str
    call_number: str  # Dewey class + first letters of the author's surname: "909.42 GAR"
    isbn: str
    location: str
    on_loan: bool

    @property
    def filing_title(self) -> str:
        """Catalogues file titles without a leading article."""
        return re.sub(r"^(The|A|An) ", "", self.title)


@dataclasses.dataclass(frozen=True)
class Wording:
    record_id: str
    author: str
    year: str
    pages: str
    call_number: str
    subjects: str
    search: str
    search_button: str
    prev_next: tuple[str, str]


WORDING = {
    1: Wording("Record ID", "Author", "Year", "Pages", "Shelf mark", "Subjects", "Search titles and authors", "Search", ("Previous", "Next")),
    2: Wording("Catalogue no.", "Written by", "Year of publication", "Length", "Classmark", "Browse subjects", "Title or author", "Find", ("< Back", "More >")),
    3: Wording("Control no.", "Author", "Published", "Extent", "Call number", "Browse holdings", "Keyword search", "Go", ("Prev", "Next page")),
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The aspects a training site draws one by one from variant 1 or 2 (Site.layout)."""

    frame: str  # html.FRAMES: where the menu and search sit, colours, fonts
    order: str  # listings sorted by "title" | "author" | "shelf" (call number)
    page_size: int  # books per listing page
    listing: str  # "table" (title, author, year) | "list" (descriptive) | "shelf table" (call number first)
    # Where the subjects are, with the home page that goes with them (never the same
    # subject link twice on a page): "menu" (every subject in the menu; the home page
    # lists titles A-Z), "index" (a subjects page in the menu, also on the home page) or
    # "holdings" (the same, as "holdings", with a home page about advanced search).
    subjects: str
    authors_index: bool  # an "Authors A-Z" page linked from the menu
    advanced_search: bool  # an advanced search page (title, author, year) linked from the menu
    record: str  # a record page as a "table" | "list" (of definitions) | "imprint" (and a holdings table)


LAYOUT = {
    1: Layout("topbar", "title", 10, "table", "menu", authors_index=False, advanced_search=False, record="table"),
    2: Layout("sidebar", "author", 8, "list", "index", authors_index=True, advanced_search=False, record="list"),
    3: Layout("compact-right", "shelf", 12, "shelf table", "holdings", authors_index=False, advanced_search=True,
              record="imprint"),
}
SORT_KEYS = {"title": lambda b: b.filing_title, "author": lambda b: (b.author.split()[-1], b.author, b.filing_title),
             "shelf": lambda b: b.call_number}
ID_PREFIX = {1: "BK", 2: "CAT", 3: "HL"}
MOVE_LIMIT = {"easy": 7, "medium": 14, "hard": 21}  # 70% of the training step limits
# Book fields that tasks ask for: (label in instructions, fact type, vocabulary)
ATTRIBUTES = {
    "title": ("title", "text", "book_title"), "record_id": ("record ID", "code", ""), "author": ("author", "text", "author"),
    "year": ("year of publication", "number", ""), "publisher": ("publisher", "text", "publisher"),
    "pages": ("number of pages", "number", ""), "isbn": ("ISBN", "text", ""),
}


def _value(book: "Book", name: str) -> str:
    return str(getattr(book, name))


def _fact(book: "Book", name: str) -> Fact:
    return Fact(_value(book, name), ATTRIBUTES[name][1], vocab=ATTRIBUTES[name][2])


def _labels(names: list[str]) -> str:
    """["author", "year", "pages"] -> "author, year of publication and number of pages"."""
    labels = [ATTRIBUTES[n][0] for n in names]
    return ", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else labels[0]


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _key(text: str) -> str:
    """Memory-key stem from a title or name: "The Silent River" -> "silent_river"."""
    return "_".join(w for w in _words(text).split() if w not in {"the", "a", "an", "of", "and", "in", "for", "from"})


class ReferenceSite(Site):
    kind = "reference"
    domain = "reference"
    subdomain = "library catalogue"

    def __init__(self, variant: int, seed: int):
        super().__init__(variant, seed)
        rng = self.rng
        town = rng.choice(content.CITIES)
        self.brand = {1: f"Library of {town}", 2: f"{town} Public Library", 3: f"{town} University Library"}[variant]
        self.words = self.wording(WORDING)
        self.look = self.layout(LAYOUT)
        self.subjects = sorted(rng.sample(list(SUBJECTS), 7))
        publishers = rng.sample(PUBLISHERS, 8)
        # No text value may contain another (after normalising), so a right title, name or
        # publisher in an answer never stands in for a wrong one.
        self._taken = [_words(name) for name, _, _ in publishers]
        # Books per author: one prolific and one modest author for the author tasks.
        counts, target = [rng.randint(4, 6), rng.randint(2, 3)], rng.randint(96, 132)
        while sum(counts) < target:
            counts.append(rng.choice([1, 1, 2, 2, 3, 3, 4, 5]))
        rng.shuffle(counts)
        used: set[str] = set()  # record IDs and call numbers
        self.books: list[Book] = []
        for count in counts:
            author = self._distinct(lambda: f"{rng.choice(content.FIRST_NAMES)} {rng.choice(content.LAST_NAMES)}")
            home_subject, other_subject = rng.sample(self.subjects, 2)
            first_year = rng.randint(1948, 2004)
            for _ in range(count):
                subject = other_subject if rng.random() < 0.25 else home_subject
                dewey, (low, high), words, patterns = SUBJECTS[subject]

                def make_title() -> str:
                    w1, w2 = rng.sample(words.split(), 2)
                    title = rng.choice(patterns).format(A=rng.choice(ADJECTIVES), N=rng.choice(NOUNS), C=rng.choice(PLACES), W=w1, W2=w2)
                    return re.sub(r"\b([Aa]) (?=[AEIOU])", r"\1n ", title)  # "An Amber Summer", "Portrait of an Iron ..."

                title = self._distinct(make_title)
                publisher, city, isbn_prefix = rng.choice(publishers)
                call = _fresh(lambda: f"{dewey}.{rng.randint(10, 99)} {author.split()[-1][:3].upper()}", used)
                self.books.append(Book(
                    record_id=_fresh(lambda: f"{ID_PREFIX[variant]}-{rng.randint(10000, 99999)}", used), title=title, author=author,
                    year=first_year + rng.randint(0, min(28, 2024 - first_year)), publisher=publisher, city=city,
                    pages=rng.randint(low // 4, high // 4) * 4, subject=subject, call_number=call,
                    isbn=_isbn(f"9781{isbn_prefix}{rng.randint(10000, 99999)}"),
                    location=f"Level {self.subjects.index(subject) % 3 + 1}, {WINGS[self.subjects.index(subject) % 4]} wing",
                    on_loan=rng.random() < 0.3,
                ))
        self.by_id = {b.record_id: b for b in self.books}
        self.authors = sorted({b.author for b in self.books}, key=lambda a: (a.split()[-1], a))

    def _distinct(self, make) -> str:
        while True:
            value = make()
            norm = _words(value)
            if not any(norm in other or other in norm for other in self._taken):
                self._taken.append(norm)
                return value

    # -- presentation --------------------------------------------------------------
    def listing_order(self, books: list[Book]) -> list[Book]:
        return sorted(books, key=SORT_KEYS[self.look.order])

    def in_subject(self, subject: str) -> list[Book]:
        return self.listing_order([b for b in self.books if b.subject == subject])

    def by_author(self, author: str) -> list[Book]:
        return sorted((b for b in self.books if b.author == author), key=lambda b: (b.year, b.filing_title))

    def _page(self, title: str, body: str, query: str = "") -> str:
        if self.look.subjects == "menu":
            nav = [(s, self.href(f"/subject/{content.slug(s)}"), f"subject:{content.slug(s)}") for s in self.subjects]
        else:
            nav = [(self.words.subjects, self.href("/subjects"), "subjects")]
        if self.look.authors_index:
            nav.append(("Authors A-Z", self.href("/authors"), "authors"))
        if self.look.advanced_search:
            nav.append(("Advanced search", self.href("/advanced"), "advanced"))
        return render_page(
            self.look.frame, brand=self.brand, home_href=self.href("/"), title=title, nav=nav, body=body,
            search=SearchBox(self.href("/search"), self.words.search, self.words.search_button, query),
            footer=f"{self.brand} - catalogue records may be reused under an open licence",
        )

    def _record_link(self, b: Book) -> str:
        return link(b.title, self.href(f"/record/{b.record_id}"), f"record:{b.record_id}")

    def _listing(self, books: list[Book], page: int, href_of_page) -> str:
        pages = max(1, -(-len(books) // self.look.page_size))
        page = min(max(page, 1), pages)
        shown = books[(page - 1) * self.look.page_size : page * self.look.page_size]
        w = self.words
        if self.look.listing == "table":
            listing = table(["Title", w.author, w.year], [[self._record_link(b), esc(b.author), str(b.year)] for b in shown])
        elif self.look.listing == "list":
            listing = "<ul>" + "".join(
                f"<li style='margin-bottom:12px'>{self._record_link(b)}<br>by {esc(b.author)} &middot; "
                f"{esc(b.publisher)}, {b.year}</li>" for b in shown) + "</ul>"
        else:
            listing = table([w.call_number, "Title", w.author, w.year],
                            [[esc(b.call_number), self._record_link(b), esc(b.author), str(b.year)] for b in shown])
        return listing + pager(page, pages, href_of_page, w.prev_next)

    def _subject_links(self) -> str:
        rows = [[link(s, self.href(f"/subject/{content.slug(s)}"), f"subject:{content.slug(s)}"), str(len(self.in_subject(s)))]
                for s in self.subjects]
        return table(["Subject", "Holdings" if self.look.subjects == "holdings" else "Titles"], rows)

    # -- routes --------------------------------------------------------------------
    def route(self, method: str, path: str):
        parts = [p for p in path.split("/") if p]
        if method != "GET":
            raise NotFound(path)
        fixed = {(): self.home, ("search",): self.search, ("subjects",): self.subject_index, ("authors",): self.author_index}
        if self.look.advanced_search:
            fixed[("advanced",)] = self.advanced
        if tuple(parts) in fixed:
            return fixed[tuple(parts)], ()
        if len(parts) == 2 and parts[0] in ("subject", "letter", "author"):
            return {"subject": self.subject, "letter": self.letter, "author": self.author}[parts[0]], (parts[1],)
        if len(parts) == 2 and parts[0] == "record" and parts[1] in self.by_id:
            return self.record, (self.by_id[parts[1]],)
        raise NotFound(path)

    def home(self, request: Request) -> Response:
        body = f"<h1>{esc(self.brand)}</h1>"
        if self.look.subjects == "menu":  # no subject links here: the menu has them
            letters = sorted({b.filing_title[0] for b in self.books})
            newest = sorted(self.books, key=lambda b: (-b.year, b.filing_title))[:5]
            body += (f"<p>Search the catalogue {menu_position(self.look.frame)}, pick a subject, or browse titles A-Z.</p>"
                     "<h2>Titles A-Z</h2><p>"
                     + " ".join(link(ch, self.href(f"/letter/{ch}"), f"letter:{ch}") for ch in letters)
                     + "</p><h2>Recently published</h2><ul>"
                     + "".join(f"<li>{self._record_link(b)} ({b.year})</li>" for b in newest) + "</ul>")
        elif self.look.subjects == "index":
            body += f"<p>{len(self.books)} books in {len(self.subjects)} subjects. Browse by subject:</p>" + self._subject_links()
        else:
            body += ("<p>Keyword search covers titles and authors; advanced search lets you combine title, "
                     "author and year.</p><h2>Holdings by subject</h2>" + self._subject_links())
        return Response(self._page("Catalogue", body))

    def subject_index(self, request: Request) -> Response:
        return Response(self._page(self.words.subjects, f"<h1>{esc(self.words.subjects)}</h1>" + self._subject_links()))

    def author_index(self, request: Request) -> Response:
        items = "".join(f"<li>{link(a, self.href(f'/author/{content.slug(a)}'), f'author:{content.slug(a)}')}"
                        f" ({len(self.by_author(a))})</li>" for a in self.authors)
        return Response(self._page("Authors A-Z", f"<h1>Authors A-Z</h1><ul style='columns:3'>{items}</ul>"))

    def subject(self, request: Request, subject_slug: str) -> Response:
        names = {content.slug(s): s for s in self.subjects}
        if subject_slug not in names:
            raise NotFound(subject_slug)
        return self._browse(request, names[subject_slug], self.in_subject(names[subject_slug]), f"/subject/{subject_slug}")

    def letter(self, request: Request, letter: str) -> Response:
        books = self.listing_order([b for b in self.books if b.filing_title[:1] == letter])
        if not books:
            raise NotFound(letter)
        return self._browse(request, f"Titles: {letter}", books, f"/letter/{letter}")

    def _browse(self, request: Request, heading: str, books: list[Book], path: str) -> Response:
        body = f"<h1>{esc(heading)}</h1><p>{len(books)} titles</p>" + self._listing(
            books, _int(request.arg("page"), 1), lambda n: self.href(path, page=n))
        return Response(self._page(heading, body))

    def author(self, request: Request, author_slug: str) -> Response:
        names = {content.slug(a): a for a in self.authors}
        if author_slug not in names:
            raise NotFound(author_slug)
        w, books = self.words, self.by_author(names[author_slug])
        rows = [[esc(b.record_id), self._record_link(b), str(b.year), esc(b.subject)] for b in books]
        body = f"<h1>{esc(names[author_slug])}</h1><p>{len(books)} titles in the catalogue</p>" + table(
            [w.record_id, "Title", w.year, "Subject"], rows)
        return Response(self._page(names[author_slug], body))

    def advanced(self, request: Request) -> Response:
        fields = "".join(
            f"<p><label>{label}<br><input type='text' name='{name}' data-oid='adv-{name}' aria-label='{label}'></label></p>"
            for name, label in (("title", "Title contains"), ("author", "Author"), ("year", "Year published")))
        body = (f"<h1>Advanced search</h1><form method='get' action='{esc(self.href('/search'))}'>{fields}"
                "<button type='submit' data-oid='adv-submit'>Search holdings</button></form>")
        return Response(self._page("Advanced search", body))

    def search(self, request: Request) -> Response:
        args = {name: request.arg(name).strip() for name in ("q", "title", "author", "year") if request.arg(name).strip()}
        q, title, author, year = (args.get(n, "").lower() for n in ("q", "title", "author", "year"))
        found = self.listing_order([
            b for b in self.books
            if (not q or q in b.title.lower() or q in b.author.lower() or q == b.record_id.lower())
            and (not title or title in b.title.lower()) and (not author or author in b.author.lower())
            and (not year or year == str(b.year))
        ]) if args else []
        author_needle = q or author
        authors = [a for a in self.authors if author_needle and author_needle in a.lower()]
        described = esc(" ".join(args.values()))
        body = f"<h1>Results for &ldquo;{described}&rdquo;</h1>"
        if authors:
            body += "<p>Matching authors: " + ", ".join(
                link(a, self.href(f"/author/{content.slug(a)}"), f"author:{content.slug(a)}") for a in authors) + "</p>"
        body += f"<p>{len(found)} title{'' if len(found) == 1 else 's'} found</p>" + (
            self._listing(found, _int(request.arg("page"), 1), lambda n: self.href("/search", **args, page=n)) if found else "")
        return Response(self._page("Search", body, args.get("q", "")))

    def record(self, request: Request, b: Book) -> Response:
        w = self.words
        author_link = link(b.author, self.href(f"/author/{content.slug(b.author)}"), f"author:{content.slug(b.author)}")
        subject_link = link(b.subject, self.href(f"/subject/{content.slug(b.subject)}"))  # no oid: the nav has one
        status = "On loan" if b.on_loan else "Available"
        if self.look.record == "imprint":  # imprint line and a separate holdings table, as research libraries show them
            rows = [[w.record_id, esc(b.record_id)], [w.author, author_link],
                    ["Published", esc(f"{b.city}: {b.publisher}, {b.year}")], [w.pages, f"{b.pages} p."],
                    ["Subject heading", subject_link], ["ISBN", esc(b.isbn)]]
            body = (f"<h1>{esc(b.title)}</h1>" + table(["Field", "Value"], rows) + "<h2>Holdings</h2>"
                    + table([w.call_number, "Location", "Status"], [[esc(b.call_number), esc(b.location), status]]))
        else:
            rows = [(w.record_id, esc(b.record_id)), (w.author, author_link), (w.year, str(b.year)),
                    ("Publisher", f"{esc(b.publisher)} ({esc(b.city)})"), (w.pages, f"{b.pages} pages"),
                    ("Subject", subject_link), ("ISBN", esc(b.isbn)), (w.call_number, esc(b.call_number)),
                    ("Location", esc(b.location)), ("Status", status)]
            if self.look.record == "table":
                details = table(["Field", "Value"], [list(r) for r in rows])
            else:
                details = "<dl>" + "".join(f"<dt><b>{esc(k)}</b></dt><dd>{v}</dd>" for k, v in rows) + "</dl>"
            body = f"<h1>{esc(b.title)}</h1>" + details
        return Response(self._page(b.title, body))

    # -- tasks ---------------------------------------------------------------------
    def vocabulary(self, name: str) -> list[str]:
        values = {"book_title": [b.title for b in self.books], "author": self.authors,
                  "publisher": sorted({b.publisher for b in self.books})}
        if name not in values:
            raise KeyError(name)
        return values[name]

    def _open_record(self, b: Book, subtask: str) -> list[dict]:
        """Moves from any page to b's record: a search for its title, the one way a plan
        takes. Never through b's subject or author, which the task does not give (a
        demonstration that takes them teaches a guess), and not at random between equally
        good ways (title index, advanced search), which teaches a small model to blend them."""
        return [type_into("search", b.title, f'Search for "{b.title}".', subtask),
                click(f"record:{b.record_id}", f'Open the record of "{b.title}".', subtask)]

    def _open_subject(self, subject: str, subtask: str) -> list[dict]:
        moves = [] if self.look.subjects == "menu" else [click("subjects", f"Open {self.words.subjects.lower()}.", subtask)]
        return moves + [click(f"subject:{content.slug(subject)}", f'Open the subject "{subject}".', subtask)]

    def _open_author(self, author: str, subtask: str) -> list[dict]:
        return [type_into("search", author, f"Search for {author}.", subtask),
                click(f"author:{content.slug(author)}", f"Open the page of {author}.", subtask)]

    def _draft(self, template: str, instruction: str, groups: list[FactGroup], plan: list[dict]) -> TaskDraft:
        """A task whose plan fits its level's move budget (a generator bug otherwise)."""
        facts = sum(len(g.facts) for g in groups)
        limit = MOVE_LIMIT["easy" if facts <= 3 else "medium" if facts <= 6 else "hard"]
        if sum(m["op"] != "note" for m in plan) > limit:
            raise AssertionError(f"{template}: its plan exceeds {limit} moves")
        return TaskDraft(template, instruction, groups, plan)

    def draft_tasks(self, rng: random.Random) -> list[TaskDraft]:
        drafts = []
        lookups = [  # (number of books, attributes): 1-3 / 4 / 8-10 facts
            (1, None), (1, None), (1, None), (2, ["author", "year"]), (2, ["publisher", "pages"]),
            (4, ["record_id", "year"]), (4, ["record_id", "pages"]), (3, ["record_id", "year", "publisher"]),
            (3, ["author", "year", "pages"]),
        ]
        for count, names in lookups:
            names = names or rng.sample(list(ATTRIBUTES)[1:], rng.randint(1, 3))
            drafts.append(self._lookup(rng, rng.sample(self.books, count), names, "reference.lookup"))
        full = ["author", "year", "publisher", "pages", "isbn"]
        drafts += [self._lookup(rng, [rng.choice(self.books)], full, "reference.full_record") for _ in range(2)]
        drafts.append(self._lookup(rng, rng.sample(self.books, 2), full[:4], "reference.full_record"))
        drafts.append(self._extreme(rng, "year", min, ["title", "record_id", "year"], "reference.earliest"))
        drafts.append(self._extreme(rng, "pages", max, ["title", "record_id", "pages", "publisher"], "reference.longest"))
        drafts.append(self._oldest_in_subject(rng))
        prolific = [a for a in self.authors if len(self.by_author(a)) >= 4]
        modest = [a for a in self.authors if 2 <= len(self.by_author(a)) <= 3]
        drafts.append(self._author_works(rng, rng.choice(modest), ["record_id"]))
        drafts.append(self._author_works(rng, rng.choice(prolific), ["record_id"]))
        drafts.append(self._author_works(rng, rng.choice(prolific), ["title", "year"]))
        return drafts

    def short_tasks(self, rng: random.Random) -> list[TaskDraft]:
        return [self._short_subject(subject) for subject in rng.sample(self.subjects, 4)]

    def _short_subject(self, subject: str) -> TaskDraft:
        """A subject's page says how many titles it lists: open it among its siblings."""
        count, stem = len(self.in_subject(subject)), _key(subject)
        plan = self._open_subject(subject, f"browse_{stem}")
        plan.append(note({f"{stem}_titles": str(count)}, f"browse_{stem}"))
        plan.append(answer(f"{subject}: {count} titles"))
        return self._draft("reference.short_subject",
                           f'In the {self.brand} catalogue, how many titles are listed under the subject "{subject}"?',
                           [FactGroup(f"number of titles under {subject}", [Fact(str(count), "number")])], plan)

    def _lookup(self, rng: random.Random, books: list[Book], names: list[str], template: str) -> TaskDraft:
        groups = [FactGroup(f"{_labels(names)} of {b.title}", [_fact(b, n) for n in names]) for b in books]

        plan = []
        for b in books:
            subtask = f"find_{_key(b.title)}"
            plan += self._open_record(b, subtask)
            plan.append(note({f"{_key(b.title)}_{n}": _value(b, n) for n in names}, subtask))
        plan.append(answer("; ".join(
            f"{b.title}: " + ", ".join(f"{ATTRIBUTES[n][0]} {_value(b, n)}" for n in names) for b in books)))
        what = " and ".join(f'"{b.title}"' for b in books)
        return self._draft(template, f"In the {self.brand} catalogue, find the {_labels(names)} of {what}.", groups, plan)

    def _extreme(self, rng: random.Random, field: str, pick, names: list[str], template: str) -> TaskDraft:
        """Compare three books on one field; report the winner (its title is a fact, so
        naming all three in the answer fails)."""
        while True:
            books = rng.sample(self.books, 3)
            if len({getattr(b, field) for b in books}) == 3:
                break
        best = pick(books, key=lambda b: getattr(b, field))

        plan = []
        for b in books:
            subtask = f"{field}_of_{_key(b.title)}"
            plan += self._open_record(b, subtask)
            plan.append(note({f"{_key(b.title)}_{field}": str(getattr(b, field))}, subtask))
        plan.append(answer(f"{best.title}: " + ", ".join(f"{ATTRIBUTES[n][0]} {_value(best, n)}" for n in names[1:])))

        adjective = {"year": "was published earliest", "pages": "has the most pages"}[field]
        titles = ", ".join(f'"{b.title}"' for b in books)
        return self._draft(template, f"In the {self.brand} catalogue, which of {titles} {adjective}? Give its {_labels(names)}.",
                           [FactGroup(f"the book that {adjective}", [_fact(best, n) for n in names])], plan)

    def _oldest_in_subject(self, rng: random.Random) -> TaskDraft:
        """Scan every page of a subject listing for its earliest book (3 facts)."""
        years = {s: sorted(b.year for b in self.in_subject(s)) for s in self.subjects}
        moves_to_open = len(self._open_subject(self.subjects[0], ""))
        subject = rng.choice([s for s in self.subjects if len(years[s]) >= 2 and years[s][0] < years[s][1]  # one answer
                              # open, next page by page, answer: within the easy budget (3 facts)
                              and moves_to_open + -(-len(years[s]) // self.look.page_size) <= MOVE_LIMIT["easy"]])
        books = self.in_subject(subject)
        oldest = min(books, key=lambda b: b.year)
        stem, pages = _key(subject), -(-len(books) // self.look.page_size)

        plan = self._open_subject(subject, f"browse_{stem}")
        for page in range(1, pages + 1):
            shown = books[(page - 1) * self.look.page_size : page * self.look.page_size]
            first = min(shown, key=lambda b: b.year)
            plan.append(note({f"{stem}_page{page}_earliest": f"{first.title} ({first.author}, {first.year})"}, f"browse_{stem}"))
            if page < pages:
                plan.append(click("next", "Go to the next page.", f"browse_{stem}"))
        plan.append(answer(f"{oldest.title} by {oldest.author}, published {oldest.year}"))

        facts = [_fact(oldest, n) for n in ("title", "author", "year")]
        return self._draft("reference.oldest_in_subject",
                           f'In the {self.brand} catalogue, which book listed under the subject "{subject}" was published '
                           "earliest? Give its title, author and year of publication.",
                           [FactGroup(f"the earliest {subject} book", facts)], plan)

    def _author_works(self, rng: random.Random, author: str, names: list[str]) -> TaskDraft:
        """Everything one author has in the catalogue, read from their author page."""
        books = self.by_author(author)
        stem = _key(author)

        plan = self._open_author(author, f"open_{stem}")
        listed = "; ".join(", ".join(_value(b, n) for n in names) for b in books)
        plan.append(note({f"{stem}_{'record_ids' if names == ['record_id'] else 'titles_and_years'}": listed}, f"open_{stem}"))
        plan.append(answer(f"Books by {author}: {listed}"))

        asked = {"record_id": "record IDs", "title": "titles"}[names[0]] + (" and years of publication" if len(names) > 1 else "")
        groups = [FactGroup(f"{_labels(names)} of every book by {author}", [_fact(b, n) for b in books for n in names])]
        return self._draft(f"reference.author_{'_'.join(names)}",
                           f"In the {self.brand} catalogue, list the {asked} of all books by {author}.", groups, plan)


def _fresh(make, used: set[str]) -> str:
    while (value := make()) in used:
        pass
    used.add(value)
    return value


def _isbn(twelve_digits: str) -> str:
    """ISBN-13 with its check digit, hyphenated as prefix-group-publisher-title-check."""
    total = sum(int(d) * (3 if i % 2 else 1) for i, d in enumerate(twelve_digits))
    digits = twelve_digits + str((10 - total % 10) % 10)
    return f"{digits[:3]}-{digits[3]}-{digits[4:7]}-{digits[7:12]}-{digits[12]}"


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
