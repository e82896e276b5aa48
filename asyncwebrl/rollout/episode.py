"""One episode: reset to the start page, observe, act, until `answer` or the step limit.

The loop (run_episode_in) runs on a Tab: a Chromium context per episode (ChromiumTab:
clean cookies and storage, its own sandbox) or the browser-free local web
(rollout/http_tab.py). A crash or a hang ends the episode as `crashed` (never reward 0);
whether the browser must be replaced is the pool's business. Judging is not done here: the episode returns what
happened, and the environment that owns the task judges it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Callable, Protocol

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.records import LEVELS, Step, Task, Trajectory
from asyncwebrl.rollout.observation import Observation, check_observation, resolve_label
from asyncwebrl.rollout.page import LEAVING_FLAG_JS, NavigationWatch, action_point, execute, observe, observe_text
from asyncwebrl.rollout.policies import Policy, PolicyUnavailable
from asyncwebrl.rollout.response import ELEMENT_INTERACTIONS, response_action
from asyncwebrl.rollout.sandbox import Sandbox
from asyncwebrl.rollout.screenshots import ScreenshotStore


@dataclasses.dataclass
class EpisodeSettings:
    """Every field is a config key or from_config's phase (configs/default.py holds the
    keys' defaults)."""
    interaction: str  # coordinates | set_of_marks | labels (rollout/response.py INTERACTIONS)
    phase: str  # train | test: with step_limits None, picks the tasks' own (train 10/20/30, test 30/50/70)
    viewport: tuple[int, int]
    timeout_s: float  # one browser operation (navigation, click, screenshot)
    step_deadline_s: float  # observing or executing one step, whatever hangs
    step_limits: tuple[int, int, int] | None  # (easy, medium, hard), or None: the phase's (records.STEP_LIMITS)
    observation: str  # screenshot | text | text+screenshot (rollout/observation.py)
    fit_plans: bool  # raise a limit to what the task's oracle plan needs (plan_room)

    @classmethod
    def from_config(cls, config, phase: str) -> EpisodeSettings:
        """config.agent's episodes of `phase` (its step limits), config.browser's deadlines."""
        agent = config.agent
        limits = agent.train_step_limits if phase == "train" else agent.test_step_limits
        return cls(interaction=agent.interaction, phase=phase, viewport=(agent.viewport_width, agent.viewport_height),
                   timeout_s=config.browser.timeout_s, step_deadline_s=config.browser.step_deadline_s,
                   step_limits=tuple(limits), observation=agent.observation, fit_plans=agent.step_limits_fit_plans)

    def __post_init__(self):
        check_observation(self.observation)
        if self.observation != "screenshot" and self.interaction not in ELEMENT_INTERACTIONS:
            raise ValueError(f"agent.observation={self.observation!r} names elements by their text ids: it needs "
                             f"agent.interaction in {ELEMENT_INTERACTIONS}, not {self.interaction!r}")

    def step_limit(self, task: Task) -> int:
        """The level's limit, raised where the task's oracle plan needs more: no task is
        posed that cannot be finished in time."""
        level_limit = task.step_limit(self.phase) if self.step_limits is None else \
            self.step_limits[LEVELS.index(task.level)]
        return max(level_limit, plan_room(task)) if self.fit_plans else level_limit


