"""Per-site layout mixing: test sites exactly as they always were, training sites mixing
the training variants' layouts aspect by aspect (web/site.py: Site.layout), with plans
that still solve every task."""

from __future__ import annotations

import dataclasses
import hashlib
import html
import re
import sys
import urllib.parse

import pytest

from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.sites import KINDS, site_class
from asyncwebrl.web.sites.forms import FORMS
from asyncwebrl.web.tasks import tasks_of_site
from asyncwebrl.web.walker import solve_and_judge, walk_task

CRAWL_LIMIT = 150  # pages per site: every kind of page, most of the items
# sha256 (first 16 hex digits) of the pages and of the tasks (instructions, facts, oracle
# plans) of some test sites, computed before layouts became mixable (commit e3041f2). The
# held-out layout is what the measurements on the test split mean: it must not drift.
PINNED = {
    # site id: (pages, tasks)
    "directory-v3-s00": ("73d7aa492bbafe42", "d2172260b340ea3d"),
    "directory-v3-s1000": ("23ce6f98b319be4f", "0437b0166d685a5f"),
    "directory-v3-s1003": ("86c88a79e3f630a8", "0be6669819075070"),
    "forms-v3-s00": ("3ce3267ccbe0346b", "c25d4cb72080d0b8"),
    "forms-v3-s1000": ("86a6f64ee06da647", "208b66e348910e3f"),
    "forms-v3-s1003": ("f7eb73ba3437f728", "e9587f12f71f6856"),
    "reference-v3-s00": ("605fb93096bc97fe", "bf282d1bb4de4301"),
    "reference-v3-s1000": ("69c6f7205154415e", "37503280734db8d5"),
    "reference-v3-s1003": ("b77929e213a2e66e", "f9544f3495252624"),
    "shop-v3-s00": ("73937582c47f9d9d", "5732ddd0d1e56392"),
    "shop-v3-s1000": ("d084a0398df6eeb8", "a982c310c7be5bb5"),
    "shop-v3-s1003": ("af0cb81e65bc81d9", "c0c883151494d9d2"),
}


def _get(web: LocalWeb, path: str, method: str = "GET") -> str:
    status, _, body = web.dispatch(method, path, b"", "awr_episode=fingerprint")
    return f"{method} {path} {status}\n" + body.decode()


def _links(page: str, base_path: str) -> list[str]:
    hrefs = (html.unescape(h) for h in re.findall(r'href="([^"]*)"|href=\'([^\']*)\'', page) for h in h if h)
    return [h for h in hrefs if h.startswith(base_path + "/") or h == base_path]


def _crawl(web: LocalWeb, base_path: str, also: list[str]) -> list[str]:
    """The pages reachable by links from the home page (breadth first, up to CRAWL_LIMIT),
    and the pages the oracle plans pass through (searches, form answers)."""
    seen, queue, pages = set(), [base_path + "/"], []
    while queue and len(seen) < CRAWL_LIMIT:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        pages.append(_get(web, path))
        queue += [link for link in _links(pages[-1], base_path) if link not in seen]
    pages += [_get(web, path) for path in also if path not in seen]
    return pages


def fingerprint(site_id: str) -> tuple[str, str]:
    web = LocalWeb()  # not started: dispatch() serves in-process
    site = web.site(site_id)
    tasks = tasks_of_site(site)
    walked = []
    for task in tasks:
        walked += [urllib.parse.urlsplit(url)._replace(scheme="", netloc="").geturl() for url in walk_task(web, task).urls]
    pages = _crawl(web, site.base_path, sorted(set(walked)))
    if site.kind == "forms":  # the re-rendered forms, errors by every field
        pages += [_get(web, f"{site.base_path}/{form}", "POST") for form in FORMS]
    digest = lambda texts: hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]  # noqa: E731
    return digest(pages), digest(task.to_json() for task in tasks)


def pinned_sites() -> list[str]:
    return [site_class(kind)(3, seed).site_id for kind in sorted(KINDS) for seed in (0, 1000, 1003)]


@pytest.mark.parametrize("site_id", pinned_sites())
def test_test_sites_keep_their_pages_tasks_and_plans(site_id):
    assert fingerprint(site_id) == PINNED[site_id]



def _layouts(kind: str) -> dict:
    """A kind's layout per variant, as its module's LAYOUT table writes it."""
    return sys.modules[site_class(kind).__module__].LAYOUT


def _training_sites(kind: str, count: int) -> list:
    cls = site_class(kind)
    return [cls(variant, seed) for seed in range(count // 2) for variant in (1, 2)]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_training_sites_mix_the_training_layouts_and_never_the_test_one(kind):
    """Each aspect of a training site's layout is variant 1's or variant 2's; an option
    only the test variant has never shows; 40 sites show several mixes, not just the two
    variants' own layouts. Test sites keep their own layout."""
    layouts = _layouts(kind)
    assert site_class(kind)(3, 1000).look == site_class(kind)(3, 1001).look == layouts[3]
    mixes = set()
    for site in _training_sites(kind, 40):
        for aspect in dataclasses.fields(site.look):
            value = getattr(site.look, aspect.name)
            assert value in (getattr(layouts[1], aspect.name), getattr(layouts[2], aspect.name)), (site.site_id, aspect.name)
            test_only = getattr(layouts[3], aspect.name) not in (getattr(layouts[1], aspect.name), getattr(layouts[2], aspect.name))
            assert not (test_only and value == getattr(layouts[3], aspect.name)), (site.site_id, aspect.name)
        mixes.add(site.look)
    assert len(mixes) >= 3 and mixes - {layouts[1], layouts[2]}, mixes


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_oracle_solves_every_task_under_every_training_option(kind):
    """Plans read the site's layout, never its variant: on training sites that together
    show every training option of every aspect, every task's plan walks to a full score."""
    web = LocalWeb()
    unseen = {(aspect.name, getattr(_layouts(kind)[v], aspect.name))
              for aspect in dataclasses.fields(_layouts(kind)[1]) for v in (1, 2)}
    for site in _training_sites(kind, 40):
        options = {(aspect.name, getattr(site.look, aspect.name)) for aspect in dataclasses.fields(site.look)}
        if not options & unseen:
            continue
        unseen -= options
        for task in tasks_of_site(web.site(site.site_id)):
            assert solve_and_judge(web, task)[1].reward == 1.0, task.task_id
    assert not unseen


if __name__ == "__main__":  # prints PINNED (to pin anew, deliberately, after changing a test layout)
    for site_id in pinned_sites():
        pages, tasks = fingerprint(site_id)
        print(f'    "{site_id}": ("{pages}", "{tasks}"),')
