"""The URL sandbox: what an episode's browser may reach (docs/architecture.md#reliability-and-security).

- Schemes: only http and https (no file:, chrome:, data:, javascript:, ...).
- Hosts for navigation (the agent's `navigate`, link clicks, redirects, popups): the
  task's own site and its subdomains, plus hosts the config allows explicitly
  (`sandbox.allow_hosts`, HOST or HOST:PORT). In local mode only the local server.
- Any request (navigation or not) to an internal address (every IANA special-purpose
  range, IPv4 and IPv6: private, loopback, link-local with cloud metadata at
  169.254.169.254, shared, multicast, reserved, ...) is blocked unless its host is
  explicitly allowed, and so is one to a host name that resolves to any internal address.

URLs are read as browsers read them (rollout/whatwg.py): `\\` separates the path, hosts are
percent-decoded and mapped, and IP literals take every spelling browsers accept
("2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "127.1").

Every block is counted by reason and logged.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import re
import socket

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.rollout.whatwg import NoScheme, Url, canonical_host, parse_url, split_host_port

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = ("http", "https")

# The IANA special-purpose address registries (IPv4 and IPv6) and multicast: no public web
# server is at any of these.
INTERNAL_IPV4 = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8",         # "this network"
    "10.0.0.0/8",        # private
    "100.64.0.0/10",     # shared address space (carrier-grade NAT)
    "127.0.0.0/8",       # loopback
    "169.254.0.0/16",    # link-local (cloud metadata)
    "172.16.0.0/12",     # private
    "192.0.0.0/24",      # IETF protocol assignments
    "192.0.2.0/24",      # documentation
    "192.31.196.0/24",   # AS112
    "192.52.193.0/24",   # AMT
    "192.88.99.0/24",    # 6to4 relay anycast
    "192.168.0.0/16",    # private
    "192.175.48.0/24",   # AS112 direct delegation
    "198.18.0.0/15",     # benchmarking
    "198.51.100.0/24",   # documentation
    "203.0.113.0/24",    # documentation
    "224.0.0.0/4",       # multicast
    "240.0.0.0/4",       # reserved, and the limited broadcast address
))
INTERNAL_IPV6 = tuple(ipaddress.IPv6Network(n) for n in (
    "::/96",             # unspecified (::), loopback (::1), IPv4-compatible (deprecated)
    "64:ff9b:1::/48",    # local-use IPv4/IPv6 translation
    "100::/64",          # discard-only
    "100:0:0:1::/64",    # dummy prefix
    "2001::/23",         # IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)
    "2001:db8::/32",     # documentation
    "2620:4f:8000::/48",  # AS112 direct delegation
    "3fff::/20",         # documentation
    "5f00::/16",         # segment routing SIDs
    "fc00::/7",          # unique local
    "fe80::/10",         # link-local
    "fec0::/10",         # site-local (deprecated)
    "ff00::/8",          # multicast
))
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix: an IPv4 address in the last 32 bits


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches: IPv4-mapped (::ffff:0:0/96), NAT64
    (64:ff9b::/96) and 6to4 (2002::/16) carry one; other addresses None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_internal(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        carried = embedded_ipv4(address)
        if carried is not None:
            return is_internal(carried)
        return any(address in network for network in INTERNAL_IPV6)
    return any(address in network for network in INTERNAL_IPV4)


def parse_ip_literal(host: str) -> Address | None:
    """The address a host names as an IP literal, read as browsers read it ("127.1",
    "[::1]", "%31%32%37.0.0.1"); None for a domain or a host browsers reject."""
    try:
        canonical = canonical_host(host)
    except ValueError:
        return None
    if canonical.startswith("["):
        return ipaddress.IPv6Address(canonical[1:-1])
    try:  # a canonical IPv4 host is in dotted decimal; a domain never is
        return ipaddress.IPv4Address(canonical)
    except ValueError:
        return None


async def resolved_addresses(host: str) -> list[Address]:
    """Every address the system resolver gives for `host` (Playwright's fetches, which
    carry every request but the page's navigations and WebSockets, use it too), without
    blocking the event loop. OSError if it gives none."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]  # no IPv6 zone


def _bare(host: str) -> str:
    """A domain without its final dot: "localhost." is the name localhost."""
    return host[:-1] if host.endswith(".") else host


def _allowance(entry: str) -> tuple[str, int | None]:
    """(host, port or None for any) of one `sandbox.allow_hosts` entry, HOST or HOST:PORT."""
    raw_host, port = split_host_port(entry.strip())
    return _bare(canonical_host(raw_host)), port


def _site_host(site: str) -> str:
    return _bare(parse_url(site if "//" in site else "http://" + site).host)


class UrlPolicy:
    """Decides per URL; one per episode (its site) or shared (local mode)."""

    def __init__(self, sites: list[str], allow_hosts: list[str] = (), *, strict: bool = False):
        """`sites`: start URLs or hosts whose host (and subdomains) the agent may visit.
        `allow_hosts`: HOST or HOST:PORT entries allowed even when internal.
        `strict`: every request, not only navigations, must stay on the sites or the
        allowed hosts (local mode: nothing but the local server)."""
        self.strict = strict
        self.site_hosts = {_site_host(site) for site in sites}
        self.allowed = {_allowance(entry) for entry in allow_hosts}
        self.blocked = collections.Counter()  # reason -> count

    def check(self, url: str, *, navigation: bool) -> str:
        """"" if allowed, else the reason (and the block is counted and logged). Host names
        are not resolved here: `admit` does that."""
        return self._record(url, self._reason(url, navigation)[0])

    async def admit(self, url: str, *, navigation: bool) -> str:
        """`check`, and a host name must not resolve to an internal address."""
        reason, parsed = self._reason(url, navigation)
        if not reason and self._is_name_to_resolve(parsed):
            reason = await self._resolution_reason(parsed.host)
        return self._record(url, reason)

    def refuse(self, url: str, reason: str) -> None:
        """Count and log a block decided elsewhere (a redirect without a readable target)."""
        self._record(url, reason)

    def count(self, reason: str) -> None:
        self.blocked[reason] += 1

    def _record(self, url: str, reason: str) -> str:
        if reason:
            self.blocked[reason.split(":")[0]] += 1
            logging.info("sandbox blocked %s (%s)", url[:200], reason)
        return reason

    def _is_name_to_resolve(self, parsed: Url) -> bool:
        """A domain (not an IP literal, not about:blank) that no allowance covers."""
        return parsed.special and parse_ip_literal(parsed.host) is None and not self._explicitly_allowed(parsed)

    def _explicitly_allowed(self, parsed: Url) -> bool:
        host = _bare(parsed.host)
        return (host, None) in self.allowed or (host, parsed.effective_port) in self.allowed

    def _reason(self, url: str, navigation: bool) -> tuple[str, Url | None]:
        """The reason to block `url` that its text gives (and the URL as the browser reads it)."""
        try:
            parsed = parse_url(url)
        except NoScheme:
            return "scheme: none is not allowed", None
        except ValueError as error:
            return f"host: {error}", None
        if parsed.scheme not in ALLOWED_SCHEMES:
            if str(parsed) == "about:blank":
                return "", parsed
            return f"scheme: {parsed.scheme} is not allowed", parsed
        return self._host_reason(parsed, navigation), parsed

    def _host_reason(self, parsed: Url, navigation: bool) -> str:
        host = _bare(parsed.host)
        if self._explicitly_allowed(parsed):
            return ""
        address = parse_ip_literal(parsed.host)
        if address is not None and is_internal(address):
            return f"internal: {parsed.host} is an internal address"
        if host == "localhost" or host.endswith(".localhost"):  # Chromium resolves these itself, to loopback
            return f"internal: {host}"
        if self.strict:
            return f"offsite: {host} is not allowed"
        if navigation and not any(host == site or host.endswith("." + site) for site in self.site_hosts):
            return f"offsite: {host} is not the task's site"
        return ""

    @staticmethod
    async def _resolution_reason(host: str) -> str:
        try:
            addresses = await resolved_addresses(host)
        except OSError:  # a name nothing can reach; refused, as it cannot be checked
            return f"unresolved: {host}"
        internal = [str(a) for a in addresses if is_internal(a)]
        return f"internal: {host} resolves to {', '.join(internal)}" if internal else ""


def local_policy(origin: str) -> UrlPolicy:
    """Local mode: the local server's host:port and nothing else."""
    parsed = parse_url(origin)
    return UrlPolicy([origin], [f"{parsed.host}:{parsed.effective_port}"], strict=True)


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
        """The browser URL for the agent's `navigate`, written as it was checked; ValueError
        if it is not allowed."""
        absolute = self.to_browser_url(url.strip())
        reason = self.policy.check(absolute, navigation=True)
        if reason:
            raise ValueError(f"navigation blocked ({reason})")
        return str(parse_url(absolute))

    async def _guard_local(self, route) -> None:
        """Only requests off the local server get here: all are refused."""
        self.policy.check(route.request.url, navigation=route.request.is_navigation_request())
        await route.abort("blockedbyclient")

    async def _guard(self, route) -> None:
        request = route.request
        navigation = request.is_navigation_request()
        if await self.policy.admit(request.url, navigation=navigation):
            await route.abort("blockedbyclient")
            return
        try:
            first = hop = await route.fetch(max_redirects=0)
            url = parse_url(request.url)
            for _ in range(self.MAX_REDIRECTS):
                location = hop.headers.get("location")
                if hop.status not in (301, 302, 303, 307, 308) or not location:
                    break
                try:  # read as the browser reads it (urljoin reads some hosts differently)
                    url = parse_url(location, base=url)
                except ValueError as error:
                    self.policy.refuse(location, f"host: {error}")
                    await route.abort("blockedbyclient")
                    return
                if await self.policy.admit(str(url), navigation=navigation):
                    await route.abort("blockedbyclient")
                    return
                hop = await route.fetch(url=str(url), method="GET", max_redirects=0)
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
