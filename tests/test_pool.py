"""The browser pool against hostile conditions: killed browsers, frozen pages, sandbox
escapes, and hundreds of episodes without leaks. Real Chromium; a small server of
hostile pages on 127.0.0.1 stands in for the open web."""

import asyncio
import collections
import contextlib
import gzip
import http.server
import ipaddress
import json
import logging
import os
import signal
import socket
import threading
import urllib.parse

import pytest

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.records import Task
from asyncwebrl.rollout.episode import EpisodeSite
from asyncwebrl.rollout.policies import Reply
from asyncwebrl.rollout.pool import make_pool
from asyncwebrl.rollout.response import format_response
from asyncwebrl.rollout.sandbox import Sandbox, UrlPolicy, is_internal
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.evaluator import Judgement
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks
from bare_settings import episode_settings, pool_settings  # tests/bare_settings.py
from loopback import LoopbackService  # tests/loopback.py

PAGES = {
    "/": "<h1>Start</h1><a href='/next' style='font-size:40px'>next</a>",
    "/next": "<h1>Next</h1>",
    "/freeze": "<button onclick='while (true) {}' style='width:400px;height:200px'>freeze</button>",
    "/popup": ("<a href='/next' target='_blank' style='display:block;width:400px;height:100px'>tab</a>"
               "<button onclick=\"window.open('/next')\" style='width:400px;height:100px'>open</button>"),
    "/download-link": "<a href='/download' style='display:block;width:400px;height:100px'>get</a>",
}


_FLIPS = collections.Counter()  # /flip URL -> times asked
REPORTS: list[str] = []  # what hostile pages sent to /report


