"""MiniWoB++ (the `miniwob` PyPI package): 125 small web tasks that run entirely offline.

The package's HTML is served by our own LocalWeb (mounted at /miniwob/) and driven by our
browser pool and action interface, like any other site. Each page runs its own episode
through its JavaScript core, which this module talks to:

    reset        core.endEpisode(0); Math.seedrandom(seed); core.setDataMode(split);
                 core.startEpisodeReal()          (the seed fixes the instruction and layout)
    instruction  core.getUtterance()
    outcome      WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL (in [-1, 1]), WOB_REWARD_REASON

Success is a raw reward above 0 (a wrong click ends most tasks at once with -1). The
reward we train on is that success, 1 or 0; the raw reward is kept in the judge note.
The page's own clock (10-30 s per episode, meant for fast scripted agents) is replaced
by `episode_seconds` so a slow model is not failed for thinking; the step limit bounds
episodes instead.

A task is one page with one seed: "miniwob/click-button/7". Every member of a GRPO group
gets the same seed, hence the same instruction and layout.

The catalogue below groups the pages by how many actions a solution takes, a judgement
from their descriptions and HTML (MACHINE_NOTES.md), not a measurement. The grouping sets
the difficulty level, and with it the step limit: single action = easy, short
multi-step = medium, long multi-step = hard.
"""

from __future__ import annotations

import dataclasses
import os

from asyncwebrl.envs.miniwob_solver import MiniWobScriptedPolicy
from asyncwebrl.records import Task
from asyncwebrl.rollout.episode import EpisodeSite
from asyncwebrl.rollout.sandbox import Sandbox, local_policy
from asyncwebrl.web.evaluator import Judgement
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.server import LOGICAL_ORIGIN, LocalWeb

MOUNT = "miniwob"   # LocalWeb prefix of the package's html/ directory

SINGLE_ACTION = (
    "click-button", "click-color", "click-dialog", "click-dialog-2", "click-link", "click-shape", "click-tab",
    "click-test", "click-test-2", "click-test-transfer", "click-widget", "focus-text", "focus-text-2",
    "identify-shape", "unicode-test", "grid-coordinate", "count-shape", "count-sides",
)
SHORT_MULTI_STEP = (  # 2-4 actions: type + submit, open + click, drag + submit
    "click-tab-2", "click-tab-2-easy", "click-tab-2-medium", "click-tab-2-hard", "click-collapsible",
    "click-collapsible-nodelay", "click-collapsible-2", "click-collapsible-2-nodelay", "click-option", "choose-list",
    "click-pie", "click-pie-nodelay", "click-menu", "click-menu-2", "click-button-sequence", "enter-text",
    "enter-text-2", "enter-text-dynamic", "text-transform", "enter-password", "login-user", "login-user-popup",
    "find-word", "simple-algebra", "simple-arithmetic", "visual-addition", "read-table", "scroll-text",
    "scroll-text-2", "copy-paste", "copy-paste-2", "circle-center", "bisect-angle", "right-angle", "find-midpoint",
    "find-greatest", "drag-box", "drag-circle", "drag-single-shape", "drag-cube", "draw-line", "draw-circle",
    "resize-textarea", "highlight-text", "highlight-text-2", "use-slider", "use-spinner", "use-colorwheel",
    "use-colorwheel-2", "enter-date", "enter-time", "sign-agreement", "generate-number", "hot-cold",
    "stock-market", "social-media", "use-autocomplete", "use-autocomplete-nodelay", "guess-number",
)
LONG_MULTI_STEP = (  # 4 or more actions: navigation, forms, several items
    "book-flight", "book-flight-nodelay", "email-inbox", "email-inbox-delete", "email-inbox-forward",
    "email-inbox-forward-nl", "email-inbox-forward-nl-turk", "email-inbox-important", "email-inbox-nl-turk",
    "email-inbox-noscroll", "email-inbox-reply", "email-inbox-star-reply", "search-engine", "order-food",
    "buy-ticket", "daily-calendar", "form-sequence", "form-sequence-2", "form-sequence-3", "multi-layouts",
    "multi-orderings", "navigate-tree", "phone-book", "terminal", "text-editor", "read-table-2", "click-checkboxes",
    "click-checkboxes-large", "click-checkboxes-soft", "click-checkboxes-transfer", "click-scroll-list",
    "click-shades", "number-checkboxes", "odd-or-even", "ascending-numbers", "drag-sort-numbers", "drag-items",
    "drag-items-grid", "drag-shapes", "drag-shapes-2", "social-media-all", "social-media-some", "choose-date",
    "choose-date-easy", "choose-date-medium", "choose-date-nodelay", "use-slider-2", "tic-tac-toe",
)
# Pages in the package we do not offer, and why.
EXCLUDED = {
    "button-delay": "not registered by the package (unstable timing)",
    "chase-circle": "not registered by the package (needs continuous pointer tracking)",
    "hover-shape": "not registered by the package (hover only)",
    "moving-items": "not registered by the package (moving targets)",
    "simon-says": "not registered by the package (timed sequence)",
}
# The flight tasks (flight/*/wrapper.html) run inside an iframe and are not offered either.

