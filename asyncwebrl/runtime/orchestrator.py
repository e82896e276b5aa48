"""The asynchronous trainer (docs/architecture.md#processes-and-threads): collector, sampler
and learner overlap.

    collector thread   asyncio: admits task groups through the staleness gate and runs
                       their episodes on the evergreen browser pool (the sampler engine
                       answers the model steps); finished episodes go to the GroupBuffer
    sampler thread     the Engine (continuous batching; takes published weights between
                       decode iterations)
    caller's thread    the learner loop: B groups -> advantages -> step rows -> update ->
                       publish -> metrics -> checkpoint -> free screenshot keys
    next-batch thread  assembles the next B groups one at a time, building each group's
                       step rows as soon as it is ready; for eta > 0 it starts as an
                       update begins, so the host work of batch u + 1 overlaps the
                       accelerator work of batch u

Several processes (asyncwebrl/distributed.py) each run all three; their learner loops
meet once per update: each brings B / P groups of its own collector and feeds their step
rows to its part of one sharded learner's batch (rows never cross processes: learner.py),
and every host's sampler takes the result. They
also agree on stopping: if any process was stopped, all stop before the same update.

The synchronous baseline is this same loop with eta = 0 (the gate then pauses
admission while the learner updates) and, optionally, fresh browsers every round.
`stop()` (e.g. from a SIGTERM handler) ends the loop after the update in progress; the
caller then saves a checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from asyncwebrl import distributed
from asyncwebrl.learner.learner import Learner
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.policies import PolicyFailure
from asyncwebrl.rollout.pool import PoolSettings, make_pool
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.groups import Group, GroupBuffer
from asyncwebrl.runtime.rows import episode_advantages, step_rows
from asyncwebrl.sampler.engine import Engine


@dataclasses.dataclass(frozen=True)
class RLSettings:
    """The fields without a default are config keys (configs/default.py holds their
    defaults: from_config); wait_report_s no config sets."""
    max_updates: int
    kind: str                          # grpo | raft
    normalizer: str                    # const (1/k) | traj (1/|tau|)
    k: float
    reward: str                        # what the advantages are made of (records.TRAINED_REWARDS)
    relaunch_browsers_each_round: bool   # the WebGym-style synchronous baseline
    wait_report_s: float = 60.0        # log what the learner waits for, at most this often

    @classmethod
    def from_config(cls, config) -> RLSettings:
        loss = config.loss
        return cls(max_updates=config.train.max_updates, kind=loss.kind, normalizer=loss.normalizer, k=loss.k,
                   reward=config.rl.reward, relaunch_browsers_each_round=config.rl.relaunch_browsers_each_round)


@dataclasses.dataclass
class Batch:
    """One process's share of an update: its groups and their step rows."""
    groups: list[Group]
    rows: list
    waited: float = 0.0         # seconds the learner waited for it (0: it was ready in time)


