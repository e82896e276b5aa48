"""MiniWoB++ pages from the miniwob package, served by our LocalWeb and driven by our
browser pool (real Chromium): reset through the page's core, the page's instruction, its
reward globals, and main.py's eval flow."""

import asyncio
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from asyncwebrl.envs import miniwob
from asyncwebrl.envs.miniwob import MiniWobEnvironment, miniwob_tasks, parse_names
from asyncwebrl.envs.miniwob_solver import SOLVED_PAGES, MiniWobScriptedPolicy
from asyncwebrl.rollout.policies import Reply
from asyncwebrl.rollout.response import format_response
from asyncwebrl.runtime.evaluate import run_tasks
from asyncwebrl.web.server import LocalWeb
from bare_settings import episode_settings, pool_settings  # tests/bare_settings.py
from configs.default import bare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = episode_settings("test", interaction="coordinates", viewport=(160, 210), step_limits=(5, 10, 20))


def run(tasks, policy, web):
    environment = MiniWobEnvironment(web, episode_seconds=bare().miniwob.episode_seconds)
    trajectories, _ = asyncio.run(run_tasks(tasks, policy, environment, SETTINGS,
                                            pool=pool_settings(concurrency=2), progress=None))
    return trajectories


def test_the_catalogue_covers_every_page_in_the_package_once():
    pages = {name[:-len(".html")] for name in os.listdir(os.path.join(miniwob.html_dir(), "miniwob"))}
    catalogued = miniwob.TASK_NAMES
    assert len(catalogued) == len(set(catalogued))              # no page in two groups
    assert set(catalogued) <= pages
    assert pages == set(catalogued) | set(miniwob.EXCLUDED)     # nothing forgotten
    assert set(miniwob.MULTI_STEP) == set(catalogued) - set(miniwob.SINGLE_ACTION)


def test_tasks_cycle_over_pages_with_seeds_disjoint_between_splits():
    train = miniwob_tasks("click-button,enter-text", "train", 5)
    test = miniwob_tasks(("click-button", "enter-text"), "test", 4)
    assert [t.task_id for t in train] == ["miniwob/click-button/0", "miniwob/enter-text/0", "miniwob/click-button/1",
                                          "miniwob/enter-text/1", "miniwob/click-button/2"]
    assert not {t.local["miniwob"]["seed"] for t in train} & {t.local["miniwob"]["seed"] for t in test}
    assert [t.level for t in train[:2]] == ["easy", "medium"]
    assert len(parse_names("all")) == len(miniwob.TASK_NAMES)


@pytest.mark.parametrize("names, message", [("click-buton", "unknown MiniWoB"), ("simon-says", "not registered"),
                                            ("", "none given")])
def test_unknown_or_excluded_pages_are_refused_with_the_reason(names, message):
    with pytest.raises(ValueError, match=message):
        parse_names(names)


def test_the_mount_serves_package_files_and_nothing_outside_it():
    with LocalWeb() as web:
        web.mount("miniwob", miniwob.html_dir())
        with urllib.request.urlopen(web.origin + "/miniwob/core/core.js") as response:
            assert "javascript" in response.headers["Content-Type"] and b"WOB_DONE_GLOBAL" in response.read()
        posted = urllib.request.Request(web.origin + "/miniwob/core/core.js", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError, match="405"):
            urllib.request.urlopen(posted)
        for path in ("/miniwob/../../../etc/passwd", "/miniwob/%2e%2e/%2e%2e/setup.py", "/miniwob/nope.html"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(web.origin + path)


def test_the_scripted_policy_solves_its_pages_through_the_page_reward():
    """Success comes from the page's own reward globals; the instruction is the page's
    utterance for the task's seed."""
    tasks = miniwob_tasks(SOLVED_PAGES, "test", len(SOLVED_PAGES))
    with LocalWeb() as web:
        trajectories = run(tasks, MiniWobScriptedPolicy(), web)
    for t in trajectories:
        assert (t.outcome, t.reward) == ("finished", 1.0), (t.task.task_id, t.task.task_name, t.judge_note, t.error)
        assert t.judge_note.startswith("raw reward 1") and t.task.task_name != tasks[0].task_name
    login = next(t for t in trajectories if t.task.local["miniwob"]["name"] == "login-user")
    assert login.task.task_name.startswith("Enter the username") and len(login.steps) == 3


class _Scripted:
    """Every episode plays the same list of actions."""

    def __init__(self, *actions):
        self.actions = actions
        self.instructions = []

    def begin(self, task, *, interaction, episode_id):
        self.instructions.append(task.task_name)
        actions = iter(self.actions)

        class Agent:
            async def act(self, observation, steps):
                return Reply(format_response({}, {}, "x", "Act.", next(actions), "memory"))

        return Agent()


def test_an_unfinished_page_scores_0_and_one_seed_poses_one_problem():
    """A click on empty space changes nothing; answering then scores 0 (the page never
    ended the episode). Every member of a group sees the same instruction."""
    task = miniwob_tasks("click-test-2", "train", 1)[0]
    policy = _Scripted({"action": "left_click", "coordinate": [990, 990]}, {"action": "answer", "text": "done"})
    with LocalWeb() as web:
        trajectories = run([task, task, task], policy, web)
    assert len(set(policy.instructions)) == 1 and policy.instructions[0] != task.task_name
    for t in trajectories:   # the page never ended: answering scores 0, never an error
        assert (t.outcome, t.reward) == ("answered", 0.0) and "did not end" in t.judge_note


def test_leaving_the_task_page_ends_the_episode_as_a_failure():
    task = miniwob_tasks("click-button", "test", 1)[0]
    with LocalWeb() as web:
        (trajectory,) = run([task], _Scripted({"action": "go_back"}, {"action": "wait", "time": 0.1}), web)
    assert (trajectory.outcome, trajectory.reward) == ("finished", 0.0)
    assert "left the task page" in trajectory.judge_note and len(trajectory.steps) == 1


def test_main_evaluates_miniwob_with_the_random_policy(tmp_path):
    """The issue's command, on fewer tasks: no crash, every episode scored, per-page rates."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py"), "--mode=eval", f"--workdir={tmp_path}",
         "--config=configs/miniwob.py", "--config.policy=random", "--config.eval.num_tasks=10"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "eval.json").read_text())
    assert (summary["episodes"], summary["crashed"], summary["unknown_reward"]) == (10, 0, 0)
    assert len(summary["by_family"]) == 10 and "click-checkboxes" in result.stdout
