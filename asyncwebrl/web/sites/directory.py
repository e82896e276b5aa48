"""An organisation's staff directory: departments, people with contact cards, search.

The organisation (a university, a company or a hospital) comes from the seed. Layouts
(LAYOUT; a training site mixes those of variants 1 and 2 aspect by aspect): 1 (top bar)
lists departments on the home page; department pages and search results list names and
job titles only (6 per page, by surname), so contacts need the person page. 2 (sidebar)
puts departments in the menu and shows the switchboard on the home page; its listings
are tables that already show email and telephone (8 per page, grouped by position). 3
(test) says "Units", "Faculty & Staff", "E-mail"; units sit behind a "Units" page, there
is an A-Z index by surname, listings are ordered by first name (7 per page) and the
contact card lists the location first.
"""

from __future__ import annotations

import dataclasses
import random

from asyncwebrl.web import content
from asyncwebrl.web.html import SearchBox, link, menu_position, pager, render_page, table
from asyncwebrl.web.site import (
    Fact, FactGroup, NotFound, Request, Response, Site, TaskDraft, answer, click, esc, note, type_into,
)

# Organisation type: (departments, head's title, roles held by one person per department,
# roles any number of people hold). One-holder roles make "who is the X in Y" answerable.
ORG_TYPES = {
    "university": (
        "Physics|Chemistry|Mathematics|History|Computer Science|Biology|Economics|Linguistics|Philosophy|Psychology",
        "Head of Department", "Department Administrator|Lab Manager|Graduate Coordinator|IT Officer",
        "Professor|Associate Professor|Assistant Professor|Lecturer|Research Fellow|Postdoctoral Researcher|Teaching Fellow",
    ),
    "company": (
        "Engineering|Marketing|Finance|Human Resources|Legal|Sales|Customer Support|Operations|Product Design|Procurement",
        "Director", "Office Manager|Team Coordinator|Compliance Officer|Executive Assistant",
        "Senior Analyst|Analyst|Specialist|Senior Specialist|Associate|Project Manager|Consultant",
    ),
    "hospital": (
        "Cardiology|Radiology|Paediatrics|Oncology|Neurology|Emergency Medicine|Orthopaedics|Dermatology|Pharmacy|Physiotherapy",
        "Clinical Lead", "Ward Manager|Medical Secretary|Clinical Educator|Patient Liaison Officer",
        "Consultant|Registrar|Staff Nurse|Nurse Practitioner|Junior Doctor|Healthcare Assistant|Specialist Nurse",
    ),
}


class _Named:
    name: str

    @property
    def slug(self) -> str:
        return content.slug(self.name)

    @property
    def key(self) -> str:  # for memory keys and subtask names: "maria_lopez"
        return self.slug.replace("-", "_")


@dataclasses.dataclass
class Person(_Named):
    name: str
    department: str
    title: str
    email: str
    phone: str
    office: str  # "Room B214"

    @property
    def surname(self) -> str:
        return self.name.split(" ", 1)[1]

    @property
    def room(self) -> str:  # "B214": the rubric wants the room, whether written "Room B214" or "office B214"
        return self.office.split()[-1]


@dataclasses.dataclass
class Department(_Named):
    name: str
    head: Person
    people: list[Person]


@dataclasses.dataclass(frozen=True)
class Wording:
    staff: str
    units: str
    head: str
    title: str
    email: str
    phone: str
    office: str
    contact: str
    search: str
    search_button: str
    prev_next: tuple[str, str]


