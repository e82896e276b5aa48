"""Where tasks run and how they are judged: the local web (this file); WebGym sites in
asyncwebrl/tasks/webgym.py.

An environment prepares each episode's site (start URL, sandbox, cookies), judges a
finished episode and cleans up after it. The browser pool runs episodes in any of them.
"""

from __future__ import annotations


from asyncwebrl.records import Task
from asyncwebrl.rollout.episode import EpisodeSite
from asyncwebrl.rollout.sandbox import Sandbox, local_policy
from asyncwebrl.web.evaluator import Judgement, judge_local_episode
from asyncwebrl.web.server import EPISODE_COOKIE, LOGICAL_ORIGIN, LocalWeb


class LocalEnvironment:
    """Tasks on the embedded local web; nothing but the local server is reachable.

    browser_free: episodes run on the browser-free driver (rollout/http_tab.py), which
    calls the sites in process under their logical origin: the server need not run."""

    def __init__(self, web: LocalWeb, *, browser_free: bool = False):
        self.web = web
        # one policy, so blocks are counted run-wide
        self.policy = local_policy(LOGICAL_ORIGIN if browser_free else web.origin)

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        if not (task.local and "site" in task.local):
            raise ValueError(f"task {task.task_id} is not a local task")
        sandbox = Sandbox(self.policy, to_browser_url=self.web.browser_url, local_origin=self.web.origin)
        return EpisodeSite(
            start_url=sandbox.resolve(task.website),
            sandbox=sandbox,
            cookies=[{"name": EPISODE_COOKIE, "value": episode_id, "url": self.web.origin}],
            shown_url=self.web.logical_url,
        )

    async def judge(self, task: Task, answer: str, episode_id: str, screenshot_keys=()) -> Judgement:
        # Pure Python over a few strings and dicts: cheap enough to run on the event loop.
        # (The rubric is checked against the answer and server state; screenshots are not needed.)
        return judge_local_episode(self.web, task, answer, episode_id)

    def finish(self, episode_id: str) -> None:
        self.web.forget(episode_id)
