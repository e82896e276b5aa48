"""A community centre's services site: info pages (events, rooms) and five forms.

Forms: newsletter signup, event registration, room booking, contact, membership. Every
field is a plain text input, radio group or checkbox (no <select>, no JavaScript, no
HTML5 validation, which would block the agent's submit-on-Enter). The agent's `type`
action presses Enter, so a form is filled one field per submit: the server re-renders
it with the entered values kept and errors next to the fields still missing or wrong,
and only a complete, valid POST is stored in `session["submissions"][form]` and
redirected (303) to a confirmation page with a code made from the submission.

Layouts (LAYOUT; a training site mixes those of variants 1 and 2 aspect by aspect): 1
has every form in the top bar and field order as listed in FORMS; 2 puts forms in the
sidebar, lists events by name, asks radio groups first and registers for an event from
the event's page; 3 (test) hides the forms behind an "Online services" page, asks
contact details first, and uses its own wording throughout.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import re

from asyncwebrl.web import content
from asyncwebrl.web.html import link, render_page, table
from asyncwebrl.web.site import (
    Fact, FactGroup, NotFound, Request, Response, Site, TaskDraft, answer, click, esc, note, type_into,
)

EVENT_NAMES = """Pottery Workshop|Jazz Evening|Chess Tournament|Film Night|Photography Walk|Coding Club|
Book Swap|Salsa Class|Science Talk|Watercolour Basics|Board Game Night|Poetry Reading|Bread Baking Class|
Gardening Clinic|Quiz Night|Choir Open Rehearsal""".replace("\n", "").split("|")
ROOM_NAMES = ["Garden Room", "Main Hall", "Studio A", "Library Annex", "Boardroom", "Terrace Room", "Workshop"]
FLOORS = ["Ground floor", "First floor", "Second floor"]
FREQUENCIES = ["Weekly", "Monthly"]
TOPICS = {  # contact topic: messages a task may send under it
    "General question": ["Is the car park open on Sundays?", "Do you sell gift vouchers?"],
    "Accessibility": ["Is there step-free access to the first floor?", "Do you have a hearing loop?"],
    "Lost property": ["I left a blue umbrella in the Main Hall.", "I lost a grey scarf at Quiz Night."],
}
TIERS = {"Basic": 2500, "Family": 6000, "Patron": 15000}  # yearly fee in cents
REQUESTS = ["Wheelchair access please", "We need a projector", "Extra chairs by the window", "Quiet corner for a baby"]
MAIL_DOMAINS = ["example.com", "mail.example.org", "post.example.net"]
SEASON_START = datetime.date(2026, 3, 2)
BOOKING_DAYS = 120
LAST_BOOKABLE = SEASON_START + datetime.timedelta(days=BOOKING_DAYS - 1)
OPENING_MINUTES = (8 * 60, 21 * 60)  # bookings may start 08:00 .. 21:00
MAX_TICKETS = 6

# form: (confirmation code prefix, fields in the order the "as listed" layout asks them)
FORMS = {
    "newsletter": ("NL", ["email", "frequency"]),
    "register": ("EV", ["name", "email", "event", "tickets"]),
    "booking": ("BK", ["name", "phone", "room", "date", "time", "party", "requests"]),
    "contact": ("CT", ["name", "email", "topic", "message"]),
    "membership": ("MB", ["name", "email", "phone", "birthdate", "tier", "terms"]),
}
CHOICE_FIELDS = {"event", "room", "frequency", "topic", "tier"}  # radio groups
OPTIONAL_FIELDS = {"requests"}
FACT_TYPES = {"email": "email", "phone": "phone", "date": "date", "birthdate": "date", "tickets": "number", "party": "number"}
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
TIME = re.compile(r"^(\d{1,2}):(\d{2})$")


# key: its wording in variants 1, 2 and 3 (field labels, then page and form titles, then the rest)
WORDING = {
    "name": ("Full name", "Your name", "Name"),
    "email": ("Email address", "E-mail", "Email"),
    "phone": ("Phone number", "Telephone", "Contact phone"),
    "date": ("Date (YYYY-MM-DD)", "Booking date (YYYY-MM-DD)", "Day (YYYY-MM-DD)"),
    "time": ("Start time (HH:MM, 24-hour)", "Arrival time (HH:MM)", "Time (HH:MM)"),
    "party": ("Party size", "Number of guests", "Guests"),
    "room": ("Room", "Choose a space", "Space"),
    "requests": ("Special requests (optional)", "Anything we should know? (optional)", "Notes (optional)"),
    "event": ("Event", "Choose an event", "Session"),
    "tickets": ("Number of tickets", "Tickets", "Seats"),
    "frequency": ("How often would you like to hear from us?", "Mailing frequency", "Frequency"),
    "topic": ("Topic", "Subject", "Reason for contact"),
    "message": ("Message", "Your message", "Details"),
    "birthdate": ("Date of birth (YYYY-MM-DD)", "Birthday (YYYY-MM-DD)", "Born on (YYYY-MM-DD)"),
    "tier": ("Membership type", "Plan", "Tier"),
    "terms": ("I accept the membership terms", "I agree to the terms and conditions", "I have read and accept the terms"),
    "events": ("Events", "What's on", "Programme"),
    "rooms": ("Rooms", "Our spaces", "Spaces"),
    "newsletter": ("Newsletter", "Mailing list", "E-news subscription"),
    "register": ("Event registration", "Sign up for an event", "Event booking"),
    "booking": ("Book a room", "Reserve a space", "Space hire request"),
    "contact": ("Contact us", "Write to us", "Enquiry"),
    "membership": ("Membership", "Join", "Membership application"),
    "submit": ("Submit", "Send", "Confirm"),
    "register_link": ("Register for this event", "Sign up for this event", "Book seats"),
    "thanks": ("Thank you! Your submission was received.", "All done - we have your details.", "Request confirmed."),
}
WORDING_BY_VARIANT = {v: {key: texts[v - 1] for key, texts in WORDING.items()} for v in (1, 2, 3)}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The aspects a training site draws one by one from variant 1 or 2 (Site.layout)."""

    frame: str  # html.FRAMES: where the menu sits, colours, fonts
    field_order: str  # "as listed" (in FORMS) | "choices first" (radio groups) | "contact first" (email, phone)
    events_by_name: bool  # the events page lists events by name rather than by date
    # Plans register for a named event from its page (whose link opens the form with the
    # event chosen) rather than from the form's menu link. Tasks that name the event by
    # date take the event page always.
    register_from_event: bool
    services_page: bool  # the forms behind an "Online services" page rather than in the menu


