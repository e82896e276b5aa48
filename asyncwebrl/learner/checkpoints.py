"""Orbax checkpoints of the train state plus the caller's runtime state (DESIGN.md §6).

A checkpoint is the TrainState (parameters, optimiser moments, step, version) and a JSON
blob the caller supplies (task-sampler position, admission counters, the seed...). Saves
are asynchronous (training goes on while the arrays are written), the last `keep` are
kept, and restore places every array on the shardings of a template state, so a run can
come back on a different mesh. Orbax commits a step atomically: a crash mid-save leaves
the previous checkpoint as the latest.
"""

from __future__ import annotations

import pathlib

import jax
import orbax.checkpoint as ocp


class CheckpointStore:
    def __init__(self, directory, keep: int = 3):
        self.directory = pathlib.Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "runtime"))

    def save(self, step: int, state, runtime: dict) -> None:
        """Start writing; returns before the arrays are on disk (see wait)."""
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        runtime=ocp.args.JsonSave(runtime)), force=True)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, template, step: int | None = None):
        """(state, runtime, step) of the latest (or given) checkpoint, or None if there is none.

        `template` is a state (or abstract state) whose shapes, dtypes and shardings the
        restored arrays take."""
        step = self.latest_step() if step is None else step
        if step is None:
            return None
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                      runtime=ocp.args.JsonRestore()))
        return restored["state"], restored["runtime"], step

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def __enter__(self) -> "CheckpointStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
