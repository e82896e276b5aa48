"""The forms site: deterministic pages, server-side validation that keeps what was typed,
submissions stored per episode, and tasks whose oracle plans really solve them."""

from __future__ import annotations

import html
import http.client
import random
import re
import urllib.parse
import urllib.request

import pytest

from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.site import Request
from asyncwebrl.web.sites import make_site
from asyncwebrl.web.sites.forms import FORMS, FormsSite

VARIANTS = (1, 2, 3)
SEEDS = (0, 1, 2, 3)
GENERIC_KEYS = {"name", "email", "phone", "date", "time", "price", "code", "answer", "result", "value", "room", "event"}


def sample_paths(site: FormsSite) -> list[str]:
    paths = ["/", "/events", f"/events/{site.events[0].slug}", "/rooms", f"/register?event={site.events[1].slug}"]
    paths += [f"/{form}" for form in FORMS] + [f"/{form}/done" for form in FORMS]
    return paths + (["/services"] if site.variant == 3 else [])


def call(site: FormsSite, method: str, path: str, form: dict | None = None, session: dict | None = None):
    parts = urllib.parse.urlsplit(path)
    request = Request(method, parts.path, dict(urllib.parse.parse_qsl(parts.query)),
                      {k: [v] for k, v in (form or {}).items()}, {} if session is None else session)
    return site.handle(request)


def oids(page: str) -> list[str]:
    return re.findall(r"data-oid='([^']*)'|data-oid=\"([^\"]*)\"", page)


