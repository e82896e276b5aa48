"""Follow an oracle plan over plain HTTP, without a browser.

A fast solvability check for every generated task: each move must find its element by
data-oid on the current page, links are followed, typing fills a field and submits its
form (as Enter does in the browser), clicking a label toggles its radio or checkbox.
Every element a move names must be unique on its page, and every fact the plan notes
must be readable on the page it is noted from. The real check, through the agent's own
actions in Chromium, is the oracle policy; this one runs in milliseconds, so tests can
cover every task of many sites.
"""

from __future__ import annotations

import dataclasses
import html.parser
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from asyncwebrl.records import Task
from asyncwebrl.web.evaluator import Judgement, judge_local_episode, normalize_text, state_value
from asyncwebrl.web.server import EPISODE_COOKIE, LocalWeb
from asyncwebrl.web.site import Site, TaskDraft

_PLACEHOLDER = re.compile(r"\{state:([^}]+)\}")


@dataclasses.dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    form: int | None  # index of the enclosing form
    control: int | None = None  # for labels: index of the input they wrap or name


@dataclasses.dataclass
class Form:
    method: str
    action: str
    fields: list[int] = dataclasses.field(default_factory=list)  # element indexes


class _PageParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.forms: list[Form] = []
        self._form: int | None = None
        self._label: int | None = None
        self._textarea: int | None = None
        self._hidden_depth = 0  # inside <style>, <script> or <title>
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag in ("style", "script", "title"):
            self._hidden_depth += 1
        if tag == "form":
            self.forms.append(Form(attrs.get("method", "get").upper(), attrs.get("action", "")))
            self._form = len(self.forms) - 1
        element = Element(tag, attrs, self._form)
        self.elements.append(element)
        index = len(self.elements) - 1
        if tag in ("input", "textarea", "button") and self._form is not None:
            self.forms[self._form].fields.append(index)
        if tag == "label":
            self._label = index
        elif tag == "input" and self._label is not None and self.elements[self._label].control is None:
            self.elements[self._label].control = index
        if tag == "textarea":
            element.attrs["value"] = ""
            self._textarea = index

    def handle_data(self, data):
        if self._textarea is not None:
            self.elements[self._textarea].attrs["value"] += data
        elif not self._hidden_depth:
            self.text.append(data)

    def handle_endtag(self, tag):
        if tag in ("style", "script", "title"):
            self._hidden_depth -= 1
        elif tag == "form":
            self._form = None
        elif tag == "label":
            self._label = None
        elif tag == "textarea":
            self._textarea = None


