"""Several processes, one program: JAX's multi-controller runtime (jax.distributed).

Every process runs the same code; the learner's mesh spans the devices of all of them, and
each update trains on one global batch that every process feeds its own rows into
(learner/learner.py): rows never travel between processes, only small facts do. This module holds the pieces that
only exist because there are several processes:

    group = process_group()            # from arguments or JAX_COORDINATOR_ADDRESS, ...
    initialize(group)                  # before anything else touches a device
    facts = gather(local_facts)        # every process's small objects, in process order, everywhere
    gathered_bytes()                   # what gather has received on this process so far
    if any_process(stopping, "update/7"): ...   # a flag agreed on without a collective
    flag_raised("update/7")            # ... and a peek at it while still busy
    addressable_copy(learner.params)   # global arrays as host values (for a local sampler)
    fingerprint(learner.params)        # one hash of the global parameters (same on all)

Process 0 is the leader: it alone writes the run directory (metrics, evaluations, the
sample of trajectories); every process takes part in checkpoints (orbax writes each
process's shards), so the checkpoint directory must be one that all hosts see.

Environment: JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES,
JAX_PROCESS_ID. With JAX_COORDINATOR_ADDRESS=auto, jax.distributed finds them itself
(Cloud TPU, SLURM). On CPU the cross-process collectives are Gloo's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import time

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
    coordinator: str      # host:port of process 0, or "auto"
    count: int = 0        # 0 with "auto": detected
    index: int = -1       # -1 with "auto": detected


def process_group(coordinator: str = "", count: int = 0, index: int = -1) -> ProcessGroup | None:
    """The group this process belongs to (arguments first, then the environment); None
    when the program runs as one process."""
    coordinator = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS", "")
    if not coordinator:
        return None
    if coordinator == "auto":
        return ProcessGroup("auto")
    count = count or int(os.environ.get("JAX_NUM_PROCESSES", "0"))
    index = index if index >= 0 else int(os.environ.get("JAX_PROCESS_ID", "-1"))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"a process group at {coordinator} needs a process count >= 1 and an index in "
                         f"[0, count): got count {count}, index {index} (set JAX_NUM_PROCESSES and JAX_PROCESS_ID)")
    return ProcessGroup(coordinator, count, index)


def initialize(group: ProcessGroup | None) -> None:
    """Join the group (no-op for a single process). Must run before any device is used."""
    if group is None:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")   # CPU devices only; GPUs use NCCL
    if group.coordinator == "auto":
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(coordinator_address=group.coordinator, num_processes=group.count,
                                   process_id=group.index)


def is_leader() -> bool:
    return jax.process_index() == 0


def share(items: list) -> list:
    """This process's share of `items` (every count-th from its index), for work that is
    split between processes and gathered again (evaluation episodes, demonstrations)."""
    return list(items)[jax.process_index()::jax.process_count()]


def per_process(total: int, what: str) -> int:
    """Each process's part of a global count (e.g. the groups of one update)."""
    count = jax.process_count()
    if total % count:
        raise ValueError(f"{what} = {total} does not split evenly over {count} processes")
    return total // count


def _store():
    # jax.distributed exposes its key-value store only through this private handle (JAX 0.10-0.11)
    from jax._src.distributed import global_state

    return global_state.client


def _flag_key(name: str, index: int) -> str:
    return f"asyncwebrl/{name}/{index}"


def any_process(flag: bool, name: str, timeout_s: float = 3600.0) -> bool:
    """True on every process if `flag` is true on any of them; `name` must be new for each
    round (e.g. the update number). The processes meet in the coordination service's
    key-value store, polled once a second, rather than in a collective: a process may wait
    here for minutes while its peers collect episodes, and it must still see its own
    signals (SIGTERM) meanwhile. Raises TimeoutError when a peer does not report."""
    if jax.process_count() == 1:
        return flag
    client = _store()
    client.key_value_set(_flag_key(name, jax.process_index()), "1" if flag else "0")
    deadline = time.monotonic() + timeout_s
    flags = []
    for index in range(jax.process_count()):
        while True:
            try:
                flags.append(client.blocking_key_value_get(_flag_key(name, index), 1000) == "1")
                break
            except jax.errors.JaxRuntimeError as error:
                if "DEADLINE_EXCEEDED" not in str(error):
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"process {index} did not reach {name!r} within {timeout_s:.0f} s") from None
    return any(flags)


def flag_raised(name: str) -> bool:
    """Whether some process already entered any_process(True, name), without waiting (a
    process still collecting for that round gives up early instead of making it wait)."""
    if jax.process_count() == 1:
        return False
    client = _store()
    for index in range(jax.process_count()):
        try:
            if client.key_value_try_get(_flag_key(name, index)) == "1":
                return True
        except jax.errors.JaxRuntimeError as error:   # NOT_FOUND: that process has not reported yet
            if "NOT_FOUND" not in str(error):
                raise
    return False


_received = {"bytes": 0}   # by gather on this process, since it started


def gathered_bytes() -> int:
    """Bytes this process has received through gather (its own part included: the
    all-gather hands every process every part). A caller measures a stretch of work by
    the difference; one process: always 0, nothing is exchanged."""
    return _received["bytes"]


def gather(items: list) -> list:
    """Every process's `items` (any picklable objects: trajectories' digests, counts),
    concatenated in process order, on every process. One process: the items themselves.
    Everything passed here is copied to every process (gathered_bytes counts it)."""
    if jax.process_count() == 1:
        return list(items)
    from jax.experimental import multihost_utils

    payload = np.frombuffer(pickle.dumps(list(items), protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    # sizes travel as 8 bytes each: without jax_enable_x64 an int64 array would become int32
    # and overflow past 2 GiB (step rows with their pixels reach that at 2B scale)
    size_bytes = np.frombuffer(np.array([payload.size], "<i8").tobytes(), np.uint8)
    everyone_sizes = np.asarray(multihost_utils.process_allgather(size_bytes)).reshape(-1, 8)
    sizes = [int(np.frombuffer(row.tobytes(), "<i8")[0]) for row in everyone_sizes]
    padded = np.zeros(max(sizes), np.uint8)
    padded[:payload.size] = payload
    everyone = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
    _received["bytes"] += everyone_sizes.nbytes + everyone.nbytes
    return [item for row, size in zip(everyone, sizes) for item in pickle.loads(row[:size].tobytes())]


def addressable_copy(tree):
    """`tree` with every array that spans other processes replaced by its global value on
    this host (a collective: all processes call it together). A sampler on this host's
    devices takes the learner's parameters this way; one process: `tree` itself."""
    def local(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return leaf
    return jax.tree.map(local, tree)


def fingerprint(tree) -> str:
    """SHA-256 over every leaf of a (possibly sharded, multi-process) pytree of arrays, as
    global values: equal on every process, and equal to a one-process run's with the same values."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(addressable_copy(tree)):
        value = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()
