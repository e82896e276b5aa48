"""The URL policy, decided without a browser (tests/test_pool.py drives it in Chromium)."""

import pytest

from asyncwebrl.rollout.sandbox import UrlPolicy, local_policy, parse_ip_literal

SITE = UrlPolicy(["https://www.shop.example/start"], ["mirror.intranet:8080"])


@pytest.mark.parametrize("url, reason", [
    ("file:///etc/passwd", "scheme"),
    ("chrome://settings", "scheme"),
    ("data:text/html,<script>alert(1)</script>", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("ftp://shop.example/", "scheme"),
    ("http://169.254.169.254/latest/meta-data/", "internal"),
    ("http://2852039166/", "internal"),  # 169.254.169.254 as one decimal number
    ("http://0xa9fea9fe/", "internal"),  # ... as hex
    ("http://0251.0376.0251.0376/", "internal"),  # ... as octal
    ("http://169.254.43518/", "internal"),  # ... as a short form
    ("http://127.1/", "internal"),
    ("http://[::1]/", "internal"),
    ("http://[::ffff:169.254.169.254]/", "internal"),
    ("http://10.0.0.8/admin", "internal"),
    ("http://192.168.1.1/", "internal"),
    ("http://172.16.0.1/", "internal"),
    ("http://0.0.0.0:8000/", "internal"),
    ("http://localhost:6379/", "internal"),
    ("http://db.localhost/", "internal"),
    ("http://mirror.intranet:9090/", "offsite"),  # allowed on port 8080 only
    ("https://evil.example/", "offsite"),
    ("https://shop.example.evil.example/", "offsite"),
    ("http:///nohost", "host"),
])
def test_blocked_navigations(url, reason):
    assert SITE.check(url, navigation=True).startswith(reason)


@pytest.mark.parametrize("url", [
    "https://www.shop.example/product/1",
    "https://shop.example/",
    "http://mirror.intranet:8080/page",  # explicitly allowed
    "about:blank",
])
def test_allowed_navigations(url):
    policy = UrlPolicy(["https://shop.example/"], ["mirror.intranet:8080"])
    assert policy.check(url, navigation=True) == ""


def test_subdomains_of_the_site_are_allowed_and_parents_are_not():
    policy = UrlPolicy(["https://www.shop.example/"])
    assert policy.check("https://img.www.shop.example/a.png", navigation=True) == ""
    assert policy.check("https://shop.example/", navigation=True).startswith("offsite")


def test_subresources_may_come_from_public_hosts_but_never_internal_ones():
    assert SITE.check("https://cdn.example.net/app.js", navigation=False) == ""
    assert SITE.check("http://169.254.169.254/", navigation=False).startswith("internal")


def test_local_mode_allows_the_local_server_and_nothing_else():
    policy = local_policy("http://127.0.0.1:41234")
    assert policy.check("http://127.0.0.1:41234/shop-v1-s00/", navigation=True) == ""
    for url in ("http://127.0.0.1:41235/", "https://cdn.example.net/app.js", "http://localhost:41234/"):
        assert policy.check(url, navigation=False) != ""


def test_blocks_are_counted_by_reason():
    policy = UrlPolicy(["https://shop.example/"])
    policy.check("file:///x", navigation=True)
    policy.check("http://10.1.1.1/", navigation=True)
    policy.check("http://10.1.1.2/", navigation=False)
    policy.check("https://shop.example/ok", navigation=True)
    assert dict(policy.blocked) == {"scheme": 1, "internal": 2}


def test_ip_literal_forms():
    assert str(parse_ip_literal("2852039166")) == "169.254.169.254"
    assert str(parse_ip_literal("0x7f.1")) == "127.0.0.1"
    assert str(parse_ip_literal("[::1]")) == "::1"
    assert parse_ip_literal("shop.example") is None
    assert parse_ip_literal("1.2.3.4.5") is None
