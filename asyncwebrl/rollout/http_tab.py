"""The browser-free episode driver (browser.driver = http): episodes on the local web
without Chromium, for demonstrations and experiments at thousands of steps per second,
on many cores, and on hosts that have no browser (the GPU host).

An HttpTab is a Tab (rollout/episode.py): the same episode loop, policies, prompts,
judge and per-episode server state as in Chromium, over web/http_page.py. It shows text
observations only (no layout, so no screenshots and no coordinates; settings that need
them are refused when the pool is made).

    async with HttpPool(LocalEnvironment(web, browser_free=True), store=store, settings=settings, concurrency=8) as pool:
        trajectory = await pool.run(task, policy)
"""

from __future__ import annotations

import asyncio
import uuid

from asyncwebrl.records import Task, Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings, TabFailure, run_episode_in
from asyncwebrl.rollout.observation import Observation, text_elements
from asyncwebrl.rollout.policies import Policy
from asyncwebrl.rollout.pool import PoolStats, judge_trajectory
from asyncwebrl.rollout.response import Action
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.http_page import HttpPage


class StartPageFailed(TabFailure):
    """The task's start page could not be opened: the episode is crashed, not failed."""


def check_http_settings(settings: EpisodeSettings) -> None:
    if settings.observation != "text":
        raise ValueError(f"browser.driver=http renders no pages: agent.observation must be 'text', not "
                         f"{settings.observation!r} (screenshots need browser.driver=chromium)")


class HttpTab:
    def __init__(self, environment, settings: EpisodeSettings, episode_id: str):
        self.environment, self.settings = environment, settings
        self.page = HttpPage(environment.web, episode_id)

    async def open(self, task: Task) -> Task:
        error = self.page.open(task.website)
        if error:
            raise StartPageFailed(error)
        return task

    async def observe(self, step: int, last_error: str) -> Observation:
        parsed = self.page.page
        return Observation(url=self.page.url, title=parsed.title, screenshot_key="", elements=text_elements(parsed),
                           scroll_y=0.0, page_height=0.0, viewport=self.settings.viewport, step=step,
                           last_error=last_error, text=parsed.text)

    async def execute(self, action: Action, observation: Observation) -> str:
        page = self.page
        if action.name in ("left_click", "type"):
            control = page.control_of(action.args["element_id"])
            if control is None:
                return f"no element with id {action.args['element_id']} on the page"
            if action.name == "type":
                return page.type(control, action.args["text"])
            return page.click(control)
        if action.name == "wait":
            return ""  # nothing on a local page changes by itself
        if action.name == "go_back":
            return page.go_back()
        if action.name == "navigate":
            url = action.args["url"].strip()
            reason = self.environment.policy.check(url, navigation=True)
            return f"navigation blocked ({reason})" if reason else page.open(url)
        raise ValueError(f"cannot execute action {action.name!r}")

    async def finished(self) -> bool:
        return False

    async def close(self) -> str:
        return ""


class HttpPool:
    """Runs episodes on HttpTabs, `concurrency` at a time (a bound for the policy's sake:
    the pages themselves cost a millisecond or two of this thread)."""

    def __init__(self, environment, *, store: ScreenshotStore, settings: EpisodeSettings, concurrency: int):
        check_http_settings(settings)
        self.environment, self.store, self.settings = environment, store, settings
        self.capacity = concurrency
        self.stats = PoolStats()
        self._slots = asyncio.Semaphore(concurrency)

    async def __aenter__(self) -> "HttpPool":
        return self

    async def __aexit__(self, *exc) -> None:
        pass

    async def run(self, task: Task, policy: Policy, *, episode_id: str = "", group_id: str = "") -> Trajectory:
        episode_id = episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        async with self._slots:
            try:
                tab = HttpTab(self.environment, self.settings, episode_id)
                trajectory = await run_episode_in(tab, task, policy, store=self.store, settings=self.settings,
                                                  episode_id=episode_id, group_id=group_id)
                await judge_trajectory(self.environment, trajectory)
                self.stats.episodes += 1
                self.stats.crashed += trajectory.outcome == "crashed"
                return trajectory
            finally:
                self.environment.finish(episode_id)
