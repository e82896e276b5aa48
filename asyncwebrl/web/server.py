"""LocalWeb: a real HTTP server on 127.0.0.1 that serves every local site.

Sites live under a path prefix (/shop-v1-s03/...). Task files name them by a fixed
logical origin, http://awr.local, so they do not depend on the port of one run;
`browser_url` and `logical_url` translate between the two.

Server state (carts, form submissions) is kept per episode: each browser context
carries a cookie with its episode id, and the programmatic judge reads the state of
exactly that episode. Eight episodes of one task group can therefore run at once on
the same site without seeing each other.

A directory of static files (MiniWoB++'s pages) can be mounted under a prefix of its
own: `web.mount("miniwob", path)` serves path/x/y.html as /miniwob/x/y.html.
"""

from __future__ import annotations

import http.cookies
import http.server
import logging
import mimetypes
import os
import sys
import threading
import urllib.parse
from typing import Any

from asyncwebrl.web.site import NotFound, Request, Site
from asyncwebrl.web.sites import make_site

LOGICAL_ORIGIN = "http://awr.local"
EPISODE_COOKIE = "awr_episode"
_MAX_BODY_BYTES = 64 * 1024
# Pages may open WebSockets to this server only. The URL sandbox refuses others too, but a
# WebSocket opened in a worker, or through the internals of Playwright's in-page WebSocket
# routing, never reaches it; this policy holds for those as well (blob: workers inherit it
# from their page). http(s) requests stay the sandbox's to refuse, and count ("http:" and
# "https:" match no ws: or wss: URL).
WEBSOCKETS_ONLY_HERE = "connect-src 'self' http: https:"


class _QuietServer(http.server.ThreadingHTTPServer):
    """A browser that closes a page mid-response (an episode ending, a context recycled)
    is routine here, not an error worth a traceback; anything else is still reported."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class LocalWeb:
    """Start with `with LocalWeb() as web:` or `start()` / `stop()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._address = (host, port)
        self._sites: dict[str, Site] = {}
        self._sessions: dict[tuple[str, str], dict[str, Any]] = {}
        self._mounts: dict[str, str] = {}  # path prefix -> directory of static files
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests_served = 0

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "LocalWeb":
        handler = _make_handler(self)
        self._server = _QuietServer(self._address, handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-web", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "LocalWeb":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalWeb is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- URLs ------------------------------------------------------------------------
    def browser_url(self, url: str) -> str:
        """Logical task URL -> the URL the browser opens on this run's port."""
        if url.startswith(LOGICAL_ORIGIN):
            return self.origin + url[len(LOGICAL_ORIGIN):]
        return url

    def logical_url(self, url: str) -> str:
        """What the agent is shown: the port of this run never appears in prompts."""
        if url.startswith(self.origin):
            return LOGICAL_ORIGIN + url[len(self.origin):]
        return url

    @property
    def cookie_domain(self) -> str:
        return urllib.parse.urlsplit(self.origin).hostname or "127.0.0.1"

    # -- sites and per-episode state ----------------------------------------------
    def site(self, site_id: str) -> Site:
        with self._lock:
            if site_id not in self._sites:
                self._sites[site_id] = make_site(site_id)
            return self._sites[site_id]

    def session(self, episode_id: str, site_id: str) -> dict[str, Any]:
        """The live state dict of one episode on one site (created empty)."""
        with self._lock:
            return self._sessions.setdefault((episode_id, site_id), {})

    def forget(self, episode_id: str) -> None:
        """Drop an episode's state once it has been judged (keeps memory flat)."""
        with self._lock:
            for key in [k for k in self._sessions if k[0] == episode_id]:
                del self._sessions[key]

    def mount(self, prefix: str, directory: str) -> None:
        """Serve the files under `directory` at /prefix/... (read-only, GET)."""
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"no directory {directory} to serve at /{prefix}/")
        with self._lock:
            self._mounts[prefix] = os.path.realpath(directory)

    def serve(self, method: str, raw_path: str, body: bytes, cookie_header: str) -> tuple[int, dict, bytes]:
        """One request, as the server answers it (and the browser-free driver, in process)."""
        try:
            return self.dispatch(method, raw_path, body, cookie_header)
        except Exception:  # a site bug must show as a 500 page, never kill the server or an episode
            logging.exception("local web: error serving %s %s", method, raw_path)
            return 500, {"Content-Type": "text/plain"}, b"internal error"

    def dispatch(self, method: str, raw_path: str, body: bytes, cookie_header: str) -> tuple[int, dict, bytes]:
        parts = urllib.parse.urlsplit(raw_path)
        segments = parts.path.split("/", 2)  # ["", site_id, rest]
        site_id = segments[1] if len(segments) > 1 else ""
        if site_id in self._mounts:
            if method != "GET":   # static files are read, never posted to
                return 405, {"Content-Type": "text/plain", "Allow": "GET"}, b"method not allowed"
            return _static_file(self._mounts[site_id], urllib.parse.unquote(segments[2] if len(segments) > 2 else ""))
        try:
            site = self.site(site_id)
        except (KeyError, ValueError):
            return 404, {"Content-Type": "text/html; charset=utf-8"}, _NOT_FOUND
        cookies = http.cookies.SimpleCookie(cookie_header or "")
        episode_id = cookies[EPISODE_COOKIE].value if EPISODE_COOKIE in cookies else "anonymous"
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        request = Request(
            method=method,
            path="/" + (segments[2] if len(segments) > 2 else ""),
            query={k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()},
            form=form,
            session=self.session(episode_id, site_id),
        )
        try:
            response = site.handle(request)
        except NotFound:
            return 404, {"Content-Type": "text/html; charset=utf-8"}, _NOT_FOUND
        headers = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
        if response.location:
            headers["Location"] = response.location
        return response.status, headers, response.body.encode("utf-8")


_NOT_FOUND = b"<!doctype html><title>Not found</title><h1>404 - page not found</h1>"


def _static_file(root: str, relative: str) -> tuple[int, dict, bytes]:
    path = os.path.realpath(os.path.join(root, relative))
    if not path.startswith(root + os.sep) or not os.path.isfile(path):  # (no way out of the root)
        return 404, {"Content-Type": "text/html; charset=utf-8"}, _NOT_FOUND
    with open(path, "rb") as f:
        payload = f.read()
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if content_type.startswith("text/") or content_type.endswith("javascript"):
        content_type += "; charset=utf-8"
    return 200, {"Content-Type": content_type, "Cache-Control": "max-age=3600"}, payload


def _make_handler(web: LocalWeb):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), _MAX_BODY_BYTES)
            body = self.rfile.read(length) if length else b""
            status, headers, payload = web.serve(method, self.path, body, self.headers.get("Cookie", ""))
            web.requests_served += 1
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Security-Policy", WEBSOCKETS_ONLY_HERE)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):  # noqa: N802 (http.server naming)
            self._serve("GET")

        def do_POST(self):  # noqa: N802
            self._serve("POST")

        def log_message(self, *args):  # quiet: thousands of requests per run
            pass

    return Handler
