"""Two processes, one learner (jax.distributed on CPU with Gloo collectives): the
parameters agree across processes and with one process trained on the same global
batches, and the two-process checkpoint restores in a single process.

This covers the learner and the data exchange of a multi-host run on fixed batches;
tests/test_launch.py runs main.py itself as two processes."""

import dataclasses
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from bare_settings import optimizer_settings  # tests/bare_settings.py
from configs.default import bare
from test_learner import SHAPE, make_rows, settings, tiny_model

from asyncwebrl import distributed
from asyncwebrl.learner.checkpoints import CheckpointStore
from asyncwebrl.learner.learner import Learner

BATCHES = (21, 22)   # seeds of the global batches, one per update
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")


def learner_on(mesh) -> Learner:
    shape = dataclasses.replace(SHAPE, rows_per_microbatch=3, images_per_microbatch=6)
    smooth = optimizer_settings(learning_rate=1e-3, eps=1e-6, warmup_steps=1, total_steps=20)
    return Learner(tiny_model(), settings(packing=shape, optimizer=smooth), mesh=mesh)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("two-processes")
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    workers = [subprocess.Popen([sys.executable, WORKER, str(i), "2", str(port), str(workdir)], env=environment,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
    return workdir


def leaves(learner) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(learner.params)]


def test_both_processes_hold_the_same_parameters_as_one_process_would(two_process_run):
    fingerprints = {(two_process_run / f"fingerprint.{i}").read_text() for i in range(2)}
    assert len(fingerprints) == 1
    alone = learner_on(None)   # one device
    initial = leaves(alone)
    for seed in BATCHES:   # the global batch in process order: process 0's half, then process 1's
        rows = make_rows(6, seed=seed)
        alone.update(rows[0::2] + rows[1::2])
    two = np.load(two_process_run / "params.npz")
    assert len(two.files) == len(initial)
    # sums over 4 devices in two processes reduce in another order (see test_learner's sharded test)
    for mine, key in zip(leaves(alone), two.files):
        np.testing.assert_allclose(two[key], mine, atol=5e-6, rtol=1e-5)
    assert max(float(np.abs(a - b).max()) for a, b in zip(leaves(alone), initial)) > 1e-4   # the updates moved them


def test_the_two_process_checkpoint_restores_in_one_process(two_process_run):
    learner = learner_on(None)
    with CheckpointStore(two_process_run / "checkpoints", keep=bare().train.keep_checkpoints) as store:
        state, runtime, step = store.restore(learner.state)
    learner.restore(state)
    assert (step, runtime, learner.version) == (2, {"processes": 2}, 2)
    two = np.load(two_process_run / "params.npz")
    for restored, key in zip(leaves(learner), two.files):
        np.testing.assert_array_equal(restored, two[key])
    assert distributed.fingerprint(learner.params) == (two_process_run / "fingerprint.0").read_text()


def test_gather_and_groups_in_one_process(monkeypatch):
    assert distributed.gather([1, "a"]) == [1, "a"]
    monkeypatch.delenv("JAX_COORDINATOR_ADDRESS", raising=False)
    assert distributed.process_group() is None
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    assert distributed.process_group() == distributed.ProcessGroup("10.0.0.1:1234", 4, 3)
    monkeypatch.setenv("JAX_PROCESS_ID", "4")
    with pytest.raises(ValueError, match="index in"):
        distributed.process_group()


def test_one_process_helpers_and_restoring_another_process_count():
    from asyncwebrl.runtime.training import own_runtime

    assert distributed.per_process(8, "rl.groups_per_batch") == 8 and distributed.share([1, 2, 3]) == [1, 2, 3]
    assert distributed.any_process(True, "round/1") and not distributed.any_process(False, "round/2")
    assert not distributed.flag_raised("round/1")
    first, second = {"task_position": 7, "counts": {"episodes": 3}}, {"task_position": 9, "counts": {"episodes": 4}}
    assert own_runtime({"updates": 2, "processes": [first, second]}) == first   # process 0 of a two-process run
    assert own_runtime({"updates": 2, "processes": [first]}) == first
