"""Admission, dynamic sampling and staleness rejection (runtime/groups.py), and the
learner's assembly of the next batch (runtime/orchestrator.py), as plain logic."""

import collections
import threading
import time

import numpy as np
import pytest

from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.runtime.groups import GroupBuffer, GroupCounts, LearnableTaskSampler, TaskSampler, make_task_sampler
from asyncwebrl.runtime.orchestrator import NextBatch

TASKS = [Task(task_id=f"t{i}", task_name="x", website="http://a/", difficulty=d) for i, d in
         enumerate([1, 2, 3, 3, 5, 6, 8])]


def finished(group, member, reward, version=0, outcome="answered", credit=None):
    # token fields as the sampler makes them: numpy arrays (whose == is elementwise)
    steps = [Step(index=0, url="u", response="r", action={}, screenshot_key=f"{group.group_id}/{member}",
                  response_ids=np.array([1, 2], np.int32), versions=np.array([version, version], np.int32))]
    return Trajectory(task=group.task, steps=steps, outcome=outcome, reward=reward, credit=credit,
                      episode_id=f"{group.group_id}-{member}", group_id=group.group_id)


def make_buffer(released, **overrides):
    settings = dict(group_size=2, groups_per_batch=2, eta=0, max_running=10, sampler=TaskSampler(TASKS, seed=1),
                    release=released.extend, dynamic_sampling=True, pacing=False)
    return GroupBuffer(**{**settings, **overrides})


def complete(buffer, group, rewards, version=0):
    for member, reward in enumerate(rewards):
        buffer.add(finished(group, member, reward, version))


def test_task_sampler_is_uniform_over_levels_and_resumes_in_sequence():
    sampler = TaskSampler(TASKS, seed=3)
    drawn = [sampler.draw() for _ in range(3000)]
    levels = collections.Counter(t.level for t in drawn)
    assert all(900 < levels[level] < 1100 for level in ("easy", "medium", "hard")), levels
    resumed = TaskSampler(TASKS, seed=3, position=1000)
    assert [resumed.draw().task_id for _ in range(50)] == [t.task_id for t in drawn[1000:1050]]


def templated(template: str, count: int, difficulty: int = 1) -> list[Task]:
    return [Task(task_id=f"{template}/{i}", task_name="x", website="http://a/", difficulty=difficulty,
                 local={"template": template}) for i in range(count)]


def test_the_learnable_sampler_draws_templates_whose_groups_disagree_and_keeps_trying_the_rest():
    """Three easy templates: one always solved, one never, one half the time (48 episodes
    each seen). Groups of 8 of the mixed one are almost surely informative, of the other two
    almost never: it gets most draws, the settled ones a few each (never none)."""
    tasks = templated("solved", 30) + templated("unsolved", 30) + templated("mixed", 5)
    sampler = LearnableTaskSampler(tasks, seed=0, group_size=8)
    assert 0.6 < sampler.mixed_group_chance("mixed") < 0.62   # untried: worth trying
    for _ in range(6):
        sampler.observe(tasks[0], [True] * 8)
        sampler.observe(tasks[30], [False] * 8)
        sampler.observe(tasks[60], [True, False] * 4)
    chance = {name: sampler.mixed_group_chance(name) for name in ("solved", "unsolved", "mixed")}
    assert chance["mixed"] > 0.98 and 0.05 < chance["solved"] < 0.1, chance
    assert chance["solved"] == pytest.approx(chance["unsolved"])
    drawn = collections.Counter(sampler.draw().template for _ in range(3000))
    assert drawn["mixed"] > 2400 and drawn["solved"] > 30 and drawn["unsolved"] > 30, drawn
    # uniform draws would give the 5 mixed tasks 5/65 of the draws
    assert collections.Counter(t.template for t in (TaskSampler(tasks, 0).draw() for _ in range(3000)))["mixed"] < 400


