"""One episode: reset to the start page, observe, act, until `answer` or the step limit.

A browser context per episode (clean cookies and storage); the context carries the
episode id as a cookie so the local server keeps this episode's state apart. A crash or
hang of the browser ends the episode as `crashed` (never reward 0); what the caller does
with the browser after that is its business.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import urllib.parse
from typing import Awaitable, Callable

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.page import LEAVING_FLAG_JS, NavigationWatch, execute, observe
from asyncwebrl.rollout.policies import Agent
from asyncwebrl.rollout.response import response_action
from asyncwebrl.web.evaluator import Judgement
from asyncwebrl.web.server import EPISODE_COOKIE, LocalWeb

Judge = Callable[[Task, str, str], Awaitable[Judgement]]  # (task, answer, episode_id)


@dataclasses.dataclass
class EpisodeSettings:
    interaction: str = "coordinates"
    phase: str = "test"  # picks the step limits: train 10/20/30, test 30/50/70
    viewport: tuple[int, int] = (1280, 720)
    timeout_s: float = 15.0  # per browser operation


class SiteGuard:
    """Keeps an episode on the local web: the agent's `navigate` may only reach the local
    server, and every request the page makes elsewhere is aborted. (The full URL sandbox
    for external sites is the rollout issue's.)"""

    def __init__(self, web: LocalWeb):
        self.web = web

    def resolve(self, url: str) -> str:
        absolute = self.web.browser_url(url.strip())
        if not absolute.startswith(self.web.origin + "/"):
            parts = urllib.parse.urlsplit(absolute)
            raise ValueError(f"navigation to {parts.scheme}://{parts.netloc} is not allowed")
        return absolute

    async def install(self, context) -> None:
        # The pattern matches every URL outside the local server, so requests to it are
        # never routed through Python (a round trip per request otherwise).
        elsewhere = re.compile("^(?!" + re.escape(self.web.origin + "/") + ")")
        await context.route(elsewhere, lambda route: route.abort("blockedbyclient"))


async def run_episode(browser, web: LocalWeb, task: Task, agent: Agent, judge: Judge, *,
                      episode_id: str, settings: EpisodeSettings, group_id: str = "") -> Trajectory:
    started = time.perf_counter()
    limit = task.step_limit(settings.phase)
    steps: list[Step] = []
    outcome, answer, error = "limit", "", ""
    guard = SiteGuard(web)
    context = await browser.new_context(
        viewport={"width": settings.viewport[0], "height": settings.viewport[1]},
        service_workers="block", accept_downloads=False,
    )
    try:
        await context.add_cookies([{"name": EPISODE_COOKIE, "value": episode_id, "url": web.origin}])
        await guard.install(context)
        await context.add_init_script(LEAVING_FLAG_JS)
        page = await context.new_page()
        page.set_default_timeout(settings.timeout_s * 1000)
        watch = NavigationWatch(page)
        await page.goto(guard.resolve(task.website), wait_until="load")
        last_error = ""
        for index in range(limit):
            browser_started = time.perf_counter()
            observation = await observe(page, interaction=settings.interaction, step=index,
                                        logical_url=web.logical_url(page.url), last_error=last_error)
            if steps:
                steps[-1].screenshot_changed = observation.screenshot_key != steps[-1].screenshot_key
            policy_started = time.perf_counter()
            reply = await agent.act(observation)
            acted = time.perf_counter()
            _, action = response_action(reply.text, settings.interaction)
            last_error = action.error
            if action.name == "answer":
                answer, outcome = action.args["text"], "answered"
            elif not action.invalid:
                last_error = await asyncio.wait_for(
                    execute(page, action, observation, watch=watch, resolve_url=guard.resolve, timeout_s=settings.timeout_s),
                    timeout=settings.timeout_s * 2,
                )
            steps.append(Step(
                index=index, url=observation.url, response=reply.text, action=action.as_dict(),
                action_error=last_error, screenshot_key=observation.screenshot_key,
                prompt_ids=reply.prompt_ids, image_keys=reply.image_keys, response_ids=reply.response_ids,
                behave_logprobs=reply.logprobs, versions=reply.versions,
                seconds_policy=acted - policy_started,
                seconds_browser=(policy_started - browser_started) + (time.perf_counter() - acted),
            ))
            if outcome == "answered":
                break
    except (PlaywrightError, asyncio.TimeoutError) as failure:
        outcome, error = "crashed", f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    finally:
        try:
            await context.close()
        except PlaywrightError:
            pass  # the browser is gone already; the caller replaces it
    trajectory = Trajectory(task=task, steps=steps, outcome=outcome, reward=None, answer=answer,
                            episode_id=episode_id, group_id=group_id, step_limit=limit, error=error)
    if outcome != "crashed":
        judgement = await judge(task, answer, episode_id)
        trajectory.reward, trajectory.fact_results, trajectory.judge_note = (
            judgement.reward, judgement.fact_results, judgement.note)
    web.forget(episode_id)
    trajectory.seconds = time.perf_counter() - started
    return trajectory
