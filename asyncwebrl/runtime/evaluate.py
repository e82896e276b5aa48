"""Evaluation: one episode per task on a few concurrent browser pages, then eval.json.

Counting follows WebGym's convention (docs/architecture.md#evaljson): `episodes` are finished episodes
with a known reward; crashed, blocked and unknown-reward episodes are excluded from the
success rate and counted in their own fields. A success rate over no scored episodes (an
evaluation where every episode crashed, a level with no tasks) is None (null in
eval.json), never 0.0.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import os
import statistics
import sys
import time

from asyncwebrl.records import LEVELS, SCORED_OUTCOMES, Task, Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.policies import Policy, PolicyFailure
from asyncwebrl.rollout.pool import PoolSettings, make_pool
from asyncwebrl.rollout.screenshots import ScreenshotStore


async def run_tasks(tasks: list[Task], policy: Policy, environment, settings: EpisodeSettings, *,
                    pool: PoolSettings, store: ScreenshotStore | None = None, free_screenshots: bool = True,
                    progress=sys.stderr, label: str = "eval") -> tuple[list[Trajectory], float]:
    """One episode per task on `pool`'s pages (Chromium or the browser-free local web), in
    `environment` (LocalEnvironment(web), or WebGymEnvironment); returns the trajectories
    (in task order) and wall seconds. Screenshots are freed as soon as an episode is
    judged, unless free_screenshots is False (the caller then frees them). Pass `store` when the policy
    reads screenshots too (the model policy does)."""
    started = time.perf_counter()
    done = 0
    interactive = bool(progress) and progress.isatty()  # a live line on a terminal, every 10% in logs
    store = store if store is not None else ScreenshotStore.in_memory()
    results: list[Trajectory | None] = [None] * len(tasks)
    episodes = make_pool(environment, store=store, settings=settings, pool=pool)

    async def run_one(index: int, task: Task) -> None:
        nonlocal done
        try:
            trajectory = await episodes.run(task, policy)
        except PolicyFailure:   # the policy itself is broken (its sampler failed): every episode would be
            raise               # lost the same way, so the evaluation stops with the error
        except Exception as error:   # one bad item (a blocked start page, a policy bug) ends its episode only
            trajectory = crashed_trajectory(task, settings, error)
        if free_screenshots:
            store.free(trajectory.screenshot_keys())
        results[index] = trajectory
        done += 1
        if progress and (interactive or done % max(1, len(tasks) // 10) == 0 or done == len(tasks)):
            succeeded = sum(1 for t in results if t is not None and t.success)
            line = f"[{label}] {done}/{len(tasks)} episodes, {succeeded} successes, {time.perf_counter() - started:.0f}s"
            print("\r" + line if interactive else line, end="" if interactive else "\n", file=progress, flush=True)

    async with episodes:
        await asyncio.gather(*(run_one(i, task) for i, task in enumerate(tasks)))
    if interactive:
        print(file=progress)
    logging.info("pool: %s; sandbox blocks: %s", episodes.stats, dict(environment.policy.blocked))
    if free_screenshots and store.stats.entries:
        logging.warning("screenshot store still holds %d entries after evaluation", store.stats.entries)
    return [t for t in results if t is not None], time.perf_counter() - started


def crashed_trajectory(task: Task, settings: EpisodeSettings, error: Exception) -> Trajectory:
    """The record of an episode that raised instead of ending: crashed, with the reason."""
    message = str(error).splitlines()[0][:200] if str(error) else ""
    logging.warning("episode of task %s crashed: %s: %s", task.task_id, type(error).__name__, message)
    return Trajectory(task=task, steps=[], outcome="crashed", reward=None, step_limit=settings.step_limit(task),
                      error=f"{type(error).__name__}: {message}")


def _crash_reasons(trajectories: list[Trajectory]) -> dict[str, int]:
    """Crashed episodes by the kind of failure (the error's name, before its message)."""
    reasons = collections.Counter(t.error.split(":", 1)[0] or "unknown" for t in trajectories if t.outcome == "crashed")
    return dict(sorted(reasons.items()))


CRASHES_KEPT = 10   # crashed episodes whose messages an evaluation keeps (`crashed` counts them all)


def _crashes(trajectories: list[Trajectory]) -> list[dict]:
    """The first crashed episodes with their messages: a training run writes only its
    evaluations' summaries (no episode file), where a count by name alone would leave a
    crash unexplained (which prompt was refused, which page hung)."""
    crashed = [t for t in trajectories if t.outcome == "crashed"][:CRASHES_KEPT]
    return [{"task_id": t.task.task_id, "error": t.error} for t in crashed]


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def _success_rate(scored: list[Trajectory]) -> float | None:
    """None when no episode could be scored: "no data" must not read as 0% (a real 0% is 0.0)."""
    return _mean([float(t.success) for t in scored])


def wilson_interval(successes: int, episodes: int, z: float = 1.96) -> list[float] | None:
    """The Wilson score interval of a success rate (95% at z = 1.96), as [low, high]; None
    over no episodes. Unlike the normal approximation it stays inside [0, 1] and is not
    empty at 0/n, which small evaluations (6 or 60 tasks) need."""
    if episodes == 0:
        return None
    rate, z2 = successes / episodes, z * z
    centre = (rate + z2 / (2 * episodes)) / (1 + z2 / episodes)
    half = z / (1 + z2 / episodes) * (rate * (1 - rate) / episodes + z2 / (4 * episodes * episodes)) ** 0.5
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def _interval_of(scored: list[Trajectory]) -> list[float] | None:
    return wilson_interval(sum(t.success for t in scored), len(scored))


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def summarize(trajectories: list[Trajectory], wall_seconds: float | None = None) -> dict:
    """The eval.json fields (docs/architecture.md#evaljson), plus timing."""
    scored = [t for t in trajectories if t.outcome in SCORED_OUTCOMES and t.reward is not None]
    by_difficulty = {}
    for level in LEVELS:
        level_scored = [t for t in scored if t.task.level == level]
        by_difficulty[level] = {
            "episodes": len(level_scored),
            "success_rate": _success_rate(level_scored),
            "interval_95": _interval_of(level_scored),
        }
    by_family: dict[str, list[Trajectory]] = {}   # subdomain: a MiniWoB++ page, a WebGym subdomain
    for t in scored:
        by_family.setdefault(t.task.subdomain or t.task.domain or "-", []).append(t)
    steps = [s for t in scored for s in t.steps]
    summary = {
        "episodes": len(scored),
        "success_rate": _success_rate(scored),
        "interval_95": _interval_of(scored),  # Wilson
        "by_difficulty": by_difficulty,
        "by_family": {name: {"episodes": len(ts), "success_rate": _success_rate(ts)}
                      for name, ts in sorted(by_family.items())},
        "crashed": sum(t.outcome == "crashed" for t in trajectories),
        "crash_reasons": _crash_reasons(trajectories),
        "crashes": _crashes(trajectories),
        "blocked": sum(t.outcome == "blocked" for t in trajectories),
        "unknown_reward": sum(t.outcome in SCORED_OUTCOMES and t.reward is None for t in trajectories),
        "mean_steps_success": _mean([len(t.steps) for t in scored if t.success]),
        "mean_steps_failure": _mean([len(t.steps) for t in scored if not t.success]),
        "mean_response_tokens_per_step": _mean([len(s.response_ids) for s in steps if len(s.response_ids)]),
        "action_errors": sum(1 for s in steps if s.action_error),  # invalid responses and failed actions
        # failed answers that had some of the facts asked for right (a fact left out or wrong):
        # what an answer cut short of its last fact (benchmarks/warm_start.py --teacher-cuts) scores
        "answers_partly_right": sum(1 for t in scored if not t.success and t.credit is not None and 0 < t.credit < 1),
        "total_steps": sum(len(t.steps) for t in trajectories),
        # each evaluated task's success (the share of its scored episodes that succeeded; null
        # where none was scored): two evaluations of the same tasks compare task by task
        # (paired_change), which separates a real change from the spread of 60 or 120 tasks
        "task_success": task_success(trajectories),
    }
    samples = samples_per_task(scored)
    if samples is not None:
        summary["samples"] = samples
    if wall_seconds:
        summary["wall_seconds"] = round(wall_seconds, 2)
        summary["steps_per_second"] = round(summary["total_steps"] / wall_seconds, 2)
    return summary


def task_success(trajectories: list[Trajectory]) -> dict[str, float | None]:
    """task id -> the share of its scored episodes that succeeded (None: none scored)."""
    by_task: dict[str, list[bool]] = {}
    for t in trajectories:
        scored = t.outcome in SCORED_OUTCOMES and t.reward is not None
        by_task.setdefault(t.task.task_id, [])
        if scored:
            by_task[t.task.task_id].append(t.success)
    return {task: (sum(results) / len(results) if results else None) for task, results in by_task.items()}


def paired_change(before: dict[str, float | None] | None, after: dict[str, float | None] | None) -> dict | None:
    """Two evaluations of the same tasks (task_success of each), task by task: how many were
    solved only after (`gained`) and only before (`lost`) among the tasks scored in both, and
    the exact two-sided sign test of gained against lost (McNemar's exact test: under no
    change a task that differs is as likely to go either way). A share between 0 and 1 (several
    episodes per task) counts as solved above one half; p keeps 4 significant digits. None
    without both evaluations' tasks."""
    if not before or not after:
        return None
    common = [task for task in before if task in after and before[task] is not None and after[task] is not None]
    if not common:
        return None
    solved_before = {task: before[task] > 0.5 for task in common}
    solved_after = {task: after[task] > 0.5 for task in common}
    gained = sum(solved_after[t] and not solved_before[t] for t in common)
    lost = sum(solved_before[t] and not solved_after[t] for t in common)
    return {"tasks": len(common), "gained": gained, "lost": lost, "p_value": float(f"{sign_test(gained, lost):.4g}")}


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided binomial test of wins against losses at p = 1/2 (1.0 when both are 0)."""
    n, fewer = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(fewer + 1)) / 2**n
    return min(1.0, 2 * tail)


def samples_per_task(scored: list[Trajectory]) -> dict | None:
    """With several scored episodes of a task (eval.samples > 1): pass@k (the share of tasks
    any of whose k episodes succeeded, k their number), overall and by level, and the share
    of tasks whose episodes disagree, the tasks a group-relative advantage can learn from.
    None when no task was run more than once."""
    by_task: dict[str, list[Trajectory]] = {}
    for t in scored:
        by_task.setdefault(t.task.task_id, []).append(t)
    if not by_task or max(len(episodes) for episodes in by_task.values()) < 2:
        return None

    def shares(groups: list[list[Trajectory]]) -> dict:
        return {"tasks": len(groups),
                "pass_at_k": _mean([float(any(t.success for t in g)) for g in groups]),
                "mixed_outcomes": _mean([float(len({t.success for t in g}) > 1) for g in groups])}

    groups = list(by_task.values())
    return {"episodes_per_task": _mean([len(g) for g in groups]), **shares(groups),
            "by_difficulty": {level: shares([g for g in groups if g[0].task.level == level]) for level in LEVELS}}


def format_table(summary: dict, *, families: bool = False) -> str:
    """Success by difficulty (and by task family: MiniWoB++ pages) with the counts; "-" where
    no episode was scored."""
    lines = [f"{'difficulty':<10} {'episodes':>8} {'success':>8}"]
    for level in LEVELS:
        row = summary["by_difficulty"][level]
        lines.append(f"{level:<10} {row['episodes']:>8} {_percent(row['success_rate']):>8}")
    if families:
        width = max([len(name) for name in summary["by_family"]] + [10])
        lines.append(f"{'family':<{width}} {'episodes':>8} {'success':>8}")
        for name, row in summary["by_family"].items():
            lines.append(f"{name:<{width}} {row['episodes']:>8} {_percent(row['success_rate']):>8}")
    lines.append(f"{'overall':<10} {summary['episodes']:>8} {_percent(summary['success_rate']):>8}")
    if summary.get("samples"):
        samples = summary["samples"]
        lines.append(f"{samples['tasks']} tasks x {samples['episodes_per_task']} episodes: pass@k "
                     f"{_percent(samples['pass_at_k'])}, tasks with mixed outcomes {_percent(samples['mixed_outcomes'])}")
    extras = {k: summary.get(k) for k in ("crashed", "blocked", "unknown_reward", "mean_steps_success",
                                          "mean_steps_failure", "action_errors", "wall_seconds", "steps_per_second")}
    lines.append("  ".join(f"{k}={v}" for k, v in extras.items() if v is not None))
    lines += [f"crashed: {crash['task_id']}: {crash['error']}" for crash in summary.get("crashes", [])]
    return "\n".join(lines)


def write_eval(workdir: str, summary: dict, trajectories: list[Trajectory]) -> str:
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "eval.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=2)
    os.replace(tmp, path)
    with open(os.path.join(workdir, "eval_episodes.jsonl"), "w") as f:
        for trajectory in trajectories:
            f.write(json.dumps(trajectory.summary()) + "\n")
    logging.info("wrote %s", path)
    return path
