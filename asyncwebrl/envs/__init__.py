"""Task sources, by name (config.tasks.source): where tasks come from, where their
episodes run and how they are judged.

    source = environment_class(config.tasks.source)
    tasks = source.tasks(config, "train", workdir)     # before any server runs
    environment = source.from_config(config, web, store)   # the browser pool runs episodes in it

A source is one class satisfying `Environment` in a module of this package, and one line
of `SOURCES` (docs/architecture.md#a-task-source). Nothing else branches on the source.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

if TYPE_CHECKING:   # the environments load playwright (~1 s): runtime/validate.py reads SOURCES without them
    from asyncwebrl.records import Task
    from asyncwebrl.rollout.episode import EpisodeSite
    from asyncwebrl.rollout.policies import Policy
    from asyncwebrl.rollout.sandbox import UrlPolicy
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.web.evaluator import Judgement
    from asyncwebrl.web.server import LocalWeb

# source -> "module:Class"; imported on first use.
SOURCES = {
    "local": "asyncwebrl.envs.local:LocalEnvironment",
    "webgym": "asyncwebrl.envs.webgym:WebGymEnvironment",
    "miniwob": "asyncwebrl.envs.miniwob:MiniWobEnvironment",
}


class MissingSetting(ValueError):
    """A config key the source needs for this run is unset: main.py reports it as a usage
    error, where a bad task file stays an error of its own."""


class Environment(Protocol):
    """What a task source provides. The class members serve main.py and the runtime before
    any episode (which tasks, which policies); an instance serves the browser pool."""

    oracle: ClassVar[bool]             # its tasks carry oracle plans: the oracle policy and the warm start work
    splits: ClassVar[tuple[str, ...]]  # the task splits it has ("train" first; eval.split picks one)
    runs_browser_free: ClassVar[bool]  # episodes may run on browser.driver=http (the instance then has `web`)
    by_family: ClassVar[bool]          # main.py's evaluation table adds a row per task family
    # a scripted policy of its own (--config.policy=scripted), or None
    scripted_policy: ClassVar[Callable[[], Policy] | None]

    policy: UrlPolicy                  # the run-wide sandbox policy: run_tasks reports its blocks

    @staticmethod
    def tasks(config, split: str, workdir: str | None) -> list[Task]:
        """The tasks of one of `splits`; a source may record them under workdir."""

    @staticmethod
    def evaluated(tasks: list[Task], count: int, seed: int) -> list[Task]:
        """The `count` of a split's tasks that an evaluation runs."""

    @classmethod
    def from_config(cls, config, web: LocalWeb, store: ScreenshotStore) -> Environment:
        """The environment of a run: raise ValueError naming the key for a setting it lacks."""

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        """The episode's start URL, sandbox, cookies and task page hooks."""

    async def judge(self, task: Task, answer: str, episode_id: str, screenshot_keys=()) -> Judgement:
        """The finished episode's reward."""

    def finish(self, episode_id: str) -> None:
        """Forget the episode's state (after it is judged, or when it crashed)."""


def environment_class(source: str) -> type[Environment]:
    if source not in SOURCES:
        raise KeyError(f"unknown task source {source!r}; known: {sorted(SOURCES)}")
    module, name = SOURCES[source].split(":")
    return getattr(importlib.import_module(module), name)
