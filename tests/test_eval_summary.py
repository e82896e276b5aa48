"""The evaluation summary (eval.json), its printouts and the training plot: no data is
null, never 0%; rates carry their 95% Wilson intervals."""

import json

import pytest

from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.analysis.training_plot import plot_training
from asyncwebrl.runtime.evaluate import format_table, summarize, wilson_interval
from asyncwebrl.runtime.rundir import RunDirectory
from asyncwebrl.runtime.training import closing_summary
from configs.default import bare

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
    assert all(row == {"episodes": 0, "success_rate": None, "interval_95": None}
               for row in summary["by_difficulty"].values())
    assert summary["interval_95"] is None
    assert json.loads(json.dumps(summary))["success_rate"] is None   # null in eval.json


def test_an_empty_level_is_null_and_an_all_failed_one_is_zero():
    summary = summarize([episode("easy", reward=1.0), episode("easy", reward=0.0, index=1),
                         episode("medium", reward=0.0), episode("medium", "limit", 0.0, index=1)])
    levels = summary["by_difficulty"]
    assert levels["easy"] == {"episodes": 2, "success_rate": 0.5, "interval_95": [0.0945, 0.9055]}
    assert levels["medium"] == {"episodes": 2, "success_rate": 0.0, "interval_95": [0.0, 0.6576]}  # a real 0%
    assert levels["hard"] == {"episodes": 0, "success_rate": None, "interval_95": None}  # no hard task was run
    assert summary["success_rate"] == 0.25
    assert summarize([episode("hard")])["success_rate"] == 0.0


