"""The URL sandbox: what an episode's browser may reach (docs/architecture.md#reliability-and-security).

- Schemes: only http and https (no file:, chrome:, data:, javascript:, ...); ws and wss
  for WebSockets.
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

Documents and workers served from an allowed host carry a Content-Security-Policy that lets
them open WebSockets to allowed hosts only (`websocket_csp`): they may be on an internal
address, where nothing else stops a WebSocket that Playwright's routing does not see.

Every block is counted by reason and logged.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import ipaddress
import json
import logging
import re
import socket

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.rollout.whatwg import NoScheme, Url, canonical_host, parse_url, split_host_port

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = ("http", "https")
WEBSOCKET_SCHEMES = ("ws", "wss")
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# Headers that describe a request's body: a redirect that drops the body drops them too.
_BODY_HEADERS = ("content-type", "content-encoding", "content-language", "content-location", "content-length")

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

    def __init__(self, sites: list[str], allow_hosts: list[str], *, strict: bool = False):
        """`sites`: start URLs or hosts whose host (and subdomains) the agent may visit.
        `allow_hosts`: HOST or HOST:PORT entries allowed even when internal (config.sandbox's,
        split at commas; local mode's own server).
        `strict`: every request, not only navigations, must stay on the sites or the
        allowed hosts (local mode: nothing but the local server)."""
        self.strict = strict
        self.site_hosts = {_site_host(site) for site in sites}
        self.allowed = {_allowance(entry) for entry in allow_hosts}
        self.blocked = collections.Counter()  # reason -> count

    def check(self, url: str, *, navigation: bool) -> str:
        """"" if allowed, else the reason (and the block is counted and logged). Host names
        are not resolved here: `admit` does that."""
        return self._record(url, self._reason(url, navigation, ALLOWED_SCHEMES)[0])

    async def admit(self, url: str, *, navigation: bool, websocket: bool = False) -> str:
        """`check`, and a host name must not resolve to an internal address. A WebSocket's
        URL must be ws: or wss:, and its block is counted as "websocket"."""
        reason, parsed = self._reason(url, navigation, WEBSOCKET_SCHEMES if websocket else ALLOWED_SCHEMES)
        if not reason and self._is_name_to_resolve(parsed):
            reason = await self._resolution_reason(parsed.host)
        return self._record(url, reason, counted_as="websocket" if websocket else "")

    def names_allowed_host(self, url: str) -> bool:
        """Whether `url` is on a host (and port) that `allow_hosts` names: the only hosts a
        document on an internal address can come from."""
        try:
            return self._explicitly_allowed(parse_url(url))
        except ValueError:
            return False

    def refuse(self, url: str, reason: str) -> None:
        """Count and log a block decided elsewhere (a redirect without a readable target)."""
        self._record(url, reason)

    def count(self, reason: str) -> None:
        self.blocked[reason] += 1

    def _record(self, url: str, reason: str, counted_as: str = "") -> str:
        if reason:
            self.blocked[counted_as or reason.split(":")[0]] += 1
            logging.info("sandbox blocked %s (%s)", url[:200], reason)
        return reason

    def _is_name_to_resolve(self, parsed: Url) -> bool:
        """A domain (not an IP literal, not about:blank) that no allowance covers."""
        return parsed.special and parse_ip_literal(parsed.host) is None and not self._explicitly_allowed(parsed)

    def _explicitly_allowed(self, parsed: Url) -> bool:
        host = _bare(parsed.host)
        return (host, None) in self.allowed or (host, parsed.effective_port) in self.allowed

    def _reason(self, url: str, navigation: bool, schemes: tuple[str, ...]) -> tuple[str, Url | None]:
        """The reason to block `url` that its text gives (and the URL as the browser reads it)."""
        try:
            parsed = parse_url(url)
        except NoScheme:
            return "scheme: none is not allowed", None
        except ValueError as error:
            return f"host: {error}", None
        if parsed.scheme not in schemes:
            if str(parsed) == "about:blank" and schemes == ALLOWED_SCHEMES:
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


# Where the sandbox's Content-Security-Policy sends its violation reports: a name that never
# resolves (.invalid, RFC 2606), answered by the sandbox's route, so no report leaves the browser.
CSP_REPORT_URL = "https://csp-report.sandbox.invalid/"
# What a CSP host-source can name: letters, digits, hyphens and dots. No IPv6 literal, no "_",
# and nothing that would end the source list (";", ",", " ") or widen it ("*").
_CSP_HOST = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)*")


def websocket_csp(allowed: set[tuple[str, int | None]]) -> str:
    """The Content-Security-Policy of documents and workers from the allowed hosts
    (`allowed`: UrlPolicy.allowed). A page there may be on an internal address, where
    Chromium's Local Network Access does not apply, and a WebSocket that Playwright's
    routing does not see (a worker's, or one opened through the routing script's internals)
    would reach any internal port. CSP has no way to say "no internal address", so the
    policy names what the URL policy allows explicitly: WebSockets to the allowed hosts,
    every http(s) request (the sandbox's route checks those), data: and blob: (no network).
    (So such a page cannot open a WebSocket to a public host either.) Violations are reported
    to CSP_REPORT_URL, where they are counted."""
    sources = [source for host, port in sorted(allowed, key=lambda entry: (entry[0], entry[1] or 0))
               for source in _websocket_sources(host, port)]
    return " ".join(["connect-src http: https: data: blob:", *sources]) + f"; report-uri {CSP_REPORT_URL}"


def _websocket_sources(host: str, port: int | None) -> list[str]:
    """The CSP sources for WebSockets to one allowance (any port if None); none for a host CSP
    cannot name (an IPv6 literal: WebSockets to it stay refused on these pages)."""
    if not _CSP_HOST.fullmatch(host):
        return []
    port_part = "*" if port is None else str(port)
    return [f"ws://{host}:{port_part}", f"wss://{host}:{port_part}"]


def with_policy(headers: dict[str, str], policy: str) -> dict[str, str]:
    """`headers` (lowercase names) with the CSP `policy` added. A response's policies are all
    enforced, and a header's comma-separated values are separate policies: a page's own
    policy stays, and adding one can only narrow what the page may do."""
    theirs = headers.get("content-security-policy")
    return {**headers, "content-security-policy": f"{theirs}, {policy}" if theirs else policy}


def _violation_report(body: str | None) -> dict:
    """The "csp-report" object of a violation report's body; {} if it is none (a page may post
    anything to CSP_REPORT_URL)."""
    try:
        report = json.loads(body or "").get("csp-report")
    except (ValueError, AttributeError):
        return {}
    return report if isinstance(report, dict) else {}


def _base64_body(body: dict) -> str:
    """A Fetch.getResponseBody result as Fetch.fulfillRequest takes it: base64 (DevTools gives
    a body that is valid UTF-8 as text, any other already in base64)."""
    return body["body"] if body["base64Encoded"] else base64.b64encode(body["body"].encode()).decode()


# Installed in every document: popups and target=_blank links open in the same page, so
# everything the agent does stays in its one page (extra pages are closed and counted).
SAME_PAGE_JS = """
window.open = function (url) { if (url) { window.location.href = url; } return window; };
document.addEventListener('click', (event) => {
  const link = event.target && event.target.closest ? event.target.closest('a[target]') : null;
  if (link) { link.removeAttribute('target'); }
}, true);
"""


_DEVTOOLS_ERRORS = {"blockedbyclient": "BlockedByClient", "namenotresolved": "NameNotResolved"}


def _browser_error(reason: str) -> str:
    """The network error a refused request fails with: a name that does not resolve fails as
    such (what the agent would see anyway), anything else as blocked."""
    return "namenotresolved" if reason.startswith("unresolved") else "blockedbyclient"


def _same_origin(a: Url, b: Url) -> bool:
    return (a.scheme, a.host, a.effective_port) == (b.scheme, b.host, b.effective_port)


def redirected_request(status: int, method: str, headers: dict[str, str], body: bytes | None,
                       crossing_origins: bool) -> tuple[str, dict[str, str], bytes | None]:
    """The next hop's method, headers and body after a redirect, as the Fetch Standard's
    HTTP-redirect fetch makes them. The Cookie header is dropped: Playwright adds the
    context's cookies for the next URL (the first URL's would leak to another host)."""
    headers = {k: v for k, v in headers.items() if k.lower() != "cookie"}
    if (status in (301, 302) and method == "POST") or (status == 303 and method not in ("GET", "HEAD")):
        method, body = "GET", b""  # b"", not None: given None, Playwright sends the first request's body
        headers = {k: v for k, v in headers.items() if k.lower() not in _BODY_HEADERS}
    if crossing_origins:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return method, headers, body


class Sandbox:
    """Applies a UrlPolicy to one episode: its browser context, its page and the agent's
    `navigate`.

    Each request is checked as the browser wrote it (Chromium's canonical URL), and no
    site is ever asked twice, so none can answer the check one way and the browser
    another:
    - The page's own navigations go out as the browser's requests. Chromium follows their
      redirects itself, where Playwright's routes see only the first request, so the
      DevTools Fetch domain of the page pauses every later hop for the policy before it
      is sent (`_check_redirect_hop`).
    - Every other request (subresources, workers' fetches, frames' navigations) is fetched
      here one hop at a time, each redirect target checked before it is requested, and the
      browser is handed the last response (`_fetch_hop_by_hop`).
    - WebSockets go through Playwright's WebSocket routing (`_guard_websocket`). That
      routing is a script in the page, not in the network: a page that calls the script's
      internals, or opens a WebSocket in a worker, goes around it. A Content-Security-Policy
      stops those: the local web's own (web/server.py), and on documents and workers from
      `allow_hosts` the sandbox's (`websocket_csp`), added to top-level documents at the
      DevTools Fetch response stage (`_mark_document`, which keeps such a document's Local
      Network Access) and to frames and worker scripts as they are handed over
      (`_hand_over`); blob: and data: workers and srcdoc frames inherit their creator's.
      Pages from public addresses are left to Chromium's Local Network Access, which
      refuses their connections to internal addresses (docs/architecture.md). Shared
      workers, whose requests no route sees, do not run (rollout/browser.py).
    In local mode the request route matches only URLs off the local server (ordinary
    requests never make a round trip through Python) and refuses them all."""

    MAX_REDIRECTS = 10

    def __init__(self, policy: UrlPolicy, *, to_browser_url=lambda url: url, local_origin: str = ""):
        self.policy = policy
        self.to_browser_url = to_browser_url
        self.local_origin = local_origin
        self.page = None  # the episode's one page (open_page)
        self._redirect_hops = collections.Counter()  # Chromium's request id -> redirects followed
        self.websocket_csp = websocket_csp(policy.allowed)
        self._local_network_origins: set[str] = set()  # origins granted Local Network Access

    @property
    def marks_allowed_hosts(self) -> bool:
        """Whether responses from `allow_hosts` get `websocket_csp`: in webgym mode, if there
        are any (no other host can serve a document from an internal address; the local web
        sends its own policy)."""
        return bool(self.policy.allowed) and not self.local_origin

    def resolve(self, url: str) -> str:
        """The browser URL for the agent's `navigate`, written as it was checked; ValueError
        if it is not allowed."""
        absolute = self.to_browser_url(url.strip())
        reason = self.policy.check(absolute, navigation=True)
        if reason:
            raise ValueError(f"navigation blocked ({reason})")
        return str(parse_url(absolute))

    async def open_page(self, context):
        """The episode's page, in `context` with every guard installed: the context's
        (`install`) and the check of its navigations' redirects. Navigations of any other
        page are refused."""
        await self.install(context)
        self.page = await context.new_page()
        session = await context.new_cdp_session(self.page)
        session.on("Fetch.requestPaused", lambda event: self._on_document_paused(session, event))
        patterns = [{"urlPattern": "*", "resourceType": "Document"}]
        if self.marks_allowed_hosts:
            patterns.append({"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"})
        await session.send("Fetch.enable", {"patterns": patterns})
        return self.page

    async def install(self, context) -> None:
        """The context's guards: requests, WebSockets, popups."""
        if self.local_origin:
            elsewhere = re.compile("^(?!" + re.escape(self.local_origin + "/") + ")")
            await context.route(elsewhere, self._guard_local)
        else:
            await context.route("**/*", self._guard)
        await context.route_web_socket(re.compile(".*"), self._guard_websocket)
        await context.add_init_script(SAME_PAGE_JS)
        context.on("page", self._close_extra_page)

    async def _guard_local(self, route) -> None:
        """Only requests off the local server get here: all are refused."""
        self.policy.check(route.request.url, navigation=route.request.is_navigation_request())
        await route.abort("blockedbyclient")

    async def _guard(self, route) -> None:
        request = route.request
        if request.url == CSP_REPORT_URL:
            await self._count_violation(route)
            return
        navigation = request.is_navigation_request()
        if navigation and request.frame.page is not self.page:
            await route.abort("blockedbyclient")  # a popup's (counted when it opened, closed as it opens)
            return
        reason = await self.policy.admit(request.url, navigation=navigation)
        if reason:
            await route.abort(_browser_error(reason))
            return
        if navigation and request.frame.parent_frame is None:
            await route.continue_()  # its redirects: _check_redirect_hop
            return
        await self._fetch_hop_by_hop(route)

    async def _fetch_hop_by_hop(self, route) -> None:
        """Fetch the request here without following redirects, check each Location before
        requesting it, and hand the browser the last response. (Fetching a hop here and
        letting the browser ask again would let the site answer the browser differently.)"""
        try:
            last = await self._follow_checked(route)
        except PlaywrightError:
            await route.abort("failed")
            return
        if last is None:
            await route.abort("blockedbyclient")
            return
        response, redirected = last
        await self._hand_over(route, response, redirected=redirected)

    async def _follow_checked(self, route):
        """(last response, whether redirects led to it) of the request's redirect chain, every
        hop fetched here once; None if a hop is refused (counted)."""
        request = route.request
        navigation = request.is_navigation_request()
        url, method, headers, body = parse_url(request.url), request.method, request.headers, request.post_data_buffer
        response = await route.fetch(max_redirects=0)
        for follows in range(self.MAX_REDIRECTS + 1):
            location = response.headers.get("location")
            if response.status not in REDIRECT_STATUSES or location is None:
                return response, follows > 0
            if follows == self.MAX_REDIRECTS:
                self.policy.count("redirects")  # refused, as the browser would give up too
                return None
            target = await self._redirect_target(location, url, navigation)
            if target is None:
                return None
            method, headers, body = redirected_request(response.status, method, headers, body,
                                                       crossing_origins=not _same_origin(url, target))
            url = target
            response = await route.fetch(url=str(url), method=method, headers=headers, post_data=body,
                                         max_redirects=0)

    async def _redirect_target(self, location: str, base: Url, navigation: bool) -> Url | None:
        """Where a redirect leads, read as the browser would read it; None if refused (counted)."""
        try:
            target = parse_url(location, base=base)
        except ValueError as error:
            self.policy.refuse(location, f"host: {error}")
            return None
        return None if await self.policy.admit(str(target), navigation=navigation) else target

    async def _hand_over(self, route, response, *, redirected: bool) -> None:
        """Fulfil the browser's request with the checked response. After redirects its
        cookies are already in the context (Playwright's fetch stored them for the URL that
        set them); given to the browser they would be set for the first URL's host. From an
        allowed host it carries `websocket_csp` (browsers read it on frames' documents and
        worker scripts, and ignore it elsewhere)."""
        headers = response.headers
        if redirected:
            headers = {k: v for k, v in headers.items() if k.lower() != "set-cookie"}
        if self.marks_allowed_hosts and self.policy.names_allowed_host(response.url):
            headers = with_policy(headers, self.websocket_csp)
        await route.fulfill(response=response, headers=headers)

    async def _count_violation(self, route) -> None:
        """A report of a connection `websocket_csp` refused: counted as "csp" and answered
        here. (A page may post here itself; that only adds to the count.)"""
        report = _violation_report(route.request.post_data)
        if report:
            where = f"{report.get('effective-directive', '?')} in {str(report.get('document-uri', '?'))[:200]}"
            self.policy.refuse(str(report.get("blocked-uri", "?")), f"csp: {where}")
        await route.fulfill(status=204)

    async def _on_document_paused(self, session, event: dict) -> None:
        """Every document request of the page, paused by the DevTools Fetch domain before it
        is sent, and (with `marks_allowed_hosts`) again when its response arrives."""
        try:
            if "responseStatusCode" in event or "responseErrorReason" in event:  # the response stage
                await self._mark_document(session, event)
            else:
                await self._check_request(session, event)
        except PlaywrightError:  # the page is gone, and with it the request
            pass

    async def _check_request(self, session, event: dict) -> None:
        """First requests were checked by the route already, redirect hops are checked here."""
        reason = await self._check_redirect_hop(event) if "redirectedRequestId" in event else ""
        verdict = {"requestId": event["requestId"]}
        if reason:
            error = _DEVTOOLS_ERRORS[_browser_error(reason)]
            await session.send("Fetch.failRequest", {**verdict, "errorReason": error})
        else:
            await session.send("Fetch.continueRequest", verdict)

    async def _mark_document(self, session, event: dict) -> None:
        """A top-level document's response, paused: from an allowed host it is handed to the
        page with `websocket_csp`. Only a fulfilled response's headers are read again
        (Fetch.continueResponse's are not enforced), so its body is taken and handed back."""
        verdict = {"requestId": event["requestId"]}
        if not self._is_document_to_mark(event):
            await session.send("Fetch.continueRequest", verdict)
            return
        try:
            body = await session.send("Fetch.getResponseBody", verdict)
        except PlaywrightError:  # the body failed to arrive: no document, rather than an unmarked one
            await session.send("Fetch.failRequest", {**verdict, "errorReason": "Failed"})
            return
        fulfilment = {**verdict, "responseCode": event["responseStatusCode"],
                      "responseHeaders": self._marked_headers(event.get("responseHeaders", [])),
                      "body": _base64_body(body)}
        if event.get("responseStatusText"):
            fulfilment["responsePhrase"] = event["responseStatusText"]
        await self._keep_local_network_access(event["request"]["url"])
        await session.send("Fetch.fulfillRequest", fulfilment)

    async def _keep_local_network_access(self, url: str) -> None:
        """Grant the document's origin Chromium's Local Network Access. A document handed back
        through DevTools has no address, so Chromium counts it public and would refuse its
        WebSockets to internal addresses, the allowed ones too; fetched by Chromium itself from
        an internal address it was exempt. The grant keeps it so, and `websocket_csp` is what
        confines it. Only origins of allowed hosts are ever granted."""
        origin = str(dataclasses.replace(parse_url(url), userinfo="", tail=""))
        if origin in self._local_network_origins:
            return
        try:
            await self.page.context.grant_permissions(["local-network-access"], origin=origin)
            self._local_network_origins.add(origin)
        except PlaywrightError as error:  # the page's WebSockets to internal addresses then fail: the safe side
            logging.warning("could not grant %s local network access: %s", origin, error)

    def _is_document_to_mark(self, event: dict) -> bool:
        """A response that makes a document, from an allowed host. Redirects are left to
        Chromium (its next hop is checked before it is sent), and downloads make no document
        (nor are they read into memory here)."""
        headers = {entry["name"].lower(): entry["value"] for entry in event.get("responseHeaders", [])}
        return ("responseStatusCode" in event and event["responseStatusCode"] not in REDIRECT_STATUSES
                and not headers.get("content-disposition", "").lower().startswith("attachment")
                and self.policy.names_allowed_host(event["request"]["url"]))

    def _marked_headers(self, entries: list[dict]) -> list[dict]:
        """A paused response's headers with `websocket_csp` added as a header of its own. The
        body handed back is whole and decoded, so its length and encoding are Chromium's to
        set."""
        kept = [e for e in entries if e["name"].lower() not in ("content-encoding", "content-length")]
        return [*kept, {"name": "Content-Security-Policy", "value": self.websocket_csp}]

    async def _check_redirect_hop(self, event: dict) -> str:
        """"" if Chromium may follow this redirect of one of the page's navigations."""
        chain = event["networkId"]  # one id for a navigation and all its redirects
        self._redirect_hops[chain] += 1
        if self._redirect_hops[chain] > self.MAX_REDIRECTS:
            self.policy.count("redirects")
            return "redirects"
        return await self.policy.admit(event["request"]["url"], navigation=True)

    async def _guard_websocket(self, websocket) -> None:
        if await self.policy.admit(websocket.url, navigation=False, websocket=True):
            await websocket.close(code=1008, reason="blocked by the sandbox")
            return
        websocket.connect_to_server()

    def _close_extra_page(self, page) -> None:
        if len(page.context.pages) > 1:  # the episode's own page is the first
            self.policy.count("popup")
            logging.info("sandbox closed a popup page")
            asyncio.ensure_future(page.close())