class NextBatch:
    """The next update's batch, assembled on a helper thread one group at a time: a group's
    step rows (host work: screenshots read back and processed) are built as soon as it is
    ready, so once the learner needs the batch it waits at most for the last group and its
    rows. Groups are checked for staleness at `version`, the one they will be trained at:
    started as an update begins (eta > 0), groups finishing during the update count
    toward the next one."""

    def __init__(self, buffer: GroupBuffer, rows_of: Callable[[list[Group]], list], version: int):
        self._buffer, self._rows_of, self._version = buffer, rows_of, version
        self._groups: list[Group] = []
        self._rows: list = []
        self._cancelled = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="next-batch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._cancelled.is_set() and len(self._groups) < self._buffer.groups_per_batch:
                taken = self._buffer.take(1, timeout=0.2, version=self._version)
                if taken is not None:
                    self._groups += taken   # before its rows: a cancel gives back all it took
                    self._rows += self._rows_of(taken)
        except BaseException as error:   # surfaced by wait()
            self._error = error

    @property
    def complete(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float) -> Batch | None:
        """The batch once complete; None if it is not within `timeout`."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self._error is not None:
            raise RuntimeError("preparing the next batch failed") from self._error
        return Batch(self._groups, self._rows)

    def cancel(self) -> None:
        """Stop waiting for groups; those taken go back to the buffer (never trained)."""
        self._cancelled.set()
        self._thread.join()
        if self._groups:
            self._buffer.give_back(self._groups)
            self._groups = []


class Orchestrator:
    def __init__(self, *, learner: Learner, engine: Engine, policy, environment, store: ScreenshotStore,
                 processor: Processor, buffer: GroupBuffer, episode: EpisodeSettings, pool: PoolSettings,
                 settings: RLSettings, on_update=lambda update, measurements, groups: None, make_pool=None):
        """make_pool: a callable returning the episode pool (an async context manager with
        `run(task, policy, episode_id=, group_id=)`); by default make_pool of the pool settings on
        `environment`. The end-to-end benchmark passes a browser-free one."""
        self.learner, self.engine, self.policy, self.environment = learner, engine, policy, environment
        self._make_pool = make_pool or self._default_pool
        self.store, self.processor, self.buffer = store, processor, buffer
        self.episode, self.pool_settings, self.settings = episode, pool, settings
        self.on_update = on_update
        self._stop = threading.Event()
        self._collector_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.busy = {"learner_seconds": 0.0}

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Finish the update in progress, then return from run() (signal-handler safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------ the learner loop

    def run(self, updates_done: int = 0) -> int:
        """Train until settings.max_updates updates are done (counting `updates_done`
        from before a resume) or stop(); returns the number of updates done."""
        collector = threading.Thread(target=self._collect_thread, name="collector", daemon=True)
        collector.start()
        update = updates_done
        upcoming: NextBatch | None = None
        try:
            while update < self.settings.max_updates:
                round_name = f"update/{update + 1}"
                upcoming = upcoming or NextBatch(self.buffer, self._rows_of, self.learner.version)
                batch = self._await(upcoming, round_name)
                upcoming = None
                if distributed.any_process(batch is None, round_name):
                    break
                update += 1
                if self.buffer.eta > 0 and update < self.settings.max_updates:
                    # groups finishing during this update are fresh enough for the next
                    upcoming = NextBatch(self.buffer, self._rows_of, self.learner.version + 1)
                self._update(update, batch)
        finally:
            if upcoming is not None:   # being assembled when the trainer stopped
                upcoming.cancel()
            self._stop.set()
            self.buffer.close()
            self._wake_collector()
            collector.join(timeout=120)
            if collector.is_alive():
                logging.warning("the collector did not stop within 120 s")
        return update

    def _await(self, upcoming: NextBatch, round_name: str) -> Batch | None:
        """The next batch, once complete; None (its groups given back) once stop() is called
        here or another process stops before this round."""
        started = last_report = time.monotonic()
        starved = not upcoming.complete
        while not (self.stopping or distributed.flag_raised(round_name)):
            if self._collector_error is not None:
                upcoming.cancel()
                error = self._collector_error
                raise RuntimeError(f"the collector failed: {type(error).__name__}: {error}") from error
            batch = upcoming.wait(timeout=1.0)
            if batch is not None:
                return dataclasses.replace(batch, waited=time.monotonic() - started if starved else 0.0)
            if time.monotonic() - last_report > self.settings.wait_report_s:
                logging.warning("learner waiting for groups: %s", self.buffer.snapshot())
                last_report = time.monotonic()
        upcoming.cancel()
        return None

    def _rows_of(self, groups: list[Group]) -> list:
        """Advantages and step rows of some groups (advantages are per group, so groups can
        be turned into rows one at a time)."""
        trajectories = [t for g in groups for t in g.members]
        s = self.settings
        advantages = episode_advantages(trajectories, kind=s.kind, normalizer=s.normalizer, k=s.k, reward=s.reward)
        return step_rows(trajectories, advantages, self.store, self.processor)

    def _update(self, update: int, batch: Batch) -> None:
        """Train on a batch, publish the new version, free the batch's screenshots."""
        self.buffer.pace(starved=batch.waited > 0)
        started = time.perf_counter()
        gathered_before = distributed.gathered_bytes()
        measurements = self.learner.update(batch.rows)   # this process's rows: each feeds its own (learner.py)
        # what this process received from the others to feed this update (0 with one process)
        measurements["gathered_bytes"] = distributed.gathered_bytes() - gathered_before
        self.engine.publish(self.learner.params, self.learner.version)
        self.buffer.set_version(self.learner.version)
        self._wake_collector()
        self.busy["learner_seconds"] += time.perf_counter() - started
        measurements["batch_wait_seconds"] = batch.waited
        self.on_update(update, measurements, batch.groups)
        for group in batch.groups:   # the learner is done with these screenshots
            self.store.free(group.screenshot_keys())

    # ------------------------------------------------------------ the collector (asyncio thread)

    def _collect_thread(self) -> None:
        try:
            asyncio.run(self._collect())
        except BaseException as error:  # surfaced by the learner loop
            logging.exception("collector failed")
            self._collector_error = error

    def _wake_collector(self) -> None:
        if self._loop is not None and self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:   # the loop already closed
                pass

    def _default_pool(self):
        """The pool of browser.driver (Chromium or the browser-free local web)."""
        return make_pool(self.environment, store=self.store, settings=self.episode, pool=self.pool_settings)

    async def _collect(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        episodes: set[asyncio.Task] = set()
        pool = self._make_pool()
        round_version = self.buffer.version
        await pool.__aenter__()
        try:
            while not self.stopping:
                if (self.settings.relaunch_browsers_each_round and self.buffer.version != round_version
                        and not episodes):   # a new synchronous round: fresh browsers, as WebGym does
                    await pool.__aexit__(None, None, None)
                    pool = self._make_pool()
                    await pool.__aenter__()
                    round_version = self.buffer.version
                while (group := self.buffer.admit()) is not None:
                    for member in range(group.size):
                        task = asyncio.create_task(self._episode(pool, group, member))
                        episodes.add(task)
                        task.add_done_callback(episodes.discard)
                self._wake.clear()
                try:   # woken by a finished episode or a new version; the timeout is a safety net
                    await asyncio.wait_for(self._wake.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    pass
        finally:
            # in-flight episodes are lost on stop (docs/architecture.md#reliability-and-security)
            for task in episodes:
                task.cancel()
            await asyncio.gather(*episodes, return_exceptions=True)
            await pool.__aexit__(None, None, None)

    async def _episode(self, pool, group: Group, member: int) -> None:
        episode_id = f"{group.group_id}-{member}"
        try:
            trajectory = await pool.run(group.task, self.policy, episode_id=episode_id, group_id=group.group_id)
        except asyncio.CancelledError:
            raise
        except PolicyFailure as failure:   # every episode would fail so: the learner loop stops the run with it
            self._collector_error = failure
            return
        except Exception as error:   # never lose a group member silently: it counts as crashed
            logging.exception("episode %s failed outside the episode loop", episode_id)
            trajectory = Trajectory(task=group.task, steps=[], outcome="crashed", reward=None, episode_id=episode_id,
                                    group_id=group.group_id, error=f"{type(error).__name__}: {error}")
        self.buffer.add(trajectory)
        self._wake.set()
