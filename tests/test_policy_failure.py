"""A failing sampler engine is the policy's failure, not the browsers': the training run
stops with the engine's error named and no browser is relaunched for it. Tiny model, real
Chromium, main.py (conftest.QUICK)."""

import os
import subprocess
import sys

from conftest import main_py
from test_training import checkpoint_steps

# Runs main.py with every prefill raising (as a device error would) and each browser
# launch written to $LAUNCHES, one line per launch.
FAILING_ENGINE = """
import os, runpy, sys
from asyncwebrl.rollout.pool import BrowserPool
from asyncwebrl.sampler.engine import Engine

def failing_prefill(self, index):
    raise RuntimeError("injected device failure")

launch = BrowserPool._launch

async def counted_launch(self):
    with open(os.environ["LAUNCHES"], "a") as f:
        f.write("launch\\n")
    return await launch(self)

Engine._prefill_slot = failing_prefill
BrowserPool._launch = counted_launch
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_an_engine_failure_stops_training_with_its_error_and_relaunches_no_browser(tmp_path):
    workdir, launches = str(tmp_path / "run"), tmp_path / "launches"
    command = [sys.executable, "-c", FAILING_ENGINE, *main_py(workdir, "--config.train.max_updates=4")[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LAUNCHES": str(launches)})
    assert done.returncode != 0, done.stdout[-2000:]
    assert "EngineFailure" in done.stderr and "injected device failure" in done.stderr, done.stderr[-3000:]
    assert launches.read_text().splitlines() == ["launch"]   # the pool's warm-up only
    assert checkpoint_steps(workdir) == [0]   # the last good checkpoint stays, nothing saved after the failure