def test_the_learnable_sampler_resumes_from_its_checkpointed_state():
    tasks = templated("a", 4) + templated("b", 4) + templated("c", 4, difficulty=8)
    sampler = make_task_sampler("learnable", tasks, seed=5, state={}, group_size=4)
    for _ in range(20):
        task = sampler.draw()
        sampler.observe(task, [task.template == "a"] * 3 + [False])
    resumed = make_task_sampler("learnable", tasks, seed=5, state=sampler.state(), group_size=4)
    assert [resumed.draw().task_id for _ in range(30)] == [sampler.draw().task_id for _ in range(30)]
    assert make_task_sampler("uniform", tasks, seed=5, state={"task_position": 3}, group_size=4).position == 3
    with pytest.raises(ValueError, match="rl.task_sampling"):
        make_task_sampler("curious", tasks, seed=5, state={}, group_size=4)


def test_every_finished_group_reaches_the_sampler_trained_or_dropped():
    released, seen = [], []

    class Recording(TaskSampler):
        def observe(self, task, successes):
            seen.append((task.task_id, successes))
    buffer = make_buffer(released, sampler=Recording(TASKS, seed=1), dynamic_sampling=True)
    first, second = buffer.admit(), buffer.admit()
    complete(buffer, first, [1.0, 0.0])
    complete(buffer, second, [0.0, 0.0])   # uniform: dropped, and still observed
    assert seen == [(first.task.task_id, [True, False]), (second.task.task_id, [False, False])]
    assert buffer.counts.dropped_uniform == 1


def test_synchronous_gate_admits_one_batch_per_version():
    released = []
    buffer = make_buffer(released, eta=0)
    first = [buffer.admit(), buffer.admit()]
    assert all(first) and buffer.admit() is None          # (eta + v + 1) * B = 2 groups at v = 0
    for group in first:
        complete(buffer, group, [1.0, 0.0])
    assert buffer.admit() is None                          # accepted + running = 2: closed while learning
    taken = buffer.take(2, timeout=1)
    assert [g.group_id for g in taken] == [g.group_id for g in first]
    assert buffer.admit() is None                          # still closed until the new version is out
    buffer.set_version(1)
    assert buffer.admit() is not None and buffer.admit() is not None and buffer.admit() is None


def test_eta_allows_groups_ahead_of_the_learner_and_max_running_caps_them():
    buffer = make_buffer([], eta=2, max_running=4)
    admitted = [buffer.admit() for _ in range(6)]
    assert sum(g is not None for g in admitted) == 4       # max_running, before (2 + 0 + 1) * 2 = 6
    for group in admitted[:4]:
        complete(buffer, group, [1.0, 0.0])
    assert buffer.admit() is not None and buffer.admit() is not None and buffer.admit() is None


def test_pacing_shrinks_the_lead_while_groups_wait_and_grows_it_when_the_learner_starves():
    buffer = make_buffer([], eta=2, max_running=10, pacing=True)    # B = 2: lead within [2, 6]
    groups = [buffer.admit() for _ in range(6)]
    assert all(groups) and buffer.admit() is None and buffer.lead == 6
    for group in groups:
        complete(buffer, group, [1.0, 0.0])
    buffer.take(2, timeout=1)
    buffer.pace(starved=False)          # 4 complete groups wait out this update: 2 too many
    assert buffer.lead == 4
    assert buffer.admit() is None       # 4 waiting fill the lead, though the eta gate has room
    buffer.take(2, timeout=1)
    buffer.set_version(1)
    buffer.pace(starved=False)          # 2 still wait
    assert buffer.lead == 3
    assert buffer.admit() is not None and buffer.admit() is None
    buffer.take(2, timeout=1)
    buffer.set_version(2)
    buffer.pace(starved=False)          # nothing waits: the lead holds
    assert buffer.lead == 3
    for _ in range(5):
        buffer.pace(starved=True)
    assert buffer.lead == 6             # never above the eta gate's (eta + 1) * B
    for _ in range(3):
        buffer.ready.extend(groups)
        buffer.pace(starved=False)
        buffer.ready.clear()
    assert buffer.lead == 2             # never below one batch
    unpaced = make_buffer([], eta=2, max_running=10)
    unpaced.ready.extend(groups)
    unpaced.pace(starved=False)
    assert unpaced.lead == 6


def test_uniform_groups_are_dropped_and_their_screenshots_released():
    released = []
    buffer = make_buffer(released)
    group = buffer.admit()
    complete(buffer, group, [0.0, 0.0])
    assert buffer.counts.dropped_uniform == 1 and not buffer.ready
    assert sorted(released) == [f"{group.group_id}/0", f"{group.group_id}/1"]
    assert buffer.admit() is not None and buffer.admit() is not None  # the dropped group gave its place back


