"""The local source: tasks generated on the embedded local web (web/tasks.py), judged
by the programmatic rubric (web/evaluator.py).

An environment prepares each episode's site (start URL, sandbox, cookies), judges a
finished episode and cleans up after it (asyncwebrl/envs/__init__.py:Environment). The
browser pool runs episodes in any of them.
"""

from __future__ import annotations

import logging
import os

from asyncwebrl.records import Task
from asyncwebrl.rollout.episode import EpisodeSite
from asyncwebrl.rollout.sandbox import Sandbox, local_policy
from asyncwebrl.web.evaluator import Judgement, judge_local_episode
from asyncwebrl.web.server import EPISODE_COOKIE, LOGICAL_ORIGIN, LocalWeb
from asyncwebrl.web.tasks import SPLITS, TIERS, generate_tasks, select_balanced, write_jsonl


class LocalEnvironment:
    """Tasks on the embedded local web; nothing but the local server is reachable.

    browser_free: episodes run on the browser-free driver (rollout/http_tab.py), which
    calls the sites in process under their logical origin: the server need not run."""

    oracle = True
    # train, unseen (new sites, training layouts), test (unseen layouts), adapt (more sites of
    # the unseen layouts, for RL)
    splits = tuple(SPLITS)
    runs_browser_free = True
    by_family = False
    scripted_policy = None

    def __init__(self, web: LocalWeb, *, browser_free: bool = False):
        self.web = web
        # one policy, so blocks are counted run-wide
        self.policy = local_policy(LOGICAL_ORIGIN if browser_free else web.origin)

    @staticmethod
    def tasks(config, split: str, workdir: str | None) -> list[Task]:
        """Generated on the split's sites (asyncwebrl/web/tasks.py SPLITS); also written to
        workdir/tasks/<split>.jsonl."""
        # splits RL draws from get the training count of sites; evaluated ones the test count
        trained = split in ("train", "adapt")
        sites = config.tasks.train_sites_per_variant if trained else config.tasks.test_sites_per_variant
        tiers = tuple(config.tasks.train_tiers) if trained else ("levels",)
        if not tiers or set(tiers) - set(TIERS):
            raise ValueError(f"tasks.train_tiers must be a non-empty tuple of {TIERS}, got {tiers!r}")
        tasks = generate_tasks(split, sites, tiers)
        if workdir is not None:
            os.makedirs(os.path.join(workdir, "tasks"), exist_ok=True)
            write_jsonl(tasks, os.path.join(workdir, "tasks", f"{split}.jsonl"))
        logging.info("%d %s tasks on %d sites", len(tasks), split, len({t.local["site"] for t in tasks}))
        return tasks

    @staticmethod
    def evaluated(tasks: list[Task], count: int, seed: int) -> list[Task]:
        return select_balanced(tasks, count, seed)   # spread over difficulty levels

    @classmethod
    def from_config(cls, config, web: LocalWeb, store) -> LocalEnvironment:
        return cls(web, browser_free=config.browser.driver == "http")

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
