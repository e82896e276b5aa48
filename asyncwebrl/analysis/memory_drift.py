"""Memory drift (docs/algorithm.md#memory-drift): does the agent's Memory stay task-specific
and stable, or does it grow with the step count and fill with generic placeholder keys?

    episodes = episodes_from_run("runs/default")          # or [episode_record(t) for t in trajectories]
    memory_drift_metrics(episodes)["generic_key_share"]

An episode is a dict {"task": str, "success": bool, "memories": [dict | None, one per step]}
with optional "outcome" ("limit" for one that ran out of steps) and "response_tokens"
(one count per step). A memory that could not be read (None) has no keys; comparisons of
key sets (persistence, adjacent pairs) only use steps whose memory was read, so a model
that writes no readable Memory at all is not "stable" (unreadable_memory_share says how
many steps that was).

What "generic" means is explicit, because the paper does not publish its list. A key is
split into lower-case words (snake_case, camelCase, spaces, digits apart). It is generic
when
  1. its words, digits dropped, spell one of GENERIC_KEYS ("task_1" -> "task",
     "currentStep" -> "current step"), or
  2. it has no content word in common with the task text (words of 3+ letters, not in
     STOP_WORDS, compared without a plural "s"): "user_goal" on a task about laptop prices.
So "laptop_price" is specific on a task that names laptops and prices, while
"search_query" and "step_3" are generic everywhere.
"""

from __future__ import annotations

import json
import os
import re

from asyncwebrl.records import Trajectory
from asyncwebrl.rollout.response import parse_response

# Placeholder keys that say nothing about any particular task (before the digits go).
GENERIC_KEYS = frozenset({
    "task", "subtask", "goal", "objective", "step", "current step", "next step", "previous step", "last step",
    "step count", "steps taken", "progress", "status", "state", "current state", "current page", "page",
    "current url", "url", "search query", "query", "search term", "search", "result", "results", "info",
    "information", "note", "notes", "memory", "data", "item", "items", "value", "detail", "details", "action",
    "last action", "next action", "observation", "context", "answer", "plan", "thought", "reasoning",
    "fact", "facts", "key", "found", "target", "website", "site",
})
STOP_WORDS = frozenset({
    "the", "and", "for", "with", "from", "that", "this", "what", "which", "find", "then", "into", "your", "you",
    "are", "was", "has", "have", "its", "their", "give", "tell", "show", "report", "after", "before", "about",
    "all", "any", "each", "how", "who", "when", "where", "why", "not", "but", "out", "one", "can", "use",
    "current", "next", "previous", "last", "first", "value", "name", "number", "page", "site", "website",
})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(str(text))]


def _content(words: list[str]) -> set[str]:
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w
            for w in words if len(w) >= 3 and not w.isdigit() and w not in STOP_WORDS}


def is_generic_key(key: str, task: str) -> bool:
    words = [w for w in _words(key) if not w.isdigit()]
    if not words or " ".join(words) in GENERIC_KEYS:
        return True
    return not (_content(words) & _content(_words(task)))


def _keys(memory) -> frozenset:
    return frozenset(memory) if isinstance(memory, dict) else frozenset()


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _outcome(episode: dict) -> str:
    if episode.get("success"):
        return "success"
    return "limit" if episode.get("outcome") == "limit" else "failure"


def memory_drift_metrics(episodes: list[dict]) -> dict:
    """The memory-drift measures (docs/algorithm.md#memory-drift) over a list of episodes
    (see the module docstring).

    generic_key_share    distinct keys of each episode, pooled: the share that are generic
    key_persistence      episodes of 2+ steps whose first-step key set equals the last's
                         (both memories readable)
    adjacent_unchanged   adjacent step pairs (both readable), pooled: the share with equal key sets
    keys_per_step        mean number of keys at step t, t = 0, 1, ... (episodes that reached t);
                         keys_per_step_mean over every step
    response_tokens_per_step, steps_by_outcome (mean steps of success / failure / limit)
    """
    generic = distinct = 0
    persistent, long_enough = 0, 0
    unchanged = pairs = 0
    keys_at: list[list[int]] = []
    by_outcome: dict[str, list[int]] = {"success": [], "failure": [], "limit": []}
    tokens = []
    unreadable = 0
    for episode in episodes:
        memories = episode["memories"]
        key_sets = [_keys(m) for m in memories]
        unreadable += sum(not isinstance(m, dict) for m in memories)
        every_key = frozenset().union(*key_sets)
        distinct += len(every_key)
        generic += sum(is_generic_key(key, episode["task"]) for key in every_key)
        if len(memories) >= 2 and isinstance(memories[0], dict) and isinstance(memories[-1], dict):
            long_enough += 1
            persistent += key_sets[0] == key_sets[-1]
        for index in range(len(memories) - 1):
            if isinstance(memories[index], dict) and isinstance(memories[index + 1], dict):
                pairs += 1
                unchanged += key_sets[index] == key_sets[index + 1]
        for index, keys in enumerate(key_sets):
            if index == len(keys_at):
                keys_at.append([])
            keys_at[index].append(len(keys))
        by_outcome[_outcome(episode)].append(len(key_sets))
        tokens += list(episode.get("response_tokens") or [])
    return {
        "episodes": len(episodes),
        "generic_key_share": generic / distinct if distinct else None,
        "distinct_keys": distinct,
        "key_persistence": persistent / long_enough if long_enough else None,
        "adjacent_unchanged": unchanged / pairs if pairs else None,
        "unreadable_memory_share": unreadable / sum(map(len, keys_at)) if keys_at else None,
        "keys_per_step": [sum(counts) / len(counts) for counts in keys_at],
        "keys_per_step_mean": _mean(n for counts in keys_at for n in counts),
        "response_tokens_per_step": _mean(tokens),
        "steps_by_outcome": {name: _mean(steps) for name, steps in by_outcome.items()},
    }


def episode_record(trajectory: Trajectory) -> dict:
    """A trajectory as memory_drift_metrics reads it (also a line of W/episodes.jsonl)."""
    return {
        "task": trajectory.task.task_name, "task_id": trajectory.task.task_id, "success": trajectory.success,
        "credit": trajectory.credit, "outcome": trajectory.outcome, "level": trajectory.task.level,
        "memories": [parse_response(step.response).memory for step in trajectory.steps],
        "response_tokens": [len(step.response_ids) for step in trajectory.steps],
    }


def episodes_from_run(run_dir: str) -> list[dict]:
    """Every episode the learner trained on in a run (W/episodes.jsonl), in order."""
    path = os.path.join(run_dir, "episodes.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a training run's directory?")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