def test_uniform_groups_are_kept_without_dynamic_sampling():
    buffer = make_buffer([], dynamic_sampling=False)
    complete(buffer, buffer.admit(), [0.0, 0.0])
    assert len(buffer.ready) == 1 and buffer.counts.dropped_uniform == 0


def test_crashed_and_unknown_members_leave_their_group():
    released = []
    buffer = make_buffer(released, group_size=4)
    group = buffer.admit()
    buffer.add(finished(group, 0, 1.0))
    buffer.add(finished(group, 1, 0.0))
    buffer.add(finished(group, 2, None, outcome="crashed"))
    buffer.add(finished(group, 3, None))                   # judge gave no verdict
    (kept,) = buffer.ready
    assert [t.episode_id for t in kept.members] == [f"{group.group_id}-0", f"{group.group_id}-1"]
    assert sorted(released) == [f"{group.group_id}/2", f"{group.group_id}/3"]
    small = buffer.admit()
    buffer.add(finished(small, 0, 1.0))
    for member in (1, 2, 3):
        buffer.add(finished(small, member, None, outcome="crashed"))
    assert buffer.counts.dropped_too_few == 1 and len(buffer.ready) == 1
    assert buffer.counts.episodes_crashed == 4 and buffer.counts.episodes_unknown == 1


def test_groups_older_than_eta_are_rejected_at_consumption():
    released = []
    buffer = make_buffer(released, eta=1, groups_per_batch=1)
    old, fresh = buffer.admit(), buffer.admit()
    complete(buffer, old, [1.0, 0.0], version=0)
    complete(buffer, fresh, [1.0, 0.0], version=1)
    buffer.set_version(2)                                   # old: 2 - 0 > eta; fresh: 2 - 1 = eta
    (taken,) = buffer.take(1, timeout=1)
    assert taken.group_id == fresh.group_id
    assert buffer.counts.rejected_stale == 1 and sorted(released) == [f"{old.group_id}/0", f"{old.group_id}/1"]
    assert buffer.accepted == 1                              # the rejected group gave its place back


def test_taking_ahead_checks_staleness_at_the_version_of_training():
    """The next batch is assembled during an update: a group fresh now but
    stale at the version it will be trained at is rejected, never trained at eta + 1."""
    released = []
    buffer = make_buffer(released, eta=1, groups_per_batch=1)
    old, fresh = buffer.admit(), buffer.admit()
    complete(buffer, old, [1.0, 0.0], version=0)
    complete(buffer, fresh, [1.0, 0.0], version=1)
    buffer.set_version(1)                                   # now: both within eta
    (taken,) = buffer.take(1, timeout=1, version=2)          # trained at 2: old is 2 versions behind
    assert taken.group_id == fresh.group_id and buffer.counts.rejected_stale == 1


def test_groups_given_back_leave_the_counts_as_if_never_taken():
    released = []
    buffer = make_buffer(released, eta=1, groups_per_batch=1)
    group = buffer.admit()
    complete(buffer, group, [1.0, 0.0])
    accepted, consumed = buffer.accepted, buffer.counts.consumed
    taken = buffer.take(1, timeout=1)
    assert buffer.counts.consumed == consumed + 1
    buffer.give_back(taken)                                 # the trainer stopped before training them
    assert buffer.counts.consumed == consumed and buffer.accepted == accepted - 1
    assert sorted(released) == [f"{group.group_id}/0", f"{group.group_id}/1"]


