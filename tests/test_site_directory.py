"""The staff directory site: deterministic content, pages served over HTTP, and tasks
whose oracle plans really solve them (walked over the site's own HTML)."""

from __future__ import annotations

import random
import re
import urllib.parse
import urllib.request

import pytest

from asyncwebrl.web.evaluator import judge
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.site import Request
from asyncwebrl.web.tasks import draft_to_task
from asyncwebrl.web.sites import make_site
from asyncwebrl.web.sites.directory import DirectorySite

VARIANTS = (1, 2, 3)
SEEDS = (0, 1, 2, 3, 4, 5)


def sample_paths(site: DirectorySite) -> list[str]:
    person, dept = site.people[0], site.departments[0]
    paths = ["/", f"/d/{dept.slug}", f"/d/{dept.slug}?page=2", f"/people/{person.slug}",
             f"/search?q={urllib.parse.quote(person.surname)}", "/search?q=a&page=2", "/contact"]
    if site.variant == 3:
        paths += ["/units", "/az", f"/az?letter={person.surname[0]}"]
    return paths


def get(web: LocalWeb, site: DirectorySite, path: str) -> tuple[int, str]:
    status, _, body = web.dispatch("GET", site.base_path + path, b"", "awr_episode=test")
    return status, body.decode()


@pytest.mark.parametrize("variant", VARIANTS)
def test_content_shape(variant):
    for seed in SEEDS:
        site = DirectorySite(variant, seed)
        assert 6 <= len(site.departments) <= 8 and 40 <= len(site.people) <= 70
        emails = [p.email for p in site.people]
        assert len(set(emails)) == len(emails) and all(e.endswith("@" + site.mail_domain) for e in emails)
        assert len({p.phone for p in site.people}) == len(site.people)
        assert len({p.office for p in site.people}) == len(site.people)
        assert all(re.fullmatch(r"Room [A-Z]\d{3}", p.office) for p in site.people)
        assert all(d.head in d.people for d in site.departments)
        assert sorted(site.vocabulary("person_name")) == sorted(p.name for p in site.people)


@pytest.mark.parametrize("variant", VARIANTS)
def test_same_seed_same_html_other_seed_differs(variant):
    web = LocalWeb()
    first, again, other = DirectorySite(variant, 7), DirectorySite(variant, 7), DirectorySite(variant, 8)
    for path in sample_paths(first):
        assert first.handle(_request(path)).body == again.handle(_request(path)).body
    assert first.handle(_request("/")).body != other.handle(_request("/")).body
    assert get(web, first, "/")[1] == get(web, again, "/")[1]
    assert [d.plan for d in first.draft_tasks(random.Random(1))] == [d.plan for d in again.draft_tasks(random.Random(1))]


def _request(path: str) -> Request:
    parts = urllib.parse.urlsplit(path)
    return Request("GET", parts.path, dict(urllib.parse.parse_qsl(parts.query)), {}, {})


def test_variants_serve_pages_over_http():
    with LocalWeb() as web:
        for variant in VARIANTS:
            site = make_site(f"directory-v{variant}-s03")
            for path in sample_paths(site):
                request = urllib.request.Request(web.origin + site.href(path), headers={"Cookie": "awr_episode=ep1"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    assert response.status == 200, path
                    assert site.org in response.read().decode()
            status, _ = get(web, site, "/people/nobody-here")
            assert status == 404
            assert get(web, site, "/units")[0] == (200 if variant == 3 else 404)


@pytest.mark.parametrize("variant", VARIANTS)
def test_drafts_end_in_one_answer_and_use_specific_memory_keys(variant):
    """(Level mix and step budgets are checked for every kind in test_tasks.py.)"""
    for seed in SEEDS:
        site = DirectorySite(variant, seed)
        drafts = site.draft_tasks(random.Random(seed))
        assert 16 <= len(drafts) <= 20
        entity_keys = {p.key for p in site.people} | {d.key for d in site.departments} | {site.org_key}
        for draft in drafts:
            assert draft.plan[-1]["op"] == "answer" and sum(m["op"] == "answer" for m in draft.plan) == 1
            for move in draft.plan:
                if move["op"] == "note":
                    # memory keys name the person/department/organisation they are about
                    assert all(any(k.startswith(e + "_") or f"_{e}_" in k for e in entity_keys) for k in move["memory"]), move
            names = [f.value for g in draft.groups for f in g.facts if f.vocab == "person_name"]
            assert all(n in site.vocabulary("person_name") for n in names)


def test_judge_rejects_extra_candidate_names():
    site = DirectorySite(1, 2)
    draft = next(d for d in site.draft_tasks(random.Random(2)) if d.template == "directory.head")
    head = draft.groups[0].facts[0].value
    other = next(n for n in site.vocabulary("person_name") if n != head)
    task = draft_to_task(site, draft, 0)
    vocabularies = {"person_name": site.vocabulary("person_name")}
    good = draft.plan[-1]["text"]
    assert judge(task, good, {}, vocabularies).reward == 1.0
    assert judge(task, f"{good} (or maybe {other})", {}, vocabularies).reward == 0.0
