"""Follow an oracle plan without a browser, on the browser-free page (web/http_page.py).

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
import re
import uuid
from typing import Any

from asyncwebrl.records import Task
from asyncwebrl.web.evaluator import Judgement, judge_local_episode, normalize_text, state_value
from asyncwebrl.web.http_page import HttpPage
from asyncwebrl.web.page_text import Control
from asyncwebrl.web.server import LOGICAL_ORIGIN, LocalWeb
from asyncwebrl.web.site import Site, TaskDraft

_PLACEHOLDER = re.compile(r"\{state:([^}]+)\}")


@dataclasses.dataclass
class WalkResult:
    answer: str
    session: dict[str, Any]
    urls: list[str]
    episode_id: str


class PlanWalker:
    """Runs plan moves on an HttpPage; every move that does not go through raises."""

    def __init__(self, web: LocalWeb, episode_id: str):
        self.tab = HttpPage(web, episode_id)
        self.urls: list[str] = []

    def load(self, url: str) -> None:
        self._check(self.tab.open(url), loaded=True)

    def _check(self, error: str, loaded: bool) -> None:
        if error:
            raise AssertionError(f"{error} (on {self.tab.url})")
        if self.tab.status != 200:
            raise AssertionError(f"{self.tab.url} answered {self.tab.status}")
        if loaded:
            self.urls.append(self.tab.url)

    def find(self, oid: str) -> Control:
        """The element with this data-oid; there must be exactly one on the page."""
        found = [c for c in self.tab.page.controls if c.oid == oid]
        if len(found) != 1:
            raise AssertionError(f"{len(found)} elements with data-oid={oid!r} on {self.tab.url}")
        return found[0]

    def check_on_screen(self, memory: dict[str, str]) -> None:
        """A noted fact must be readable on the page it is noted from: as a phrase, or
        (for composed notes such as "Title (Author, 1965)") word by word."""
        visible = normalize_text(self.tab.page.text)
        words = set(visible.split())
        for key, value in memory.items():
            phrase = normalize_text(value)
            missing = [] if phrase in visible else [w for w in phrase.split() if w not in words]
            if missing:
                raise AssertionError(f"noted {key}={value!r} but {missing} is not on {self.tab.url}")

    def click(self, oid: str) -> None:
        control = self.find(oid)
        before = self.tab.requests
        error = self.tab.click(control)
        loaded = self.tab.requests > before
        if not (error or loaded or control.tag == "label" or control.type in ("radio", "checkbox")):
            raise AssertionError(f"clicking <{control.tag} data-oid={oid!r}> does nothing on {self.tab.url}")
        self._check(error, loaded)

    def type(self, oid: str, text: str) -> None:
        control = self.find(oid)
        if control.form is None:
            raise AssertionError(f"cannot type into <{control.tag} data-oid={oid!r}> outside a form on {self.tab.url}")
        before = self.tab.requests
        error = self.tab.type(control, text)
        self._check(error, self.tab.requests > before)


def fill_placeholders(text: str, session: dict[str, Any]) -> str:
    """Replace "{state:a.b}" in an oracle answer with the episode's server state."""
    return _PLACEHOLDER.sub(lambda m: str(state_value(session, m[1])), text)


def walk_plan(web: LocalWeb, site: Site, draft: TaskDraft) -> WalkResult:
    """Run a draft's plan from its start page; raise AssertionError where it breaks."""
    return _walk(web, site, draft.plan, LOGICAL_ORIGIN + site.base_path + draft.start_path)


def walk_task(web: LocalWeb, task: Task) -> WalkResult:
    """The same for a generated task (its plan and start page come from the task row)."""
    return _walk(web, web.site(task.local["site"]), task.local["oracle"], task.website)


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
