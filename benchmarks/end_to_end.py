"""Asynchronous against synchronous RL, end to end: trajectories/hour, busy fractions, staleness.

    .venv/bin/python benchmarks/end_to_end.py --setting cpu --updates 5     # (a) embedded default, real browsers
    python3 benchmarks/end_to_end.py --setting gpu --updates 8              # (b) one GPU, 2B preset, simulated web

Both variants run in one process, one after the other, with the same model (same seed),
tasks, pages and hardware; only the trainer differs:
    async   eta = 2: admission runs ahead of the learner by up to two versions
    sync    eta = 0: each round collects B groups, then the learner updates while
            admission waits (add --sync-relaunch for fresh browsers every round, as WebGym)

Setting cpu: configs/default.py (tiny model, CPU, Chromium on the local web), no warm
start, coordinates mode and shorter prompts so that an update takes about a minute.
Setting gpu: the 2B preset in bf16 with Pallas attention and full remat on the default
device, and the browser-free web of benchmarks/simulated_web.py (step latencies and
episode lengths from the local browsers); prompts carry two real 1280x720 screenshots'
worth of vision tokens.

Several processes (one per GPU, or per host): start the same command in each with
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set (asyncwebrl/
distributed.py); every process collects with its own sampler, rl.groups_per_batch is
split between them, and process 0 prints the counts of all of them.

Measured between the end of update --skip and the end of the last one (compilation
and start-up left out): finished episodes per hour, trained trajectories per hour
(members of the groups the learner consumed) and trained step rows per hour, the
sampler's and the learner's busy shares of wall time (seconds inside engine calls /
inside updates), and the staleness of every consumed token (mean of the per-update
means, and the max); and, of the trained episodes, their steps and seconds, their
groups' seconds (the slowest member), and a step's seconds in the model (sampler
queueing included) and on the web.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from asyncwebrl import distributed  # noqa: E402
from asyncwebrl.rollout.screenshots import ScreenshotStore  # noqa: E402
from asyncwebrl.runtime.build import build_model, make_engine, make_learner, make_model_policy  # noqa: E402
from asyncwebrl.runtime.training import make_orchestrator  # noqa: E402
from configs import default  # noqa: E402

CPU_OVERRIDES = {
    "sft.steps": 0, "eval.num_tasks": 0, "agent.interaction": "coordinates", "agent.train_step_limits": (4, 6, 8),
    "sampler.capacity": 3072, "sampler.prompt_buckets": (1536, 3072), "sampler.max_new_tokens": 32,
    "learner.row_length": 3072, "rl.group_size": 3, "rl.groups_per_batch": 1, "rl.max_running_groups": 3,
    "rl.dynamic_sampling": False, "browser.pages": 4, "tasks.train_sites_per_variant": 4,
}
GPU_OVERRIDES = {
    "sft.steps": 0, "eval.num_tasks": 0, "model.preset": "2b", "model.dtype": "bfloat16", "model.attention": "pallas",
    "sampler.slots": 64, "sampler.capacity": 3072, "sampler.prompt_buckets": (2560, 3072),
    "sampler.patches_per_image": 3520, "sampler.max_new_tokens": 64, "learner.row_length": 3072,
    # 4 rows and 5 images a microbatch: 4 consecutive steps of an episode share 3 screenshots
    "learner.rows_per_microbatch": 4, "learner.images_per_microbatch": 5,
    "rl.group_size": 4, "rl.groups_per_batch": 4, "rl.max_running_groups": 12,
    "rl.dynamic_sampling": False, "browser.pages": 48,
    # at remat none the gradient step keeps 81 GiB of activations and one H200 runs out (as configs/instruct.py)
    "model.remat": "full",
}
VARIANTS = {"async": {"rl.eta": 2}, "sync": {"rl.eta": 0}}


def make_config(setting: str, updates: int, variant: dict, extra: dict):
    config = default.bare()   # the bare system (a random tiny model): the trainer's speed, not the agent's
    config.update_from_flattened_dict({**(CPU_OVERRIDES if setting == "cpu" else GPU_OVERRIDES),
                                       "train.max_updates": updates, **variant, **extra})
    return config


@contextlib.contextmanager
def episode_side(setting: str, config, engine, processor, store: ScreenshotStore, model_config, web_step_s: float):
    """(policy, environment, tasks, make_pool) of a setting: real browsers on the local
    web, or the simulated web (median browser seconds per step: web_step_s)."""
    if setting == "cpu":
        from asyncwebrl.envs.local import LocalEnvironment
        from asyncwebrl.web.server import LocalWeb
        from asyncwebrl.web.tasks import generate_tasks

        with LocalWeb() as web:
            yield (make_model_policy(config, engine, processor, store), LocalEnvironment(web),
                   generate_tasks("train", config.tasks.train_sites_per_variant), None)
        return
    from benchmarks.simulated_web import EnvironmentModel, SimulatedPool, SyntheticPolicy, synthetic_tasks

    policy = SyntheticPolicy(engine, processor, store, model_config, max_new_tokens=config.sampler.max_new_tokens,
                             seed=config.seed)
    environment = EnvironmentModel(step_limits=tuple(config.agent.train_step_limits), step_median_s=web_step_s)
    yield (policy, None, synthetic_tasks(96),
           lambda: SimulatedPool(environment, store=store, pages=config.browser.pages, seed=config.seed))


def run_variant(setting: str, config, web_step_s: float = 0.16) -> list[dict]:
    """Train config.train.max_updates updates; one mark per update (cumulative counters)."""
    model, processor = build_model(config)
    if setting == "gpu":
        from asyncwebrl.model import preset
        from benchmarks.workload import synthetic_processor

        processor = synthetic_processor(preset(config.model.preset))
    learner = make_learner(config, model, "rl")
    engine = make_engine(config, learner.model(), processor, config.rl.temperature, top_p=1.0,
                         version=learner.version)
    engine.warm_up()   # every prefill bucket and the decode step compile before the clock starts
    store = ScreenshotStore.in_memory()
    marks: list[dict] = []
    started = time.monotonic()

    def on_update(update: int, measured: dict, groups) -> None:
        snapshot = orchestrator.buffer.snapshot()
        episodes = [t for g in groups for t in g.members]
        steps = [s for t in episodes for s in t.steps]
        counts = distributed.gather([(snapshot["episodes"], len(episodes))])   # every process's
        marks.append({"update": update, "t": time.monotonic() - started, "episodes": sum(e for e, _ in counts),
                      "trained": sum(t for _, t in counts), "learner_s": orchestrator.busy["learner_seconds"],
                      "sampler_s": engine.busy_seconds(), "staleness_mean": measured["staleness_mean"],
                      "staleness_max": measured["staleness_max"], "update_s": measured["seconds"],
                      # where an update's time goes: packing rows (host), the proximal policy's
                      # forward; and before it, how long the learner waited for its batch
                      "pack_s": measured["pack_seconds"], "prox_s": measured["prox_seconds"],
                      "wait_s": measured["batch_wait_seconds"], "rows": measured["rows"],
                      "lead": snapshot["lead"],
                      "images_shown": measured["images_shown"], "images_encoded": measured["images_encoded"],
                      "rejected_stale": snapshot["rejected_stale"], "crashed": snapshot["episodes_crashed"],
                      # the trained episodes themselves (this process's): how long they ran, and
                      # a step's time in the model (queueing in the sampler included) and on the web
                      "steps_per_episode": len(steps) / max(1, len(episodes)),
                      "episode_s": float(np.mean([t.seconds for t in episodes])) if episodes else 0.0,
                      "group_s": (float(np.mean([max(t.seconds for t in g.members) for g in groups]))
                                  if groups else 0.0),
                      "policy_s_per_step": float(np.mean([s.seconds_policy for s in steps])) if steps else 0.0,
                      "web_s_per_step": float(np.mean([s.seconds_browser for s in steps])) if steps else 0.0})
        if distributed.is_leader():
            print(json.dumps({"variant": variant_name(config), **marks[-1]}), flush=True)

    with episode_side(setting, config, engine, processor, store, model.config, web_step_s) as (policy, environment, tasks, pool):
        orchestrator = make_orchestrator(config, learner=learner, engine=engine, policy=policy,
                                         environment=environment, store=store, processor=processor, tasks=tasks,
                                         on_update=on_update, make_pool=pool)
        with engine:
            orchestrator.run()
    return marks


def variant_name(config) -> str:
    return "async" if config.rl.eta > 0 else "sync"


def summarize(marks: list[dict], skip: int) -> dict:
    first, last = marks[skip - 1], marks[-1]
    span = last["t"] - first["t"]
    window = marks[skip:]
    return {
        "updates_measured": len(window), "seconds": round(span, 1),
        "episodes_per_hour": round(3600 * (last["episodes"] - first["episodes"]) / span, 1),
        "trained_trajectories_per_hour": round(3600 * sum(m["trained"] for m in window) / span, 1),
        # trajectories/h rewards short episodes; step rows/h counts the work trained on
        "trained_step_rows_per_hour": round(3600 * sum(m["rows"] for m in window) / span, 1),
        "sampler_busy": round((last["sampler_s"] - first["sampler_s"]) / span, 3),
        "learner_busy": round((last["learner_s"] - first["learner_s"]) / span, 3),
        "staleness_mean": round(float(np.mean([m["staleness_mean"] for m in window])), 3),
        "staleness_max": max(m["staleness_max"] for m in window),
        "mean_update_s": round(float(np.mean([m["update_s"] for m in window])), 2),
        "mean_pack_s": round(float(np.mean([m["pack_s"] for m in window])), 2),
        "mean_prox_s": round(float(np.mean([m["prox_s"] for m in window])), 2),
        "mean_wait_s": round(float(np.mean([m["wait_s"] for m in window])), 2),
        # learner seconds per step row: the learner's speed, whatever the episode lengths
        "update_s_per_row": round(float(np.mean([m["update_s"] / m["rows"] for m in window])), 4),
        "updates_waited": sum(m["wait_s"] > 0 for m in window),   # batch not ready when the learner was
        "admission_lead_last": last["lead"],   # groups in flight that pacing allows (rl.pace_admission)
        "images_encoded_per_shown": round(sum(m["images_encoded"] for m in window)
                                          / max(1, sum(m["images_shown"] for m in window)), 3),
        "groups_rejected_stale": last["rejected_stale"], "episodes_crashed": last["crashed"],
        **{f"mean_{name}": round(float(np.mean([m[name] for m in window])), 3)
           for name in ("steps_per_episode", "episode_s", "group_s", "policy_s_per_step", "web_s_per_step")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--skip", type=int, default=1, help="updates left out of the measurement (compilation)")
    parser.add_argument("--variants", default="sync,async")
    parser.add_argument("--sync-relaunch", action="store_true", help="sync: fresh browsers every round (cpu)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for both variants, e.g. --set rl.eta=1 (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--web-step-s", type=float, default=0.16,
                        help="gpu: median browser seconds per simulated step (0.16 = measured on the local web)")
    args = parser.parse_args()
    distributed.initialize(distributed.process_group())   # several processes: from JAX_* variables
    if not 1 <= args.skip < args.updates:
        raise SystemExit("--skip must be at least 1 and below --updates")
    extra = {"seed": args.seed}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            extra[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            extra[key] = value
    results = {}
    for name in args.variants.split(","):
        variant = dict(VARIANTS[name])
        if name == "sync" and args.sync_relaunch:
            variant["rl.relaunch_browsers_each_round"] = True
        config = make_config(args.setting, args.updates, variant, extra)
        results[name] = summarize(run_variant(args.setting, config, args.web_step_s), args.skip)
        if distributed.is_leader():
            print(json.dumps({name: results[name]}), flush=True)
    if not distributed.is_leader():
        return
    if {"async", "sync"} <= results.keys():
        results["async_over_sync_episodes_per_hour"] = round(
            results["async"]["episodes_per_hour"] / results["sync"]["episodes_per_hour"], 2)
        results["async_over_sync_trained_per_hour"] = round(
            results["async"]["trained_trajectories_per_hour"] / results["sync"]["trained_trajectories_per_hour"], 2)
        results["async_over_sync_step_rows_per_hour"] = round(
            results["async"]["trained_step_rows_per_hour"] / results["sync"]["trained_step_rows_per_hour"], 2)
    print(json.dumps({"setting": args.setting, "updates": args.updates, "skip": args.skip, "seed": args.seed,
                      "web_step_s": args.web_step_s, "processes": jax.process_count(), "devices": jax.device_count(),
                      "overrides": extra, "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
                      "cpu_count": os.cpu_count(), "machine": platform.machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