@dataclasses.dataclass
class WalkResult:
    answer: str
    session: dict[str, Any]
    urls: list[str]
    episode_id: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class PlanWalker:
    def __init__(self, web: LocalWeb, episode_id: str):
        self.web = web
        self.episode_id = episode_id
        self.opener = urllib.request.build_opener(_NoRedirect)
        self.urls: list[str] = []

    def load(self, url: str, method: str = "GET", body: bytes | None = None) -> None:
        for _ in range(5):  # follow redirects ourselves (303 after POST -> GET)
            request = urllib.request.Request(url, data=body, method=method,
                                             headers={"Cookie": f"{EPISODE_COOKIE}={self.episode_id}"})
            try:
                with self.opener.open(request) as response:
                    status, text = response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                status, text = error.code, error.read().decode()
                if status in (301, 302, 303, 307):
                    url, method, body = urllib.parse.urljoin(url, error.headers["Location"]), "GET", None
                    continue
            if status != 200:
                raise AssertionError(f"{method} {url} answered {status}")
            self.url, self.urls = url, self.urls + [url]
            parser = _PageParser()
            parser.feed(text)
            self.elements, self.forms = parser.elements, parser.forms
            self.visible_text = normalize_text(" ".join(parser.text))
            return
        raise AssertionError(f"too many redirects from {url}")

    def find(self, oid: str) -> int:
        """The element with this data-oid; there must be exactly one on the page."""
        found = [i for i, element in enumerate(self.elements) if element.attrs.get("data-oid") == oid]
        if len(found) != 1:
            raise AssertionError(f"{len(found)} elements with data-oid={oid!r} on {self.url}")
        return found[0]

    def check_on_screen(self, memory: dict[str, str]) -> None:
        """A noted fact must be readable on the page it is noted from: as a phrase, or
        (for composed notes such as "Title (Author, 1965)") word by word."""
        words = set(self.visible_text.split())
        for key, value in memory.items():
            phrase = normalize_text(value)
            missing = [] if phrase in self.visible_text else [w for w in phrase.split() if w not in words]
            if missing:
                raise AssertionError(f"noted {key}={value!r} but {missing} is not on {self.url}")

    def submit(self, form_index: int) -> None:
        form = self.forms[form_index]
        pairs = []
        for index in form.fields:
            element = self.elements[index]
            kind = element.attrs.get("type", "text").lower()
            name = element.attrs.get("name")
            if not name or element.tag == "button" or kind in ("submit", "button"):
                continue
            if kind in ("radio", "checkbox") and "checked" not in element.attrs:
                continue
            pairs.append((name, element.attrs.get("value", "on" if kind in ("radio", "checkbox") else "")))
        encoded = urllib.parse.urlencode(pairs)
        action = urllib.parse.urljoin(self.url, form.action or self.url)
        if form.method == "POST":
            self.load(action, "POST", encoded.encode())
        else:
            self.load(action.split("?")[0] + "?" + encoded)

    def click(self, oid: str) -> None:
        element = self.elements[self.find(oid)]
        if element.tag == "a":
            self.load(urllib.parse.urljoin(self.url, element.attrs["href"]))
        elif element.tag == "label" or (element.tag == "input" and element.attrs.get("type") in ("radio", "checkbox")):
            target = element if element.tag == "input" else self.elements[self._label_control(element)]
            self._toggle(target)
        elif element.tag == "button" or element.attrs.get("type") == "submit":
            if element.form is None:
                raise AssertionError(f"button {oid!r} is outside any form on {self.url}")
            self.submit(element.form)
        else:
            raise AssertionError(f"clicking <{element.tag} data-oid={oid!r}> does nothing")

    def _label_control(self, label: Element) -> int:
        if label.control is not None:
            return label.control
        target_id = label.attrs.get("for")
        for index, element in enumerate(self.elements):
            if target_id and element.attrs.get("id") == target_id:
                return index
        raise AssertionError(f"label {label.attrs.get('data-oid')!r} controls no input")

    def _toggle(self, target: Element) -> None:
        if target.attrs.get("type") == "radio":
            for element in self.elements:
                if element.form == target.form and element.attrs.get("name") == target.attrs.get("name"):
                    element.attrs.pop("checked", None)
            target.attrs["checked"] = ""
        elif "checked" in target.attrs:
            del target.attrs["checked"]
        else:
            target.attrs["checked"] = ""

    def type(self, oid: str, text: str) -> None:
        element = self.elements[self.find(oid)]
        if element.tag not in ("input", "textarea") or element.form is None:
            raise AssertionError(f"cannot type into <{element.tag} data-oid={oid!r}> on {self.url}")
        element.attrs["value"] = text
        self.submit(element.form)  # Enter submits the form


def fill_placeholders(text: str, session: dict[str, Any]) -> str:
    """Replace "{state:a.b}" in an oracle answer with the episode's server state."""
    return _PLACEHOLDER.sub(lambda m: str(state_value(session, m[1])), text)


def walk_plan(web: LocalWeb, site: Site, draft: TaskDraft) -> WalkResult:
    """Run a draft's plan from its start page; raise AssertionError where it breaks."""
    return _walk(web, site, draft.plan, web.origin + site.base_path + draft.start_path)


def walk_task(web: LocalWeb, task: Task) -> WalkResult:
    """The same for a generated task (its plan and start page come from the task row)."""
    return _walk(web, web.site(task.local["site"]), task.local["oracle"], web.browser_url(task.website))


def _walk(web: LocalWeb, site: Site, plan: list[dict], start_url: str) -> WalkResult:
    episode_id = f"walk-{uuid.uuid4().hex[:8]}"
    walker = PlanWalker(web, episode_id)
    walker.load(start_url)
    final = None
    for move in plan:
        if move["op"] == "click":
            walker.click(move["oid"])
        elif move["op"] == "type":
            walker.type(move["oid"], move["text"])
        elif move["op"] == "note":
            session = web.session(episode_id, site.site_id)
            walker.check_on_screen({k: fill_placeholders(v, session) for k, v in move["memory"].items()})
        elif move["op"] == "answer":
            final = move["text"]
    if final is None:
        raise AssertionError("plan has no answer move")
    session = web.session(episode_id, site.site_id)
    return WalkResult(fill_placeholders(final, session), session, walker.urls, episode_id)


def solve_and_judge(web: LocalWeb, task: Task) -> tuple[WalkResult, Judgement]:
    """Walk a generated task's oracle plan and judge its answer as an episode would be."""
    result = walk_task(web, task)
    return result, judge_local_episode(web, task, result.answer, result.episode_id)
