"""Eight fake CPU devices for every JAX test, so sharded code runs on CPU
(docs/architecture.md#devices-and-sharding).
This must happen before anything imports jax; unsharded code still runs on device 0.

Also: a persistent compilation cache, and a short training run through main.py (the bare system's
random tiny model, real Chromium), made once per
test session and shared by the tests that read a run directory."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
# One persistent XLA compilation cache for the session, inherited by the main.py processes
# the tests start: they compile the same tiny model's functions again and again (about
# 17 s of each run on 2 cores), and so do tests that build a second engine or learner.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="asyncwebrl-xla-cache-")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Short runs: the bare system (configs/default.py:bare, a random tiny model on screenshots),
# no warm start, no evaluation, 8 new tokens per step, 2-step episodes in
# coordinates mode (short prompts), groups of 2, one group per update, and dynamic
# sampling off (an untrained policy succeeds too rarely for groups with reward variance).
QUICK = [f"--config={os.path.join(ROOT, 'configs', 'default.py')}:bare",
         "--config.sft.steps=0", "--config.eval.num_tasks=0", "--config.sampler.max_new_tokens=8",
         "--config.agent.interaction=coordinates", "--config.sampler.capacity=2048",
         "--config.sampler.prompt_buckets=(2048,)", "--config.learner.row_length=2048",
         "--config.agent.train_step_limits=(2,2,2)", "--config.agent.step_limits_fit_plans=False",
         "--config.rl.group_size=2", "--config.rl.groups_per_batch=1", "--config.rl.max_running_groups=2",
         "--config.rl.dynamic_sampling=False", "--config.browser.pages=2",
         "--config.tasks.train_sites_per_variant=1", "--config.tasks.test_sites_per_variant=1"]


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:   # the cache made for this session goes with it
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the long checks marked slow (left out of the ~20-minute suite)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long check, run only with --slow")


# Fixtures that run main.py or several processes, once per module (or session) that uses them
SHARED_RUNS = ("short_run_process", "two_process_run", "marks", "study_run")


# tryfirst: pytest-xdist's worker reads the xdist_group marks in its own hook, which pytest
# calls before a conftest's unless this one asks to go first (without it no mark took effect,
# and each worker made the shared runs again: 290 s twice for tests/test_launch.py)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="a long check: run with --slow")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--slow"):
            item.add_marker(skip)
        # under pytest-xdist (-n 2 --dist loadgroup), the tests that read a shared run go to one
        # worker, so it is made once rather than once per worker: the session's short run (and
        # what is built on it) in one group, each module's own run in a group of that module
        fixtures = getattr(item, "fixturenames", ())
        if "short_run_process" in fixtures:
            item.add_marker(pytest.mark.xdist_group("short_run"))
        elif any(name in fixtures for name in SHARED_RUNS):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def main_py(workdir, *flags):
    return [sys.executable, os.path.join(ROOT, "main.py"), f"--workdir={workdir}", *QUICK, *flags]


@pytest.fixture(scope="session")
def short_run_process(tmp_path_factory):
    """(workdir, finished process) of a 4-update asynchronous run with eta = 1."""
    workdir = str(tmp_path_factory.mktemp("short") / "run")
    done = subprocess.run(main_py(workdir, "--config.train.max_updates=4", "--config.rl.eta=1"),
                          capture_output=True, text=True, timeout=1200)
    return workdir, done


@pytest.fixture(scope="session")
def short_run(short_run_process) -> str:
    workdir, done = short_run_process
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir
