"""The evaluation summary (eval.json) and its printouts: no data is null, never 0%."""

import json

import pytest

from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.runtime.evaluate import format_table, summarize
from asyncwebrl.runtime.rundir import RunDirectory
from asyncwebrl.runtime.training import closing_summary

DIFFICULTY = {"easy": 2, "medium": 5, "hard": 8}


def episode(level: str, outcome: str = "answered", reward: float | None = 0.0, index: int = 0) -> Trajectory:
    task = Task(task_id=f"{level}-{index}", task_name="find it", website="http://awr.local/x/",
                difficulty=DIFFICULTY[level], subdomain=f"family-{level}")
    steps = [Step(index=0, url=task.website, response="answer(x)", action={"name": "answer"})]
    return Trajectory(task=task, steps=steps, outcome=outcome, reward=reward)


def test_an_evaluation_with_nothing_scored_reports_null_not_zero():
    """Every episode crashed, was blocked, or has no verdict: there is no success rate."""
    summary = summarize([episode("easy", "crashed", None), episode("medium", "blocked", None),
                         episode("hard", "answered", None)])
    assert (summary["episodes"], summary["crashed"], summary["blocked"], summary["unknown_reward"]) == (0, 1, 1, 1)
    assert summary["success_rate"] is None
    assert all(row == {"episodes": 0, "success_rate": None} for row in summary["by_difficulty"].values())
    assert json.loads(json.dumps(summary))["success_rate"] is None   # null in eval.json


def test_an_empty_level_is_null_and_an_all_failed_one_is_zero():
    summary = summarize([episode("easy", reward=1.0), episode("easy", reward=0.0, index=1),
                         episode("medium", reward=0.0), episode("medium", "limit", 0.0, index=1)])
    levels = summary["by_difficulty"]
    assert levels["easy"] == {"episodes": 2, "success_rate": 0.5}
    assert levels["medium"] == {"episodes": 2, "success_rate": 0.0}     # a real 0%
    assert levels["hard"] == {"episodes": 0, "success_rate": None}      # no hard task was run
    assert summary["success_rate"] == 0.25
    assert summarize([episode("hard")])["success_rate"] == 0.0


def table_rows(table: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in table.splitlines()}


def test_the_table_prints_a_dash_where_nothing_was_scored():
    rows = table_rows(format_table(summarize([episode("medium", reward=0.0)]), families=True))
    assert rows["easy"] == ["0", "-"] and rows["hard"] == ["0", "-"]
    assert rows["medium"] == ["1", "0.0%"] and rows["family-medium"] == ["1", "0.0%"]
    assert rows["overall"] == ["1", "0.0%"]
    assert table_rows(format_table(summarize([episode("easy", "crashed", None)])))["overall"] == ["0", "-"]


@pytest.mark.parametrize("skipped_before", [False, True])
def test_the_closing_summary_shows_a_dash_for_missing_rates(tmp_path, capsys, skipped_before):
    """Before -> after by level, where one evaluation had no scored hard episode (or the
    first evaluation did not run): a dash, and null in summary.json."""
    before = None if skipped_before else summarize([episode("easy", reward=0.0), episode("hard", "crashed", None)])
    after = summarize([episode("easy", reward=1.0), episode("hard", reward=0.0)])
    run = RunDirectory(str(tmp_path), tensorboard=False)
    summary = closing_summary(run, before, after)
    run.close()
    printed = capsys.readouterr().out
    assert summary["success_before"] == (None if skipped_before else 0.0)
    assert f"easy: {'-' if skipped_before else 0.0} -> 1.0" in printed
    assert "hard: - -> 0.0" in printed and "medium: - -> -" in printed
    assert f"before -> after RL: {'-' if skipped_before else 0.0} -> 0.5" in printed
    assert json.loads(json.dumps(summary))["by_difficulty_after"]["medium"]["success_rate"] is None