def test_several_episodes_per_task_give_pass_at_k_and_the_share_of_tasks_that_disagree():
    """eval.samples = 3: task easy-0 succeeds once in three (mixed), easy-1 never, medium-0
    always; pass@3 counts a task once if any episode succeeded. A crashed episode is not scored."""
    episodes = ([episode("easy", reward=r, index=0) for r in (0.0, 1.0, 0.0)]
                + [episode("easy", reward=0.0, index=1) for _ in range(3)]
                + [episode("medium", reward=1.0) for _ in range(2)] + [episode("medium", "crashed", None)])
    summary = summarize(episodes)
    assert summary["success_rate"] == round(3 / 8, 3)     # over the scored episodes
    samples = summary["samples"]
    assert (samples["tasks"], samples["episodes_per_task"]) == (3, round(8 / 3, 3))
    assert samples["pass_at_k"] == round(2 / 3, 3) and samples["mixed_outcomes"] == round(1 / 3, 3)
    assert samples["by_difficulty"]["easy"] == {"tasks": 2, "pass_at_k": 0.5, "mixed_outcomes": 0.5}
    assert samples["by_difficulty"]["hard"] == {"tasks": 0, "pass_at_k": None, "mixed_outcomes": None}
    assert "3 tasks x 2.667 episodes: pass@k 66.7%, tasks with mixed outcomes 33.3%" in format_table(summary)
    assert "samples" not in summarize([episode("easy"), episode("easy", index=1)])   # one episode per task


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
    summary = closing_summary(run, before, after, train_split=bare().train.split,
                              groups_per_batch=bare().rl.groups_per_batch)
    run.close()
    printed = capsys.readouterr().out
    assert summary["success_before"] == (None if skipped_before else 0.0)
    zero_of_one = "0.0% [0%-79%] of 1"  # the 95% Wilson interval of 0/1
    assert f"easy: {'-' if skipped_before else zero_of_one} -> 100.0% [21%-100%] of 1" in printed
    assert f"hard: - -> {zero_of_one}" in printed and "medium: - -> -" in printed
    assert (f"before -> after RL (95% Wilson interval): {'-' if skipped_before else zero_of_one} -> "
            "50.0% [9%-91%] of 2") in printed
    assert summary["interval_95_after"] == [0.0945, 0.9055]
    assert json.loads(json.dumps(summary))["by_difficulty_after"]["medium"]["success_rate"] is None
    assert summary["plot"] == str(tmp_path / "training.png") and f"plot: {summary['plot']}" in printed
    with open(summary["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_closing_summary_says_how_many_groups_rl_trained_on(tmp_path, capsys):
    """Updates x rl.groups_per_batch groups trained, against the uniform groups dropped (the
    last record's running count): what bounds a run in which success did not move."""
    run = RunDirectory(str(tmp_path), tensorboard=False)
    for update, dropped in [(1, 7), (2, 16)]:
        run.log({"phase": "rl", "update": update, "episodes": 72 * update, "groups_dropped_uniform": dropped,
                 "staleness_mean": 0.5, "staleness_max": 1, "trajectories_per_hour": 1000.0}, update)
    summary = closing_summary(run, None, None, train_split=bare().train.split, groups_per_batch=2)
    run.close()
    assert (summary["groups_trained"], summary["groups_dropped_uniform"]) == (4, 16)
    assert "RL trained on 4 groups; 16 finished groups had equal rewards (no signal) and were dropped" in \
        capsys.readouterr().out
    empty = RunDirectory(str(tmp_path / "no_rl"), tensorboard=False)   # no RL record: null, not 0
    summary = closing_summary(empty, None, None, train_split=bare().train.split, groups_per_batch=2)
    empty.close()
    assert summary["groups_trained"] is None and summary["groups_dropped_uniform"] is None


def test_wilson_interval_matches_known_values():
    assert wilson_interval(0, 0) is None
    assert wilson_interval(0, 6) == [0.0, 0.3903]      # the embedded default's 0/6
    assert wilson_interval(15, 60) == [0.1578, 0.3723]
    low, high = wilson_interval(30, 60)
    assert abs((low + high) / 2 - 0.5) < 1e-4 and 0.37 < low < 0.38


def test_the_training_plot_draws_what_the_records_hold(tmp_path):
    """Four panels from RL records with a null and a missing value (left out, not drawn as
    0), and an evaluation that did not run: the PNG is written and differs with the data."""
    records = [{"update": u, "success_rate": u / 10, "steps_per_episode": 3.0 + u,
                "response_tokens_per_step": None if u == 2 else 20.0} for u in range(1, 6)]
    after = summarize([episode("easy", reward=1.0), episode("hard", reward=0.0)])
    first = plot_training(records, None, after, str(tmp_path / "a.png"))
    second = plot_training(records[:2], after, after, str(tmp_path / "b.png"))
    empty = plot_training([], None, None, str(tmp_path / "c.png"))
    blobs = [open(path, "rb").read() for path in (first, second, empty)]
    assert all(b.startswith(b"\x89PNG") and len(b) > 10_000 for b in blobs)
    assert len(set(blobs)) == 3


def test_two_evaluations_of_the_same_tasks_compare_task_by_task():
    """eval.json's task_success (null for a task nothing scored), and paired_change: the
    tasks solved only after and only before, with the exact sign test's p."""
    from asyncwebrl.runtime.evaluate import paired_change, sign_test

    summary = summarize([episode("easy", reward=1.0), episode("easy", reward=0.0, index=1),
                         episode("medium", "crashed", None)])
    assert summary["task_success"] == {"easy-0": 1.0, "easy-1": 0.0, "medium-0": None}
    before = {f"t{i}": float(i < 10) for i in range(40)}                 # t0..t9 solved
    after = {**before, **{f"t{i}": 1.0 for i in range(10, 19)}, "t0": 0.0, "t39": None}
    assert paired_change(before, after) == {"tasks": 39, "gained": 9, "lost": 1, "p_value": 0.02148}
    assert paired_change(before, {**before, "t12": 1.0}) == {"tasks": 40, "gained": 1, "lost": 0, "p_value": 1.0}
    assert paired_change(before, None) is None and paired_change({"a": None}, {"a": 1.0}) is None
    # the exact two-sided binomial tail at 1/2: 2 * P(X <= 1 | n = 10) = 2 * 11 / 1024
    assert sign_test(9, 1) == pytest.approx(22 / 1024) and sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0


def test_failed_answers_with_some_facts_right_are_counted_apart():
    """An answer that left a fact out scores partial credit and fails: counted in
    answers_partly_right (what the imperfect teacher's habit produces), a wholly wrong one not."""
    partly, wrong, right = episode("easy", reward=0.0), episode("easy", reward=0.0, index=1), episode("hard", reward=1.0)
    partly.credit, wrong.credit, right.credit = 0.5, 0.0, 1.0
    assert summarize([partly, wrong, right])["answers_partly_right"] == 1
