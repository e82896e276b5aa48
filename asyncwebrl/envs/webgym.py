"""WebGym task files (docs/algorithm.md#task-files-and-evaluation): JSONL, one task per line.

    tasks, report = load_webgym("train.jsonl", levels=("easy", "medium"))
    print(report)      # 292,092 rows: 290,114 kept, 1,978 outside the levels asked for

Fields: task_id, task_name (the instruction), website, domain, subdomain,
benchmark_name, difficulty (the number of rubric facts), evaluator_reference,
definite_answer (may be empty). Released files are not uniform, so two fields are
normalised here and nowhere else:
  - evaluator_reference: a list of fact groups {id, description, facts: [...]}, a list of
    strings (one fact each, in one group), or one string (one fact);
  - website: "https://" is added when the row names a bare host.
A row that cannot be read (not UTF-8, not JSON, a field of the wrong type, no rubric
fact) raises ValueError naming the file and line, and a file with no rows raises naming
the file; rows are never dropped silently (blank lines and rows outside `levels` are counted in the report).

WebGymEnvironment (the webgym source) runs such tasks on their own sites in the browser
pool and scores them with the LLM judge (asyncwebrl/envs/judge.py) from the episode's
screenshots.
"""

from __future__ import annotations

import dataclasses
import json

from asyncwebrl.envs import MissingSetting
from asyncwebrl.envs.judge import JudgeSettings, LLMJudge
from asyncwebrl.records import LEVELS, Task
from asyncwebrl.rollout.episode import EpisodeSite
from asyncwebrl.rollout.sandbox import Sandbox, UrlPolicy
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.evaluator import Judgement
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import select_balanced

REQUIRED = ("task_id", "task_name", "website")


@dataclasses.dataclass
class LoadReport:
    path: str
    rows: int = 0                # non-blank lines
    kept: int = 0
    blank_lines: int = 0
    outside_levels: int = 0      # valid rows of a difficulty level not asked for
    by_level: dict = dataclasses.field(default_factory=lambda: {level: 0 for level in LEVELS})

    def __str__(self) -> str:
        levels = ", ".join(f"{level} {count:,}" for level, count in self.by_level.items())
        return (f"{self.path}: {self.rows:,} rows: {self.kept:,} kept ({levels}), "
                f"{self.outside_levels:,} outside the levels asked for, {self.blank_lines:,} blank lines")


def fact_groups(reference, task_id: str) -> list[dict]:
    """evaluator_reference in any released shape -> [{id, description, facts}]."""
    if reference is None or reference == "" or reference == []:
        return []
    if isinstance(reference, str):
        return [{"id": f"{task_id}-1", "description": "", "facts": [reference]}] if reference.strip() else []
    if not isinstance(reference, list):
        raise ValueError(f"evaluator_reference must be a list or a string, not {type(reference).__name__}")
    if all(isinstance(item, str) for item in reference):
        empty = [number for number, fact in enumerate(reference, 1) if not fact.strip()]
        if empty:   # a blank fact is a check the judge can only pass
            raise ValueError(f"evaluator_reference item {empty[0]} is an empty fact")
        return [{"id": f"{task_id}-1", "description": "", "facts": list(reference)}]
    groups = []
    for number, group in enumerate(reference, 1):
        if not isinstance(group, dict) or not isinstance(group.get("facts"), list):
            raise ValueError(f"evaluator_reference item {number} is neither a fact group with a 'facts' list "
                             "nor a string (a mixed list)")
        facts = group["facts"]
        if not all(isinstance(fact, str) and fact.strip() for fact in facts):
            raise ValueError(f"evaluator_reference item {number} has a fact that is not a non-empty string")
        groups.append({"id": str(group.get("id", f"{task_id}-{number}")),
                       "description": str(group.get("description") or ""), "facts": list(facts)})
    return groups


def start_url(website: str) -> str:
    website = website.strip()
    if "://" not in website:
        return "https://" + website
    if not website.startswith(("http://", "https://")):
        raise ValueError(f"website {website!r} is not an http(s) URL")
    return website


def _check_types(row: dict) -> None:
    """The identifying fields are text (a released task_id may be a number): str() of a dict
    or of a number would make a task id or a website out of anything."""
    task_id = row["task_id"]
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
        raise ValueError(f"task_id must be a string or an integer, not {type(task_id).__name__}")
    for name in ("task_name", "website"):
        if not isinstance(row[name], str):
            raise ValueError(f"{name} must be a string, not {type(row[name]).__name__}")


