"""Orbax checkpoints of the train state plus the caller's runtime state
(docs/architecture.md#reliability-and-security).

A checkpoint is the TrainState (parameters, optimiser moments, step, version) and a JSON
blob the caller supplies (task-sampler position, admission counters, the seed...). Saves
are asynchronous (training goes on while the arrays are written), the last `keep` are
kept, and restore places every array on the shardings of a template state, so a run can
come back on a different mesh. Orbax commits a step atomically: a crash mid-save leaves
the previous checkpoint as the latest.

A step directory can still be damaged afterwards (a truncated data file, deleted metadata,
a partial copy): restore then reports each unreadable step and comes back from the newest
one it can read. The run that owns the directory moves the unreadable ones aside, into
`unreadable/`, so that their step numbers can be written again and they stay for a look.
"""

from __future__ import annotations

import logging
import pathlib

import jax
import orbax.checkpoint as ocp

# What reading a damaged step raises: tensorstore's OUT_OF_RANGE / NOT_FOUND (ValueError),
# a missing file (FileNotFoundError, an OSError), an item absent from a partial directory
# (KeyError), a cut JSON blob (json.JSONDecodeError, a ValueError). Anything else (a device
# error, running out of memory) is not the checkpoint's fault and is raised as it is.
UNREADABLE_ERRORS = (OSError, KeyError, ValueError)

UNREADABLE_FOLDER = "unreadable"   # not a number: orbax does not take it for a step


class NoReadableCheckpoint(RuntimeError):
    """Every checkpoint in the directory failed to restore."""

    def __init__(self, directory: pathlib.Path, failures: list[tuple[int, Exception]]):
        self.directory, self.failures = directory, failures
        lines = [f"  step {step}: {describe(error)}" for step, error in failures]
        super().__init__(f"no checkpoint in {directory} can be read:\n" + "\n".join(lines)
                         + f"\nmove {directory} aside to start again from scratch")


def describe(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:300]}"


class CheckpointStore:
    def __init__(self, directory, *, keep: int):
        """keep: the newest checkpoints kept (train.keep_checkpoints); older ones are deleted as new ones are saved."""
        self.directory = pathlib.Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "runtime"))

    def save(self, step: int, state, runtime: dict) -> None:
        """Start writing; returns before the arrays are on disk (see wait)."""
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        runtime=ocp.args.JsonSave(runtime)), force=True)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def steps(self) -> list[int]:
        """The steps kept, oldest first."""
        return sorted(self.manager.all_steps())

    def restore(self, template, step: int | None = None, *, set_aside_unreadable: bool = False):
        """(state, runtime, step) of the newest readable (or the given) checkpoint, or None
        if there is none.

        `template` is a state (or abstract state) whose shapes, dtypes and shardings the
        restored arrays take. Without `step`, the checkpoints are tried newest first: each
        unreadable one is reported (a warning with its step and error) and the one before
        it tried; when none can be read, NoReadableCheckpoint names each failure. A given
        `step` is read or its error raised. `set_aside_unreadable` (for the run that
        writes this directory) moves the unreadable steps newer than the restored one into
        unreadable/: otherwise saving their step numbers again would fail."""
        if step is not None:
            return (*self._restore_step(template, step), step)
        failures = []
        for candidate in sorted(self.manager.all_steps(), reverse=True):
            try:
                state, runtime = self._restore_step(template, candidate)
            except UNREADABLE_ERRORS as error:
                logging.warning("checkpoint %d in %s cannot be read (%s); trying the one before it",
                                candidate, self.directory, describe(error))
                failures.append((candidate, error))
                continue
            if failures and set_aside_unreadable:
                self._set_aside([s for s, _ in failures])
            return state, runtime, candidate
        if failures:
            raise NoReadableCheckpoint(self.directory, failures)
        return None

    def _restore_step(self, template, step: int):
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                      runtime=ocp.args.JsonRestore()))
        return restored["state"], restored["runtime"]

    def _set_aside(self, steps: list[int]) -> None:
        """Move these step directories into unreadable/ (process 0 alone: the directory is
        shared), then let the manager see the steps that are left."""
        if jax.process_index() == 0:
            folder = self.directory / UNREADABLE_FOLDER
            folder.mkdir(exist_ok=True)
            for step in steps:
                source = self.directory / str(step)   # orbax's default step name: the number itself
                target = unused_path(folder / str(step))
                source.rename(target)
                logging.warning("moved the unreadable checkpoint %d to %s", step, target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            multihost_utils.sync_global_devices("asyncwebrl/checkpoints/set_aside")
        self.manager.reload()

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def __enter__(self) -> "CheckpointStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def unused_path(path: pathlib.Path) -> pathlib.Path:
    """`path`, or `path.1`, `path.2`... when a step of that number was set aside before."""
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate
