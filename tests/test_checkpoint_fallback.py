"""Issue 26, finding 14: a damaged newest checkpoint falls back to the previous one, and a
workdir whose checkpoints are gone (but whose metrics show an RL run) refuses to start
from scratch unless told to. Real orbax on disk, with a tiny pytree for the state."""

from __future__ import annotations

import json
import logging
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from asyncwebrl.learner.checkpoints import CheckpointStore, NoReadableCheckpoint
from asyncwebrl.runtime import training
from asyncwebrl.runtime.rundir import RunDirectory
from configs.default import bare as get_config   # the bare system


def tiny_state(scale: float) -> dict:
    return {"w": jnp.arange(64.0).reshape(8, 8) * scale, "b": jnp.ones(3) * scale}


@pytest.fixture
def two_checkpoints(tmp_path):
    """checkpoints/1 and checkpoints/2, both complete; the state of step s is tiny_state(s)."""
    directory = tmp_path / "checkpoints"
    with CheckpointStore(directory, keep=3) as store:
        for step in (1, 2):
            store.save(step, tiny_state(step), {"updates": step})
            store.wait()
    return directory


def truncate_data_files(directory):
    """Cut every array data file of step 2 in half (a disk filled up, a copy cut short)."""
    for path in (directory / "2" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            os.truncate(path, path.stat().st_size // 2)


def delete_runtime_metadata(directory):
    os.remove(directory / "2" / "runtime" / "metadata")


def delete_array_manifest(directory):
    os.remove(directory / "2" / "state" / "manifest.ocdbt")


def partial_step_directory(directory):
    """A step 3 holding the arrays but not the runtime blob (a copy that stopped midway)."""
    shutil.copytree(directory / "2" / "state", directory / "3" / "state")


def runtime_item_missing(directory):
    shutil.rmtree(directory / "2" / "runtime")


DAMAGES = {
    "truncated data file": (truncate_data_files, 2, "OUT_OF_RANGE"),
    "deleted runtime metadata": (delete_runtime_metadata, 2, "FileNotFoundError"),
    "deleted array manifest": (delete_array_manifest, 2, "NOT_FOUND"),
    "partial step directory": (partial_step_directory, 3, "KeyError"),
    "step without its runtime item": (runtime_item_missing, 2, "KeyError"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_an_unreadable_newest_checkpoint_falls_back_to_the_previous_one(two_checkpoints, caplog, damage):
    damage_fn, bad_step, error_text = DAMAGES[damage]
    damage_fn(two_checkpoints)
    with caplog.at_level(logging.WARNING), CheckpointStore(two_checkpoints, keep=3) as store:
        assert store.latest_step() == bad_step
        state, runtime, step = store.restore(tiny_state(0))
    previous = bad_step - 1   # the complete checkpoint before the damaged one
    assert (step, runtime) == (previous, {"updates": previous})
    np.testing.assert_array_equal(np.asarray(state["w"]), np.asarray(tiny_state(previous)["w"]))
    warning = next(r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage())
    assert f"checkpoint {bad_step} " in warning and error_text in warning
    assert (two_checkpoints / str(bad_step)).exists()   # a reader leaves the directory as it is


def test_the_writer_moves_unreadable_steps_aside_and_can_save_their_numbers_again(two_checkpoints):
    truncate_data_files(two_checkpoints)
    partial_step_directory(two_checkpoints)
    with CheckpointStore(two_checkpoints, keep=3) as store:
        _, _, step = store.restore(tiny_state(0), set_aside_unreadable=True)
        assert step == 1 and store.manager.all_steps() == [1]
        store.save(2, tiny_state(20), {"updates": 2})   # failed with StepAlreadyExistsError before
        store.save(3, tiny_state(30), {"updates": 3})
    assert sorted(os.listdir(two_checkpoints / "unreadable")) == ["2", "3"]
    with CheckpointStore(two_checkpoints, keep=3) as store:
        state, runtime, step = store.restore(tiny_state(0))
    assert (step, runtime) == (3, {"updates": 3})
    np.testing.assert_array_equal(np.asarray(state["b"]), np.asarray(tiny_state(30)["b"]))


def test_no_readable_checkpoint_names_the_directory_and_every_failure(two_checkpoints):
    truncate_data_files(two_checkpoints)
    shutil.rmtree(two_checkpoints / "1" / "runtime")
    with CheckpointStore(two_checkpoints, keep=3) as store, pytest.raises(NoReadableCheckpoint) as raised:
        store.restore(tiny_state(0), set_aside_unreadable=True)
    message = str(raised.value)
    assert str(two_checkpoints) in message
    assert "step 2: ValueError: OUT_OF_RANGE" in message and "step 1: KeyError" in message
    assert sorted(os.listdir(two_checkpoints)) == ["1", "2"]   # nothing moved when nothing was restored


def test_a_given_step_is_read_or_its_error_raised(two_checkpoints):
    delete_runtime_metadata(two_checkpoints)
    with CheckpointStore(two_checkpoints, keep=3) as store:
        with pytest.raises(FileNotFoundError):
            store.restore(tiny_state(0), step=2)
        assert store.restore(tiny_state(0), step=1)[1:] == ({"updates": 1}, 1)


def test_an_empty_directory_restores_nothing(tmp_path):
    with CheckpointStore(tmp_path / "checkpoints", keep=get_config().train.keep_checkpoints) as store:
        assert store.restore(tiny_state(0)) is None


# ------------------------------------------------------------------ no checkpoint, but metrics

def write_metrics(path, records, tail=""):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.write(tail)


RL_RECORDS = [{"phase": "sft", "step": 1}, {"phase": "rl", "update": 1}, {"phase": "rl", "update": 2}]


def test_metrics_without_checkpoints_refuse_a_fresh_start(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, RL_RECORDS, tail='{"phase": "rl", "upd')   # a crash cut the last line
    with pytest.raises(RuntimeError) as raised:
        training.check_fresh_start(str(metrics), tmp_path / "checkpoints", restart=False)
    message = str(raised.value)
    assert "updates up to 2" in message and "holds no checkpoint" in message
    assert "--config.train.restart=True" in message


def test_restart_starts_again_from_scratch_saying_so(tmp_path, caplog):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, RL_RECORDS)
    with caplog.at_level(logging.WARNING):
        training.check_fresh_start(str(metrics), tmp_path / "checkpoints", restart=True)
    assert any("train.restart=True" in r.getMessage() and "from scratch" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("records", [None, [], [{"phase": "sft", "step": 1}]], ids=["no file", "empty", "sft only"])
def test_a_workdir_without_rl_records_starts_fresh(tmp_path, records, caplog):
    metrics = tmp_path / "metrics.jsonl"
    if records is not None:
        write_metrics(metrics, records)
    with caplog.at_level(logging.WARNING):
        training.check_fresh_start(str(metrics), tmp_path / "checkpoints", restart=False)
    assert not caplog.records


def test_training_refuses_before_building_the_model(tmp_path, monkeypatch):
    """The decision is wired into the train flow, ahead of the (slow) model build: a workdir
    whose checkpoints/ was deleted used to start again at update 1 silently."""
    def build_model(config):
        raise AssertionError("the model was built: the run went on from scratch")
    monkeypatch.setattr(training, "build_model", build_model)
    run = RunDirectory(str(tmp_path), tensorboard=False)
    write_metrics(tmp_path / "metrics.jsonl", RL_RECORDS)
    try:
        with CheckpointStore(run.file("checkpoints"), keep=get_config().train.keep_checkpoints) as store, pytest.raises(RuntimeError, match="holds no checkpoint"):
            training._train(get_config(), run, None, store, [], [])
    finally:
        run.close()
