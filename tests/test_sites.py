"""Properties every kind of local site must have, and the shop's own behaviour."""

import dataclasses
import sys
import urllib.parse

import pytest

from asyncwebrl.web import content
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.sites import KINDS, make_site, site_class
from asyncwebrl.web.tasks import tasks_of_site
from asyncwebrl.web.walker import walk_task


def get(web: LocalWeb, url: str, episode: str = "anonymous") -> tuple[int, bytes]:
    status, _, body = web.dispatch("GET", url, b"", f"awr_episode={episode}")
    return status, body


@pytest.mark.parametrize("variant", (1, 2, 3))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pages_are_a_pure_function_of_kind_variant_and_seed(kind, variant):
    site_id = site_class(kind)(variant, 4).site_id
    with LocalWeb() as first:
        urls = {urllib.parse.urlsplit(u) for task in tasks_of_site(first.site(site_id))[:6] for u in walk_task(first, task).urls}
    paths = sorted({u.path + ("?" + u.query if u.query else "") for u in urls})
    assert len(paths) >= 4
    second = LocalWeb()  # not started: dispatch() serves in-process, from a fresh site instance
    third = LocalWeb()
    for path in paths:
        assert get(second, path) == get(third, path), path
    other = site_class(kind)(variant, 5).site_id
    assert get(second, f"/{site_id}/")[1] != get(second, f"/{other}/")[1].replace(other.encode(), site_id.encode())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_variants_of_a_kind_look_different(kind):
    """Each variant's own layout has a frame (style) of its own. Training sites mix the
    frames of variants 1 and 2 with their other layout aspects (Site.layout), so a variant
    1 and a variant 2 site may share one; a test site's style is never a training site's."""
    web = LocalWeb()
    homes = [get(web, f"/{site_class(kind)(v, 0).site_id}/")[1] for v in (1, 2, 3)]
    assert len(set(homes)) == 3
    layouts = sys.modules[site_class(kind).__module__].LAYOUT
    assert len({layouts[v].frame for v in (1, 2, 3)}) == 3

    def style(variant: int, seed: int) -> bytes:
        return get(web, f"/{site_class(kind)(variant, seed).site_id}/")[1].split(b"<style>")[1].split(b"</style>")[0]

    training = {style(variant, seed) for variant in (1, 2) for seed in range(8)}
    assert len(training) == 2 and style(3, 1000) not in training


def _labels(words) -> dict:
    return dict(words) if isinstance(words, dict) else dataclasses.asdict(words)


def _variant_words(cls, variant: int) -> dict:
    """A variant's own wording, as its module's WORDING table writes it."""
    table = sys.modules[cls.__module__].WORDING
    if variant in table:
        return _labels(table[variant])
    return {name: texts[variant - 1] for name, texts in table.items()}   # forms: name -> one text per variant


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_training_sites_mix_the_training_wordings_and_test_sites_keep_their_own(kind):
    """A training site's labels come, label by label, from the training variants (so no
    label goes with one layout); a test site shows its own variant's words, which no
    training site shows."""
    cls = site_class(kind)
    own = {v: _variant_words(cls, v) for v in (1, 2)}
    test_words = _variant_words(cls, 3)
    assert _labels(cls(3, 1000).words) == _labels(cls(3, 1001).words) == test_words   # test sites: their own
    mixes = set()
    for variant in (1, 2):
        for seed in range(12):
            labels = _labels(cls(variant, seed).words)
            assert all(labels[name] in (own[1][name], own[2][name]) for name in labels)
            training_only = {name for name in labels if test_words[name] not in (own[1][name], own[2][name])}
            assert all(labels[name] != test_words[name] for name in training_only)
            mixes.add(tuple(sorted((k, str(v)) for k, v in labels.items())))
    assert len(mixes) >= 12   # 24 sites: many mixes, not the two variants' own


def test_shop_pagination_and_listing_order():
    web = LocalWeb()
    for variant in (1, 2, 3):
        site = make_site(f"shop-v{variant}-s00")
        category = max(site.categories, key=lambda c: len(site.in_category(c)))
        path = site.href(f"/c/{content.slug(category)}")
        first, second = get(web, path)[1].decode(), get(web, path + "?page=2")[1].decode()
        listed = site.in_category(category)
        assert listed[0].name in first and listed[0].name not in second
        assert listed[site.look.page_size].name in second and 'data-oid="next"' in first
        assert site.page_of(listed, listed[site.look.page_size]) == 2


def test_shop_cart_validates_quantity_and_keeps_lines_per_episode():
    web = LocalWeb()
    site = make_site("shop-v1-s00")
    code = site.products[0].code

    def add(qty: str, episode: str) -> int:
        status, headers, _ = web.dispatch("POST", site.href("/cart/add"), f"code={code}&qty={qty}".encode(),
                                          f"awr_episode={episode}")
        assert headers["Location"] == site.href("/cart")
        return status

    assert add("abc", "e1") == 303 and add("0", "e1") == 303 and add("21", "e1") == 303
    assert "cart" not in web.session("e1", site.site_id)
    assert "whole number" in get(web, site.href("/cart"), "e1")[1].decode()
    add("3", "e1")
    add("2", "e1")
    assert web.session("e1", site.site_id)["cart"] == {code: 5}
    assert "cart" not in web.session("e2", site.site_id)
    assert site.products[0].name in get(web, site.href("/cart"), "e1")[1].decode()