def task_from_row(row: dict) -> Task:
    if not isinstance(row, dict):
        raise ValueError(f"a row must be a JSON object, not {type(row).__name__}")
    missing = [name for name in REQUIRED if not str(row.get(name) or "").strip()]
    if missing:
        raise ValueError(f"missing or empty {', '.join(missing)}")
    _check_types(row)
    task_id = str(row["task_id"])
    groups = fact_groups(row.get("evaluator_reference"), task_id)
    facts = sum(len(group["facts"]) for group in groups)
    if not facts:   # the judge checks facts: with none, any grounded answer would score 1.0
        raise ValueError("no rubric facts (evaluator_reference is missing or empty); "
                         "a task needs at least one rubric fact")
    difficulty = row.get("difficulty")
    if difficulty is None or difficulty == "":
        difficulty = facts   # the number of rubric facts is what difficulty means
    try:
        difficulty = int(difficulty)
    except (TypeError, ValueError, OverflowError):   # OverflowError: 1e400 reads as infinity
        raise ValueError(f"difficulty {row.get('difficulty')!r} is not an integer") from None
    if difficulty < 1:
        raise ValueError(f"difficulty {difficulty} (a task needs at least one rubric fact)")
    return Task(task_id=task_id, task_name=str(row["task_name"]).strip(), website=start_url(str(row["website"])),
                domain=str(row.get("domain") or ""), subdomain=str(row.get("subdomain") or ""),
                benchmark_name=str(row.get("benchmark_name") or ""), difficulty=difficulty,
                evaluator_reference=groups, definite_answer=str(row.get("definite_answer") or ""))


def load_webgym(path: str, *, levels: tuple[str, ...]) -> tuple[list[Task], LoadReport]:
    """The tasks of a WebGym JSONL file at the given difficulty levels (tasks.levels), and what was read."""
    unknown = set(levels) - set(LEVELS)
    if unknown:
        raise ValueError(f"unknown difficulty levels {sorted(unknown)}; the levels are {LEVELS}")
    report = LoadReport(path=path)
    tasks, seen = [], {}
    with open(path, "rb") as f:   # bytes: a line that is not UTF-8 is reported with its number
        for line_number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not UTF-8 ({error})") from None
            if not line.strip():
                report.blank_lines += 1
                continue
            report.rows += 1
            try:
                task = task_from_row(json.loads(line))
            except (ValueError, RecursionError) as error:   # RecursionError: JSON nested too deeply
                raise ValueError(f"{path}:{line_number}: {error}") from error
            if task.task_id in seen:
                raise ValueError(f"{path}:{line_number}: task_id {task.task_id!r} already on line {seen[task.task_id]}")
            seen[task.task_id] = line_number
            if task.level not in levels:
                report.outside_levels += 1
                continue
            tasks.append(task)
            report.kept += 1
            report.by_level[task.level] += 1
    if not report.rows:
        raise ValueError(f"{path}: no task rows (the file is empty or blank)")
    return tasks, report


class WebGymEnvironment:
    """WebGym tasks on their own sites. The agent may navigate within the task's site
    (host and subdomains); loopback and private addresses stay blocked unless named in
    `allow_hosts` (HOST or HOST:PORT: an intranet mirror, a loopback test site). The
    judge is anything with `async judge(task, answer, screenshots)`, e.g. an LLMJudge."""

    oracle = False
    splits = ("train", "test")  # tasks.path, tasks.test_path
    runs_browser_free = False
    by_family = False
    scripted_policy = None

    def __init__(self, judge, store: ScreenshotStore, *, allow_hosts: list[str]):
        self.judge_client = judge
        self.store = store
        self.allow_hosts = list(allow_hosts)
        self.policy = UrlPolicy([], self.allow_hosts)   # holds the run-wide count of blocks

    @staticmethod
    def tasks(config, split: str, workdir: str | None) -> list[Task]:
        """The tasks of tasks.path (train) or tasks.test_path (test), at tasks.levels."""
        key = "tasks.path" if split == "train" else "tasks.test_path"
        path = config.tasks.path if split == "train" else config.tasks.test_path
        if not path:
            raise MissingSetting(f"tasks.source=webgym needs --config.{key} (a WebGym JSONL file)")
        tasks, report = load_webgym(path, levels=tuple(config.tasks.levels))
        print(report, flush=True)
        return tasks

    @staticmethod
    def evaluated(tasks: list[Task], count: int, seed: int) -> list[Task]:
        return select_balanced(tasks, count, seed)   # spread over difficulty levels

    @classmethod
    def from_config(cls, config, web: LocalWeb, store: ScreenshotStore) -> WebGymEnvironment:
        if config.agent.observation == "text":
            raise ValueError("the LLM judge of webgym tasks reads the episode's screenshots: use "
                             "agent.observation=text+screenshot (or screenshot), not text")
        allow = [h.strip() for h in config.sandbox.allow_hosts.split(",") if h.strip()]
        return cls(llm_judge(config), store, allow_hosts=allow)

    def episode_site(self, task: Task, episode_id: str) -> EpisodeSite:
        policy = UrlPolicy([task.website], self.allow_hosts)
        policy.blocked = self.policy.blocked   # every episode counts into the run's tally
        sandbox = Sandbox(policy)
        return EpisodeSite(start_url=sandbox.resolve(task.website), sandbox=sandbox)

    async def judge(self, task: Task, answer: str, episode_id: str, screenshot_keys=()) -> Judgement:
        screenshots = [self.store.get(key) for key in screenshot_keys]
        return await self.judge_client.judge(task, answer, screenshots)

    def finish(self, episode_id: str) -> None:
        pass


def llm_judge(config) -> LLMJudge:
    """The judge of config.judge (its endpoint and model must be set)."""
    settings = JudgeSettings.from_config(config)
    if not (settings.base_url and settings.model):
        raise ValueError("webgym tasks are scored by the LLM judge: set --config.judge.base_url and "
                         "--config.judge.model (and judge.api_key_env if the endpoint needs a key)")
    return LLMJudge(settings)
