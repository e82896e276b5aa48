"""The kinds of local site, by name."""

from __future__ import annotations

import importlib
import re

from asyncwebrl.web.site import Site

# kind -> "module:Class"; imported on first use.
KINDS = {
    "shop": "asyncwebrl.web.sites.shop:ShopSite",
    "directory": "asyncwebrl.web.sites.directory:DirectorySite",
    "reference": "asyncwebrl.web.sites.reference:ReferenceSite",
    "forms": "asyncwebrl.web.sites.forms:FormsSite",
}
_SITE_ID = re.compile(r"^(?P<kind>[a-z]+)-v(?P<variant>\d+)-s(?P<seed>\d+)$")


def site_class(kind: str) -> type[Site]:
    if kind not in KINDS:
        raise KeyError(f"unknown site kind {kind!r}; known: {sorted(KINDS)}")
    module, name = KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name)


def make_site(site_id: str) -> Site:
    """"shop-v1-s03" -> ShopSite(variant=1, seed=3)."""
    match = _SITE_ID.match(site_id)
    if not match:
        raise ValueError(f"not a site id: {site_id!r}")
    site = site_class(match["kind"])(int(match["variant"]), int(match["seed"]))
    if site.site_id != site_id:  # "s3" vs "s03": one canonical spelling per site
        raise ValueError(f"not a canonical site id: {site_id!r}")
    return site
