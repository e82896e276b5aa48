"""The task-source registry (asyncwebrl/envs/__init__.py): a source is one class and one
line of SOURCES, main.py and the runtime find it there, and validate_config refuses a
source it does not hold."""

import subprocess
import sys

import pytest

from asyncwebrl import envs
from asyncwebrl.records import Task
from asyncwebrl.rollout.sandbox import local_policy
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.settings import make_environment
from asyncwebrl.runtime.validate import validate_config
from asyncwebrl.web.server import LocalWeb
from configs.default import bare as get_config   # the bare system


class ToyEnvironment:
    """A source of numbered tasks on one made-up site."""

    oracle = False
    splits = ("train", "test")
    runs_browser_free = False
    by_family = False
    scripted_policy = None

    def __init__(self):
        self.policy = local_policy("http://toy.invalid")

    @staticmethod
    def tasks(config, split, workdir):
        return [Task(task_id=f"toy/{split}/{i}", task_name=f"task {i}", website="http://toy.invalid/")
                for i in range(5)]

    @staticmethod
    def evaluated(tasks, count, seed):
        return tasks[-count:]

    @classmethod
    def from_config(cls, config, web, store):
        return cls()


@pytest.fixture
def toy_config(monkeypatch):
    monkeypatch.setitem(envs.SOURCES, "toy", f"{__name__}:ToyEnvironment")   # the one line a source adds
    config = get_config()
    config.tasks.source = "toy"
    return config


def test_a_registered_source_is_validated_loaded_evaluated_and_run_through_the_registry(toy_config):
    import main

    toy_config.eval.num_tasks = 2
    validate_config(toy_config)
    assert [t.task_id for t in main.load_split(toy_config, "train", None)] == [f"toy/train/{i}" for i in range(5)]
    assert [t.task_id for t in main.evaluation_tasks(toy_config, "test", None)] == ["toy/test/3", "toy/test/4"]
    assert isinstance(make_environment(toy_config, LocalWeb(), ScreenshotStore.in_memory()), ToyEnvironment)


def test_a_source_without_oracle_plans_refuses_the_oracle_and_the_http_driver(toy_config):
    import main
    from absl import app

    toy_config.policy = "oracle"
    with pytest.raises(app.UsageError, match="oracle only knows"):
        main.make_policy(toy_config, LocalWeb(), ScreenshotStore.in_memory())
    toy_config.browser.driver = "http"
    with pytest.raises(ValueError, match="browser.driver=http runs the local web only"):
        make_environment(toy_config, LocalWeb(), ScreenshotStore.in_memory())


def test_a_split_the_source_does_not_have_is_a_usage_error(toy_config):
    import main
    from absl import app

    with pytest.raises(app.UsageError, match=r"eval.split: tasks.source=toy has the splits \('train', 'test'\), "
                                             r"not 'unseen'"):
        main.evaluation_tasks(toy_config, "unseen", None)


def test_an_unknown_task_source_is_refused_naming_the_choices():
    config = get_config()
    config.tasks.source = "webarena"
    with pytest.raises(ValueError, match=r"tasks.source must be one of \('local', 'webgym', 'miniwob'\), "
                                         r"got 'webarena'"):
        validate_config(config)


def test_every_registered_source_has_the_class_members_of_the_protocol():
    # `policy` is an instance's (each sets its own in __init__)
    members = {name for name in {*envs.Environment.__annotations__, *vars(envs.Environment)}
               if not name.startswith("_")} - {"policy"}
    assert {"oracle", "tasks", "evaluated", "from_config", "episode_site", "judge", "finish"} <= members
    for source in envs.SOURCES:
        missing = {name for name in members if not hasattr(envs.environment_class(source), name)}
        assert not missing, f"{source} lacks {sorted(missing)}"


def test_validating_the_source_loads_no_environment():
    # the environments import playwright (~1 s): main.py checks the config before any of it
    code = ("import sys; from asyncwebrl.runtime.validate import validate_config; "
            "print(any(m.startswith(('playwright', 'asyncwebrl.envs.')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
