"""BrowserPool: browser workers that live for the whole run (docs/algorithm.md#everlasting-rollout).

W workers, each one Chromium with up to P episodes (pages, one context each) at a time.
A worker starts the next episode the moment a page is free: no per-round warm-up. A
browser is retired (no new episodes; closed once its running ones end) after
`recycle_after` episodes, after any crashed episode, and after every episode in
`relaunch_every_episode` mode, the synchronous pipeline's habit kept for comparison. A
browser that died is replaced at once.

    async with make_pool(environment, store=store, settings=settings, pool=PoolSettings.from_config(config)) as pool:
        trajectory = await pool.run(task, policy)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

from asyncwebrl.records import Task, Trajectory
from asyncwebrl.rollout.browser import launch_browser
from asyncwebrl.rollout.episode import EpisodeSettings, run_episode
from asyncwebrl.rollout.policies import Policy, PolicyUnavailable
from asyncwebrl.rollout.screenshots import ScreenshotStore


@dataclasses.dataclass
class PoolStats:
    episodes: int = 0
    crashed: int = 0
    launches: int = 0
    retired: int = 0


async def judge_trajectory(environment, trajectory: Trajectory) -> None:
    """Score a finished episode in place (a crashed one is never judged; one whose context
    would not close still is)."""
    if trajectory.outcome == "crashed":
        return
    try:
        judgement = await environment.judge(trajectory.task, trajectory.answer, trajectory.episode_id,
                                            trajectory.screenshot_keys())
    except Exception as error:   # one judge call's failure is this episode's unknown reward, not the run's end
        logging.warning("judging task %s failed: %s: %s", trajectory.task.task_id, type(error).__name__, error)
        trajectory.reward, trajectory.fact_results, trajectory.credit = None, [], None
        trajectory.judge_note = f"judge failed: {type(error).__name__}: {str(error)[:200]}"
        return
    trajectory.reward, trajectory.fact_results, trajectory.credit, trajectory.judge_note = (
        judgement.reward, judgement.fact_results, judgement.credit, judgement.note)
    if judgement.blocked:   # an anti-bot page: counted apart, never scored
        trajectory.outcome, trajectory.reward, trajectory.credit = "blocked", None, None


def browser_suspect(trajectory: Trajectory) -> bool:
    """Whether the episode's browser may be at fault: a crash or a context that would not
    close, unless the policy refused the step (a prompt too long for the sampler), which
    the episode loop records under PolicyUnavailable's name."""
    refused = trajectory.error.startswith(f"{PolicyUnavailable.__name__}:")
    return (trajectory.outcome == "crashed" or bool(trajectory.error)) and not refused


class _Worker:
    """One browser slot. The browser object changes when it is replaced."""

    def __init__(self, index: int):
        self.index = index
        self.browser = None
        self.in_flight = 0  # episodes holding a page slot of this worker
        self.running: dict = {}  # browser -> episodes running on it
        self.episodes = 0  # on the current browser
        self.retiring: list = []  # old browsers still running episodes
        self.replacing = asyncio.Lock()  # one replacement at a time