LAYOUT = {
    1: Layout("topbar", "as listed", events_by_name=False, register_from_event=False, services_page=False),
    2: Layout("sidebar", "choices first", events_by_name=True, register_from_event=True, services_page=False),
    3: Layout("compact-right", "contact first", events_by_name=False, register_from_event=False, services_page=True),
}
FIRST_FIELDS = {"as listed": set(), "choices first": CHOICE_FIELDS, "contact first": {"email", "phone"}}


@dataclasses.dataclass
class Event:
    name: str
    day: datetime.date
    start: str  # "18:30"
    price_cents: int
    room: str
    host: str

    slug = property(lambda self: content.slug(self.name))
    price = property(lambda self: content.money(self.price_cents))
    date = property(lambda self: content.long_date(self.day))


@dataclasses.dataclass
class Room:
    name: str
    floor: str
    capacity: int
    rate_cents: int

    rate = property(lambda self: content.money(self.rate_cents))


def placeholder(form: str) -> str:
    """The oracle replaces this with the confirmation code issued in its episode."""
    return "{state:submissions." + form + ".confirmation}"


class FormsSite(Site):
    kind = "forms"
    domain = "services"
    subdomain = "bookings and registrations"

    def __init__(self, variant: int, seed: int):
        super().__init__(variant, seed)
        rng = self.rng
        self.brand = f"{rng.choice(content.ADJECTIVES)} {rng.choice(['Community Centre', 'Civic Centre', 'Arts House', 'Town Hall'])}"
        self.words = self.wording(WORDING_BY_VARIANT)
        self.look = self.layout(LAYOUT)
        capacities = sorted(rng.sample([8, 12, 16, 20, 24, 30, 40, 60, 80], 5))
        self.rooms = [Room(name, rng.choice(FLOORS), cap, rng.randint(3, 30) * 500)
                      for name, cap in zip(rng.sample(ROOM_NAMES, 5), capacities)]
        days = sorted(rng.sample(range(BOOKING_DAYS - 10), 8))  # distinct dates: tasks name events by date
        hosts = content.unique_names(rng, 8)
        self.events = [Event(name, SEASON_START + datetime.timedelta(days=d), rng.choice(["10:00", "14:30", "18:00", "19:30"]),
                             rng.randint(10, 90) * 50, rng.choice(self.rooms).name, host)
                       for name, d, host in zip(rng.sample(EVENT_NAMES, 8), days, hosts)]
        self.event_by_slug = {e.slug: e for e in self.events}
        self.room_by_name = {r.name: r for r in self.rooms}

    # -- presentation ------------------------------------------------------------------
    def _page(self, title: str, body: str) -> str:
        w = self.words
        nav = [(w["events"], self.href("/events"), "nav:events"), (w["rooms"], self.href("/rooms"), "nav:rooms")]
        if self.look.services_page:
            nav.append(("Online services", self.href("/services"), "nav:services"))
        else:
            nav += [(w[f], self.href(f"/{f}"), f"nav:{f}") for f in FORMS]
        return render_page(self.look.frame, brand=self.brand, home_href=self.href("/"), title=title, nav=nav, body=body,
                           footer=f"{self.brand} - open daily 08:00 to 22:00")

    def options(self, field: str) -> list[tuple[str, str]]:
        """(value, visible text) of a radio group. Events and rooms show only their names,
        so tasks that pick one by date or size need the info pages."""
        if field == "event":
            return [(e.name, e.name) for e in self.events]
        if field == "room":
            return [(r.name, r.name) for r in self.rooms]
        if field == "tier":
            return [(t, f"{t} ({content.money(c)} per year)") for t, c in TIERS.items()]
        return [(v, v) for v in (FREQUENCIES if field == "frequency" else TOPICS)]

    def ordered_fields(self, form: str) -> list[str]:
        first = FIRST_FIELDS[self.look.field_order]
        return sorted(FORMS[form][1], key=lambda f: f not in first)  # stable: the rest as listed

    def _field_html(self, field: str, value: str, error: str) -> str:
        label = self.words[field]
        err = f" <span class='error'>{esc(error)}</span>" if error else ""
        if field in CHOICE_FIELDS:  # data-oid on the <label>: the whole text is the click target
            items = "".join(
                f"<label data-oid='{field}={content.slug(v)}'><input type='radio' name='{field}' value='{esc(v)}'"
                f"{' checked' if v == value else ''}> {esc(text)}</label><br>" for v, text in self.options(field))
            return f"<fieldset><legend>{esc(label)}</legend>{items}{err}</fieldset>"
        if field == "terms":
            checked = " checked" if value == "yes" else ""
            return f"<p><label data-oid='terms'><input type='checkbox' name='terms' value='yes'{checked}> {esc(label)}</label>{err}</p>"
        kind = "email" if field == "email" else "text"
        return (f"<p><label for='f-{field}'>{esc(label)}</label><br><input type='{kind}' id='f-{field}' name='{field}'"
                f" value='{esc(value)}' size='34' data-oid='{field}'>{err}</p>")

    def _form_page(self, form: str, values: dict[str, str], errors: dict[str, str]) -> Response:
        title = self.words[form]
        hints = {
            "booking": f"Bookings are taken for {content.long_date(SEASON_START)} to {content.long_date(LAST_BOOKABLE)}, "
                       "starting between 08:00 and 21:00. Party size may not exceed the room's capacity.",
            "register": f"Up to {MAX_TICKETS} tickets per registration. Dates and prices are on the {self.words['events']} page.",
            "membership": "Members must be 18 or older.",
        }
        notice = f"<p class='error'>Please correct the {len(errors)} field(s) marked below.</p>" if errors else ""
        fields = "".join(self._field_html(f, values.get(f, ""), errors.get(f, "")) for f in self.ordered_fields(form))
        body = (f"<h1>{esc(title)}</h1><p>{esc(hints.get(form, 'All fields are required.'))}</p>{notice}"
                f"<form method='post' action='{esc(self.href('/' + form))}' novalidate>{fields}"
                f"<p><button type='submit' data-oid='submit'>{esc(self.words['submit'])}</button></p></form>")
        return Response(self._page(title, body))

    # -- validation ------------------------------------------------------------------
    def _check(self, field: str, value: str, values: dict[str, str]) -> tuple[str, str]:
        """(error message or "", the value as stored) for one non-empty field."""
        if field == "email" and not EMAIL.match(value):
            return "Enter a valid email address, like name@example.com.", value
        if field == "phone" and not 7 <= sum(ch.isdigit() for ch in value) <= 15:
            return "Enter a phone number with 7 to 15 digits.", value
        if field in ("date", "birthdate"):
            try:
                day = datetime.date.fromisoformat(value) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) else None
            except ValueError:
                day = None
            if day is None:
                return "Use the format YYYY-MM-DD.", value
            low, high = ((SEASON_START, LAST_BOOKABLE) if field == "date"
                         else (datetime.date(1920, 1, 1), datetime.date(2008, 3, 1)))
            if not low <= day <= high:
                return f"Choose a date from {low.isoformat()} to {high.isoformat()}.", value
        if field == "time":
            match = TIME.match(value)
            minutes = int(match[1]) * 60 + int(match[2]) if match and int(match[2]) < 60 else -1
            if not OPENING_MINUTES[0] <= minutes <= OPENING_MINUTES[1]:
                return "Enter a start time from 08:00 to 21:00 as HH:MM.", value
            return "", f"{minutes // 60:02d}:{minutes % 60:02d}"
        if field in ("tickets", "party"):
            if not value.isdigit():
                return "Enter a whole number.", value
            room = self.room_by_name.get(values.get("room", ""))
            high = MAX_TICKETS if field == "tickets" else (room.capacity if room else max(r.capacity for r in self.rooms))
            if not 1 <= int(value) <= high:
                return f"Enter a number from 1 to {high}.", value
            return "", str(int(value))
        if field in CHOICE_FIELDS and value not in dict(self.options(field)):
            return "Choose one of the options.", value
        if field == "terms" and value != "yes":
            return "Please accept the terms.", value
        if (field == "name" and len(value) < 2) or (field == "message" and len(value) < 5):
            return "This is too short.", value
        return "", value

    def validate(self, form: str, values: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(errors by field, cleaned values). Cleaned values are what the judge compares."""
        errors, clean = {}, {}
        for field in FORMS[form][1]:
            value = values.get(field, "")
            if not value:
                if field not in OPTIONAL_FIELDS:
                    errors[field] = "Please accept the terms." if field == "terms" else "This field is required."
                clean[field] = ""
                continue
            errors[field], clean[field] = self._check(field, value, values)
        return {f: e for f, e in errors.items() if e}, clean

    # -- routes ------------------------------------------------------------------------
    def route(self, method: str, path: str):
        parts = [p for p in path.split("/") if p]
        if len(parts) == 1 and parts[0] in FORMS:
            return (self.submit if method == "POST" else self.show_form), (parts[0],)
        if method != "GET":
            raise NotFound(path)
        if not parts:
            return self.home, ()
        if parts in (["events"], ["rooms"]) or (parts == ["services"] and self.look.services_page):
            return getattr(self, f"{parts[0]}_page"), ()
        if len(parts) == 2 and parts[0] == "events" and parts[1] in self.event_by_slug:
            return self.event_page, (self.event_by_slug[parts[1]],)
        if len(parts) == 2 and parts[0] in FORMS and parts[1] == "done":
            return self.done_page, (parts[0],)
        raise NotFound(path)

    def home(self, request: Request) -> Response:
        soon = "".join(f"<li>{link(e.name, self.href(f'/events/{e.slug}'), f'event:{e.slug}')} - {esc(e.date)}</li>" for e in self.events[:3])
        intro = {1: f"Welcome to {self.brand}: classes, events and rooms for everyone.",
                 2: f"{self.brand} is your neighbourhood's home for learning and fun.",
                 3: "Book events and spaces, join, or send us an enquiry online."}[self.variant]
        return Response(self._page("Home", f"<h1>{esc(self.brand)}</h1><p>{esc(intro)}</p><h2>Coming up</h2><ul>{soon}</ul>"))

    def events_page(self, request: Request) -> Response:
        events = sorted(self.events, key=lambda e: e.name) if self.look.events_by_name else self.events
        rows = [[link(e.name, self.href(f"/events/{e.slug}"), f"event:{e.slug}"), esc(e.date)] for e in events]
        title = self.words["events"]
        return Response(self._page(title, f"<h1>{esc(title)}</h1>" + table(["Event", "Date"], rows)))

    def event_page(self, request: Request, event: Event) -> Response:
        facts = table(["", ""], [["Date", esc(event.date)], ["Starts", esc(event.start)], ["Ticket price", esc(event.price)],
                                 ["Room", esc(event.room)], ["Host", esc(event.host)]])
        register = link(self.words["register_link"], self.href("/register", event=event.slug), "register-link")
        return Response(self._page(event.name, f"<h1>{esc(event.name)}</h1>{facts}<p>{register}</p>"))

    def rooms_page(self, request: Request) -> Response:
        rows = [[esc(r.name), esc(r.floor), str(r.capacity), esc(r.rate)] for r in self.rooms]
        body = f"<h1>{esc(self.words['rooms'])}</h1>" + table(["Room", "Floor", "Capacity (people)", "Hourly rate"], rows)
        return Response(self._page(self.words["rooms"], body))

    def services_page(self, request: Request) -> Response:
        items = "".join(f"<li>{link(self.words[f], self.href(f'/{f}'), f'service:{f}')}</li>" for f in FORMS)
        return Response(self._page("Online services", f"<h1>Online services</h1><ul>{items}</ul>"))

    def show_form(self, request: Request, form: str) -> Response:
        preset = self.event_by_slug.get(request.arg("event"))  # from an event page's register link
        return self._form_page(form, {"event": preset.name} if preset and form == "register" else {}, {})

    def submit(self, request: Request, form: str) -> Response:
        values = {field: request.field(field) for field in FORMS[form][1]}
        errors, clean = self.validate(form, values)
        if errors:  # re-render with everything the visitor typed or ticked
            return self._form_page(form, values, errors)
        count = request.session.get("submission_count", 0) + 1
        request.session["submission_count"] = count
        # The code depends on the episode's submissions, so only submitting reveals it.
        code_rng = random.Random(f"{self.site_id}|{form}|{count}|{sorted(clean.items())}")
        clean["confirmation"] = f"{FORMS[form][0]}-{code_rng.randint(100000, 999999)}"  # the judge's code shape
        request.session.setdefault("submissions", {})[form] = clean
        return Response("", status=303, location=self.href(f"/{form}/done"))

    def done_page(self, request: Request, form: str) -> Response:
        stored = request.session.get("submissions", {}).get(form)
        title = self.words[form]
        if not stored:
            return Response(self._page(title, f"<h1>{esc(title)}</h1><p>Nothing has been submitted yet.</p>"))
        rows = [[esc(self.words[f]), esc(stored[f])] for f in self.ordered_fields(form) if stored[f]]
        body = (f"<h1>{esc(title)}</h1><div class='notice'>{esc(self.words['thanks'])} Your confirmation code is "
                f"<b data-oid='confirmation'>{esc(stored['confirmation'])}</b>.</div>" + table(["Field", "Value"], rows))
        return Response(self._page(title, body))

    # -- tasks -------------------------------------------------------------------------
    def vocabulary(self, name: str) -> list[str]:
        vocabularies = {"event_name": [e.name for e in self.events], "room_name": [r.name for r in self.rooms],
                        "person_name": [e.host for e in self.events]}
        return vocabularies[name]

    def _open_form(self, form: str, subtask: str) -> list[dict]:
        title = self.words[form]
        if self.look.services_page:
            return [click("nav:services", "Open the online services page.", subtask),
                    click(f"service:{form}", f'Open the "{title}" form.', subtask)]
        return [click(f"nav:{form}", f'Open the "{title}" form.', subtask)]

    def _open_event(self, event: Event, subtask: str) -> list[dict]:
        return [click("nav:events", f"Open the {self.words['events']} page.", subtask),
                click(f"event:{event.slug}", f'Open "{event.name}".', subtask)]

    def _fill(self, form: str, values: dict[str, str], subtask: str, preset: tuple = ()) -> list[dict]:
        """Moves that fill the open form. Radio and checkbox clicks come first: they are only
        sent with the next Enter. Optional text comes before required text, so the form turns
        valid (and is stored) exactly at the last move."""
        labels = self.words
        moves = [click(f"{f}={content.slug(values[f])}" if f in CHOICE_FIELDS else f,
                       f'Select "{values[f]}" under "{labels[f]}".' if f in CHOICE_FIELDS else f'Tick "{labels[f]}".', subtask)
                 for f in self.ordered_fields(form) if f in values and (f in CHOICE_FIELDS or f == "terms") and f not in preset]
        typed = [f for f in self.ordered_fields(form) if f in values and f not in CHOICE_FIELDS and f != "terms"]
        for f in sorted(typed, key=lambda f: f not in OPTIONAL_FIELDS):
            moves.append(type_into(f, values[f], f'Type "{values[f]}" into "{labels[f]}" and press Enter.', subtask))
        return moves

    @staticmethod
    def _state_facts(form: str, values: dict[str, str]) -> list[Fact]:
        facts = [Fact(v, FACT_TYPES.get(f, "text"), source="state", key=f"submissions.{form}.{f}") for f, v in values.items()]
        return facts + [Fact("", "code", source="state_echo", key=f"submissions.{form}.confirmation")]

    def _person(self, rng: random.Random) -> dict[str, str]:
        name = content.unique_names(rng, 1)[0]
        return {"name": name, "email": f"{content.email_local(name)}@{rng.choice(MAIL_DOMAINS)}",
                "phone": content.phone(rng, rng.choice([212, 415, 503, 617]))}

    def draft_tasks(self, rng: random.Random) -> list[TaskDraft]:
        drafts = [self._event_info(rng, [event], rng.randint(2, 3)) for event in rng.sample(self.events, 3)]  # easy
        drafts += [self._room_info(rng, 1), self._newsletter(rng), self._newsletter(rng)]  # easy
        drafts += [self._event_info(rng, rng.sample(self.events, 2), 2), self._room_info(rng, 2), self._register(rng, by_date=True)]  # medium
        drafts += [self._register(rng), self._register(rng), self._contact(rng)]  # medium
        drafts += [self._event_info(rng, rng.sample(self.events, 4), 2), self._booking(rng, with_request=False), self._booking(rng, with_request=True)]  # hard
        drafts += [self._booking(rng, by_capacity=True), self._register(rng, with_newsletter=True), self._membership(rng)]  # hard
        return drafts

    def short_tasks(self, rng: random.Random) -> list[TaskDraft]:
        return [self._event_info(rng, [event], 1, "forms.short_event") for event in rng.sample(self.events, 4)]

    def _event_info(self, rng: random.Random, events: list[Event], per_event: int,
                    template: str = "forms.event_info") -> TaskDraft:
        attributes = {  # key: (what the task asks, getter, fact type, vocabulary)
            "date": ("date", lambda e: e.date, "date", ""), "price": ("ticket price", lambda e: e.price, "number", ""),
            "start": ("start time", lambda e: e.start, "text", ""), "host": ("host", lambda e: e.host, "text", "person_name"),
            "room": ("room", lambda e: e.room, "text", "room_name"),
        }
        asked = rng.sample(list(attributes), per_event)
        while {"start", "price"} <= set(asked):  # "18:30" reads as two numbers next to a price fact
            asked = rng.sample(list(attributes), per_event)
        plan, groups, parts = [], [], []
        for event in events:
            subtask = f"read_{event.slug.replace('-', '_')}"
            plan += self._open_event(event, subtask)
            plan.append(note({f"{subtask[5:]}_{a}": attributes[a][1](event) for a in asked}, subtask))
            groups.append(FactGroup(f"{', '.join(attributes[a][0] for a in asked)} of {event.name}",
                                    [Fact(attributes[a][1](event), attributes[a][2], vocab=attributes[a][3]) for a in asked]))
            parts.append(f"{event.name}: " + ", ".join(f"{attributes[a][0]} {attributes[a][1](event)}" for a in asked))
        plan.append(answer("; ".join(parts)))
        names = _and([f'"{e.name}"' for e in events])
        what = _and([attributes[a][0] for a in asked])
        return TaskDraft(template, f"On {self.brand}, find the {what} of the event{'s' if len(events) > 1 else ''} {names}.", groups, plan)

    def _room_info(self, rng: random.Random, count: int) -> TaskDraft:
        rooms = rng.sample(self.rooms, count)
        plan = [click("nav:rooms", f"Open the {self.words['rooms']} page.", "read_rooms")]
        plan.append(note({f"{content.slug(r.name).replace('-', '_')}_{k}": v for r in rooms
                          for k, v in (("capacity", str(r.capacity)), ("hourly_rate", r.rate))}, "read_rooms"))
        plan.append(answer("; ".join(f"{r.name}: capacity {r.capacity}, hourly rate {r.rate}" for r in rooms)))
        groups = [FactGroup(f"capacity and hourly rate of {r.name}", [Fact(str(r.capacity), "number"), Fact(r.rate, "number")]) for r in rooms]
        names = " and ".join(f'"{r.name}"' for r in rooms)
        return TaskDraft("forms.room_info", f"On {self.brand}, how many people fit in {names}, and what is the hourly rate?", groups, plan)

    def _newsletter(self, rng: random.Random) -> TaskDraft:
        values = {"email": self._person(rng)["email"], "frequency": rng.choice(FREQUENCIES)}
        plan = self._open_form("newsletter", "subscribe") + self._fill("newsletter", values, "subscribe")
        plan.append(answer(f"Subscribed; confirmation code {placeholder('newsletter')}"))
        return TaskDraft("forms.newsletter",
                         f"On {self.brand}, subscribe {values['email']} to the newsletter with {values['frequency'].lower()} emails. "
                         "Answer with the confirmation code.",
                         [FactGroup("newsletter signup", self._state_facts("newsletter", values))], plan)

    def _register(self, rng: random.Random, by_date: bool = False, with_newsletter: bool = False) -> TaskDraft:
        event, person = rng.choice(self.events), self._person(rng)
        values = {"name": person["name"], "email": person["email"], "event": event.name, "tickets": str(rng.randint(1, 4))}
        total = content.money(event.price_cents * int(values["tickets"]))
        groups = [FactGroup("event registration", self._state_facts("register", values))]
        # Through the event page, whose link opens the form with the event already chosen,
        # when the task names the event by date or this layout registers that way.
        if by_date or self.look.register_from_event:
            plan = self._open_event(event, "find_event")
            if by_date:
                day_key = content.slug(event.date.split(",")[0]).replace("-", "_")  # "march_5"
                plan.append(note({f"event_on_{day_key}": event.name, f"{event.slug.replace('-', '_')}_ticket_price": event.price}, "find_event"))
            plan.append(click("register-link", f'Click "{self.words["register_link"]}".', "find_event"))
            plan += self._fill("register", values, "register", preset=("event",))
        else:
            plan = self._open_form("register", "register") + self._fill("register", values, "register")
        who = f"{values['name']} ({values['email']})"
        if by_date:
            groups.append(FactGroup("total ticket cost", [Fact(total, "number")]))
            plan.append(answer(f"Registered for {event.name}; total {total}; confirmation code {placeholder('register')}"))
            return TaskDraft("forms.register_by_date",
                             f"On {self.brand}, register {who} for {_tickets(values['tickets'])} to the event on {event.date}. "
                             "Answer with the total ticket cost and the confirmation code.", groups, plan)
        text = f'On {self.brand}, register {who} for "{event.name}" with {_tickets(values["tickets"])}.'
        if not with_newsletter:
            plan.append(answer(f"Registered; confirmation code {placeholder('register')}"))
            return TaskDraft("forms.register", text + " Answer with the confirmation code.", groups, plan)
        plan.append(note({"registration_confirmation_code": placeholder("register")}, "register"))
        letter = {"email": values["email"], "frequency": rng.choice(FREQUENCIES)}
        plan += self._open_form("newsletter", "subscribe") + self._fill("newsletter", letter, "subscribe")
        plan.append(answer(f"Registration code {placeholder('register')}; newsletter code {placeholder('newsletter')}"))
        groups.append(FactGroup("newsletter signup", self._state_facts("newsletter", letter)))
        return TaskDraft("forms.register_and_subscribe",
                         text + f" Then subscribe the same email to the newsletter ({letter['frequency'].lower()}). "
                         "Answer with both confirmation codes.", groups, plan)

    def _booking(self, rng: random.Random, with_request: bool = False, by_capacity: bool = False) -> TaskDraft:
        person, plan = self._person(rng), []
        day = SEASON_START + datetime.timedelta(days=rng.randrange(BOOKING_DAYS))
        if by_capacity:  # the smallest room that fits the group: read capacities first
            bigger = rng.choice(self.rooms[1:])
            party = rng.randint(self.rooms[self.rooms.index(bigger) - 1].capacity + 1, bigger.capacity)
            room = bigger
            plan.append(click("nav:rooms", f"Open the {self.words['rooms']} page.", "choose_room"))
            plan.append(note({f"smallest_room_for_{party}": room.name}, "choose_room"))
        else:
            room = rng.choice(self.rooms)
            party = rng.randint(2, room.capacity)
        values = {"name": person["name"], "phone": person["phone"], "room": room.name, "date": day.isoformat(),
                  "time": f"{rng.randint(9, 20):02d}:{rng.choice(['00', '30'])}", "party": str(party)}
        if with_request:
            values["requests"] = rng.choice(REQUESTS)
        plan += self._open_form("booking", "book_room") + self._fill("booking", values, "book_room")
        plan.append(answer(f"Booked; confirmation code {placeholder('booking')}"))
        when = content.long_date(day) if rng.random() < 0.5 else day.isoformat()  # sometimes the agent must reformat
        where = "the smallest room that can hold the group" if by_capacity else f"the {room.name}"
        extra = f' Special request: "{values["requests"]}".' if with_request else ""
        return TaskDraft("forms.booking_by_capacity" if by_capacity else "forms.booking",
                         f"On {self.brand}, book {where} for {party} people on {when} at {values['time']}, under the name "
                         f"{person['name']}, phone {person['phone']}.{extra} Answer with the confirmation code.",
                         [FactGroup("room booking", self._state_facts("booking", values))], plan)

    def _contact(self, rng: random.Random) -> TaskDraft:
        person, topic = self._person(rng), rng.choice(list(TOPICS))
        values = {"name": person["name"], "email": person["email"], "topic": topic, "message": rng.choice(TOPICS[topic])}
        plan = self._open_form("contact", "send_enquiry") + self._fill("contact", values, "send_enquiry")
        plan.append(answer(f"Sent; confirmation code {placeholder('contact')}"))
        return TaskDraft("forms.contact",
                         f'On {self.brand}, send the message "{values["message"]}" under the topic "{topic}" as '
                         f"{person['name']} ({person['email']}). Answer with the confirmation code.",
                         [FactGroup("contact message", self._state_facts("contact", values))], plan)

    def _membership(self, rng: random.Random) -> TaskDraft:
        person = self._person(rng)
        birth = datetime.date(rng.randint(1950, 2000), rng.randint(1, 12), rng.randint(1, 28))
        values = {**person, "birthdate": birth.isoformat(), "tier": rng.choice(list(TIERS)), "terms": "yes"}
        plan = self._open_form("membership", "apply") + self._fill("membership", values, "apply")
        plan.append(answer(f"Applied; confirmation code {placeholder('membership')}"))
        return TaskDraft("forms.membership",
                         f"On {self.brand}, apply for a {values['tier']} membership for {person['name']}, born "
                         f"{birth.isoformat()}, email {person['email']}, phone {person['phone']}, accepting the terms. "
                         "Answer with the confirmation code.",
                         [FactGroup("membership application", self._state_facts("membership", values))], plan)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _tickets(count: str) -> str:
    return f"{count} ticket" + ("" if count == "1" else "s")
