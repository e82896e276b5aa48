"""Two processes, one learner (jax.distributed on CPU with Gloo collectives): the
parameters agree across processes and with one process trained on the same global
batches, and the two-process checkpoint restores in a single process.

This covers the learner and the data exchange of a multi-host run on fixed batches;
tests/test_launch.py runs main.py itself as two processes."""

import dataclasses
import json
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
from asyncwebrl.learner.learner import Learner, process_part
from asyncwebrl.learner.packing import pack

# the global batches, one per update: (seed, rows, how many of them process 0 has); process
# 1 has the rest, so the processes feed unequal parts (and pack unequal microbatch counts)
BATCHES = ((21, 9, 7), (22, 7, 2))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")


def global_rows(batch) -> list:
    seed, count, _ = batch
    return make_rows(count, seed=seed)


def process_rows(batch, index: int) -> list:
    """Process `index`'s rows of a global batch (in process order, they are the global batch)."""
    cut = batch[2]
    return global_rows(batch)[:cut] if index == 0 else global_rows(batch)[cut:]


def learner_on(mesh) -> Learner:
    # a microbatch of 4 rows and 8 images: 2 and 4 from each of the two processes
    shape = dataclasses.replace(SHAPE, rows_per_microbatch=4, images_per_microbatch=8)
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
    for batch in BATCHES:
        alone.update(global_rows(batch))
    two = np.load(two_process_run / "params.npz")
    assert len(two.files) == len(initial)
    # within float tolerance, not exactly: the processes pack their rows into other
    # microbatches than one process does, and sums over 4 devices in two processes reduce
    # in another order (see test_learner's sharded test); one optimiser step per update
    # (bare config), so the update's gradient is the same sum
    for mine, key in zip(leaves(alone), two.files):
        np.testing.assert_allclose(two[key], mine, atol=5e-6, rtol=1e-5)
    assert max(float(np.abs(a - b).max()) for a, b in zip(leaves(alone), initial)) > 1e-4   # the updates moved them


def test_the_processes_pack_unequal_microbatch_counts():
    """The precondition of the padding with empty parts (learner.py): in the first batch,
    process 0 packs more parts of microbatches than process 1."""
    learner = learner_on(None)
    part = process_part(learner.settings.packing, 2)
    counts = [len(pack(process_rows(BATCHES[0], index), part, learner.config)) for index in range(2)]
    assert counts[0] > counts[1] >= 1


def test_step_rows_never_reach_the_other_process(two_process_run):
    """Per update a process receives a few hundred bytes of counts from the other, far less
    than that process's screenshots alone: its step rows stayed where they were made."""
    for index in range(2):
        gathered = json.loads((two_process_run / f"gathered.{index}.json").read_text())
        for batch, received in zip(BATCHES, gathered):
            peer_pixels = sum(row.pixel_values.nbytes for row in process_rows(batch, 1 - index))
            assert 0 < received < 2048 and 10 * received < peer_pixels, (index, batch, received, peer_pixels)


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
