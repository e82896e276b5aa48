"""Issue 26's findings 8, 9, 12 and 13: what a hostile model, a broken judge endpoint, a
bad task file or a bad config value does, each caught where it happens (each test failed
before its fix)."""

import asyncio
import json
import time

import pytest

from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.response import parse_response, response_action
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.rundir import RunDirectory
from asyncwebrl.tasks.judge import precheck

TASK = Task(task_id="t1", task_name="Find the price of the blue kettle", website="https://shop.example",
            difficulty=1, evaluator_reference=[{"id": "g", "description": "", "facts": ["price is $24.50"]}])


def seconds(call, *args):
    started = time.perf_counter()
    result = call(*args)
    return time.perf_counter() - started, result


# -- finding 9: parsing is linear-time and bounded; every writer takes any string -------------

@pytest.mark.parametrize("text", ["\n" * 32_000, " \n" * 32_000, "Memory:" + "\n" * 64_000 + "x"])
def test_parsing_a_response_of_many_blank_lines_is_linear(text):
    took, (parsed, action) = seconds(response_action, text, "coordinates")
    assert took < 0.5   # 15.7 s for 32k newlines with `^\s*` under re.M
    assert action.invalid and "tool_call" in action.error


def test_an_overlong_response_is_a_counted_no_op_without_any_regex():
    text = "Memory: {}\n" * 20_000 + '<tool_call>{"name": "computer_use", "arguments": {"action": "go_back"}}</tool_call>'
    took, (parsed, action) = seconds(response_action, text, "coordinates")
    assert took < 0.1 and action.invalid and "too long" in action.error


def test_the_label_only_precheck_runs_after_the_length_cap():
    took, reason = seconds(precheck, TASK, "answer" + " " * 16_000 + "x")
    assert took < 0.05 and reason.startswith("answer too long")   # 4.2 s before the cap came first
    assert precheck(TASK, "Final answer :--") == "not an answer"
    assert precheck(TASK, "The price is $24.50.") is None


def test_a_lone_surrogate_in_a_response_reaches_the_viewer_and_episodes_file(tmp_path):
    store = ScreenshotStore()
    answer = "price \ud800 $24.50"
    step = Step(index=0, url="http://x", action={"name": "answer", "text": answer},
                response=f'Memory: {{"a": "\udfff"}}\n<tool_call>{answer}</tool_call>')
    trajectory = Trajectory(task=TASK, steps=[step], outcome="answered", reward=1.0, answer=answer, episode_id="e1")
    run = RunDirectory(str(tmp_path / "run"), tensorboard=False)
    run.save_trajectory(trajectory, store, "update_000001")   # UnicodeEncodeError before
    run.log_episodes([{"answer": answer}], update=1)
    run.close()
    page = (tmp_path / "run" / "trajectories" / "update_000001" / "index.html").read_text(encoding="utf-8")
    assert "\\ud800" in page and "\\udfff" in page
    with open(tmp_path / "run" / "episodes.jsonl", encoding="utf-8") as f:
        assert json.loads(f.readline())["answer"] == answer   # the escape reads back as the same string
