"""The records every part shares: tasks, steps, trajectories. One definition each."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

# Step limits by difficulty level (docs/algorithm.md#step-limits).
STEP_LIMITS = {"train": {"easy": 10, "medium": 20, "hard": 30}, "test": {"easy": 30, "medium": 50, "hard": 70}}
LEVELS = ("easy", "medium", "hard")


def difficulty_level(difficulty: int) -> str:
    """Number of rubric facts -> easy (<= 3), medium (4..6), hard (>= 7)."""
    if difficulty <= 3:
        return "easy"
    return "medium" if difficulty <= 6 else "hard"


@dataclasses.dataclass
class Task:
    """One task in WebGym's JSONL format (docs/algorithm.md#task-files-and-evaluation).

    `local` is our extension for tasks on the embedded local web: the site id, split,
    template, per-fact check specs (aligned with the flattened facts) and the oracle
    plan. It is None for external WebGym tasks.
    """

    task_id: str
    task_name: str  # the instruction
    website: str  # start URL
    domain: str = ""
    subdomain: str = ""
    benchmark_name: str = ""
    difficulty: int = 1
    evaluator_reference: list[dict] = dataclasses.field(default_factory=list)  # [{id, description, facts}]
    definite_answer: str = ""
    local: dict[str, Any] | None = None

    @property
    def level(self) -> str:
        return difficulty_level(self.difficulty)

    @property
    def template(self) -> str:
        """What kind of task this is: the local web's task template (e.g. "directory.head"),
        else the WebGym domain. Tasks of one template share their skill."""
        return (self.local or {}).get("template", self.domain)

    def step_limit(self, phase: str) -> int:
        """phase: "train" or "test" (docs/algorithm.md#step-limits)."""
        return STEP_LIMITS[phase][self.level]

    @property
    def facts(self) -> list[str]:
        return [fact for group in self.evaluator_reference for fact in group["facts"]]

    def to_json(self) -> str:
        row = dataclasses.asdict(self)
        if row["local"] is None:
            del row["local"]
        return json.dumps(row, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, row: dict) -> "Task":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in names})


def no_tokens(dtype) -> dataclasses.Field:
    """A per-token field of a step that no model wrote: an empty array."""
    return dataclasses.field(default_factory=lambda: np.zeros(0, dtype))


@dataclasses.dataclass(eq=False)   # identity: its token fields are arrays, whose == is elementwise
class Step:
    """One agent step. Token fields stay empty for policies without a model. They are numpy
    arrays from the sampler to the learner's rows (a long prompt is thousands of ids);
    writers of JSON turn them into lists."""

    index: int
    url: str
    response: str  # the raw text the policy wrote
    action: dict  # the parsed action (name, arguments) as executed
    action_error: str = ""  # why the response became a no-op, or why execution failed
    title: str = ""  # of the page the step was taken on
    screenshot_key: str = ""
    screenshot_changed: bool = True
    prompt_ids: np.ndarray = no_tokens(np.int32)  # [p] as the sampler saw them, image placeholders expanded
    image_keys: list[str] = dataclasses.field(default_factory=list)
    response_ids: np.ndarray = no_tokens(np.int32)  # [r]
    behave_logprobs: np.ndarray = no_tokens(np.float32)  # [r] under the sampler's distribution
    versions: np.ndarray = no_tokens(np.int32)  # [r] the weight version that wrote each response token
    seconds_policy: float = 0.0
    seconds_browser: float = 0.0
    point: list[float] | None = None  # where a click or type landed, in screenshot pixels
    page_text: str = ""  # text observations: the page as the agent was shown it (before a budget cut)


# answered: the agent gave its answer; finished: the page ended the episode (MiniWoB++);
# limit: out of steps. Those three are scored. crashed and blocked never are.
OUTCOMES = ("answered", "finished", "limit", "crashed", "blocked")
SCORED_OUTCOMES = ("answered", "finished", "limit")


# What RL trains on (rl.reward), episode -> a number, None where unknown (the episode then
# leaves its group): success, the judge's binary reward (the paper's); facts, the judge's
# partial credit, the share of the task's facts the episode got right (0 for an answer that
# breaks the judge's rules), which tells apart episodes that fail alike. Reported success
# is always the binary reward.
TRAINED_REWARDS = {
    "success": lambda trajectory: trajectory.reward,
    "facts": lambda trajectory: trajectory.credit,   # None with the reward (rollout/pool.py)
}


def trained_reward(trajectory: Trajectory, kind: str) -> float | None:
    if kind not in TRAINED_REWARDS:
        raise ValueError(f"rl.reward must be one of {tuple(TRAINED_REWARDS)}, got {kind!r}")
    return TRAINED_REWARDS[kind](trajectory)


@dataclasses.dataclass(eq=False)   # identity, as its steps
class Trajectory:
    task: Task
    steps: list[Step]
    outcome: str  # one of OUTCOMES
    reward: float | None  # None = unknown (judge failed): the episode is dropped, never scored 0
    answer: str = ""
    fact_results: list[bool] = dataclasses.field(default_factory=list)
    credit: float | None = None  # the judge's partial credit (share of facts right); None = unknown
    judge_note: str = ""
    episode_id: str = ""
    group_id: str = ""
    step_limit: int = 0
    seconds: float = 0.0
    error: str = ""  # for crashed episodes: what went wrong

    def screenshot_keys(self) -> list[str]:
        """The store references this trajectory holds (one per step)."""
        return [step.screenshot_key for step in self.steps if step.screenshot_key]

    @property
    def success(self) -> bool:
        return bool(self.reward) and self.reward > 0

    def summary(self) -> dict:
        """A JSON-able digest (for logs and demonstration files)."""
        return {
            "task_id": self.task.task_id,
            "episode_id": self.episode_id,
            "outcome": self.outcome,
            "reward": self.reward,
            "answer": self.answer,
            "fact_results": self.fact_results,
            "credit": self.credit,
            "judge_note": self.judge_note,
            "steps": len(self.steps),
            "difficulty": self.task.difficulty,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }
