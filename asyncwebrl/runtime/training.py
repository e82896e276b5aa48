"""The train flow of main.py (the RL issue, item 4):

    1. warm start (optional, config.sft.steps > 0): oracle demonstrations collected by
       the browser pool in the model's own prompt format -> supervised steps
    2. checkpoint 0, then the held-out evaluation "before" (saved in eval_before.json)
    3. asynchronous GRPO (Orchestrator) for config.train.max_updates updates, or fewer where
       config.train.max_rl_minutes runs out first, with a checkpoint every
       config.train.checkpoint_every updates and on SIGTERM
    4. the held-out evaluation "after" and a closing summary (summary.json)

A run restarted on the same workdir resumes from its latest checkpoint: parameters,
optimiser state, version, the task sampler's position, the group counters and the RL clock
(metrics' wall_seconds) come back (and the warm start and the "before" evaluation are not repeated). An unreadable newest
checkpoint is reported and the one before it used; a workdir whose metrics show RL updates
but which holds no checkpoint refuses to start from scratch unless config.train.restart.

As several processes (asyncwebrl/distributed.py) every process collects with its own
browsers and sampler, demonstrations and evaluation episodes are split between them and
gathered, each process feeds its own step rows to its part of the learner's batch (the
rows never leave it: learner.py), and process 0 alone writes the run
directory. Each process keeps its own task-sampler position and counters (the checkpoint
holds all of them); metrics add the counters up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import signal
import threading
import time

import jax
import numpy as np

from asyncwebrl import distributed
from asyncwebrl.analysis.memory_drift import episode_record, memory_drift_metrics
from asyncwebrl.analysis.training_plot import plot_training
from asyncwebrl.envs import environment_class
from asyncwebrl.learner.checkpoints import CheckpointStore
from asyncwebrl.records import Task
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.pool import PoolSettings
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.build import build_model, make_engine, make_learner, make_model_policy
from asyncwebrl.runtime.demonstrations import demonstrate
from asyncwebrl.runtime.evaluate import format_table, paired_change, run_tasks, summarize
from asyncwebrl.runtime.groups import GroupBuffer, GroupCounts, make_task_sampler
from asyncwebrl.runtime.orchestrator import Orchestrator, RLSettings
from asyncwebrl.runtime.rows import step_rows
from asyncwebrl.runtime.rundir import FollowerDirectory, Progress, RunDirectory, read_metrics
from asyncwebrl.runtime.settings import make_environment, screenshot_store
from asyncwebrl.web.server import LocalWeb


def train(config, workdir: str, train_tasks: list[Task], test_tasks: list[Task]) -> dict:
    run = RunDirectory(workdir) if distributed.is_leader() else FollowerDirectory(workdir)
    try:
        with LocalWeb() as web, CheckpointStore(run.file("checkpoints"), keep=config.train.keep_checkpoints) as ckpt:
            return _train(config, run, web, ckpt, train_tasks, test_tasks)
    finally:
        run.close()


def _train(config, run: RunDirectory, web: LocalWeb, checkpoints: CheckpointStore, train_tasks, test_tasks) -> dict:
    if checkpoints.latest_step() is None:   # decided before the model is built: a refusal comes at once
        check_fresh_start(run.file("metrics.jsonl"), checkpoints.directory, restart=config.train.restart)
    model, processor = build_model(config)
    learner = make_learner(config, model, "rl")
    restored = checkpoints.restore(learner.state, set_aside_unreadable=True)
    if restored is None:
        if config.sft.steps > 0:
            model = warm_start(config, run, web, processor, model, train_tasks)
            learner = make_learner(config, model, "rl")   # RL starts with fresh optimiser moments
        fresh = {"task_position": 0, "counts": dataclasses.asdict(GroupCounts())}
        runtime = {"updates": 0, "processes": [fresh] * jax.process_count()}
        checkpoints.save(0, learner.state, runtime)
        before = evaluate_model(config, web, learner.model(), processor, test_tasks, "before RL")
        if before is not None:
            run.write_json("eval_before.json", before)
    else:
        state, runtime, step = restored
        learner.restore(state)
        print(f"resumed from checkpoint {step}: update {runtime['updates']}, version {learner.version}", flush=True)
        before = run.read_json("eval_before.json")
    updates, budget_ended_rl = rl_phase(config, run, web, checkpoints, learner, processor, train_tasks, runtime)
    if config.train.fingerprint:   # every process: a hash of the global parameters (launch/local_multiprocess.sh)
        fingerprint = distributed.fingerprint(learner.params)
        with open(run.file(f"fingerprint.{jax.process_index()}"), "w") as f:
            f.write(fingerprint + "\n")
    if updates < config.train.max_updates and not budget_ended_rl:
        print(f"stopped after update {updates}; run again with the same --workdir to resume")
        return {"stopped_at_update": updates}
    after = evaluate_model(config, web, learner.model(), processor, test_tasks, "after RL")
    if after is not None:
        run.write_json("eval.json", after)
    if not distributed.is_leader():
        return {}
    summary = closing_summary(run, before, after, train_split=config.train.split,
                              groups_per_batch=config.rl.groups_per_batch)
    # the updates planned, where the RL time budget ended the phase before them
    summary["max_updates"] = config.train.max_updates
    summary["rl_time_budget_spent"] = budget_ended_rl
    run.write_json("summary.json", summary)
    if budget_ended_rl:
        print(f"[summary] train.max_rl_minutes={config.train.max_rl_minutes:g} ended RL after {updates} of "
              f"{config.train.max_updates} updates", flush=True)
    return summary


def check_fresh_start(metrics_path: str, checkpoint_directory, *, restart: bool) -> None:
    """A workdir without a checkpoint starts from scratch, unless its metrics show an RL
    run already went on there (its checkpoints were deleted or never reached this disk):
    starting again would then go on writing update 1, 2... after the old updates. That
    refuses to start, or with `restart` (config.train.restart) starts again, saying so."""
    last = last_rl_update(metrics_path)
    if last is None:
        return
    if not restart:
        raise RuntimeError(f"{metrics_path} records RL updates up to {last} but {checkpoint_directory} holds no "
                           "checkpoint to resume from: refusing to start again from scratch (set "
                           "--config.train.restart=True to do so, or use another --workdir)")
    logging.warning("train.restart=True: %s records RL updates up to %d and %s holds no checkpoint; starting "
                    "again from scratch (the new updates are appended after the old ones)",
                    metrics_path, last, checkpoint_directory)


def last_rl_update(metrics_path: str) -> int | None:
    """The highest update of the RL records in metrics.jsonl, or None if it has none (or
    does not exist)."""
    return max((r["update"] for r in read_metrics(metrics_path) if r.get("phase") == "rl" and "update" in r),
               default=None)


# ---------------------------------------------------------------- warm start

def warm_start(config, run: RunDirectory, web: LocalWeb, processor, model, tasks: list[Task]):
    """Supervised steps on the oracle's successful demonstrations; returns the trained model."""
    if not environment_class(config.tasks.source).oracle:
        raise ValueError("the warm start's oracle only knows local tasks: set --config.sft.steps=0 "
                         f"for tasks.source={config.tasks.source!r}")
    store = screenshot_store(config, "demonstrations", host=jax.process_index())
    demo_tasks = random.Random(config.seed).sample(tasks, min(config.sft.demo_tasks, len(tasks)))
    demos, seconds = demonstrate(config, web, processor, store, distributed.share(demo_tasks))
    solved = [t for t in demos if t.success]
    rows = step_rows(solved, np.zeros(len(solved)), store, processor)
    store.free([k for t in demos for k in t.screenshot_keys()])
    # every process keeps its own rows and feeds them to the learner itself (learner.py):
    # only the counts travel
    fitting = [r for r in rows if len(r) <= config.learner.row_length]
    reports = distributed.gather([(len(solved), seconds, len(rows), len(fitting))])
    solved_count, seconds = sum(r[0] for r in reports), max(r[1] for r in reports)
    row_count, fitting_count = sum(r[2] for r in reports), sum(r[3] for r in reports)
    print(f"[sft] {solved_count}/{len(demo_tasks)} demonstrations solved, {row_count} step rows "
          f"({row_count - fitting_count} longer than learner.row_length left out), {seconds:.0f}s")
    rows = fitting
    if not fitting_count:
        raise RuntimeError("the oracle solved no demonstration task: nothing to warm-start on")
    cut = sum(len(r.response_ids) > config.sampler.max_new_tokens for r in rows)
    if cut:   # the warm start then teaches responses the sampler will always stop short of
        logging.warning("%d of %d demonstration responses are longer than sampler.max_new_tokens=%d: "
                        "the model cannot write them whole (their actions come at the end)",
                        cut, len(rows), config.sampler.max_new_tokens)
    learner = make_learner(config, model, "sft")
    # each process draws its share of a step's rows from its own (one process: from all, by config.seed)
    rows_per_step = distributed.per_process(config.sft.rows_per_step, "sft.rows_per_step")
    rng = np.random.default_rng(config.seed if jax.process_count() == 1 else (config.seed, jax.process_index()))
    for step in range(1, config.sft.steps + 1):
        batch = [rows[i] for i in rng.choice(len(rows), min(rows_per_step, len(rows)), replace=False)]
        measured = learner.update(batch)
        run.log({"phase": "sft", "sft_step": step, **learner_record(measured)}, step)
        if step == 1 or step % max(1, config.sft.steps // 10) == 0 or step == config.sft.steps:
            print(f"[sft] step {step}/{config.sft.steps}  nll/token {measured['nll']:.3f}", flush=True)
    return learner.model()


# ---------------------------------------------------------------- evaluation

def evaluate_model(config, web: LocalWeb, model, processor, tasks: list[Task], label: str) -> dict | None:
    """One episode per held-out task at the evaluation temperature (None without tasks)."""
    if not tasks:
        print(f"[eval] {label}: skipped (eval.num_tasks = 0)")
        return None
    store = screenshot_store(config, "eval", host=jax.process_index())
    with make_engine(config, model, processor, config.eval.temperature, config.eval.top_p) as engine:
        policy = make_model_policy(config, engine, processor, store)
        trajectories, seconds = asyncio.run(run_tasks(distributed.share(tasks), policy,
                                                      make_environment(config, web, store),
                                                      EpisodeSettings.from_config(config, "test"),
                                                      pool=PoolSettings.from_config(config), store=store))
    reports = distributed.gather([(trajectories, seconds)])   # each process ran its share
    summary = summarize([t for part, _ in reports for t in part], max(s for _, s in reports))
    if distributed.is_leader():
        print(f"[eval] {label}:\n{format_table(summary)}", flush=True)
    return summary


def closing_summary(run: RunDirectory, before: dict | None, after: dict | None, *, train_split: str,
                    groups_per_batch: int) -> dict:
    """train_split "eval": RL trained on the evaluated tasks, so they are not held out.
    groups_per_batch (rl.groups_per_batch): the groups every update trains on, of all processes."""
    records = [r for r in run.records() if r.get("phase") == "rl"]
    last = records[-1] if records else {}
    before, after = before or {}, after or {}
    summary = {
        "train_split": train_split,
        "success_before": before.get("success_rate"), "success_after": after.get("success_rate"),
        "interval_95_before": before.get("interval_95"), "interval_95_after": after.get("interval_95"),
        "by_difficulty_before": before.get("by_difficulty"), "by_difficulty_after": after.get("by_difficulty"),
        "mean_response_tokens_per_step_after": after.get("mean_response_tokens_per_step"),
        "answers_partly_right_before": before.get("answers_partly_right"),
        "answers_partly_right_after": after.get("answers_partly_right"),
        # the same tasks before and after, task by task: solved only after / only before, and
        # the sign test's p (null where an evaluation lacks per-task results)
        "paired_change": paired_change(before.get("task_success"), after.get("task_success")),
        "updates": last.get("update", 0), "episodes": last.get("episodes", 0),
        "trajectories_per_hour": _rounded(last.get("trajectories_per_hour"), 1),
        "staleness_mean": _rounded(np.mean([r["staleness_mean"] for r in records]), 2) if records else None,
        "staleness_max": max((r["staleness_max"] for r in records), default=None),
        # over every update's trained episodes (the last update's alone is a handful of groups)
        "steps_per_episode": _rounded(_over_updates(records, "steps_per_episode"), 1),
        "tokens_per_step": _rounded(_over_updates(records, "tokens_per_step"), 1),
        # how much RL had to learn from: the groups trained, against the finished groups whose
        # rewards were all equal (dynamic sampling drops them: no group-relative signal)
        "groups_trained": last.get("update", 0) * groups_per_batch if records else None,
        "groups_dropped_uniform": last.get("groups_dropped_uniform"),
    }
    if distributed.is_leader():
        summary["plot"] = plot_training(records, before or None, after or None, run.file("training.png"))
    evaluated = "held-out" if train_split != "eval" else "trained-on (train.split=eval, not held out)"
    print(f"[summary] {evaluated} success before -> after RL (95% Wilson interval): "
          f"{_with_interval(before)} -> {_with_interval(after)}")
    for level, row in after.get("by_difficulty", {}).items():
        print(f"[summary]   {level}: {_with_interval(before.get('by_difficulty', {}).get(level, {}))} -> "
              f"{_with_interval(row)}")
    paired = summary["paired_change"]
    if paired is not None:   # whether the change is more than the spread of this many tasks
        print(f"[summary]   task by task: {paired['gained']} solved only after, {paired['lost']} only before, of "
              f"{paired['tasks']} (sign test p = {paired['p_value']:.3g}; p < 0.05: a change this many tasks resolve)")
    if summary["answers_partly_right_after"] is not None:
        print(f"[summary]   failed answers with some facts right (one left out or wrong): "
              f"{summary['answers_partly_right_before'] if before else '-'} -> {summary['answers_partly_right_after']}")
    print(f"[summary] {summary['updates']} updates, {summary['episodes']} episodes, "
          f"{summary['trajectories_per_hour']} trajectories/h, staleness mean {summary['staleness_mean']} "
          f"max {summary['staleness_max']}, {summary['steps_per_episode']} steps/episode, "
          f"{summary['tokens_per_step']} tokens/step")
    if summary["groups_trained"] is not None:
        dropped = summary["groups_dropped_uniform"]
        print(f"[summary] RL trained on {summary['groups_trained']} groups"
              + (f"; {dropped} finished groups had equal rewards (no signal) and were dropped" if dropped else ""))
    if summary.get("plot"):
        print(f"[summary] plot: {summary['plot']}")
    return summary


def _with_interval(evaluation: dict) -> str:
    """"33.3% [10%-70%] of 6" for a success rate, "-" where nothing was scored."""
    rate, interval = evaluation.get("success_rate"), evaluation.get("interval_95")
    if rate is None:
        return "-"
    shown = f"{rate:.1%}"
    if interval:
        shown += f" [{interval[0]:.0%}-{interval[1]:.0%}]"
    return f"{shown} of {evaluation.get('episodes')}"


# ---------------------------------------------------------------- asynchronous RL

def rl_phase(config, run: RunDirectory, web: LocalWeb, checkpoints: CheckpointStore, learner, processor,
             train_tasks: list[Task], runtime: dict) -> tuple[int, bool]:
    """Asynchronous GRPO until config.train.max_updates, a stop (SIGTERM, Ctrl-C) or the end
    of config.train.max_rl_minutes; returns the updates done and whether the time budget
    ended the phase before max_updates (on any process, and no signal on any: then every
    process goes on to the evaluation)."""
    store = screenshot_store(config, "rl", host=jax.process_index())
    own = own_runtime(runtime)
    engine = make_engine(config, learner.model(), processor, config.rl.temperature, top_p=1.0,   # what the learner scores
                         version=learner.version)
    orchestrator = make_orchestrator(
        config, learner=learner, engine=engine, policy=make_model_policy(config, engine, processor, store),
        environment=make_environment(config, web, store), store=store, processor=processor, tasks=train_tasks,
        sampler_state=own, counts=GroupCounts(**own["counts"]))
    log = UpdateLog(config, run, checkpoints, orchestrator, updates_done=runtime["updates"],
                    rl_seconds_done=runtime.get("rl_seconds", 0.0))
    orchestrator.on_update = log.after_update

    with stop_on_signals(orchestrator) as signalled, engine, \
            rl_time_budget(config, orchestrator, runtime) as out_of_time:
        updates = orchestrator.run(updates_done=runtime["updates"])

    log.close(updates)
    # a signal on any process wins over the budget: the run then stops to be resumed
    signalled_anywhere = distributed.any_process(signalled.is_set(), "rl/signalled")
    out_of_time_anywhere = distributed.any_process(out_of_time.is_set(), "rl/time-budget")
    return updates, out_of_time_anywhere and not signalled_anywhere and updates < config.train.max_updates


@contextlib.contextmanager
def rl_time_budget(config, orchestrator: Orchestrator, runtime: dict):
    """An Event set, and the orchestrator stopped, once config.train.max_rl_minutes of RL have
    passed, counting the RL time a resumed run's checkpoint recorded (the clock at its last
    update: a run restarted after the budget ended it gets the time since then again)."""
    out_of_time = threading.Event()
    budget_s = 60.0 * config.train.max_rl_minutes
    if budget_s <= 0:
        yield out_of_time
        return

    def spent():
        out_of_time.set()
        print(f"[rl] the RL time budget of {config.train.max_rl_minutes:g} min is spent: finishing the update in "
              "progress, then evaluating", flush=True)
        orchestrator.stop()

    timer = threading.Timer(max(budget_s - runtime.get("rl_seconds", 0.0), 0.0), spent)
    timer.daemon = True
    timer.start()
    try:
        yield out_of_time
    finally:
        timer.cancel()


class UpdateLog:
    """What each RL update leaves in the run directory: its metrics line (the learner's
    measurements, the trained episodes' statistics, the collector's counters summed over
    processes), the trained episodes, a sample trajectory, the progress line, and a
    checkpoint every train.checkpoint_every updates and at the last."""

    def __init__(self, config, run: RunDirectory, checkpoints: CheckpointStore, orchestrator: Orchestrator,
                 updates_done: int, rl_seconds_done: float = 0.0):
        self.config, self.run, self.checkpoints, self.orchestrator = config, run, checkpoints, orchestrator
        self.progress = Progress(config.train.max_updates)
        self.started = time.monotonic()
        # the RL clock (metrics' wall_seconds) of a resumed run goes on from its checkpoint's, so
        # that a stopped and resumed run's updates stand at comparable times; the rates below
        # are this process's own
        self.rl_seconds_done = rl_seconds_done
        self.saved = updates_done                      # the update of the newest checkpoint
        counts = orchestrator.buffer.counts
        self.episodes_at_start = sum(distributed.gather([counts.episodes]))
        # the counters at the previous update: every episode finished since then, kept or dropped
        self.episodes, self.successes = self.episodes_at_start, sum(distributed.gather([counts.successes]))

    def after_update(self, update: int, measured: dict, groups) -> None:
        members = [t for g in groups for t in g.members]
        # every process's trained episodes and counters (the sampler and learner times are this one's)
        reports = distributed.gather([([episode_record(t) for t in members], self.orchestrator.buffer.snapshot())])
        episodes = [e for part, _ in reports for e in part]
        counters = {name: sum(s[name] for _, s in reports) for name in reports[0][1] if name != "version"}
        record = {"phase": "rl", "update": update, **learner_record(measured),
                  **self._collection(counters, processes=len(reports)), **trained_episode_stats(episodes)}
        self.episodes, self.successes = counters["episodes"], counters["successes"]
        self.run.log(record, update)
        self.run.log_episodes(episodes, update)
        self.run.save_trajectory(members[0], self.orchestrator.store, f"update_{update:06d}")
        if distributed.is_leader():
            self.progress.show(record)
        if update % self.config.train.checkpoint_every == 0 or update == self.config.train.max_updates:
            self.checkpoint(update)

    def _collection(self, counters: dict, processes: int) -> dict:
        """The collector's side since RL began: rates, busy shares, admission and drop counts."""
        wall = time.monotonic() - self.started
        finished = counters["episodes"] - self.episodes
        sampler = self.orchestrator.engine.stats
        prompts = sampler["prefills"] + sampler["prefill_cache_hits"]
        return {
            "episodes": counters["episodes"],
            # the policy's own success at the sampling temperature: every episode finished since
            # the previous update, whether its group was trained on or dropped (null if none)
            "collected_success_rate": (counters["successes"] - self.successes) / finished if finished else None,
            "trajectories_per_hour": 3600.0 * (counters["episodes"] - self.episodes_at_start) / max(wall, 1e-9),
            "sampler_busy": min(1.0, self.orchestrator.engine.busy_seconds() / max(wall, 1e-9)),
            "learner_busy": min(1.0, self.orchestrator.busy["learner_seconds"] / max(wall, 1e-9)),
            # the share of the sampler's prompts since RL began that were copies served from its
            # prefill cache (sampler.prefill_cache; null before any prompt)
            "prefill_cache_share": sampler["prefill_cache_hits"] / prompts if prompts else None,
            "admission_lead": counters["lead"],
            "groups_dropped_uniform": counters["dropped_uniform"], "groups_dropped_too_few": counters["dropped_too_few"],
            "groups_rejected_stale": counters["rejected_stale"], "episodes_crashed": counters["episodes_crashed"],
            "screenshots_held": self.orchestrator.store.stats.entries,
            "screenshot_bytes_held": self.orchestrator.store.stats.bytes_held,
            "wall_seconds": self.rl_clock(), "processes": processes,
        }

    def rl_clock(self) -> float:
        """Seconds of RL phase so far, those before a resume included."""
        return self.rl_seconds_done + time.monotonic() - self.started

    def checkpoint(self, update: int) -> None:
        buffer = self.orchestrator.buffer
        processes = distributed.gather([{**buffer.sampler.state(), "counts": dataclasses.asdict(buffer.counts)}])
        self.checkpoints.save(update, self.orchestrator.learner.state,
                              {"updates": update, "processes": processes, "rl_seconds": self.rl_clock()})
        self.saved = update

    def close(self, updates: int) -> None:
        if self.saved != updates:
            self.checkpoint(updates)   # stopped between periodic checkpoints (SIGTERM)
        self.checkpoints.wait()


def trained_episode_stats(episodes: list[dict]) -> dict:
    """The trained episodes' success, lengths and memory-drift metrics. Their success is the
    trained groups': under dynamic sampling only groups with mixed outcomes are trained on."""
    steps = [(len(e["memories"]), e["success"]) for e in episodes]
    drift = memory_drift_metrics(episodes)
    return {
        "success_rate": float(np.mean([success for _, success in steps])),
        # the judge's partial credit (share of facts right) of the same episodes: what
        # rl.reward=facts trains on (null where no judge gave one)
        "credit_mean": _mean([e.get("credit") for e in episodes if e.get("credit") is not None]),
        "steps_per_episode": float(np.mean([n for n, _ in steps])),
        "steps_per_success": _mean([n for n, success in steps if success]),
        "steps_per_failure": _mean([n for n, success in steps if not success]),
        "memory_generic_key_share": drift["generic_key_share"], "memory_key_persistence": drift["key_persistence"],
        "memory_adjacent_unchanged": drift["adjacent_unchanged"], "memory_keys_per_step": drift["keys_per_step_mean"],
        "response_tokens_per_step": drift["response_tokens_per_step"],
    }


@contextlib.contextmanager
def stop_on_signals(orchestrator: Orchestrator):
    """SIGTERM or Ctrl-C: finish the update in progress, then stop (a checkpoint follows);
    a second Ctrl-C leaves at once (the last periodic checkpoint stays). Yields an Event set
    once a signal came."""
    signalled = threading.Event()   # (the orchestrator may also have been stopped by the RL time budget)

    def on_signal(signum, frame):
        if signalled.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        signalled.set()
        print(f"\n{signal.Signals(signum).name}: finishing the update in progress, then saving a checkpoint",
              flush=True)
        orchestrator.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield signalled
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# metrics.jsonl's names for the learner measurements whose own would be unclear among a record's
LEARNER_RECORD_NAMES = {"seconds": "update_seconds"}


def learner_record(measured: dict) -> dict:
    """Every measurement of a learner update (its loss kind's metrics included), under its
    metrics.jsonl name: a metric a loss returns is logged without being listed here."""
    return {LEARNER_RECORD_NAMES.get(name, name): value for name, value in measured.items()}


def make_orchestrator(config, *, learner, engine, policy, environment, store: ScreenshotStore, processor,
                      tasks: list[Task], sampler_state: dict | None = None, counts: GroupCounts | None = None,
                      on_update=lambda update, measured, groups: None, make_pool=None) -> Orchestrator:
    """The asynchronous trainer of config.rl / config.loss, with its group buffer
    (orchestrator.buffer) drawing from `tasks`; a synchronous one when config.rl.eta = 0.
    With several processes, this process's part: rl.groups_per_batch / processes groups
    per update, max_running_groups on its own browsers."""
    rl = config.rl
    # each process collects its part of every update, from a task sequence of its own
    buffer = GroupBuffer(group_size=rl.group_size, eta=rl.eta, max_running=rl.max_running_groups,
                         groups_per_batch=distributed.per_process(rl.groups_per_batch, "rl.groups_per_batch"),
                         sampler=make_task_sampler(rl.task_sampling, tasks, config.seed + jax.process_index(),
                                                   sampler_state or {}, rl.group_size),
                         release=store.free, version=learner.version, counts=counts or GroupCounts(),
                         dynamic_sampling=rl.dynamic_sampling, pacing=rl.pace_admission, reward=rl.reward)
    return Orchestrator(
        learner=learner, engine=engine, policy=policy, environment=environment, store=store, processor=processor,
        buffer=buffer, episode=EpisodeSettings.from_config(config, "train"), pool=PoolSettings.from_config(config),
        settings=RLSettings.from_config(config),
        on_update=on_update, make_pool=make_pool)


def own_runtime(runtime: dict) -> dict:
    """This process's task-sampler state and counters from a checkpoint's runtime.
    Resumed on more processes than saved it, the new ones start afresh (each has a task
    sequence of its own); on fewer, the positions and counters of the missing ones are dropped."""
    processes = runtime["processes"]
    if len(processes) != jax.process_count() and distributed.is_leader():
        logging.warning("checkpoint of %d processes restored on %d: task positions of the processes that are "
                        "not in both runs start afresh or are dropped", len(processes), jax.process_count())
    index = jax.process_index()
    if index < len(processes):
        return processes[index]
    return {"task_position": 0, "counts": dataclasses.asdict(GroupCounts())}


def _rounded(value, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _over_updates(records: list[dict], key: str) -> float | None:
    return _mean([r[key] for r in records if r.get(key) is not None])


def _mean(values) -> float | None:
    return float(np.mean(values)) if values else None
