"""Task groups from admission to the learner (docs/algorithm.md#admission-and-staleness):
the task sampler, the staleness gate, and the group buffer with dynamic sampling.

Counted in groups (one task, G episodes):
    running   groups admitted whose episodes are not all finished
    accepted  groups that passed the buffer's filters and went to (or wait for) the learner
A new group may start only while
    running < max_running  and  accepted + running < (eta + v + 1) * B
(v = the learner's version, B = groups per update). A waiting group counts as accepted,
so full buffers hold admission back; a group rejected at consumption for staleness
gives its place back. eta = 0 is synchronous RL: admission pauses while the learner
updates, because the B groups of version v fill the gate until v + 1 is published.

Pacing (optional) keeps admission from running ahead of the learner's demand: the gate
allows up to (eta + 1) * B groups in flight, and when the learner is the bottleneck they
all finish early and wait, each update making them a version older. So the groups in
flight (running + waiting) are also capped by `lead`, which adapts once per update:
down while complete groups are still waiting when the learner starts an update (they
will age a whole update), up when the learner had to wait for its batch. It stays
within [B, (eta + 1) * B].

Everything here is plain Python under one lock: the collector (asyncio thread) adds
trajectories, the learner thread takes groups.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import threading
import time

import numpy as np

from asyncwebrl.records import LEVELS, Task, Trajectory, trained_reward


class TaskSampler:
    """Uniform over difficulty levels, then uniform within the level (WebGym's finding:
    uniform over difficulties works best). Draw i depends only on (seed, i), so a resumed
    run continues the same sequence from its saved position."""

    def __init__(self, tasks: list[Task], seed: int, position: int = 0):
        if not tasks:
            raise ValueError("the task sampler needs at least one task")
        by_level = collections.defaultdict(list)
        for task in tasks:
            by_level[task.level].append(task)
        self.levels = [by_level[level] for level in LEVELS if by_level[level]]
        self.seed = seed
        self.position = position

    def draw(self) -> Task:
        rng = random.Random(f"{self.seed}:{self.position}")
        self.position += 1
        return self._within_level(rng, rng.randrange(len(self.levels)))   # = rng.choice(self.levels)

    def _within_level(self, rng: random.Random, level: int) -> Task:
        return rng.choice(self.levels[level])

    def observe(self, task: Task, successes: list[bool]) -> None:
        """The scored episodes of a finished group of `task` (every group, trained or dropped)."""

    def state(self) -> dict:
        """What a checkpoint keeps to resume the same sequence (restored by make_task_sampler)."""
        return {"task_position": self.position}


class LearnableTaskSampler(TaskSampler):
    """Uniform over difficulty levels, then over the level's templates in proportion to the
    chance that a group of G episodes of that template has mixed outcomes (the only groups a
    group-relative advantage learns from), then uniform within the template.

    A template whose episodes succeeded s times and failed f times has success p ~ Beta(s + 1/2,
    f + 1/2) (Jeffreys), and a group of G is mixed with probability 1 - E[p^G] - E[(1-p)^G].
    A template not yet tried scores 0.61 for G = 8, so it is tried early; one that always
    fails (or always succeeds) sinks towards 0 but is still drawn now and then, so it comes
    back when the policy starts to succeed on it. With a warm start whose outcome is nearly
    fixed per task, uniform draws leave three groups in four uniform (BENCHMARKS.md "RL from
    the shipped warm start at GPU scale"); this spends the episodes where there is signal.
    The outcomes are part of the checkpoint, so a resumed run draws the same sequence."""

    def __init__(self, tasks: list[Task], seed: int, position: int = 0, *, group_size: int,
                 outcomes: dict[str, list[int]] | None = None):
        super().__init__(tasks, seed, position)
        self.group_size = group_size
        self.outcomes = {template: list(counts) for template, counts in (outcomes or {}).items()}  # [s, f]
        self.by_template = [_grouped_by_template(level) for level in self.levels]

    def _within_level(self, rng: random.Random, level: int) -> Task:
        templates = self.by_template[level]
        names = sorted(templates)
        weights = [self.mixed_group_chance(name) for name in names]
        return rng.choice(templates[rng.choices(names, weights=weights)[0]])

    def mixed_group_chance(self, template: str) -> float:
        successes, failures = self.outcomes.get(template, (0, 0))
        a, b = successes + 0.5, failures + 0.5
        all_succeed = all_fail = 1.0
        for i in range(self.group_size):   # E[p^G] and E[(1-p)^G] under Beta(a, b)
            all_succeed *= (a + i) / (a + b + i)
            all_fail *= (b + i) / (a + b + i)
        return max(1.0 - all_succeed - all_fail, 0.0)

    def observe(self, task: Task, successes: list[bool]) -> None:
        counts = self.outcomes.setdefault(task.template, [0, 0])
        counts[0] += sum(successes)
        counts[1] += len(successes) - sum(successes)

    def state(self) -> dict:
        return {"task_position": self.position, "task_outcomes": {t: list(c) for t, c in self.outcomes.items()}}


def _grouped_by_template(tasks: list[Task]) -> dict[str, list[Task]]:
    grouped = collections.defaultdict(list)
    for task in tasks:
        grouped[task.template].append(task)
    return dict(grouped)


TASK_SAMPLING = ("uniform", "learnable")   # rl.task_sampling


def make_task_sampler(kind: str, tasks: list[Task], seed: int, state: dict, group_size: int) -> TaskSampler:
    """rl.task_sampling's sampler, resumed from a checkpoint's `state` (TaskSampler.state())."""
    if kind == "uniform":
        return TaskSampler(tasks, seed, position=state.get("task_position", 0))
    if kind == "learnable":
        return LearnableTaskSampler(tasks, seed, position=state.get("task_position", 0), group_size=group_size,
                                    outcomes=state.get("task_outcomes"))
    raise ValueError(f"rl.task_sampling must be one of {TASK_SAMPLING}, got {kind!r}")


@dataclasses.dataclass
class Group:
    group_id: str
    task: Task
    size: int
    members: list[Trajectory] = dataclasses.field(default_factory=list)

    def rewards(self, kind: str = "success") -> list[float]:
        """Its members' trained rewards (rl.reward: records.TRAINED_REWARDS)."""
        return [trained_reward(t, kind) for t in self.members]

    def min_version(self) -> int:
        """The oldest weights that wrote any of its tokens (-1 when no tokens carry one)."""
        oldest = [int(np.min(s.versions)) for t in self.members for s in t.steps if len(s.versions)]
        return min(oldest) if oldest else -1

    def screenshot_keys(self) -> list[str]:
        return [k for t in self.members for k in t.screenshot_keys()]


@dataclasses.dataclass
class GroupCounts:
    """Why groups and episodes left the pipeline (reported in metrics, kept across resume)."""
    admitted: int = 0
    consumed: int = 0
    dropped_uniform: int = 0        # zero reward variance: no signal (dynamic sampling)
    dropped_too_few: int = 0        # fewer than 2 members with a known reward
    rejected_stale: int = 0         # older than eta at consumption
    episodes: int = 0
    episodes_crashed: int = 0
    episodes_unknown: int = 0
    successes: int = 0


class GroupBuffer:
    """Admission, completion and hand-over of task groups.

    Dynamic sampling (docs/algorithm.md#dynamic-sampling) drops groups whose rewards are all
    equal; switched off, they reach the learner with advantage 0 (tests and the sync/async
    benchmark use that to keep updates coming from an untrained policy).
    The collector calls `admit()` (None when the gate is closed) and `add(trajectory)`;
    the learner calls `take(count)` and `set_version(v)`. `release` receives the
    screenshot keys of every group that leaves without training, so the store frees them."""

    def __init__(self, *, group_size: int, groups_per_batch: int, eta: int, max_running: int, dynamic_sampling: bool,
                 pacing: bool, sampler: TaskSampler, release=lambda keys: None, version: int = 0,
                 counts: GroupCounts | None = None, reward: str = "success"):
        if group_size < 2:
            raise ValueError("a group needs at least 2 episodes (the advantage is relative to the group)")
        if groups_per_batch < 1 or eta < 0 or max_running < 1:
            raise ValueError("groups_per_batch and max_running must be >= 1 and eta >= 0")
        self.group_size, self.groups_per_batch, self.eta, self.max_running = group_size, groups_per_batch, eta, max_running
        self.sampler = sampler
        self.release = release
        self.dynamic_sampling = dynamic_sampling
        self.reward = reward   # what "all equal" compares (rl.reward)
        self.pacing = pacing
        self.max_lead = (eta + 1) * groups_per_batch
        self.lead = self.max_lead   # groups in flight allowed by pacing (running + waiting)
        self.version = version
        self.counts = counts or GroupCounts()
        # after a restart nothing is running or waiting: accepted = what the learner consumed
        self.accepted = self.counts.consumed
        self.running: dict[str, Group] = {}
        self.ready: collections.deque[Group] = collections.deque()
        self._lock = threading.Condition()
        self._closed = False

    # ------------------------------------------------------------ the collector's side

    def gate_open(self) -> bool:
        with self._lock:
            return self._gate_open()

    def _gate_open(self) -> bool:
        limit = (self.eta + self.version + 1) * self.groups_per_batch
        return (len(self.running) < self.max_running and self.accepted + len(self.running) < limit
                and len(self.running) + len(self.ready) < self.lead)

    def admit(self) -> Group | None:
        """A new group to run, or None while the staleness gate is closed."""
        with self._lock:
            if self._closed or not self._gate_open():
                return None
            number = self.counts.admitted
            self.counts.admitted += 1
            group = Group(group_id=f"g{number:07d}", task=self.sampler.draw(), size=self.group_size)
            self.running[group.group_id] = group
            return group

    def add(self, trajectory: Trajectory) -> None:
        """One finished episode; completes its group when it is the last."""
        with self._lock:
            group = self.running[trajectory.group_id]
            group.members.append(trajectory)
            counts = self.counts
            counts.episodes += 1
            counts.episodes_crashed += trajectory.outcome == "crashed"
            if trajectory.outcome == "crashed":   # counted and left out of its group: say why
                logging.warning("episode %s crashed: %s", trajectory.episode_id, trajectory.error or "no reason given")
            counts.episodes_unknown += trajectory.reward is None and trajectory.outcome != "crashed"
            counts.successes += trajectory.success
            if len(group.members) < group.size:
                return
            del self.running[group.group_id]
            self._complete(group)
            self._lock.notify_all()

    def _complete(self, group: Group) -> None:
        # crashed and unknown-reward episodes leave the group; it stays if 2 remain
        scored, leaving = [], []
        for t in group.members:
            known = t.reward is not None and trained_reward(t, self.reward) is not None
            (scored if known and t.outcome != "crashed" else leaving).append(t)
        self.release([k for t in leaving for k in t.screenshot_keys()])
        group.members = scored
        self.sampler.observe(group.task, [t.success for t in scored])
        if len(scored) < 2:
            self.counts.dropped_too_few += 1
            self.release(group.screenshot_keys())
        elif self.dynamic_sampling and np.std(group.rewards(self.reward)) == 0:
            self.counts.dropped_uniform += 1
            self.release(group.screenshot_keys())
        else:
            self.accepted += 1
            self.ready.append(group)

    # ------------------------------------------------------------ the learner's side

    def take(self, count: int, timeout: float | None = None, version: int | None = None) -> list[Group] | None:
        """`count` ready groups no older than eta at `version`, the one they will be trained
        at (default and at least: the current one; the next one when taken during the
        update that makes it), or None on timeout/close. Stale groups met on the way are
        rejected (their keys released)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                self._reject_stale(self.version if version is None else max(version, self.version))
                if len(self.ready) >= count:
                    taken = [self.ready.popleft() for _ in range(count)]
                    self.counts.consumed += count
                    return taken
                remaining = None if deadline is None else deadline - time.monotonic()
                if self._closed or (remaining is not None and remaining <= 0):
                    return None
                self._lock.wait(remaining)

    def pace(self, *, starved: bool) -> None:
        """The learner starts an update (`starved`: it had to wait for the batch): adapt
        `lead`. Each complete group still waiting now will wait out this whole update."""
        if not self.pacing:
            return
        with self._lock:
            if starved:
                self.lead = min(self.lead + 1, self.max_lead)
            elif self.ready:
                self.lead = max(self.lead - max(1, len(self.ready) // 2), self.groups_per_batch)

    def give_back(self, groups: list[Group]) -> None:
        """Groups taken but never trained (the trainer stopped first): they no longer count
        as consumed, so a resumed run's gate (accepted = consumed) stays exact."""
        with self._lock:
            self.counts.consumed -= len(groups)
            self.accepted -= len(groups)
            for group in groups:
                self.release(group.screenshot_keys())

    def _reject_stale(self, version: int) -> None:
        fresh = collections.deque()
        for group in self.ready:
            oldest = group.min_version()   # -1: no generated tokens (a scripted policy), never stale
            if oldest >= 0 and version - oldest > self.eta:
                self.accepted -= 1
                self.counts.rejected_stale += 1
                self.release(group.screenshot_keys())
            else:
                fresh.append(group)
        self.ready = fresh

    def set_version(self, version: int) -> None:
        with self._lock:
            self.version = version
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def snapshot(self) -> dict:
        with self._lock:
            return {"running": len(self.running), "ready": len(self.ready), "accepted": self.accepted,
                    "version": self.version, "lead": self.lead, **dataclasses.asdict(self.counts)}
