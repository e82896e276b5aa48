"""One episode: reset to the start page, observe, act, until `answer` or the step limit.

A browser context per episode (clean cookies and storage, its own sandbox). A crash or a
hang ends the episode as `crashed` (never reward 0); whether the browser must be
replaced is the pool's business. Judging is not done here: the episode returns what
happened, and the environment that owns the task judges it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Callable, Protocol

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.records import LEVELS, Step, Task, Trajectory
from asyncwebrl.rollout.page import LEAVING_FLAG_JS, NavigationWatch, action_point, execute, observe
from asyncwebrl.rollout.policies import Policy, PolicyUnavailable
from asyncwebrl.rollout.response import response_action
from asyncwebrl.rollout.sandbox import Sandbox
from asyncwebrl.rollout.screenshots import ScreenshotStore


@dataclasses.dataclass
class EpisodeSettings:
    interaction: str = "coordinates"
    phase: str = "test"  # picks the step limits: train 10/20/30, test 30/50/70
    viewport: tuple[int, int] = (1280, 720)
    timeout_s: float = 15.0  # one browser operation (navigation, click, screenshot)
    step_deadline_s: float = 30.0  # observing or executing one step, whatever hangs
    step_limits: tuple[int, int, int] | None = None  # (easy, medium, hard) instead of the phase's

    def step_limit(self, task: Task) -> int:
        if self.step_limits is None:
            return task.step_limit(self.phase)
        return self.step_limits[LEVELS.index(task.level)]


class TaskPage(Protocol):
    """A page that runs its own episode (MiniWoB++): it sets the task up in the loaded
    start page, says what the instruction is, and says when the episode is over."""

    async def start(self, page, task: Task) -> Task: ...  # the task as this episode poses it

    async def finished(self, page) -> bool: ...  # after each action


@dataclasses.dataclass
class EpisodeSite:
    """Where an episode runs: its start page, sandbox, cookies and the URL the agent sees."""

    start_url: str  # as the browser opens it
    sandbox: Sandbox
    cookies: list[dict] = dataclasses.field(default_factory=list)
    shown_url: Callable[[str], str] = lambda url: url
    task_page: TaskPage | None = None


class StepHang(Exception):
    """A step did not finish within its deadline (a page in an endless script, say)."""


async def _within(deadline_s: float, what: str, awaitable):
    try:
        return await asyncio.wait_for(awaitable, timeout=deadline_s)
    except asyncio.TimeoutError:
        raise StepHang(f"{what} took longer than {deadline_s:.0f}s") from None


async def run_episode(browser, task: Task, policy: Policy, *, site: EpisodeSite, store: ScreenshotStore,
                      settings: EpisodeSettings, episode_id: str, group_id: str = "") -> Trajectory:
    """Run one episode of `policy` in a fresh context of `browser`. The trajectory's steps
    hold one store reference each (their screenshot keys); the caller frees them."""
    started = time.perf_counter()
    limit = settings.step_limit(task)
    steps: list[Step] = []
    outcome, answer, error = "limit", "", ""
    unrecorded: list[str] = []  # keys observed but not (yet) in a step: freed on a crash
    context = None
    try:
        context = await browser.new_context(
            viewport={"width": settings.viewport[0], "height": settings.viewport[1]},
            service_workers="block", accept_downloads=False,
        )
        if site.cookies:
            await context.add_cookies(site.cookies)
        await site.sandbox.install(context)
        await context.add_init_script(LEAVING_FLAG_JS)
        page = await context.new_page()
        page.set_default_timeout(settings.timeout_s * 1000)
        page.on("download", lambda download: site.sandbox.policy.count("download"))
        watch = NavigationWatch(page)
        await _within(settings.step_deadline_s, "opening the start page", page.goto(site.start_url, wait_until="load"))
        if site.task_page is not None:
            task = await _within(settings.step_deadline_s, "starting the task page", site.task_page.start(page, task))
        agent = policy.begin(task, interaction=settings.interaction, episode_id=episode_id)
        last_error = ""
        for index in range(limit):
            browser_started = time.perf_counter()
            observation = await _within(settings.step_deadline_s, "observing the page", observe(
                page, store, interaction=settings.interaction, step=index,
                shown_url=site.shown_url(page.url), last_error=last_error))
            unrecorded.append(observation.screenshot_key)
            if steps:
                steps[-1].screenshot_changed = observation.screenshot_key != steps[-1].screenshot_key
            policy_started = time.perf_counter()
            reply = await agent.act(observation, steps)
            acted = time.perf_counter()
            _, action = response_action(reply.text, settings.interaction)
            last_error = action.error
            point = action_point(action, observation) if action.name in ("left_click", "type") else None
            if action.name == "answer":
                answer, outcome = action.args["text"], "answered"
            elif not action.invalid:
                last_error = await _within(settings.step_deadline_s, f"executing {action.name}", execute(
                    page, action, observation, watch=watch, resolve_url=site.sandbox.resolve,
                    timeout_s=settings.timeout_s))
            steps.append(Step(
                index=index, url=observation.url, title=observation.title, response=reply.text, action=action.as_dict(),
                action_error=last_error, screenshot_key=observation.screenshot_key,
                prompt_ids=reply.prompt_ids, image_keys=reply.image_keys, response_ids=reply.response_ids,
                behave_logprobs=reply.logprobs, versions=reply.versions,
                seconds_policy=acted - policy_started,
                seconds_browser=(policy_started - browser_started) + (time.perf_counter() - acted),
                point=list(point) if isinstance(point, tuple) else None,
            ))
            unrecorded.pop()
            if outcome == "answered":
                break
            if site.task_page is not None and await _within(
                    settings.step_deadline_s, "reading the task page", site.task_page.finished(page)):
                outcome = "finished"
                break
    except (PlaywrightError, StepHang, PolicyUnavailable) as failure:
        message = str(failure).splitlines()[0] if str(failure) else ""
        outcome, error = "crashed", f"{type(failure).__name__}: {message}"
    finally:
        store.free(unrecorded)
        if context is not None:
            try:  # a context whose page is stuck in a script loop may not close: don't wait forever
                await asyncio.wait_for(context.close(), timeout=settings.timeout_s)
            except (PlaywrightError, asyncio.TimeoutError):
                error = error or "context did not close"
    return Trajectory(task=task, steps=steps, outcome=outcome, reward=None, answer=answer, episode_id=episode_id,
                      group_id=group_id, step_limit=limit, error=error, seconds=time.perf_counter() - started)