# Difficulty numbers chosen so records.difficulty_level gives easy / medium / hard.
_DIFFICULTY = {**{n: 1 for n in SINGLE_ACTION}, **{n: 4 for n in SHORT_MULTI_STEP}, **{n: 7 for n in LONG_MULTI_STEP}}
TASK_NAMES = SINGLE_ACTION + SHORT_MULTI_STEP + LONG_MULTI_STEP
MULTI_STEP = SHORT_MULTI_STEP + LONG_MULTI_STEP
_SEED_BASE = {"train": 0, "test": 1_000_000}   # disjoint seeds: test episodes are never trained on


def html_dir() -> str:
    try:
        import miniwob
    except ImportError:
        raise RuntimeError("MiniWoB++ tasks need the miniwob package: pip install miniwob") from None
    return os.path.join(os.path.dirname(miniwob.__file__), "html")


def parse_names(names) -> tuple[str, ...]:
    """A comma-separated string or a sequence of page names -> checked names ("all": every one)."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = tuple(names)
    if names == ("all",):
        return TASK_NAMES
    unknown = [n for n in names if n not in _DIFFICULTY]
    if unknown or not names:
        hint = f"; {', '.join(f'{n}: {EXCLUDED[n]}' for n in unknown if n in EXCLUDED)}" if unknown else ""
        raise ValueError(f"unknown MiniWoB++ tasks {unknown or '(none given)'}: see asyncwebrl/envs/miniwob.py{hint}")
    return names


def miniwob_tasks(names, split: str, count: int) -> list[Task]:
    """`count` tasks cycling over the pages in order, each with a fresh seed of the split."""
    if split not in _SEED_BASE:
        raise ValueError(f"split must be train or test, got {split!r}")
    names = parse_names(names)
    tasks = []
    for index in range(count):
        name, round_ = names[index % len(names)], index // len(names)
        seed = _SEED_BASE[split] + round_
        tasks.append(Task(
            task_id=f"miniwob/{name}/{seed}", task_name="(set by the page when the episode starts)",
            website=f"{LOGICAL_ORIGIN}/{MOUNT}/miniwob/{name}.html", domain="miniwob", subdomain=name,
            benchmark_name="miniwob", difficulty=_DIFFICULTY[name],
            local={"miniwob": {"name": name, "seed": seed, "split": split}}))
    return tasks


_READY_JS = "() => typeof core !== 'undefined' && core.cover_div !== null && WOB_TASK_READY === true"
_RESET_JS = """([seed, mode, maxMs]) => {
  core.endEpisode(0);
  if (maxMs > 0) { core.EPISODE_MAX_TIME = maxMs; }
  Math.seedrandom(seed);
  core.setDataMode(mode);
  core.startEpisodeReal();
  window.__awrEpisode = true;
}"""
# A page without the flag is another document: the agent went back, or a form reloaded the
# page (with a new problem). Either way this episode's task is gone: over, and failed.
_STATE_JS = """() => window.__awrEpisode
  ? {done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON}
  : {done: true, raw: 0, reason: 'the agent left the task page'}"""


class _MiniWobPage:
    """One episode's page: reset with the task's seed, report done and the raw reward."""

    def __init__(self, outcomes: dict, episode_id: str, episode_seconds: float):
        self.outcomes, self.episode_id, self.episode_seconds = outcomes, episode_id, episode_seconds

    async def start(self, page, task: Task) -> Task:
        spec = task.local["miniwob"]
        await page.wait_for_function(_READY_JS, polling=50)   # window.onload ran core.startEpisode()
        await page.evaluate(_RESET_JS, [spec["seed"], spec["split"], int(self.episode_seconds * 1000)])
        await page.wait_for_function("() => WOB_TASK_READY === true", polling=50)
        utterance = await page.evaluate("() => core.getUtterance()")
        return dataclasses.replace(task, task_name=str(utterance).strip())

    async def finished(self, page) -> bool:
        state = await page.evaluate(_STATE_JS)
        self.outcomes[self.episode_id] = state
        return bool(state["done"])


class MiniWobEnvironment:
    """MiniWoB++ pages on the local server; the page's reward globals are the judge."""

    oracle = False
    splits = ("train", "test")  # disjoint seeds
    runs_browser_free = False   # the pages run their own JavaScript
    by_family = True            # one row per page
    scripted_policy = MiniWobScriptedPolicy

    def __init__(self, web: LocalWeb, *, episode_seconds: float):
        self.web = web
        self.episode_seconds = episode_seconds
        web.mount(MOUNT, html_dir())
        self.policy = local_policy(web.origin)   # nothing but the local server
        self._outcomes: dict[str, dict] = {}     # episode id -> the page state last read

    @staticmethod
    def tasks(config, split: str, workdir: str | None) -> list[Task]:
        """miniwob.train_tasks (train) or eval.num_tasks (test) tasks on the miniwob.tasks pages."""
        count = config.miniwob.train_tasks if split == "train" else config.eval.num_tasks
        return miniwob_tasks(config.miniwob.tasks, split, count)

    @staticmethod
    def evaluated(tasks: list[Task], count: int, seed: int) -> list[Task]:
        return tasks[:count]   # the tasks already cycle over the pages, a new seed each round

    @classmethod
    def from_config(cls, config, web: LocalWeb, store: ScreenshotStore) -> MiniWobEnvironment:
        return cls(web, episode_seconds=config.miniwob.episode_seconds)

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        if not (task.local and "miniwob" in task.local):
            raise ValueError(f"task {task.task_id} is not a MiniWoB++ task")
        sandbox = Sandbox(self.policy, to_browser_url=self.web.browser_url, local_origin=self.web.origin)
        return EpisodeSite(start_url=sandbox.resolve(task.website), sandbox=sandbox, shown_url=self.web.logical_url,
                           task_page=_MiniWobPage(self._outcomes, episode_id, self.episode_seconds))

    async def judge(self, task: Task, answer: str, episode_id: str, screenshot_keys=()) -> Judgement:
        state = self._outcomes.get(episode_id)
        if state is None or not state["done"]:
            return Judgement(reward=0.0, fact_results=[False], note="the page did not end the episode")
        raw = float(state["raw"])
        return Judgement(reward=float(raw > 0), fact_results=[raw > 0],
                         note=f"raw reward {raw:g} ({state['reason'] or 'no reason given'})")

    def finish(self, episode_id: str) -> None:
        self._outcomes.pop(episode_id, None)
