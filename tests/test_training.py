"""The train flow of main.py end to end: tiny model, real Chromium, the local web.
Runs are short (conftest.QUICK)."""

import collections
import json
import os
import signal
import subprocess
import time

from conftest import main_py


def rl_records(workdir):
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in map(json.loads, filter(str.strip, f)) if r.get("phase") == "rl"]


def checkpoint_steps(workdir):
    folder = os.path.join(workdir, "checkpoints")
    return sorted(int(name) for name in os.listdir(folder) if name.isdigit()) if os.path.isdir(folder) else []


def wait_for_updates(process, workdir, count, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"main.py exited early ({process.returncode})")
        if len(rl_records(workdir)) >= count and count in checkpoint_steps(workdir):
            return
        time.sleep(0.5)
    raise AssertionError(f"no {count} updates within {timeout} s")


def test_short_asynchronous_run_keeps_staleness_within_eta(short_run_process, tmp_path):
    workdir, done = short_run_process
    assert done.returncode == 0, done.stderr[-3000:]
    records = rl_records(workdir)
    assert [r["update"] for r in records] == [1, 2, 3, 4]
    assert [r["version"] for r in records] == [1, 2, 3, 4]           # one published version per update
    for record in records:
        assert 0 <= record["staleness_mean"] <= record["staleness_max"] <= 1   # eta = 1
        for name in ("episodes", "success_rate", "clip_ratio", "behave_cap_ratio", "loss", "tokens_per_step",
                     "steps_per_episode", "trajectories_per_hour", "sampler_busy", "learner_busy",
                     "memory_generic_key_share", "memory_key_persistence", "response_tokens_per_step",
                     "rows", "rows_trained"):
            assert name in record, name
        assert record["prefill_cache_share"] == 0.0   # the bare config's cache is off, and it had prompts
        # every episode finished since the previous update, trained on or not: null when none
        # finished in between (the update trained on groups that were already waiting)
        assert record["collected_success_rate"] is None or 0 <= record["collected_success_rate"] <= 1
    assert records[0]["collected_success_rate"] is not None   # the first update's groups finished before it
    assert records[-1]["episodes"] >= 8
    assert checkpoint_steps(workdir)[-1] == 4
    assert os.listdir(os.path.join(workdir, "events"))                 # TensorBoard events
    sample = os.path.join(workdir, "trajectories", "update_000001")
    assert {"trajectory.json", "index.html"} <= set(os.listdir(sample)) and any(n.endswith(".png") for n in os.listdir(sample))
    assert os.path.exists(os.path.join(workdir, "trajectories", "index.html"))     # the viewer's list
    with open(os.path.join(workdir, "episodes.jsonl")) as f:
        episodes = [json.loads(line) for line in f]
    assert collections.Counter(e["update"] for e in episodes) == {1: 2, 2: 2, 3: 2, 4: 2}   # each trained group of 2
    assert {"task", "success", "memories", "response_tokens"} <= set(episodes[0])
    summary = json.load(open(os.path.join(workdir, "summary.json")))
    assert summary["updates"] == 4 and summary["staleness_max"] <= 1
    assert summary["paired_change"] is None   # no evaluation (eval.num_tasks=0): nothing to compare, not 0
    assert "[summary]" in done.stdout
    evaluation = str(tmp_path / "eval")   # the trained weights, evaluated from a workdir of its own
    evaluated = subprocess.run(
        main_py(evaluation, "--mode=eval", "--config.policy=model", "--config.eval.num_tasks=1",
                "--config.agent.test_step_limits=(1,1,1)", f"--config.model.checkpoint={workdir}/checkpoints"),
        capture_output=True, text=True, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "model: checkpoint 4 (version 4)" in evaluated.stdout
    evaluated_json = json.load(open(os.path.join(evaluation, "eval.json")))
    assert evaluated_json["episodes"] == 1 and list(evaluated_json["task_success"].values()) in ([0.0], [1.0])


def test_interrupted_runs_resume_from_their_checkpoints(tmp_path):
    """SIGTERM: the update in progress finishes, a checkpoint is saved, exit 0. SIGKILL:
    nothing is saved at the kill. After each, a restart on the workdir continues from the
    last checkpoint with the version and the counters restored."""
    workdir = str(tmp_path / "run")
    command = main_py(workdir, "--config.train.max_updates=4", "--config.rl.eta=2")

    def interrupt(kill, after_updates):
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_updates(process, workdir, after_updates)
            process.send_signal(kill)
            out, err = process.communicate(timeout=300)
        finally:
            process.kill()
        return process.returncode, out, err

    code, out, err = interrupt(signal.SIGTERM, after_updates=1)
    assert code == 0, err[-3000:]
    assert "run again with the same --workdir to resume" in out
    assert checkpoint_steps(workdir)[-1] == rl_records(workdir)[-1]["update"]   # the stop saved its state
    for kill in (signal.SIGKILL, None):
        saved = checkpoint_steps(workdir)[-1]
        before = rl_records(workdir)
        at_save = next(r for r in before if r["update"] == saved)
        if kill is None:
            done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
            assert done.returncode == 0, done.stderr[-3000:]
        else:
            interrupt(kill, after_updates=saved + 1)
        resumed = rl_records(workdir)[len(before):]
        assert resumed[0]["update"] == saved + 1                                     # from the checkpoint
        assert [r["version"] for r in resumed] == [r["update"] for r in resumed]    # version restored
        assert resumed[0]["episodes"] > at_save["episodes"]                         # counters continue
        # and so does the RL clock, from the time the checkpoint recorded
        with open(os.path.join(workdir, "checkpoints", str(saved), "runtime", "metadata")) as f:
            clock_at_save = json.load(f)["rl_seconds"]
        assert resumed[0]["wall_seconds"] > clock_at_save >= at_save["wall_seconds"]
    assert rl_records(workdir)[-1]["update"] == 4 and checkpoint_steps(workdir)[-1] == 4


def test_the_rl_time_budget_ends_rl_and_the_run_goes_on_to_its_summary(tmp_path):
    """train.max_rl_minutes: once spent, no new update starts (the one in progress finishes),
    and the run is not left to be resumed but summarised, saying how many updates it did."""
    workdir = str(tmp_path / "run")
    done = subprocess.run(main_py(workdir, "--config.train.max_updates=1000", "--config.train.max_rl_minutes=0.25"),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RL time budget of 0.25 min is spent" in done.stdout
    assert "run again with the same --workdir" not in done.stdout
    summary = json.load(open(os.path.join(workdir, "summary.json")))
    updates = len(rl_records(workdir))
    assert summary["rl_time_budget_spent"] is True and summary["max_updates"] == 1000
    assert summary["updates"] == updates < 1000
    assert f"ended RL after {updates} of 1000 updates" in done.stdout
    if updates:
        assert checkpoint_steps(workdir)[-1] == updates   # what was trained is saved
