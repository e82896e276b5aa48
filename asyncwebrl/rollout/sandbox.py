"""The URL sandbox: what an episode's browser may reach (docs/architecture.md#reliability-and-security).

- Schemes: only http and https (no file:, chrome:, data:, javascript:, ...).
- Hosts for navigation (the agent's `navigate`, link clicks, redirects, popups): the
  task's own site and its subdomains, plus hosts the config allows explicitly
  (`sandbox.allow_hosts`, HOST or HOST:PORT). In local mode only the local server.
- Any request (navigation or not) to a private, loopback, link-local (cloud metadata at
  169.254.169.254!), multicast, reserved or unspecified address is blocked unless its
  host is explicitly allowed. IP literals are read the way browsers read them, so
  decimal ("2852039166"), hex ("0xa9fea9fe"), octal and short ("127.1") forms are caught.

Every block is counted by reason and logged.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import re
import socket
import urllib.parse

from playwright.async_api import Error as PlaywrightError

ALLOWED_SCHEMES = ("http", "https")
_IPV4_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.I)


def parse_ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host string names as an IP literal, in any form a browser accepts."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    parts = host.split(".")
    if 1 <= len(parts) <= 4 and all(_IPV4_PART.match(p) for p in parts):
        try:  # inet_aton implements the legacy forms (octal, hex, fewer than 4 parts)
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def is_internal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return (address.is_private or address.is_loopback or address.is_link_local or address.is_multicast
            or address.is_reserved or address.is_unspecified)


def _host_port(parts: urllib.parse.SplitResult) -> tuple[str, int | None]:
    host = (parts.hostname or "").rstrip(".").lower()
    try:
        port = parts.port
    except ValueError:
        port = -1  # unparsable port: never matches an allowance
    return host, port


class UrlPolicy:
    """Decides per URL; one per episode (its site) or shared (local mode)."""

    def __init__(self, sites: list[str], allow_hosts: list[str] = (), *, strict: bool = False):
        """`sites`: start URLs or hosts whose host (and subdomains) the agent may visit.
        `allow_hosts`: HOST or HOST:PORT entries allowed even when internal.
        `strict`: every request, not only navigations, must stay on the sites or the
        allowed hosts (local mode: nothing but the local server)."""
        self.strict = strict
        self.site_hosts = {_host_port(urllib.parse.urlsplit(s if "//" in s else "//" + s))[0] for s in sites}
        self.allowed: set[tuple[str, int | None]] = set()
        for entry in allow_hosts:
            host, port = _host_port(urllib.parse.urlsplit("//" + entry.strip()))
            self.allowed.add((host, port))
        self.blocked = collections.Counter()  # reason -> count

    def _explicitly_allowed(self, host: str, port: int | None, scheme: str) -> bool:
        default = {"http": 80, "https": 443}.get(scheme)
        return (host, None) in self.allowed or (host, port if port is not None else default) in self.allowed

    def check(self, url: str, *, navigation: bool) -> str:
        """"" if allowed, else the reason (and the block is counted and logged)."""
        reason = self._reason(url, navigation)
        if reason:
            self.blocked[reason.split(":")[0]] += 1
            logging.info("sandbox blocked %s (%s)", url[:200], reason)
        return reason

    def _reason(self, url: str, navigation: bool) -> str:
        parts = urllib.parse.urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            if scheme == "about" and url.strip() == "about:blank":
                return ""
            return f"scheme: {scheme or 'none'} is not allowed"
        host, port = _host_port(parts)
        if not host:
            return "host: missing"
        if self._explicitly_allowed(host, port, scheme):
            return ""
        address = parse_ip_literal(host)
        if address is not None and is_internal(address):
            return f"internal: {host} is a {type(address).__name__} internal address"
        if host == "localhost" or host.endswith(".localhost"):
            return f"internal: {host}"
        if self.strict:
            return f"offsite: {host} is not allowed"
        if navigation and not any(host == site or host.endswith("." + site) for site in self.site_hosts):
            return f"offsite: {host} is not the task's site"
        return ""

    def count(self, reason: str) -> None:
        self.blocked[reason] += 1


def local_policy(origin: str) -> UrlPolicy:
    """Local mode: the local server's host:port and nothing else."""
    netloc = urllib.parse.urlsplit(origin).netloc
    return UrlPolicy([origin], [netloc], strict=True)


# Installed in every document: popups and target=_blank links open in the same page, so
# everything the agent does stays in its one page (extra pages are closed and counted).
SAME_PAGE_JS = """
window.open = function (url) { if (url) { window.location.href = url; } return window; };
document.addEventListener('click', (event) => {
  const link = event.target && event.target.closest ? event.target.closest('a[target]') : null;
  if (link) { link.removeAttribute('target'); }
}, true);
"""


class Sandbox:
    """Applies a UrlPolicy to one browser context and to the agent's `navigate`.

    In local mode the route matches only URLs off the local server, so ordinary requests
    never make a round trip through Python (the local server never redirects off-site).
    Elsewhere every request is checked, and because the browser follows a redirect
    without routing it again, the request is fetched here hop by hop without following
    redirects, every Location is checked, and only then is the first response handed to
    the browser. (A server that redirects differently when the browser asks again could
    slip one hop past this; an egress proxy would close that gap.)"""

    MAX_REDIRECTS = 10

    def __init__(self, policy: UrlPolicy, *, to_browser_url=lambda url: url, local_origin: str = ""):
        self.policy = policy
        self.to_browser_url = to_browser_url
        self.local_origin = local_origin

    def resolve(self, url: str) -> str:
        """The browser URL for the agent's `navigate`; ValueError if it is not allowed."""
        absolute = self.to_browser_url(url.strip())
        reason = self.policy.check(absolute, navigation=True)
        if reason:
            raise ValueError(f"navigation blocked ({reason})")
        return absolute

    async def _guard_local(self, route) -> None:
        """Only requests off the local server get here: all are refused."""
        self.policy.check(route.request.url, navigation=route.request.is_navigation_request())
        await route.abort("blockedbyclient")

    async def _guard(self, route) -> None:
        request = route.request
        navigation = request.is_navigation_request()
        if self.policy.check(request.url, navigation=navigation):
            await route.abort("blockedbyclient")
            return
        try:
            first = hop = await route.fetch(max_redirects=0)
            url = request.url
            for _ in range(self.MAX_REDIRECTS):
                location = hop.headers.get("location")
                if hop.status not in (301, 302, 303, 307, 308) or not location:
                    break
                url = urllib.parse.urljoin(url, location)
                if self.policy.check(url, navigation=navigation):
                    await route.abort("blockedbyclient")
                    return
                hop = await route.fetch(url=url, method="GET", max_redirects=0)
            else:  # still redirecting: the browser would follow the rest unchecked
                self.policy.count("redirects")
                await route.abort("blockedbyclient")
                return
        except PlaywrightError:
            await route.abort("failed")
            return
        await route.fulfill(response=first)

    async def install(self, context) -> None:
        if self.local_origin:
            elsewhere = re.compile("^(?!" + re.escape(self.local_origin + "/") + ")")
            await context.route(elsewhere, self._guard_local)
        else:
            await context.route("**/*", self._guard)
        await context.add_init_script(SAME_PAGE_JS)
        context.on("page", self._close_extra_page)

    def _close_extra_page(self, page) -> None:
        if len(page.context.pages) > 1:  # the episode's own page is the first
            self.policy.count("popup")
            logging.info("sandbox closed a popup page")
            asyncio.ensure_future(page.close())