def test_next_batch_builds_rows_group_by_group_and_gives_back_what_it_took_when_cancelled():
    released = []
    buffer = make_buffer(released, eta=1, groups_per_batch=2)
    built = []
    def rows_of(groups):
        built.append([g.group_id for g in groups])
        return [f"row of {g.group_id}" for g in groups]

    upcoming = NextBatch(buffer, rows_of, version=1)               # an update (0 -> 1) starts
    first, second = buffer.admit(), buffer.admit()
    complete(buffer, first, [1.0, 0.0])                            # one group finishes meanwhile
    assert upcoming.wait(timeout=0.5) is None                      # not a batch yet ...
    assert built == [[first.group_id]]                             # ... but its rows are built
    buffer.set_version(1)                                          # the update ends
    complete(buffer, second, [1.0, 0.0])
    batch = upcoming.wait(timeout=10)
    assert [g.group_id for g in batch.groups] == [first.group_id, second.group_id]
    assert batch.rows == [f"row of {first.group_id}", f"row of {second.group_id}"] and upcoming.complete

    consumed, accepted = buffer.counts.consumed, buffer.accepted
    upcoming = NextBatch(buffer, rows_of, version=1)
    third = buffer.admit()
    complete(buffer, third, [1.0, 0.0])
    deadline = time.monotonic() + 10
    while buffer.counts.consumed == consumed and time.monotonic() < deadline:
        time.sleep(0.01)
    upcoming.cancel()                                              # the trainer stops
    assert (buffer.counts.consumed, buffer.accepted) == (consumed, accepted)
    assert sorted(released) == [f"{third.group_id}/0", f"{third.group_id}/1"]


def test_take_waits_for_a_batch_and_close_releases_the_waiter():
    buffer = make_buffer([])
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("groups", buffer.take(2)))
    waiter.start()
    complete(buffer, buffer.admit(), [1.0, 0.0])
    waiter.join(timeout=0.2)
    assert waiter.is_alive()                                 # one group is not a batch of two
    buffer.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive() and result["groups"] is None
    assert buffer.admit() is None


def test_a_restored_buffer_counts_consumed_groups_as_accepted():
    counts = GroupCounts(admitted=40, consumed=10)
    buffer = make_buffer([], eta=0, groups_per_batch=2, counts=counts, version=5)
    assert buffer.accepted == 10                            # (0 + 5 + 1) * 2 - 10 = 2 places, no burst
    assert buffer.admit().group_id == "g0000040" and buffer.admit() is not None and buffer.admit() is None


def test_invalid_settings_fail_clearly():
    with pytest.raises(ValueError, match="at least 2"):
        make_buffer([], group_size=1)
    with pytest.raises(ValueError, match="at least one task"):
        TaskSampler([], seed=0)


def test_a_group_of_text_only_episodes_with_a_crashed_member_completes():
    """Text observations: steps without screenshot keys, token fields as arrays, so two members'
    steps differ only in arrays; finding who leaves the group must not compare them by value
    (an array's == is elementwise: `in` raised and stopped the embedded default's training)."""
    released = []
    buffer = make_buffer(released, group_size=3)
    group = buffer.admit()
    for member, (reward, outcome) in enumerate([(1.0, "answered"), (0.0, "answered"), (None, "crashed")]):
        step = Step(index=0, url="u", response="r", action={}, response_ids=np.array([1, 2], np.int32),
                    versions=np.array([0, 0], np.int32))
        buffer.add(Trajectory(task=group.task, steps=[step], outcome=outcome, reward=reward,
                              episode_id=f"{group.group_id}-{member}", group_id=group.group_id))
    [ready] = buffer.take(1, timeout=1.0)
    assert [t.reward for t in ready.members] == [1.0, 0.0]


def test_with_partial_credit_a_group_failing_alike_is_informative_by_its_facts():
    """rl.reward=facts: two failures with 1 of 2 and 0 of 2 facts right are a group with a
    signal (kept, advantages of opposite signs); under success they are uniform (dropped).
    Equal credit is uniform under both."""
    from asyncwebrl.runtime.rows import episode_advantages

    for reward, kept in (("success", 0), ("facts", 1)):
        buffer = make_buffer([], reward=reward)
        group = buffer.admit()
        buffer.add(finished(group, 0, 0.0, credit=0.5))
        buffer.add(finished(group, 1, 0.0, credit=0.0))
        other = buffer.admit()
        buffer.add(finished(other, 0, 0.0, credit=0.5))
        buffer.add(finished(other, 1, 0.0, credit=0.5))
        assert (len(buffer.ready), buffer.counts.dropped_uniform) == (kept, 2 - kept), reward
    members = buffer.ready[0].members
    advantages = episode_advantages(members, kind="grpo", normalizer="const", k=10.0, reward="facts")
    assert advantages[0] > 0 > advantages[1]
    assert np.all(episode_advantages(members, kind="grpo", normalizer="const", k=10.0) == 0)