WORDING = {
    1: Wording("People", "Departments", "Head of department", "Job title", "Email", "Phone", "Office",
               "Contact us", "Search people by name", "Search", ("Previous", "Next")),
    2: Wording("Staff", "Departments", "Department head", "Position", "Email", "Telephone", "Building / room",
               "About & contact", "Find a colleague", "Go", ("< Back", "More >")),
    3: Wording("Faculty & Staff", "Units", "Unit lead", "Role", "E-mail", "Tel.", "Location",
               "Contact", "Search faculty & staff", "Find", ("Prev", "Next page")),
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The aspects a training site draws one by one from variant 1 or 2 (Site.layout)."""

    frame: str  # html.FRAMES: where the menu and search sit, colours, fonts
    order: str  # listings sorted by "surname" | "position" | "first name"
    page_size: int  # people per listing page
    listing: str  # "names" (list with titles) | "contacts" (table with email and phone) | "roles" (title first)
    # Where the department links are, with the home page that goes with them: "home" (listed
    # on the home page; plans go home first), "menu" (in the menu on every page) or "units"
    # (a "Units" page linked from the menu).
    departments: str
    switchboard_on_home: bool  # the home page shows the switchboard and enquiries address
    az_index: bool  # an A-Z index by surname, linked from the menu
    location_first: bool  # a person's card starts with office and phone


LAYOUT = {
    1: Layout("topbar", "surname", 6, "names", "home", switchboard_on_home=False, az_index=False, location_first=False),
    2: Layout("sidebar", "position", 8, "contacts", "menu", switchboard_on_home=True, az_index=False, location_first=False),
    3: Layout("compact-right", "first name", 7, "roles", "units", switchboard_on_home=False, az_index=True, location_first=True),
}
SORT_KEYS = {"surname": lambda p: (p.surname, p.name), "position": lambda p: (p.title, p.surname, p.name),
             "first name": lambda p: p.name}
# What a listing row (department page, search result) shows besides the name, by listing;
# everything else is only on the person's page.
LISTED = {"names": {"title"}, "contacts": {"title", "email", "phone"}, "roles": {"title"}}
ATTRIBUTES = {  # name: (phrase in instructions, fact type)
    "title": ("job title", "text"), "email": ("email address", "email"),
    "phone": ("phone number", "phone"), "office": ("office", "text"),
}


class DirectorySite(Site):
    kind = "directory"
    domain = "organisation"
    subdomain = "staff directory"

    def __init__(self, variant: int, seed: int):
        super().__init__(variant, seed)
        rng = self.rng
        self.words = self.wording(WORDING)
        self.look = self.layout(LAYOUT)  # before the content: departments list their people in its order
        self.org_type = rng.choice(sorted(ORG_TYPES))
        unit_names, (head_title,), single_roles, common_roles = (part.split("|") for part in ORG_TYPES[self.org_type])
        adjective, city = rng.choice(content.ADJECTIVES), rng.choice(content.CITIES)
        if self.org_type == "university":
            self.org, self.mail_domain = f"{adjective} University", f"{adjective.lower()}.edu"
        elif self.org_type == "company":
            suffix = rng.choice(["Systems", "Analytics", "Logistics", "Energy"])
            self.org, self.mail_domain = f"{adjective} {suffix}", f"{adjective.lower()}{suffix.lower()}.com"
        else:
            self.org = f"{city} {rng.choice(['General Hospital', 'Medical Centre', 'Royal Infirmary'])}"
            self.mail_domain = f"{city.lower()}health.org"
        self.org_key = content.slug(self.org).replace("-", "_")
        area = rng.randint(201, 989)
        self.switchboard = content.phone(rng, area)
        self.enquiries = f"{rng.choice(['info', 'enquiries', 'contact'])}@{self.mail_domain}"
        self.address = f"{rng.randint(1, 220)} {rng.choice(content.STREETS)} Street, {city}"

        # Two large departments (for the roster task, which wants 7+ names), 40-70 people.
        count = rng.randint(6, 8)
        while True:
            sizes = [rng.randint(8, 11) for _ in range(2)] + [rng.randint(4, 8) for _ in range(count - 2)]
            if 40 <= sum(sizes) <= 70:
                break
        rng.shuffle(sizes)
        names = iter(content.unique_names(rng, sum(sizes)))
        buildings = rng.sample("ABCDEFGHKLMN", count)
        phones, offices = {self.switchboard}, set()
        self.departments: list[Department] = []
        for unit, size, building in zip(sorted(rng.sample(unit_names, count)), sizes, buildings):
            titles = [head_title] + rng.sample(single_roles, 2) + [rng.choice(common_roles) for _ in range(size - 3)]
            members = []
            for title in titles:
                name = next(names)
                phone = _fresh(phones, lambda: content.phone(rng, area))
                office = _fresh(offices, lambda: f"Room {building}{rng.randint(1, 4)}{rng.randint(1, 40):02d}")
                members.append(Person(name, unit, title, f"{content.email_local(name)}@{self.mail_domain}", phone, office))
            self.departments.append(Department(unit, members[0], self.listing_order(members)))
        self.people = [p for d in self.departments for p in d.people]
        self.by_slug = {p.slug: p for p in self.people}
        self.by_dept_slug = {d.slug: d for d in self.departments}

    # -- presentation --------------------------------------------------------------
    def listing_order(self, people: list[Person]) -> list[Person]:
        return sorted(people, key=SORT_KEYS[self.look.order])

    def search_results(self, query: str) -> list[Person]:
        needle = query.strip().lower()
        return self.listing_order([p for p in self.people if needle and needle in p.name.lower()])

    def surname_groups(self) -> dict[str, list[Person]]:
        groups: dict[str, list[Person]] = {}
        for p in sorted(self.people, key=lambda p: (p.surname, p.name)):
            groups.setdefault(p.surname[0].upper(), []).append(p)
        return groups

    def _page(self, title: str, body: str, query: str = "") -> str:
        w = self.words
        nav = []
        if self.look.departments == "menu":
            nav += [(d.name, self.href(f"/d/{d.slug}"), f"dept:{d.slug}") for d in self.departments]
        elif self.look.departments == "units":
            nav.append((w.units, self.href("/units"), "units"))
        if self.look.az_index:
            nav.append(("A-Z index", self.href("/az"), "az"))
        nav.append((w.contact, self.href("/contact"), "contact"))
        search = SearchBox(self.href("/search"), w.search, w.search_button, query)
        return render_page(self.look.frame, brand=self.org, home_href=self.href("/"), title=title, nav=nav,
                           body=body, search=search, footer=f"{self.org} - {w.staff} directory - updated weekly")

    def _person_link(self, p: Person, oid: str = "") -> str:
        return link(p.name, self.href(f"/people/{p.slug}"), oid or f"person:{p.slug}")

    def _listing(self, people: list[Person], page: int, href_of_page, show_unit: bool) -> str:
        pages = max(1, -(-len(people) // self.look.page_size))
        page = min(max(page, 1), pages)
        shown = people[(page - 1) * self.look.page_size : page * self.look.page_size]
        w = self.words
        if self.look.listing == "names":
            items = "".join(f"<li style='margin-bottom:8px'>{self._person_link(p)} &ndash; {esc(p.title)}"
                            + (f" ({esc(p.department)})" if show_unit else "") + "</li>" for p in shown)
            listing = f"<ul>{items}</ul>"
        elif self.look.listing == "contacts":
            headers = ["Name", w.title] + (["Department"] if show_unit else []) + [w.email, w.phone]
            rows = [[self._person_link(p), esc(p.title)] + ([esc(p.department)] if show_unit else [])
                    + [esc(p.email), esc(p.phone)] for p in shown]
            listing = table(headers, rows)
        else:
            headers = [w.title, "Name"] + (["Unit"] if show_unit else [])
            rows = [[esc(p.title), self._person_link(p)] + ([esc(p.department)] if show_unit else []) for p in shown]
            listing = table(headers, rows)
        return listing + pager(page, pages, href_of_page, w.prev_next)

    # -- routes --------------------------------------------------------------------
    def route(self, method: str, path: str):
        parts = [p for p in path.split("/") if p]
        if method != "GET":
            raise NotFound(path)
        if not parts:
            return self.home, ()
        optional = {"units": self.look.departments == "units", "az": self.look.az_index}  # pages this layout has
        if parts in (["search"], ["contact"]) or (len(parts) == 1 and optional.get(parts[0])):
            return getattr(self, parts[0]), ()
        if len(parts) == 2 and parts[0] == "d" and parts[1] in self.by_dept_slug:
            return self.department, (self.by_dept_slug[parts[1]],)
        if len(parts) == 2 and parts[0] == "people" and parts[1] in self.by_slug:
            return self.person, (self.by_slug[parts[1]],)
        raise NotFound(path)

    def home(self, request: Request) -> Response:
        """What the home page says follows where the department links are; the
        switchboard notice is an aspect of its own (the contact task's plan reads it)."""
        w = self.words
        if self.look.departments == "home":
            items = "".join(f"<li style='margin-bottom:8px'>{link(d.name, self.href(f'/d/{d.slug}'), f'dept:{d.slug}')}"
                            f" &ndash; {len(d.people)} people, head: {esc(d.head.name)}</li>" for d in self.departments)
            body = (f"<h1>{esc(self.org)}</h1><p>Find colleagues by department or search by name.</p>"
                    f"<h2>Departments</h2><ul>{items}</ul>")
        elif self.look.departments == "menu":
            body = (f"<h1>{esc(self.org)} staff directory</h1>"
                    f"<p>Choose a department {menu_position(self.look.frame)}, or find a colleague by name.</p>")
        else:
            body = (f"<h1>{esc(w.staff)}</h1><p>{esc(self.org)}: {len(self.people)} entries in {len(self.departments)} units. "
                    "Browse the Units list or the A-Z index, or search by name.</p>")
        if self.look.switchboard_on_home:
            body += (f"<div class='notice'>Main switchboard: <b>{esc(self.switchboard)}</b> &middot; general enquiries: "
                     f"<b>{esc(self.enquiries)}</b></div>")
        return Response(self._page("Home", body))

    def units(self, request: Request) -> Response:
        rows = [[link(d.name, self.href(f"/d/{d.slug}"), f"dept:{d.slug}"), esc(d.head.name), str(len(d.people))]
                for d in self.departments]
        return Response(self._page("Units", "<h1>Units</h1>" + table(["Unit", self.words.head, "Entries"], rows)))

    def az(self, request: Request) -> Response:
        groups = self.surname_groups()
        letter = request.arg("letter").upper()
        bar = " ".join(link(l, self.href("/az", letter=l), f"letter:{l}") for l in groups)
        body = f"<h1>A-Z index</h1><p style='font-size:20px; word-spacing:16px'>{bar}</p>"  # room to click
        if letter in groups:
            rows = [[self._person_link(p), esc(p.title), esc(p.department)] for p in groups[letter]]
            body += f"<h2>Surnames: {esc(letter)}</h2>" + table(["Name", self.words.title, "Unit"], rows)
        else:
            body += "<p>Choose the first letter of a surname.</p>"
        return Response(self._page("A-Z index", body))

    def department(self, request: Request, d: Department) -> Response:
        page = _int(request.arg("page"), 1)
        body = (f"<h1>{esc(d.name)}</h1><p>{esc(self.words.head)}: {self._person_link(d.head, 'head')}</p>"
                f"<h2>{esc(self.words.staff)}</h2>"
                + self._listing(d.people, page, lambda n: self.href(f"/d/{d.slug}", page=n), show_unit=False))
        return Response(self._page(d.name, body))

    def person(self, request: Request, p: Person) -> Response:
        w = self.words
        unit = link(p.department, self.href(f"/d/{content.slug(p.department)}"), "person-dept")
        unit_label = "Unit" if self.look.departments == "units" else "Department"  # as its Units page says
        rows = [(w.title, esc(p.title)), (unit_label, unit), (w.email, esc(p.email)), (w.phone, esc(p.phone)),
                (w.office, esc(p.office))]
        if self.look.location_first:  # where to find the person, then how to reach them
            rows = [rows[4], rows[3], rows[2], rows[0], rows[1]]
        card = "<table>" + "".join(f"<tr><th>{esc(label)}</th><td>{value}</td></tr>" for label, value in rows) + "</table>"
        return Response(self._page(p.name, f"<h1>{esc(p.name)}</h1>{card}"))

    def search(self, request: Request) -> Response:
        query = request.arg("q").strip()
        found = self.search_results(query)
        body = f"<h1>Results for &ldquo;{esc(query)}&rdquo;</h1><p>{len(found)} found</p>"
        if found:
            page = _int(request.arg("page"), 1)
            body += self._listing(found, page, lambda n: self.href("/search", q=query, page=n), show_unit=True)
        else:
            body += "<p>Nobody matches. Search by first name or surname.</p>"
        return Response(self._page("Search", body, query))

    def contact(self, request: Request) -> Response:
        rows = [["Address", esc(self.address)], ["Main switchboard", esc(self.switchboard)],
                ["General enquiries", esc(self.enquiries)], ["Opening hours", "Monday to Friday, 8:30 to 17:00"]]
        body = f"<h1>{esc(self.words.contact)}</h1>" + table(["", esc(self.org)], rows)
        return Response(self._page(self.words.contact, body))

    # -- tasks ---------------------------------------------------------------------
    def vocabulary(self, name: str) -> list[str]:
        if name == "person_name":
            return [p.name for p in self.people]
        raise KeyError(name)

    def draft_tasks(self, rng: random.Random) -> list[TaskDraft]:
        single = self._spread(rng, 5)  # distinct people for the one-person tasks
        heads = rng.sample(self.departments, 2)
        return [
            # easy: 1-3 facts
            self._lookup_task(rng, [single[0]], ["email"]),
            self._lookup_task(rng, [single[1]], ["email"]),
            self._lookup_task(rng, [single[2]], ["phone", "office"]),
            self._heads_task(heads[:1]),
            self._heads_task(heads[1:2]),
            self._roles_task(rng, 1),
            self._contact_task(),
            # medium: 4-6 facts
            self._lookup_task(rng, [single[3]], ["title", "email", "phone", "office"]),
            self._lookup_task(rng, [single[4]], ["title", "email", "phone", "office"]),
            self._lookup_task(rng, self._spread(rng, rng.randint(4, 6)), ["email"]),
            self._lookup_task(rng, self._spread(rng, 3), ["phone", "office"]),
            self._heads_task(rng.sample(self.departments, 2)),
            # hard: 7+ facts
            self._lookup_task(rng, self._spread(rng, 7), ["email"]),
            self._lookup_task(rng, self._spread(rng, 8), ["email"]),
            self._lookup_task(rng, self._spread(rng, 2), ["title", "email", "phone", "office"]),
            self._heads_task(rng.sample(self.departments, 4)),
            self._roles_task(rng, 3),
            self._roster_task(rng),
        ]

    def short_tasks(self, rng: random.Random) -> list[TaskDraft]:
        return [self._short_head(d) for d in rng.sample(self.departments, 4)]

    def _short_head(self, d: Department) -> TaskDraft:
        """The department page names its head: open it among its siblings, read one name."""
        plan, subtask = [], f"head_of_{d.key}"
        self._go_to_department(plan, d, subtask)
        plan.append(note({f"{d.key}_head_name": d.head.name}, subtask))
        plan.append(answer(f"Head of {d.name}: {d.head.name}"))
        instruction = f"In the {self.org} staff directory, who is the head of the department {d.name}?"
        group = FactGroup(f"name of the head of {d.name}", [Fact(d.head.name, "text", vocab="person_name")])
        return TaskDraft("directory.short_head", instruction, [group], plan)

    def _spread(self, rng: random.Random, count: int) -> list[Person]:
        """`count` people from as many different departments as possible."""
        pools = [rng.sample(d.people, len(d.people)) for d in rng.sample(self.departments, len(self.departments))]
        return [pools[i % len(pools)][i // len(pools)] for i in range(count)]

    def _go_to_department(self, plan: list[dict], d: Department, subtask: str) -> None:
        if self.look.departments == "home" and not _at_home(plan):
            plan.append(click("home", "Go back to the home page with the list of departments.", subtask))
        if self.look.departments == "units":
            plan.append(click("units", "Open the list of units.", subtask))
        plan.append(click(f"dept:{d.slug}", f'Open the "{d.name}" department.', subtask))

    def _next_pages(self, plan: list[dict], people: list[Person], p: Person, subtask: str) -> None:
        for _ in range(people.index(p) // self.look.page_size):
            plan.append(click("next", "Go to the next page of the list.", subtask))

    def _reach(self, plan: list[dict], p: Person, attrs: list[str], subtask: str) -> None:
        """Moves from any page to a page that shows `attrs` of p: a search for p's name,
        the one way a plan takes (the task does not name p's department, and a teacher that
        picks between ways at random teaches a small model to blend them)."""
        plan.append(type_into("search", p.name, f'Search the directory for "{p.name}".', subtask))
        self._next_pages(plan, self.search_results(p.name), p, subtask)
        if not set(attrs) <= LISTED[self.look.listing]:  # the results list does not show them
            plan.append(click(f"person:{p.slug}", f"Open {p.name}'s entry.", subtask))

    def _lookup_task(self, rng: random.Random, people: list[Person], attrs: list[str]) -> TaskDraft:
        plan, groups, parts = [], [], []
        for p in people:
            subtask = f"find_{p.key}"
            self._reach(plan, p, attrs, subtask)
            values = {a: p.office if a == "office" else getattr(p, a) for a in attrs}
            plan.append(note({f"{p.key}_{a}": v for a, v in values.items()}, subtask))
            facts = [Fact(p.room if a == "office" else values[a], ATTRIBUTES[a][1]) for a in attrs]
            groups.append(FactGroup(f"{', '.join(ATTRIBUTES[a][0] for a in attrs)} of {p.name}", facts))
            parts.append(f"{p.name}: " + ", ".join(f"{ATTRIBUTES[a][0]} {values[a]}" for a in attrs))
        plan.append(answer("; ".join(parts)))
        asked = _join([ATTRIBUTES[a][0] for a in attrs])
        if len(people) == 1:
            instruction = f"In the {self.org} staff directory, find the {asked} of {people[0].name}."
        else:
            instruction = f"In the {self.org} staff directory, find the {asked} of each of these people: {_join([p.name for p in people])}."
        template = "directory.card" if len(attrs) == 4 else f"directory.{'_'.join(attrs)}"
        return TaskDraft(template, instruction, groups, plan)

    def _heads_task(self, departments: list[Department]) -> TaskDraft:
        plan, groups, parts = [], [], []
        for d in departments:
            subtask = f"head_of_{d.key}"
            self._go_to_department(plan, d, subtask)
            plan.append(click("head", f"Open the entry of the head, {d.head.name}.", subtask))
            plan.append(note({f"{d.key}_head_name": d.head.name, f"{d.key}_head_email": d.head.email}, subtask))
            groups.append(FactGroup(f"name and email address of the head of {d.name}",
                                    [Fact(d.head.name, "text", vocab="person_name"), Fact(d.head.email, "email")]))
            parts.append(f"{d.name}: {d.head.name} ({d.head.email})")
        plan.append(answer("Heads: " + "; ".join(parts)))
        names = _join([d.name for d in departments])
        which = f"the department {names}" if len(departments) == 1 else f"each of these departments: {names}"
        instruction = f"In the {self.org} staff directory, find the name and email address of the head of {which}."
        return TaskDraft("directory.head", instruction, groups, plan)

    def _roles_task(self, rng: random.Random, count: int) -> TaskDraft:
        """"Who is the <role> in <department>": only roles held by one person there."""
        plan, groups, parts, asked = [], [], [], []
        for d in rng.sample(self.departments, count):
            titles = [p.title for p in d.people]
            holder = rng.choice([p for p in d.people if p is not d.head and titles.count(p.title) == 1])
            subtask = f"{content.slug(holder.title).replace('-', '_')}_in_{d.key}"
            self._go_to_department(plan, d, subtask)
            self._next_pages(plan, d.people, holder, subtask)
            plan.append(click(f"person:{holder.slug}", f"Open the entry of the {holder.title}, {holder.name}.", subtask))
            plan.append(note({f"{subtask}_name": holder.name, f"{subtask}_email": holder.email, f"{subtask}_phone": holder.phone}, subtask))
            groups.append(FactGroup(f"name, email address and phone number of the {holder.title} in {d.name}",
                                    [Fact(holder.name, "text", vocab="person_name"), Fact(holder.email, "email"),
                                     Fact(holder.phone, "phone")]))
            parts.append(f"{holder.title} in {d.name}: {holder.name}, email {holder.email}, phone {holder.phone}")
            asked.append(f"the {holder.title} in {d.name}")
        plan.append(answer("; ".join(parts)))
        whose = "their" if count == 1 else "each person's"
        instruction = (f"In the {self.org} staff directory, find out who is {_join(asked)}. "
                       f"Give {whose} name, email address and phone number.")
        return TaskDraft("directory.role", instruction, groups, plan)

    def _roster_task(self, rng: random.Random) -> TaskDraft:
        d = rng.choice([d for d in self.departments if len(d.people) >= 7])
        plan, subtask = [], f"list_{d.key}_staff"
        self._go_to_department(plan, d, subtask)
        for start in range(0, len(d.people), self.look.page_size):
            if start:
                plan.append(click("next", "Go to the next page of the list.", subtask))
            names_here = "; ".join(p.name for p in d.people[start : start + self.look.page_size])
            plan.append(note({f"{d.key}_staff_page_{start // self.look.page_size + 1}": names_here}, subtask))
        plan.append(answer(f"The {len(d.people)} people in {d.name}: " + "; ".join(p.name for p in d.people)))
        instruction = (f"In the {self.org} staff directory, list the names of all {len(d.people)} people "
                       f"in the department {d.name}, including its head.")
        facts = [Fact(p.name, "text", vocab="person_name") for p in d.people]
        return TaskDraft("directory.roster", instruction, [FactGroup(f"everyone in {d.name}", facts)], plan)

    def _contact_task(self) -> TaskDraft:
        plan, subtask = [], "general_contact"
        if not self.look.switchboard_on_home:  # else the home page, where the plan starts, shows both
            plan.append(click("contact", "Open the contact page.", subtask))
        plan.append(note({f"{self.org_key}_switchboard": self.switchboard, f"{self.org_key}_enquiries_email": self.enquiries}, subtask))
        plan.append(answer(f"Main switchboard: {self.switchboard}; general enquiries: {self.enquiries}"))
        instruction = f"What are the main switchboard phone number and the general enquiries email address of {self.org}?"
        group = FactGroup("switchboard number and enquiries address", [Fact(self.switchboard, "phone"), Fact(self.enquiries, "email")])
        return TaskDraft("directory.contact", instruction, [group], plan)


def _at_home(plan: list[dict]) -> bool:
    """Whether a plan so far leaves the agent on the home page (where it starts)."""
    moves = [m for m in plan if m["op"] != "note"]
    return not moves or moves[-1].get("oid") == "home"


def _fresh(used: set[str], make) -> str:
    """A value from `make()` not in `used` (and now in it)."""
    while (value := make()) in used:
        pass
    used.add(value)
    return value


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
