"""Several processes, one program: JAX's multi-controller runtime (jax.distributed).

Every process runs the same code; the learner's mesh spans the devices of all of them, and
each update must see the same global batch everywhere. This module holds the pieces that
only exist because there are several processes:

    group = process_group()            # from arguments or JAX_COORDINATOR_ADDRESS, ...
    initialize(group)                  # before anything else touches a device
    rows = gather(local_rows)          # every process's rows, in process order, everywhere
    fingerprint(learner.params)        # one hash of the global parameters (same on all)

Environment: JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES,
JAX_PROCESS_ID. With JAX_COORDINATOR_ADDRESS=auto, jax.distributed finds them itself
(Cloud TPU, SLURM). On CPU the cross-process collectives are Gloo's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle

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


def gather(items: list) -> list:
    """Every process's `items` (any picklable objects: step rows, trajectories' digests),
    concatenated in process order, on every process. One process: the items themselves."""
    if jax.process_count() == 1:
        return list(items)
    from jax.experimental import multihost_utils

    payload = np.frombuffer(pickle.dumps(list(items), protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([payload.size], np.int64))).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:payload.size] = payload
    everyone = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
    return [item for row, size in zip(everyone, sizes) for item in pickle.loads(row[:size].tobytes())]


def fingerprint(tree) -> str:
    """SHA-256 over every leaf of a (possibly sharded, multi-process) pytree of arrays, as
    global values: equal on every process, and equal to a one-process run's with the same values."""
    from jax.experimental import multihost_utils

    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            leaf = multihost_utils.process_allgather(leaf, tiled=True)
        value = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()
