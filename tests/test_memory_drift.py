"""Memory-drift metrics (docs/algorithm.md#memory-drift) on hand-written episodes with known answers."""

import json

import pytest

from asyncwebrl.analysis.memory_drift import (episode_record, episodes_from_run, is_generic_key,
                                              memory_drift_metrics)
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.response import format_response

TASK = "Find the price of the blue laptop and the seller's rating"


@pytest.mark.parametrize("key, generic", [
    ("laptop_price", False), ("sellerRating", False), ("blue laptops", False),   # content words of the task
    ("task_1", True), ("current_step", True), ("search_query", True), ("currentStep", True), ("step 3", True),
    ("user_goal", True),            # not on the list, but nothing in common with the task
    ("page_number", True),          # only stop words ("page", "number")
    ("42", True), ("", True),
])
def test_generic_keys_follow_the_list_and_the_content_word_rule(key, generic):
    assert is_generic_key(key, TASK) is generic


def episode(memories, success=False, outcome="answered", tokens=None):
    return {"task": TASK, "success": success, "outcome": outcome, "memories": memories,
            "response_tokens": tokens or [10] * len(memories)}


def test_metrics_on_hand_counted_episodes():
    stable = episode([{"laptop_price": "$900"}, {"laptop_price": "$900"}, {"laptop_price": "$900"}],
                     success=True, tokens=[10, 20, 30])
    drifting = episode([{"laptop_price": ""}, {"laptop_price": "", "task_1": "x"},
                        {"laptop_price": "", "task_1": "x", "current_step": 3}, None], outcome="limit")
    single = episode([{"seller_rating": "4.5"}])
    m = memory_drift_metrics([stable, drifting, single])
    # distinct keys: stable {laptop_price}, drifting {laptop_price, task_1, current_step}, single {seller_rating}
    assert m["distinct_keys"] == 5 and m["generic_key_share"] == pytest.approx(2 / 5)
    # 2+ steps with readable first and last memories: only stable (drifting ends unreadable)
    assert m["key_persistence"] == pytest.approx(1.0)
    # adjacent readable pairs: stable 2 equal; drifting 2 (the pair into the unread step is left out), none equal
    assert m["adjacent_unchanged"] == pytest.approx(2 / 4)
    assert m["unreadable_memory_share"] == pytest.approx(1 / 8)
    assert m["keys_per_step"] == pytest.approx([1.0, 1.5, 2.0, 0.0])
    assert m["keys_per_step_mean"] == pytest.approx((1 + 1 + 1 + 1 + 2 + 3 + 0 + 1) / 8)
    assert m["steps_by_outcome"] == {"success": 3.0, "failure": 1.0, "limit": 4.0}
    assert m["response_tokens_per_step"] == pytest.approx((10 + 20 + 30 + 10 * 4 + 10) / 8)


def test_a_model_without_readable_memory_is_not_counted_as_stable():
    m = memory_drift_metrics([episode([None, None, None]), episode([None, {"laptop_price": ""}])])
    assert m["key_persistence"] is None and m["adjacent_unchanged"] is None
    assert m["unreadable_memory_share"] == pytest.approx(4 / 5)


def test_no_episodes_gives_no_numbers_rather_than_zeros():
    m = memory_drift_metrics([])
    assert m["generic_key_share"] is None and m["key_persistence"] is None and m["adjacent_unchanged"] is None
    assert m["keys_per_step"] == [] and m["steps_by_outcome"] == {"success": None, "failure": None, "limit": None}


def test_trajectories_become_records_through_the_response_parser(tmp_path):
    task = Task(task_id="t", task_name=TASK, website="http://x")
    steps = [Step(index=i, url="u", action={}, response=format_response(
        memory, {}, "find", "Look.", {"action": "wait", "time": 1}, "memory"), response_ids=[1] * (i + 5))
        for i, memory in enumerate([{"laptop_price": "$9"}, {"laptop_price": "$9", "step": 2}])]
    steps.append(Step(index=2, url="u", action={}, response="garbage without a memory"))
    record = episode_record(Trajectory(task=task, steps=steps, outcome="limit", reward=0.0))
    assert record["memories"] == [{"laptop_price": "$9"}, {"laptop_price": "$9", "step": 2}, None]
    assert record["response_tokens"] == [5, 6, 0] and record["outcome"] == "limit" and not record["success"]
    (tmp_path / "episodes.jsonl").write_text(json.dumps({"update": 1, **record}) + "\n")
    assert episodes_from_run(str(tmp_path))[0]["memories"][1] == {"laptop_price": "$9", "step": 2}
    with pytest.raises(FileNotFoundError, match="training run"):
        episodes_from_run(str(tmp_path / "nothing"))