def plan_room(task: Task) -> int:
    """Steps a local task's oracle plan takes, with slack for the scrolls it needs in
    coordinates mode and a wait for a slow page: 1.5x its moves, at least 2 more (0 for
    tasks without a plan)."""
    plan = (task.local or {}).get("oracle")
    if not plan:
        return 0
    moves = sum(move["op"] != "note" for move in plan)
    return moves + max(2, moves // 2)


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


class TabFailure(Exception):
    """The tab could not do its part (no start page, say): the episode is crashed."""


async def _within(deadline_s: float, what: str, awaitable):
    try:
        return await asyncio.wait_for(awaitable, timeout=deadline_s)
    except asyncio.TimeoutError:
        raise StepHang(f"{what} took longer than {deadline_s:.0f}s") from None


class Tab(Protocol):
    """Where one episode's pages are shown and acted on: a Chromium page (ChromiumTab) or
    the browser-free local web (rollout/http_tab.py). The episode loop knows only this."""

    async def open(self, task: Task) -> Task: ...  # the start page; the task as this episode poses it

    async def observe(self, step: int, last_error: str) -> Observation: ...

    async def execute(self, action, observation: Observation) -> str: ...  # "" or what went wrong

    async def finished(self) -> bool: ...  # did the page end the episode (MiniWoB++)?

    async def close(self) -> str: ...  # "" or what went wrong


class ChromiumTab:
    """A fresh browser context per episode: clean cookies and storage, its own sandbox."""

    def __init__(self, browser, site: EpisodeSite, store: ScreenshotStore, settings: EpisodeSettings):
        self.browser, self.site, self.store, self.settings = browser, site, store, settings
        self.context = self.page = self.watch = None

    async def open(self, task: Task) -> Task:
        settings, site = self.settings, self.site
        self.context = await self.browser.new_context(
            viewport={"width": settings.viewport[0], "height": settings.viewport[1]},
            service_workers="block", accept_downloads=False,
        )
        if site.cookies:
            await self.context.add_cookies(site.cookies)
        await self.context.add_init_script(LEAVING_FLAG_JS)
        self.page = page = await site.sandbox.open_page(self.context)
        page.set_default_timeout(settings.timeout_s * 1000)
        page.on("download", lambda download: site.sandbox.policy.count("download"))
        self.watch = NavigationWatch(page)
        await page.goto(site.start_url, wait_until="load")
        if site.task_page is not None:
            task = await site.task_page.start(page, task)
        return task

    async def observe(self, step: int, last_error: str) -> Observation:
        settings, shown_url = self.settings, self.site.shown_url(self.page.url)
        if settings.observation == "screenshot":
            return await observe(self.page, self.store, interaction=settings.interaction, step=step,
                                 shown_url=shown_url, last_error=last_error)
        return await observe_text(self.page, self.store, screenshot=settings.observation == "text+screenshot",
                                  step=step, shown_url=shown_url, last_error=last_error)

    async def execute(self, action, observation: Observation) -> str:
        return await execute(self.page, action, observation, watch=self.watch, resolve_url=self.site.sandbox.resolve,
                             timeout_s=self.settings.timeout_s)

    async def finished(self) -> bool:
        return self.site.task_page is not None and await self.site.task_page.finished(self.page)

    async def close(self) -> str:
        if self.context is None:
            return ""
        try:  # a context whose page is stuck in a script loop may not close: don't wait forever
            await asyncio.wait_for(self.context.close(), timeout=self.settings.timeout_s)
        except (PlaywrightError, asyncio.TimeoutError):
            return "context did not close"
        return ""


async def run_episode(browser, task: Task, policy: Policy, *, site: EpisodeSite, store: ScreenshotStore,
                      settings: EpisodeSettings, episode_id: str, group_id: str = "") -> Trajectory:
    """One episode of `policy` in a fresh context of `browser` (see run_episode_in)."""
    return await run_episode_in(ChromiumTab(browser, site, store, settings), task, policy, store=store,
                                settings=settings, episode_id=episode_id, group_id=group_id)


async def run_episode_in(tab: Tab, task: Task, policy: Policy, *, store: ScreenshotStore, settings: EpisodeSettings,
                         episode_id: str, group_id: str = "") -> Trajectory:
    """Run one episode of `policy` in `tab`. The trajectory's steps hold one store
    reference each (their screenshot keys); the caller frees them."""
    started = time.perf_counter()
    limit = settings.step_limit(task)
    steps: list[Step] = []
    outcome, answer, error = "limit", "", ""
    unrecorded: list[str] = []  # keys observed but not (yet) in a step: freed on a crash
    try:
        # The whole opening has one deadline, not just the page load: a browser that dies
        # while a context or page is being made may never answer (new_page then waits forever).
        task = await _within(settings.step_deadline_s, "opening the episode", tab.open(task))
        agent = policy.begin(task, interaction=settings.interaction, episode_id=episode_id)
        last_error, seen = "", ""
        for index in range(limit):
            browser_started = time.perf_counter()
            observation = await _within(settings.step_deadline_s, "observing the page",
                                        tab.observe(index, last_error))
            if observation.screenshot_key:
                unrecorded.append(observation.screenshot_key)
            if steps:
                steps[-1].screenshot_changed = observation.fingerprint != seen
            seen = observation.fingerprint
            policy_started = time.perf_counter()
            reply = await agent.act(observation, steps)
            acted = time.perf_counter()
            _, action = response_action(reply.text, settings.interaction)
            action = resolve_label(action, observation)
            last_error = action.error
            point = action_point(action, observation) if action.name in ("left_click", "type") else None
            if action.name == "answer":
                answer, outcome = action.args["text"], "answered"
            elif observation.text and action.name == "scroll":  # the same no-op under either driver
                last_error = "scroll does nothing here: the page text already shows the whole page"
            elif not action.invalid:
                last_error = await _within(settings.step_deadline_s, f"executing {action.name}",
                                           tab.execute(action, observation))
            steps.append(Step(
                index=index, url=observation.url, title=observation.title, response=reply.text, action=action.as_dict(),
                action_error=last_error, screenshot_key=observation.screenshot_key,
                prompt_ids=reply.prompt_ids, image_keys=reply.image_keys, response_ids=reply.response_ids,
                behave_logprobs=reply.logprobs, versions=reply.versions,
                seconds_policy=acted - policy_started,
                seconds_browser=(policy_started - browser_started) + (time.perf_counter() - acted),
                point=list(point) if isinstance(point, tuple) and not observation.text else None,
                page_text=observation.text,
            ))
            if observation.screenshot_key:
                unrecorded.pop()
            if outcome == "answered":
                break
            if await _within(settings.step_deadline_s, "reading the task page", tab.finished()):
                outcome = "finished"
                break
    except (PlaywrightError, StepHang, TabFailure, PolicyUnavailable) as failure:
        message = str(failure).splitlines()[0] if str(failure) else ""
        outcome, error = "crashed", f"{type(failure).__name__}: {message}"
    except BaseException:
        # Anything else propagates (the caller records it: runtime/evaluate.py), and the
        # trajectory with it: the screenshots its steps hold are freed here or never.
        store.free([step.screenshot_key for step in steps if step.screenshot_key])
        raise
    finally:
        store.free(unrecorded)
        # Closed after a crash too: a policy-side crash leaves the browser in use (rollout/pool.py).
        closing = await tab.close()
        error = error or closing
    return Trajectory(task=task, steps=steps, outcome=outcome, reward=None, answer=answer, episode_id=episode_id,
                      group_id=group_id, step_limit=limit, error=error, seconds=time.perf_counter() - started)