class BrowserPool:
    def __init__(self, environment, *, store: ScreenshotStore, settings: EpisodeSettings, workers: int,
                 pages_per_browser: int, recycle_after: int, executable_path: str, relaunch_every_episode: bool = False):
        if workers < 1 or pages_per_browser < 1:
            raise ValueError("a pool needs at least one worker and one page per browser")
        self.environment = environment
        self.store = store
        self.settings = settings
        self.pages_per_browser = pages_per_browser
        self.recycle_after = 1 if relaunch_every_episode else recycle_after
        self.executable_path = executable_path
        self.workers = [_Worker(i) for i in range(workers)]
        self.stats = PoolStats()
        self._free = asyncio.Condition()
        self._playwright_manager = None
        self._playwright = None

    @property
    def capacity(self) -> int:
        return len(self.workers) * self.pages_per_browser

    async def __aenter__(self) -> "BrowserPool":
        self._playwright_manager = async_playwright()
        self._playwright = await self._playwright_manager.__aenter__()
        try:
            for worker in self.workers:  # warm up every worker before the first episode
                await self._replace(worker)
        except BaseException as error:
            await self.__aexit__(type(error), error, error.__traceback__)
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        for worker in self.workers:
            for browser in [worker.browser, *worker.retiring]:
                await self._close(browser)
        await self._playwright_manager.__aexit__(*exc)

    async def _launch(self):
        """A new browser, or an error past browser.step_deadline_s (a launch that hangs must
        not hold the worker's lock forever; a browser the driver starts after the deadline is
        closed when Playwright stops)."""
        self.stats.launches += 1
        try:
            return await asyncio.wait_for(launch_browser(self._playwright, self.executable_path),
                                          timeout=self.settings.step_deadline_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"launching a browser took longer than {self.settings.step_deadline_s:.0f}s") from None

    async def _close(self, browser) -> None:
        if browser is None:
            return
        try:
            await asyncio.wait_for(browser.close(), timeout=self.settings.timeout_s)
        except (PlaywrightError, asyncio.TimeoutError) as error:
            logging.warning("browser did not close cleanly: %s", error)

    def _needs_new_browser(self, worker: _Worker) -> bool:
        return worker.browser is None or not worker.browser.is_connected() or worker.episodes >= self.recycle_after

    async def _replace(self, worker: _Worker, *, unless=None) -> None:
        """Give the worker a fresh browser; the old one closes when its episodes end.
        `unless(worker)` is checked under the lock: another episode may have replaced
        the browser while this one waited."""
        async with worker.replacing:
            if unless is not None and unless(worker):
                return
            old = worker.browser
            worker.browser, worker.episodes = await self._launch(), 0
            if old is not None:
                self.stats.retired += 1
                if worker.running.get(old):  # episodes still run (or are ending) on it
                    worker.retiring.append(old)
                else:
                    worker.running.pop(old, None)
                    await self._close(old)

    async def _acquire(self) -> tuple[_Worker, object]:
        async with self._free:
            while True:
                open_workers = [w for w in self.workers if w.in_flight < self.pages_per_browser]
                if open_workers:
                    worker = min(open_workers, key=lambda w: w.in_flight)
                    worker.in_flight += 1
                    break
                await self._free.wait()
        try:
            if self._needs_new_browser(worker):
                await self._replace(worker, unless=lambda w: not self._needs_new_browser(w))
        except BaseException:
            await self._release(worker, None)
            raise
        worker.episodes += 1
        worker.running[worker.browser] = worker.running.get(worker.browser, 0) + 1
        return worker, worker.browser

    async def _release(self, worker: _Worker, browser) -> None:
        async with self._free:
            worker.in_flight -= 1
            self._free.notify()
        if browser is None:
            return
        worker.running[browser] -= 1
        if browser in worker.retiring and not worker.running[browser]:  # its last episode ended
            worker.retiring.remove(browser)
            del worker.running[browser]
            await self._close(browser)

    async def run(self, task: Task, policy: Policy, *, episode_id: str = "", group_id: str = "") -> Trajectory:
        """One episode of `task`, judged; waits for a free page first."""
        episode_id = episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        worker, browser = await self._acquire()
        try:
            site = self.environment.episode_site(task, episode_id)
            trajectory = await run_episode(browser, task, policy, site=site, store=self.store, settings=self.settings,
                                           episode_id=episode_id, group_id=group_id)
            await judge_trajectory(self.environment, trajectory)
            self.stats.crashed += trajectory.outcome == "crashed"
            if browser_suspect(trajectory):
                # Don't trust this browser with another episode (unless already replaced).
                await self._replace(worker, unless=lambda w: w.browser is not browser)
            self.stats.episodes += 1
            return trajectory
        finally:
            self.environment.finish(episode_id)
            await self._release(worker, browser)

    def live_browsers(self) -> int:
        """Connected browsers, current and retiring (for leak checks)."""
        return sum(1 for w in self.workers for b in [w.browser, *w.retiring] if b is not None and b.is_connected())

    def open_contexts(self) -> int:
        """Browser contexts open across all workers (for leak checks)."""
        return sum(len(b.contexts) for w in self.workers for b in [w.browser, *w.retiring]
                   if b is not None and b.is_connected())


DRIVERS = ("chromium", "http")


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """make_pool's size and driver (and so run_tasks'), as config.browser sets them."""
    concurrency: int                   # pages (episodes) at once
    pages_per_browser: int
    recycle_after: int
    executable_path: str
    driver: str                        # chromium | http (the browser-free local web)

    @classmethod
    def from_config(cls, config) -> PoolSettings:
        b = config.browser
        return cls(concurrency=b.pages, pages_per_browser=b.pages_per_browser, recycle_after=b.recycle_after,
                   executable_path=b.executable_path, driver=b.driver)


def make_pool(environment, *, store: ScreenshotStore, settings: EpisodeSettings, pool: PoolSettings):
    """The pool that runs `pool.concurrency` episodes at once on `pool.driver`: Chromium
    (pages_per_browser pages per browser) or the browser-free local web."""
    if pool.driver == "http":
        from asyncwebrl.rollout.http_tab import HttpPool  # (it builds on this module)

        return HttpPool(environment, store=store, settings=settings, concurrency=pool.concurrency)
    if pool.driver != "chromium":
        raise ValueError(f"browser.driver must be one of {DRIVERS}, got {pool.driver!r}")
    return BrowserPool(environment, store=store, settings=settings, workers=-(-pool.concurrency // pool.pages_per_browser),
                       pages_per_browser=min(pool.concurrency, pool.pages_per_browser),
                       recycle_after=pool.recycle_after, executable_path=pool.executable_path)
