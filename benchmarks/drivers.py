"""The two episode drivers side by side: Chromium and the browser-free local web.

    .venv/bin/python benchmarks/drivers.py [--tasks 60] [--concurrency 4] [--random-tasks 60]

On `--tasks` held-out test tasks spread over the three levels and four site kinds, with
text observations (agent.observation=text, element ids):
  - parity: the oracle's outcome per task under both drivers, and the page text the
    agent is shown at every step (step 0 of every task, and every later step the two
    runs share), compared byte for byte;
  - the random policy's success under both (it must stay low: the tasks are not
    solvable by chance);
  - oracle steps per second under both, in this one run (the ratio is the number).
Prints a JSON report; BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asyncwebrl.envs.local import LocalEnvironment  # noqa: E402
from asyncwebrl.rollout.episode import EpisodeSettings  # noqa: E402
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy  # noqa: E402
from asyncwebrl.rollout.pool import PoolSettings  # noqa: E402
from asyncwebrl.runtime.evaluate import run_tasks, summarize  # noqa: E402
from asyncwebrl.web.server import LocalWeb  # noqa: E402
from asyncwebrl.web.tasks import generate_tasks, select_balanced  # noqa: E402
from configs.default import bare  # noqa: E402

DRIVERS = ("chromium", "http")


def run(web: LocalWeb, tasks, policy, driver: str, concurrency: int):
    settings = dataclasses.replace(EpisodeSettings.from_config(bare(), "test"), observation="text")
    environment = LocalEnvironment(web, browser_free=driver == "http")
    pool = dataclasses.replace(PoolSettings.from_config(bare()), driver=driver, concurrency=concurrency)
    return asyncio.run(run_tasks(tasks, policy, environment, settings, pool=pool, progress=None))


def compare(chromium, http) -> dict:
    """Outcomes (and step counts) and page texts of the same tasks under the two drivers."""
    outcome_mismatch, first_text_mismatch, later_text_mismatch, steps_compared = [], [], [], 0
    for a, b in zip(chromium, http):
        if (a.outcome, a.reward, len(a.steps)) != (b.outcome, b.reward, len(b.steps)):
            outcome_mismatch.append(a.task.task_id)
        if not (a.steps and b.steps and a.steps[0].page_text == b.steps[0].page_text):
            first_text_mismatch.append(a.task.task_id)
        for step_a, step_b in list(zip(a.steps, b.steps))[1:]:
            steps_compared += 1
            if step_a.page_text != step_b.page_text:
                later_text_mismatch.append(f"{a.task.task_id}@{step_a.index}")
    return {"tasks": len(chromium), "outcome_mismatches": outcome_mismatch,
            "step0_text_mismatches": first_text_mismatch, "later_steps_compared": steps_compared,
            "later_text_mismatches": later_text_mismatch}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--random-tasks", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    tasks = select_balanced(generate_tasks("test", 6), args.tasks, seed=0)
    report = {"machine": f"{platform.node()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "tasks": len(tasks), "kinds": dict(collections.Counter(t.local["site"].split("-")[0] for t in tasks)),
              "levels": dict(collections.Counter(t.level for t in tasks)), "oracle": {}, "random": {}}
    web = LocalWeb().start()  # Chromium needs the server; the http driver ignores it
    try:
        oracle_runs = {}
        for driver in DRIVERS:
            trajectories, wall = run(web, tasks, OraclePolicy(web.session, "action"), driver, args.concurrency)
            summary = summarize(trajectories, wall)
            oracle_runs[driver] = trajectories
            report["oracle"][driver] = {"success_rate": summary["success_rate"], "episodes": summary["episodes"],
                                        "crashed": summary["crashed"], "steps": summary["total_steps"],
                                        "wall_s": summary["wall_seconds"],
                                        "steps_per_s": summary["steps_per_second"]}
            print(driver, json.dumps(report["oracle"][driver]), file=sys.stderr)
        report["oracle"]["http_over_chromium_steps_per_s"] = round(
            report["oracle"]["http"]["steps_per_s"] / report["oracle"]["chromium"]["steps_per_s"], 1)
        report["parity"] = compare(oracle_runs["chromium"], oracle_runs["http"])
        random_tasks = select_balanced(generate_tasks("test", 6), args.random_tasks, seed=1)
        for driver in DRIVERS:
            trajectories, wall = run(web, random_tasks, RandomPolicy(seed=0), driver, args.concurrency)
            summary = summarize(trajectories, wall)
            report["random"][driver] = {"success_rate": summary["success_rate"], "episodes": summary["episodes"],
                                        "action_errors": summary["action_errors"], "steps": summary["total_steps"]}
    finally:
        web.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
