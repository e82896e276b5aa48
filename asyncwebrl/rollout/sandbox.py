"""The URL sandbox: what an episode's browser may reach (DESIGN.md §6).

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

import collections
import ipaddress
import logging
import re
import socket
import urllib.parse

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

    def __init__(self, sites: list[str], allow_hosts: list[str] = ()):
        """`sites`: start URLs or hosts whose host (and subdomains) the agent may visit.
        `allow_hosts`: HOST or HOST:PORT entries allowed even when internal."""
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
        if host in ("localhost",) or host.endswith(".localhost"):
            return f"internal: {host}"
        if navigation and not any(host == site or host.endswith("." + site) for site in self.site_hosts):
            return f"offsite: {host} is not the task's site"
        return ""