class _Hostile(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        if parts.path == "/flip":  # a page the first time it is asked, afterwards a redirect to ?to=
            _FLIPS[self.path] += 1
            if _FLIPS[self.path] > 1:
                self._redirect(query["to"][0])
                return
        if parts.path in ("/redirect", "/spin", "/toctou"):  # /spin redirects to itself forever
            self._redirect({"/redirect": query.get("to", [""])[0], "/spin": "/spin",
                            "/toctou": "/flip?" + parts.query}[parts.path])
            return
        if parts.path == "/report":
            REPORTS.append(urllib.parse.unquote(parts.query))
        if parts.path == "/download":
            body = b"secret,data\n" * 100
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Disposition", "attachment; filename=data.csv")
        else:  # /html?body=...: the page (or script, with &type=) a test writes
            body = (query["body"][0] if parts.path == "/html" else PAGES.get(parts.path, "<h1>404</h1>")).encode()
            self.send_response(200)
            self._test_written_headers(query)
            body = self._encoded(body, query)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _test_written_headers(self, query: dict) -> None:
        """Content-Type (&type=, text/html if none; &charset=) and the page's own
        Content-Security-Policy (&csp=)."""
        content_type = query.get("type", ["text/html"])[0]
        if "charset" in query:
            content_type += "; charset=" + query["charset"][0]
        self.send_header("Content-Type", content_type)
        if "csp" in query:
            self.send_header("Content-Security-Policy", query["csp"][0])

    def _encoded(self, body: bytes, query: dict) -> bytes:
        """The body in &charset= (utf-8 if none), gzipped if &gzip=1."""
        if "charset" in query:
            body = body.decode().encode(query["charset"][0])
        if query.get("gzip") == ["1"]:
            self.send_header("Content-Encoding", "gzip")
            return gzip.compress(body)
        return body

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hostile():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class HostileEnvironment:
    """Tasks on the hostile server, sandboxed as an external site would be, with the
    server's host:port explicitly allowed (as `sandbox.allow_hosts` would)."""

    def __init__(self, origin: str, allow_hosts: tuple[str, ...] = ()):
        self.origin = origin
        self.policy = UrlPolicy([origin], [urllib.parse.urlsplit(origin).netloc, *allow_hosts])

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        return EpisodeSite(start_url=task.website, sandbox=Sandbox(self.policy))

    async def judge(self, task, answer, episode_id, screenshot_keys=()):
        return Judgement(1.0 if answer == "ok" else 0.0, [answer == "ok"])

    def finish(self, episode_id):
        pass


class Script:
    """A policy that plays fixed tool-call arguments, then answers "ok". A callable in the
    list is run (with the step's observation) instead of acting, e.g. to kill the browser."""

    def __init__(self, moves):
        self.moves = moves

    def begin(self, task, *, interaction, episode_id):
        moves = iter(self.moves)

        class Agent:
            async def act(self, observation, steps):
                move = next(moves, {"action": "answer", "text": "ok"})
                if callable(move):
                    move(observation)
                    move = {"action": "wait", "time": 0.5}
                return Reply(format_response({}, {}, "x", "Scripted.", move, "memory"))

        return Agent()


def task_at(url: str) -> Task:
    return Task(task_id="hostile", task_name="survive", website=url, difficulty=1)


def run_pool(origin, jobs, settings=None, allow_hosts=(), **pool_changes):
    """Runs (path, policy) jobs on one pool (the bare config's, changed by `pool_changes`);
    returns trajectories, pool and environment."""
    environment = HostileEnvironment(origin, allow_hosts)
    store = ScreenshotStore.in_memory()
    settings = settings or episode_settings("test", interaction="coordinates", timeout_s=5, step_deadline_s=5)

    async def scenario():
        async with make_pool(environment, store=store, settings=settings, pool=pool_settings(**pool_changes)) as pool:
            results = []
            for path, policy in jobs:
                trajectory = await pool.run(task_at(origin + path), policy)
                store.free(trajectory.screenshot_keys())
                results.append(trajectory)
            return results, pool

    trajectories, pool = asyncio.run(scenario())
    return trajectories, pool, environment, store


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _our_chromium_pids(kind: bytes = b"") -> list[int]:
    """Chromium processes under this test process (through Playwright's driver): the
    browser itself for kind b"", else those started with --type=<kind> (b"renderer")."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").split()  # zygote children rewrite argv as one string
            ancestors = [int(entry)]
            while ancestors[-1] > 1 and len(ancestors) < 8:
                ancestors.append(_parent(ancestors[-1]))
        except (OSError, IndexError, ValueError):
            continue
        types = [a[len(b"--type="):] for a in command if a.startswith(b"--type=")]
        mine = os.getpid() in ancestors and bool(command) and b"chrom" in command[0]
        if mine and ((not kind and not types and b"--remote-debugging-pipe" in command) or (kind and kind in types)):
            pids.append(int(entry))
    return pids


def test_a_killed_browser_is_replaced_and_the_pool_goes_on(hostile):
    def kill_browser(observation):
        pids = _our_chromium_pids()
        assert len(pids) == 1
        os.kill(pids[0], signal.SIGKILL)

    click = {"action": "left_click", "coordinate": [100, 60]}
    jobs = [("/", Script([click]))] + [("/", Script([kill_browser, click]))] + [("/", Script([click]))] * 3
    trajectories, pool, _, store = run_pool(hostile, jobs, concurrency=1)
    assert [t.outcome for t in trajectories] == ["answered", "crashed", "answered", "answered", "answered"]
    assert trajectories[1].reward is None  # crashed is never scored
    assert all(t.reward == 1.0 for i, t in enumerate(trajectories) if i != 1)
    assert pool.stats.crashed == 1 and pool.stats.launches == 2
    assert store.stats.entries == 0


class _FreezingSandbox(Sandbox):
    """Stops (SIGSTOP) the browser once, while the first episode is being opened: the
    browser then never answers, as a killed one does when Playwright misses its death."""

    def __init__(self, policy, stopped: list):
        super().__init__(policy)
        self.stopped = stopped

    async def install(self, context) -> None:
        await super().install(context)
        if not self.stopped:
            (pid,) = _our_chromium_pids()
            os.kill(pid, signal.SIGSTOP)
            self.stopped.append(pid)


class FreezingEnvironment(HostileEnvironment):
    def __init__(self, origin: str):
        super().__init__(origin)
        self.stopped: list[int] = []

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        return EpisodeSite(start_url=task.website, sandbox=_FreezingSandbox(self.policy, self.stopped))


def test_a_browser_that_stops_answering_while_an_episode_opens_ends_its_episodes_as_crashed(hostile):
    environment = FreezingEnvironment(hostile)
    store = ScreenshotStore.in_memory()
    settings = episode_settings("test", interaction="coordinates", timeout_s=2, step_deadline_s=5)

    async def scenario():
        async with make_pool(environment, store=store, settings=settings, pool=pool_settings(concurrency=2)) as pool:
            trajectories = await asyncio.gather(*(pool.run(task_at(hostile + "/"), Script([])) for _ in range(4)))
            return trajectories, pool

    try:  # the timeout only ends a hang (as before deadlines covered the opening), it measures nothing
        trajectories, pool = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    finally:
        for pid in environment.stopped:
            with contextlib.suppress(ProcessLookupError):  # Playwright's driver may have killed it on stopping
                os.kill(pid, signal.SIGKILL)
    outcomes = sorted(t.outcome for t in trajectories)
    assert outcomes == ["answered", "answered", "crashed", "crashed"], [t.error for t in trajectories]
    assert all(t.reward == 1.0 for t in trajectories if t.outcome == "answered")
    assert pool.stats.crashed == 2 and pool.stats.launches == 2  # one new browser for the later episodes
    for t in trajectories:
        store.free(t.screenshot_keys())
    assert store.stats.entries == 0


def test_a_crashed_page_ends_its_episode_and_the_next_one_runs(hostile):
    def kill_renderers(observation):
        pids = _our_chromium_pids(b"renderer")
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    click = {"action": "left_click", "coordinate": [100, 60]}
    jobs = [("/", Script([kill_renderers, click])), ("/", Script([click]))]
    trajectories, pool, _, store = run_pool(hostile, jobs, concurrency=1)
    assert [t.outcome for t in trajectories] == ["crashed", "answered"], [t.error for t in trajectories]
    assert trajectories[1].reward == 1.0 and store.stats.entries == 0


def test_a_frozen_page_is_abandoned_at_the_step_deadline(hostile):
    settings = episode_settings("test", interaction="coordinates", timeout_s=2, step_deadline_s=3)
    freeze = {"action": "left_click", "coordinate": [100, 50]}
    jobs = [("/freeze", Script([freeze])), ("/", Script([]))]
    trajectories, pool, _, store = run_pool(hostile, jobs, settings=settings, concurrency=1)
    frozen, after = trajectories
    assert frozen.outcome == "crashed" and ("StepHang" in frozen.error or "Timeout" in frozen.error), frozen.error
    assert after.outcome == "answered" and after.reward == 1.0
    assert store.stats.entries == 0


def test_sandbox_blocks_escapes_while_the_site_works(hostile):
    moves = [
        {"action": "navigate", "url": "file:///etc/passwd"},
        {"action": "navigate", "url": "chrome://settings"},
        {"action": "navigate", "url": "javascript:alert(1)"},
        {"action": "navigate", "url": "data:text/html,<h1>x</h1>"},
        {"action": "navigate", "url": "http://2130706433:65000/"},  # 127.0.0.1 written as a decimal
        {"action": "navigate", "url": "http://0x7f.1:65000/"},  # 127.0.0.1, hex and short
        {"action": "navigate", "url": "http://public-site.example/"},  # not the task's site
        {"action": "navigate", "url": hostile + "/redirect?to=http://127.0.0.1:65000/"},  # a redirect to a blocked host
        {"action": "navigate", "url": hostile + "/spin"},  # an endless redirect chain
        {"action": "navigate", "url": hostile + "/next"},  # the site itself still works
    ]
    trajectories, _, environment, _ = run_pool(hostile, [("/", Script(moves))])
    steps = trajectories[0].steps
    errors = [s.action_error for s in steps]
    assert all("blocked" in e for e in errors[:7]), errors
    assert "ERR_BLOCKED_BY_CLIENT" in errors[7] and "ERR_BLOCKED_BY_CLIENT" in errors[8], errors
    assert errors[9] == "", errors
    assert steps[-1].url == hostile + "/next"  # after the final navigation, the page is the site's
    blocked = environment.policy.blocked
    assert blocked["scheme"] == 4 and blocked["internal"] >= 3 and blocked["offsite"] == 1 and blocked["redirects"] == 1


# The hostile review's URL-sandbox findings (docs/architecture.md#a-hostile-review-finding-by-finding),
# each replayed by a hostile page on the allowed site against an internal service on
# another loopback port, one the policy does not allow.

@pytest.fixture
def internal():
    service = LoopbackService()
    yield service
    service.close()


def redirect_to(hostile: str, location: str) -> str:
    return hostile + "/redirect?" + urllib.parse.urlencode({"to": location})


def page_with(html: str, **headers: str) -> str:
    """The path of a page (or, with type=, another resource) of `html`; `headers` as
    _Hostile._test_written_headers and _encoded read them."""
    return "/html?" + urllib.parse.urlencode({**headers, "body": html})  # the body last: log lines cut it


WAIT = {"action": "wait", "time": 1.5}


def test_finding_1_a_backslash_before_the_at_sign_does_not_hide_a_redirects_host(hostile, internal):
    """Location: http://127.0.0.1:B\\@allowed/ is port B to a browser (\\ ends the host), the
    allowed site to Python's urlsplit. Followed by a navigation and by a fetch."""
    allowed = urllib.parse.urlsplit(hostile).netloc
    sneaky = f"http://127.0.0.1:{internal.port}\\@{allowed}/"
    fetch = f"<script>fetch({redirect_to(hostile, sneaky)!r}).catch(() => 0)</script>"
    moves = [{"action": "navigate", "url": redirect_to(hostile, sneaky)}, {"action": "navigate", "url": hostile + "/"}]
    trajectories, _, environment, _ = run_pool(hostile, [("/", Script(moves)), (page_with(fetch), Script([WAIT]))])
    navigated = trajectories[0].steps
    assert "ERR_BLOCKED_BY_CLIENT" in navigated[0].action_error, navigated[0].action_error
    assert not any(s.url.startswith(f"http://127.0.0.1:{internal.port}") for s in navigated)
    assert internal.requests == []
    assert environment.policy.blocked["internal"] == 2


def test_finding_2_a_percent_encoded_ip_host_in_a_fetchs_redirect_is_read_as_the_ip(hostile, internal):
    encoded = f"http://%31%32%37.0.0.1:{internal.port}/"  # 127.0.0.1, percent-encoded
    page = page_with(f"<script>fetch({redirect_to(hostile, encoded)!r}).catch(() => 0)</script>")
    _, _, environment, _ = run_pool(hostile, [(page, Script([WAIT]))])
    assert internal.requests == []
    assert environment.policy.blocked["internal"] == 1


def test_finding_3_a_site_that_answers_the_browser_differently_from_the_check_is_asked_once(hostile, internal):
    """/toctou redirects to /flip, which is a page the first time it is asked and a redirect to
    the internal service afterwards. Nothing may ask twice: the page stays the first answer."""
    flip = "/toctou?" + urllib.parse.urlencode({"to": f"http://127.0.0.1:{internal.port}/"})
    moves = [{"action": "navigate", "url": hostile + flip + "&via=navigate"}]
    trajectories, _, _, _ = run_pool(hostile, [(flip + "&via=start", Script(moves))])
    steps = trajectories[0].steps
    assert steps[0].url.startswith(hostile + "/flip?") and "via=start" in steps[0].url  # the start page
    assert steps[-1].url.startswith(hostile + "/flip?") and "via=navigate" in steps[-1].url  # after navigate
    assert internal.requests == []


def _this_machines_name_and_an_internal_address() -> tuple[str, str]:
    """(this machine's host name, an internal IPv4 address it resolves to), to serve the
    internal service at; a host name resolves on any machine, mostly to loopback or a
    private address. (localhost and *.localhost are refused by name.)"""
    name = socket.gethostname()
    try:
        addresses = {ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(name, 80, socket.AF_INET)}
    except OSError:
        pytest.skip(f"this machine's name {name!r} does not resolve")
    internal_ones = sorted(str(a) for a in addresses if is_internal(a))
    if not internal_ones or name.lower() == "localhost":
        pytest.skip(f"this machine's name {name!r} resolves to no internal address: {addresses}")
    return name, internal_ones[0]


def test_finding_4_subresources_at_a_name_that_resolves_to_loopback_are_blocked(hostile):
    name, address = _this_machines_name_and_an_internal_address()
    service = LoopbackService(address)
    target = f"http://{name}:{service.port}"
    kinds = f"""
      <img src="{target}/img"><script src="{target}/script"></script><link rel="stylesheet" href="{target}/css">
      <link rel="prefetch" href="{target}/prefetch">
      <script>
        fetch("{target}/fetch").catch(() => 0);
        const xhr = new XMLHttpRequest(); xhr.open("GET", "{target}/xhr"); xhr.send();
        navigator.sendBeacon("{target}/beacon", "x");
        new EventSource("{target}/sse");
        new Worker(URL.createObjectURL(new Blob(['fetch("{target}/worker").catch(() => 0)'])));
      </script>"""
    try:
        _, _, environment, _ = run_pool(hostile, [(page_with(kinds), Script([WAIT]))])
    finally:
        service.close()
    assert service.requests == []
    assert environment.policy.blocked["internal"] >= 8  # nine kinds; a prefetch waits for an idle browser


def test_finding_5_websockets_go_through_the_policy_and_allowed_ones_still_work(hostile, internal):
    allowed = LoopbackService()
    page = page_with(f"""<script>
      for (const port of [{internal.port}, {allowed.port}]) {{
        const socket = new WebSocket("ws://127.0.0.1:" + port + "/");
        socket.onmessage = (event) => fetch("/report?" + port + "=" + event.data);
      }}</script>""")
    try:
        _, _, environment, _ = run_pool(hostile, [(page, Script([WAIT]))], allow_hosts=(f"127.0.0.1:{allowed.port}",))
    finally:
        allowed.close()
    assert internal.requests == []
    assert environment.policy.blocked["websocket"] == 1
    assert f"{allowed.port}=hello" in REPORTS  # the allowed one connected and got its message


def _inline_js_string(value: str) -> str:
    """A JavaScript string literal of `value` that may stand in an inline script (a "</script>"
    in it would end the script)."""
    return json.dumps(value).replace("</", "<\\/")


def _websockets_the_routing_misses(url: str, prefix: str) -> str:
    """A page that opens a WebSocket to `url` in each way Playwright's in-page routing does
    not see, and reports how each ended ("/report?<prefix><way>=<first message or error>")."""
    opening = f"const socket = new WebSocket({json.dumps(url)});"
    worker = opening + ' socket.onmessage = (e) => postMessage(e.data); socket.onerror = () => postMessage("error");'
    frame = (f"<script>{opening} if (socket._apiPassThrough) socket._apiPassThrough();"
             ' socket.onmessage = (e) => parent.postMessage(e.data, "*");'
             ' socket.onerror = () => parent.postMessage("error", "*");</script>')
    return page_with(f"""<script>
      const report = (way) => (event) => fetch("/report?{prefix}" + way + "=" + event.data);
      const blob = (source) => URL.createObjectURL(new Blob([source], {{type: "text/javascript"}}));
      const worker = {json.dumps(worker)};
      // in the page, through the routing script's internals
      const socket = new WebSocket({json.dumps(url)});
      if (socket._apiPassThrough) socket._apiPassThrough();
      socket.onmessage = report("page"); socket.onerror = () => report("page")({{data: "error"}});
      new Worker(blob(worker)).onmessage = report("blob-worker");
      new Worker({json.dumps(page_with(worker, type="text/javascript"))}).onmessage = report("worker");
      new Worker("data:text/javascript," + encodeURIComponent(worker)).onmessage = report("data-worker");
      window.onmessage = report("srcdoc-frame");
      const frame = document.createElement("iframe");
      frame.srcdoc = {_inline_js_string(frame)};
      document.documentElement.append(frame);
    </script>""")


WAYS_PAST_THE_ROUTING = ("page", "blob-worker", "worker", "data-worker", "srcdoc-frame")


def test_finding_5_websockets_the_routing_misses_are_refused_on_an_allowed_hosts_pages(hostile, internal, caplog):
    """The hostile review's finding 5 in webgym mode, on a page of an `allow_hosts` entry on
    loopback (where Chromium's Local Network Access does not apply): WebSockets to another
    loopback port from workers (from a URL, blob: and data:), from a srcdoc frame and through
    the routing script's internals are refused by the sandbox's Content-Security-Policy, and
    counted from its reports. The page is reached through a redirect, and both the page's
    document and its worker script carry the policy."""
    caplog.set_level(logging.INFO)
    page = _websockets_the_routing_misses(f"ws://127.0.0.1:{internal.port}/", "missed-")
    _, _, environment, _ = run_pool(hostile, [("/redirect?" + urllib.parse.urlencode({"to": page}), Script([WAIT]))])
    assert internal.requests == []
    assert {f"missed-{way}=error" for way in WAYS_PAST_THE_ROUTING} <= set(REPORTS), REPORTS
    assert environment.policy.blocked["csp"] == 5
    refusals = [r.getMessage() for r in caplog.records if "(csp: connect-src in " in r.getMessage()]
    refused_in = [message.rsplit(" in ", 1)[1] for message in refusals]
    assert any(where.startswith(hostile + "/html?body=") for where in refused_in), refused_in  # the document
    assert any(where.startswith(hostile + "/html?type=text%2Fjavascript") for where in refused_in), refused_in


def test_finding_5_no_shared_worker_runs_as_no_route_sees_its_requests(hostile, internal):
    """Playwright's routing sees none of a shared worker's requests (its fetches and
    WebSockets, even its CSP reports), so neither does the sandbox: on an allowed host's page
    a blob: shared worker reached any internal port. Chromium runs without shared workers."""
    target = f"127.0.0.1:{internal.port}"
    worker = ("onconnect = (connection) => { const port = connection.ports[0];"
              f" fetch('http://{target}/fetch')"
              ".then(() => port.postMessage('reached'), () => port.postMessage('failed'));"
              f" new WebSocket('ws://{target}/socket').onmessage = (e) => port.postMessage(e.data); }};")
    page = page_with(f"""<script>
      const report = (value) => fetch("/report?shared-" + value);
      if (typeof SharedWorker === "undefined") {{ report("absent"); }} else {{
        const blob = URL.createObjectURL(new Blob([{json.dumps(worker)}], {{type: "text/javascript"}}));
        for (const url of [blob, {json.dumps(page_with(worker, type="text/javascript"))}]) {{
          new SharedWorker(url).port.onmessage = (event) => report(event.data);
        }}
      }}</script>""")
    run_pool(hostile, [(page, Script([WAIT]))])
    assert internal.requests == []
    assert "shared-absent" in REPORTS, REPORTS


def test_an_allowed_hosts_pages_work_whole_under_the_sandboxs_policy(hostile):
    """Everything but those WebSockets still works on a page of an allowed host: its
    subresources, fetches (http, data:, blob:), frames and workers, and WebSockets to allowed
    hosts, from the page and from a worker. Nothing is refused."""
    allowed = LoopbackService()
    ws = json.dumps(f"ws://127.0.0.1:{allowed.port}/")
    script = page_with("window.scriptRan = 'yes';", type="text/javascript")
    style = page_with("h1 { color: rgb(1, 2, 3); }", type="text/css")
    image = page_with("<svg xmlns='http://www.w3.org/2000/svg' width='4' height='4'></svg>", type="image/svg+xml")
    worker = page_with("fetch('/next').then(r => r.text()).then(text => postMessage(text));", type="text/javascript")
    socket_worker = f"const socket = new WebSocket({ws}); socket.onmessage = (e) => postMessage(e.data);"
    frame = page_with("<script>parent.postMessage('loaded', '*')</script>")
    page = page_with(f"""<head><script>
        const report = (kind) => (value) => fetch("/report?mixed-" + kind + "=" + encodeURIComponent(value));
        const message = (kind) => (event) => report(kind)(event.data);
      </script><link rel="stylesheet" href="{style}"><script src="{script}"></script></head>
      <h1>mixed</h1><img src="{image}" onload="report('image')('ok')"><iframe src="{frame}"></iframe>
      <script>
        report("script")(window.scriptRan);
        window.onload = () => report("style")(getComputedStyle(document.querySelector("h1")).color);
        fetch("/next").then(r => r.text()).then(report("fetch"));
        const xhr = new XMLHttpRequest(); xhr.open("GET", "/next");
        xhr.onload = () => report("xhr")(xhr.responseText); xhr.send();
        fetch("data:text/plain,from-data").then(r => r.text()).then(report("data"));
        fetch(URL.createObjectURL(new Blob(["from-blob"]))).then(r => r.text()).then(report("blob"));
        window.onmessage = message("frame");
        new Worker("{worker}").onmessage = message("worker");
        new WebSocket({ws}).onmessage = message("socket");
        new Worker(URL.createObjectURL(new Blob([{json.dumps(socket_worker)}]))).onmessage = message("worker-socket");
      </script>""")
    try:
        _, _, environment, _ = run_pool(hostile, [(page, Script([WAIT]))], allow_hosts=(f"127.0.0.1:{allowed.port}",))
    finally:
        allowed.close()
    expected = {"script=yes", "style=rgb(1, 2, 3)", "image=ok", "fetch=<h1>Next</h1>", "xhr=<h1>Next</h1>",
                "data=from-data", "blob=from-blob", "frame=loaded", "worker=<h1>Next</h1>", "socket=hello",
                "worker-socket=hello"}
    assert {"mixed-" + e for e in expected} <= set(REPORTS), REPORTS
    assert environment.policy.blocked == {}


def test_a_pages_own_policy_holds_alongside_the_sandboxs(hostile, internal):
    """Policies add up. A page's own CSP still holds (its img-src 'none' refuses an image),
    and its own connect-src * lets no WebSocket past the sandbox's; the same for a worker
    script with a policy of its own. The page is gzipped and in Latin-1: the document handed
    back to Chromium is whole and decoded once."""
    own = "img-src 'none'; connect-src *"
    url = json.dumps(f"ws://127.0.0.1:{internal.port}/")
    worker = page_with(f"const socket = new WebSocket({url}); socket.onmessage = (e) => postMessage(e.data);"
                       ' socket.onerror = () => postMessage("error");', type="text/javascript", csp=own)
    page = page_with(f"""<h1>café</h1><img src="/next" onerror="report('image')('refused')">
      <script>
        const report = (kind) => (value) => fetch("/report?own-" + kind + "=" + encodeURIComponent(value));
        report("text")(document.querySelector("h1").textContent);
        new Worker("{worker}").onmessage = (event) => report("worker")(event.data);
        new Worker(URL.createObjectURL(new Blob([`const socket = new WebSocket({url});
          socket.onmessage = (e) => postMessage(e.data); socket.onerror = () => postMessage("error");`])))
          .onmessage = (event) => report("blob-worker")(event.data);
      </script>""", csp=own, charset="iso-8859-1", gzip="1")
    _, _, environment, _ = run_pool(hostile, [(page, Script([WAIT]))])
    assert {"own-text=café", "own-image=refused", "own-worker=error", "own-blob-worker=error"} <= set(REPORTS), REPORTS
    assert internal.requests == []
    assert environment.policy.blocked["csp"] == 2


def test_a_fetchs_redirects_are_followed_hop_by_hop_with_each_hosts_own_cookies(hostile):
    """Subresources' redirects are followed by the sandbox (Playwright routes only a chain's
    first request): allowed ones still work, endless ones are cut, and the next host gets
    its own cookies, never the first host's."""
    other_host = LoopbackService()
    page = page_with(f"""<script>
      document.cookie = "secret=1";
      const report = (what) => (response) => response.text().then(text => fetch("/report?" + what + "=" + text));
      fetch({redirect_to(hostile, "/next")!r}).then(report("next"));
      fetch({redirect_to(hostile, f"http://localhost:{other_host.port}/")!r}).then(report("other"));
      fetch("/spin").catch(() => fetch("/report?spin=refused"));
    </script>""")
    try:
        _, _, environment, _ = run_pool(hostile, [(page, Script([WAIT]))],
                                        allow_hosts=(f"localhost:{other_host.port}",))
    finally:
        other_host.close()
    assert "secret=1" not in other_host.cookies  # that cookie is 127.0.0.1's
    assert {"next=<h1>Next</h1>", "other=<h1>internal service</h1>", "spin=refused"} <= set(REPORTS)
    assert other_host.cookies == [""]
    assert environment.policy.blocked["redirects"] == 1


def test_downloads_and_popups_stay_contained(hostile, tmp_path):
    click_download = {"action": "left_click", "coordinate": [100, 30]}
    click_tab, click_open = {"action": "left_click", "coordinate": [100, 40]}, {"action": "left_click", "coordinate": [100, 180]}
    trajectories, pool, environment, _ = run_pool(
        hostile, [("/download-link", Script([click_download])), ("/popup", Script([click_tab])),
                  ("/popup", Script([click_open]))])
    download, tab, window_open = trajectories
    assert download.outcome == "answered", download.error
    assert environment.policy.blocked["download"] == 1
    # target=_blank and window.open navigate the episode's own page instead of a new one.
    assert tab.steps[-1].url.endswith("/next") and window_open.steps[-1].url.endswith("/next")
    assert pool.open_contexts() == 0


def test_sixty_episodes_leave_no_contexts_or_screenshots_behind():
    store = ScreenshotStore.in_memory()
    policy = Script([{"action": "left_click", "coordinate": [30, 100]}])
    episodes = 60   # three browsers' worth; the 1,000-episode soak is benchmarks/browser_pool.py --soak

    async def scenario(web):
        task = generate_tasks("test", 1)[0]
        settings = episode_settings("test", interaction="coordinates", timeout_s=10)
        async with make_pool(LocalEnvironment(web), store=store, settings=settings,
                             pool=pool_settings(concurrency=4, pages_per_browser=4, recycle_after=20)) as pool:
            baseline = pool.open_contexts()

            async def one():
                trajectory = await pool.run(task, policy)
                assert trajectory.outcome == "answered", trajectory.error
                store.free(trajectory.screenshot_keys())

            await asyncio.gather(*(one() for _ in range(episodes)))
            assert pool.live_browsers() == 1  # retired browsers were closed, none launched twice
            return baseline, pool.open_contexts(), pool

    with LocalWeb() as web:
        baseline, after, pool = asyncio.run(scenario(web))
        assert not web._sessions  # every episode's server state was dropped
    assert baseline == after == 0
    assert pool.stats.episodes == episodes
    assert pool.stats.launches == 3 and pool.stats.retired == 2  # a new browser every 20 episodes
    assert store.stats.entries == 0 and store.stats.bytes_held == 0 and store.keys() == []
    assert store.stats.puts == 2 * episodes and store.stats.deletes == store.stats.puts - store.stats.hits
    assert store.stats.hits > 0  # concurrent episodes on the same page shared a screenshot
