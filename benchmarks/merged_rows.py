"""Identical steps merged into one learner row (`learner.merge_duplicates`): how many of a
group's step rows are copies, and what merging saves the learner.

    python benchmarks/merged_rows.py                        # the embedded default's warm start, training sites
    python benchmarks/merged_rows.py --split adapt --tasks 12 --timed-groups 2

Runs groups of `rl.group_size` episodes per task at the training temperature with the
browser-free driver (the same episodes as Chromium: BENCHMARKS.md "The page as text"),
makes step rows as a training run does (runtime/rows.py: advantages of the loss kind),
and keeps the informative groups (dynamic sampling drops the others). For every group it
counts the rows and the rows left after merging, and the microbatches each packs into;
then it times Learner.update on the first `--timed-groups` informative groups, merged and
not, from the same weights, after a compiling update. The learner's work is the packed
microbatches (fixed shapes), so the time should follow their ratio. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from asyncwebrl.envs import environment_class  # noqa: E402
from asyncwebrl.learner.packing import PackingShape, merge_duplicates, pack  # noqa: E402
from asyncwebrl.rollout.episode import EpisodeSettings  # noqa: E402
from asyncwebrl.rollout.pool import PoolSettings  # noqa: E402
from asyncwebrl.rollout.screenshots import ScreenshotStore  # noqa: E402
from asyncwebrl.runtime.build import build_model, make_engine, make_learner, make_model_policy  # noqa: E402
from asyncwebrl.runtime.evaluate import run_tasks  # noqa: E402
from asyncwebrl.runtime.rows import episode_advantages, step_rows  # noqa: E402
from asyncwebrl.runtime.settings import make_environment  # noqa: E402
from asyncwebrl.web.server import LocalWeb  # noqa: E402
from configs import default  # noqa: E402


def collect_groups(config, split: str, num_tasks: int, store: ScreenshotStore):
    """num_tasks tasks of the split (spread over levels), each run group_size times: the
    trajectories, grouped by task."""
    source = environment_class(config.tasks.source)
    # drawn from 60 spread over levels and templates (a few taken directly would all be the
    # first templates by name)
    spread = source.evaluated(source.tasks(config, split, None), max(60, num_tasks), config.seed)
    tasks = random.Random(config.seed).sample(spread, num_tasks)
    size = config.rl.group_size
    model, processor = build_model(config)
    with LocalWeb() as web, make_engine(config, model, processor, config.rl.temperature, top_p=1.0) as engine:
        policy = make_model_policy(config, engine, processor, store)
        trajectories, seconds = asyncio.run(run_tasks(
            [task for task in tasks for _ in range(size)], policy, make_environment(config, web, store),
            EpisodeSettings.from_config(config, "train"), pool=PoolSettings.from_config(config), store=store,
            free_screenshots=False, label="groups"))
    groups = [[dataclasses.replace(t, group_id=f"group-{g}") for t in trajectories[g * size:(g + 1) * size]]
              for g in range(len(tasks))]
    return groups, processor, model, seconds


def group_rows(config, group, store, processor):
    advantages = episode_advantages(group, kind=config.loss.kind, normalizer=config.loss.normalizer, k=config.loss.k)
    return step_rows(group, advantages, store, processor)


def timed_update(config, model, rows, merge: bool) -> dict:
    config = config.copy_and_resolve_references()
    config.learner.merge_duplicates = merge
    learner = make_learner(config, model, "rl")
    learner.update(rows[:1])   # compiles the step functions
    started = time.perf_counter()
    measured = learner.update(rows)
    return {"rows_trained": measured["rows_trained"], "microbatches": measured["microbatches"],
            "seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="train", help="the tasks' split (train | adapt | unseen | test)")
    parser.add_argument("--tasks", type=int, default=12, help="groups (one task each)")
    parser.add_argument("--timed-groups", type=int, default=1, help="informative groups the learner is timed on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    config = default.get_config()
    config.browser.driver = "http"
    config.seed = args.seed
    store = ScreenshotStore.in_memory()
    groups, processor, model, seconds = collect_groups(config, args.split, args.tasks, store)
    shape = PackingShape.from_config(config)
    per_group = []
    informative = []
    for group in groups:
        rewards = [t.reward for t in group if t.reward is not None]
        rows = group_rows(config, group, store, processor)
        merged = merge_duplicates(rows)
        per_group.append({"task": group[0].task.task_id, "successes": int(sum(r > 0 for r in rewards)),
                          "episodes": len(group), "rows": len(rows), "rows_merged": len(merged),
                          "microbatches": len(pack(rows, shape, model.config)) if rows else 0,
                          "microbatches_merged": len(pack(merged, shape, model.config)) if rows else 0})
        if len(set(rewards)) > 1:
            informative.append(rows)
    mixed = [g for g in per_group if 0 < g["successes"] < g["episodes"]]

    def share(key_a, key_b, chosen):
        total = sum(g[key_a] for g in chosen)
        return round(sum(g[key_b] for g in chosen) / total, 3) if total else None

    timed = None
    if informative and args.timed_groups:
        rows = [row for group in informative[:args.timed_groups] for row in group]
        timed = {"groups": min(len(informative), args.timed_groups), "rows": len(rows),
                 "merged": timed_update(config, model, rows, True), "copies": timed_update(config, model, rows, False)}
        timed["speedup"] = round(timed["copies"]["seconds"] / timed["merged"]["seconds"], 2)
    print(json.dumps({
        "split": args.split, "seed": args.seed, "group_size": config.rl.group_size, "groups": len(groups),
        "informative_groups": len(mixed), "episodes_seconds": round(seconds, 1),
        # the learner's rows (and microbatches) left after merging, as a share of the copies'
        "rows_left_all": share("rows", "rows_merged", per_group),
        "rows_left_informative": share("rows", "rows_merged", mixed),
        "microbatches_left_informative": share("microbatches", "microbatches_merged", mixed),
        "per_group": per_group, "timed": timed,
        "machine": platform.machine(), "cpu_count": os.cpu_count(),
    }), flush=True)


if __name__ == "__main__":
    main()