def visible_text(page: str) -> str:
    page = re.sub(r"<(style|title)>.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def valid_booking(site: FormsSite) -> dict[str, str]:
    room = site.rooms[-1]
    return {"name": "Rosa Costa", "phone": "(415) 555-0142", "room": room.name, "date": "2026-04-12",
            "time": "9:30", "party": "05", "requests": ""}


@pytest.mark.parametrize("variant", VARIANTS)
def test_same_seed_same_html_other_seed_differs(variant):
    first, again, other = FormsSite(variant, 7), FormsSite(variant, 7), FormsSite(variant, 8)
    for path in sample_paths(first):
        assert call(first, "GET", path).body == call(again, "GET", path).body, path
    assert call(first, "GET", "/events").body != call(other, "GET", "/events").body
    assert [(d.instruction, d.plan) for d in first.draft_tasks(random.Random(1))] == \
           [(d.instruction, d.plan) for d in again.draft_tasks(random.Random(1))]
    # the same invalid POST re-renders byte-identically too
    bad = {"email": "nope", "frequency": "Weekly"}
    assert call(first, "POST", "/newsletter", bad).body == call(again, "POST", "/newsletter", bad).body


def test_variants_serve_pages_over_http_with_unique_oids():
    with LocalWeb() as web:
        for variant in VARIANTS:
            site = make_site(f"forms-v{variant}-s03")
            for path in sample_paths(site):
                request = urllib.request.Request(web.origin + site.base_path + path, headers={"Cookie": "awr_episode=ep1"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    page = response.read().decode()
                assert response.status == 200 and site.brand in page, path
                found = [a or b for a, b in oids(page)]
                assert len(found) == len(set(found)), (path, found)
                assert not re.search(r"<select|<script|<textarea|\srequired[\s>=]", page), path  # Enter must always submit
            for path in ("/events/no-such-event", "/nowhere", "/booking/extra"):
                assert web.dispatch("GET", site.base_path + path, b"", "")[0] == 404
            assert web.dispatch("GET", site.base_path + "/services", b"", "")[0] == (200 if variant == 3 else 404)


@pytest.mark.parametrize("variant", VARIANTS)
def test_partial_form_rerenders_with_values_kept_and_errors(variant):
    site, session = FormsSite(variant, 2), {}
    response = call(site, "POST", "/register", {"name": "Rosa Costa", "event": site.events[2].name}, session)
    assert response.status == 200 and response.location is None
    page = response.body
    assert "value='Rosa Costa'" in page  # what was typed stays
    assert re.search(rf"value='{re.escape(html.escape(site.events[2].name))}' checked", page)  # the radio stays chosen
    assert page.count("This field is required.") == 2  # email and tickets
    assert "submissions" not in session
    # a ticked checkbox survives a re-render as well
    page = call(site, "POST", "/membership", {"terms": "yes", "tier": "Family"}, session).body
    assert "value='yes' checked" in page and "value='Family' checked" in page


@pytest.mark.parametrize("form, field, bad_value, message", [
    ("membership", "email", "rosa.costa@", "valid email"), ("membership", "birthdate", "2015-06-01", "Choose a date from"),
    ("booking", "date", "12/04/2026", "YYYY-MM-DD"), ("booking", "date", "2026-02-30", "YYYY-MM-DD"),
    ("booking", "date", "2027-01-15", "Choose a date from"), ("booking", "time", "23:15", "08:00 to 21:00"),
    ("booking", "party", "many", "whole number"), ("booking", "party", "0", "from 1 to"),
    ("booking", "phone", "12-34", "7 to 15 digits"), ("register", "tickets", "9", "from 1 to 6"),
])
def test_bad_values_are_rejected_and_kept(form, field, bad_value, message):
    site, session = FormsSite(1, 4), {}
    values = {"booking": valid_booking(site), "register": {"name": "Rosa Costa", "email": "rosa@example.com",
                                                           "event": site.events[0].name, "tickets": "2"},
              "membership": {"name": "Rosa Costa", "email": "rosa@example.com", "phone": "(415) 555-0142",
                             "birthdate": "1980-05-05", "tier": "Basic", "terms": "yes"}}[form]
    assert call(site, "POST", f"/{form}", values, {}).status == 303  # valid as given...
    response = call(site, "POST", f"/{form}", values | {field: bad_value}, session)  # ...until one field is wrong
    assert response.status == 200 and message in response.body and "submissions" not in session
    assert f"value='{html.escape(bad_value)}'" in response.body  # shown again for correction
    assert call(site, "POST", "/booking", valid_booking(site) | {"room": "The Moon"}, {}).body.count("Choose one") == 1


def test_party_may_not_exceed_the_chosen_rooms_capacity():
    site = FormsSite(2, 4)
    small = site.rooms[0]
    response = call(site, "POST", "/booking", valid_booking(site) | {"room": small.name, "party": str(small.capacity + 1)}, {})
    assert f"from 1 to {small.capacity}" in response.body
    assert call(site, "POST", "/membership", {"name": "Al Li", "email": "a@b.co", "phone": "5550001111",
                                             "birthdate": "1990-01-01", "tier": "Basic"}, {}).body.count("accept the terms") == 1


def test_valid_post_stores_clean_values_and_redirects_to_the_code():
    site, session = FormsSite(3, 5), {}
    response = call(site, "POST", "/booking", valid_booking(site), session)
    assert response.status == 303 and response.location == site.href("/booking/done")
    stored = session["submissions"]["booking"]
    assert stored["time"] == "09:30" and stored["party"] == "5" and stored["room"] == site.rooms[-1].name
    assert re.fullmatch(r"BK-\d{6}", stored["confirmation"])
    done = call(site, "GET", "/booking/done", session=session).body
    assert stored["confirmation"] in done and "Rosa Costa" in done
    # the code depends on the episode's submissions: a second, identical booking gets a new one
    call(site, "POST", "/booking", valid_booking(site), session)
    assert session["submissions"]["booking"]["confirmation"] != stored["confirmation"]
    assert "Nothing has been submitted" in call(site, "GET", "/contact/done", session={}).body


def test_valid_post_over_http_is_per_episode():
    with LocalWeb() as web:
        site = make_site("forms-v1-s06")
        host, port = web.origin.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=5)
        body = urllib.parse.urlencode({"email": "mei.sato@example.com", "frequency": "Monthly"})
        connection.request("POST", site.href("/newsletter"), body,
                           {"Content-Type": "application/x-www-form-urlencoded", "Cookie": "awr_episode=ep7"})
        response = connection.getresponse()
        response.read()
        assert response.status == 303 and response.getheader("Location") == site.href("/newsletter/done")
        code = web.session("ep7", site.site_id)["submissions"]["newsletter"]["confirmation"]
        assert code in web.dispatch("GET", site.href("/newsletter/done"), b"", "awr_episode=ep7")[2].decode()
        assert "submissions" not in web.session("ep8", site.site_id)


@pytest.mark.parametrize("variant", VARIANTS)
def test_drafts_end_in_one_answer_and_use_specific_memory_keys(variant):
    """(Level mix and step budgets are checked for every kind in test_tasks.py.)"""
    for seed in SEEDS:
        site = FormsSite(variant, seed)
        drafts = site.draft_tasks(random.Random(seed))
        assert 16 <= len(drafts) <= 20
        assert len({d.instruction for d in drafts}) == len(drafts)  # tasks.py drops repeated instructions
        for draft in drafts:
            assert draft.plan[-1]["op"] == "answer" and sum(m["op"] == "answer" for m in draft.plan) == 1
            for move in draft.plan:
                if move["op"] == "note":
                    assert all("_" in key and key not in GENERIC_KEYS for key in move["memory"]), move
            for fact in (f for g in draft.groups for f in g.facts):
                if fact.source == "state_echo":  # the answer must carry the code, so the plan's answer names it
                    assert "{state:" + fact.key + "}" in draft.plan[-1]["text"]
                if fact.vocab:
                    assert fact.value in site.vocabulary(fact.vocab)
