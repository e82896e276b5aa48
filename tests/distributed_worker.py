"""One process of tests/test_distributed.py's two-process run (not a test module).

    python tests/distributed_worker.py INDEX COUNT PORT WORKDIR

Joins the group, trains the small learner of test_learner.py for two updates on global
batches that each process contributes its own rows of (unequal parts), saves a checkpoint (orbax, all processes
together), and writes WORKDIR/fingerprint.INDEX, WORKDIR/gathered.INDEX.json (bytes received
through distributed.gather per update) and, from process 0, WORKDIR/params.npz.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"   # 2 devices per process
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from asyncwebrl import distributed  # noqa: E402

index, count, port, workdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
distributed.initialize(distributed.process_group(f"127.0.0.1:{port}", count, index))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from test_distributed import BATCHES, learner_on, process_rows  # noqa: E402

from asyncwebrl.learner.checkpoints import CheckpointStore  # noqa: E402
from asyncwebrl.parallel import make_mesh  # noqa: E402
from configs.default import bare  # noqa: E402

assert jax.process_count() == count and jax.device_count() == 2 * count
learner = learner_on(make_mesh({"fsdp": -1}))   # one fsdp axis over every device of every process
gathered = []   # bytes this process received through distributed.gather, per update
for batch in BATCHES:
    before = distributed.gathered_bytes()
    learner.update(process_rows(batch, index))   # its own rows only: they never leave this process
    gathered.append(distributed.gathered_bytes() - before)
with open(os.path.join(workdir, f"gathered.{index}.json"), "w") as f:
    json.dump(gathered, f)
with CheckpointStore(os.path.join(workdir, "checkpoints"), keep=bare().train.keep_checkpoints) as store:
    store.save(learner.version, learner.state, {"processes": count})
with open(os.path.join(workdir, f"fingerprint.{index}"), "w") as f:
    f.write(distributed.fingerprint(learner.params))
leaves = [np.asarray(multihost_utils.process_allgather(x, tiled=True)) for x in jax.tree.leaves(learner.params)]
if index == 0:
    np.savez(os.path.join(workdir, "params.npz"), *leaves)
jax.distributed.shutdown()
