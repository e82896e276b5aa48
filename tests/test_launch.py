"""Several processes through main.py (launch/local_multiprocess.sh: jax.distributed on this
machine, Gloo collectives on CPU, real Chromium per process), and the launch scripts'
command lines (DRY_RUN=1: printed, not run)."""

import json
import os
import re
import signal
import subprocess
import time

import pytest
from conftest import QUICK, ROOT, main_py

LAUNCH = os.path.join(ROOT, "launch")


def read(path) -> str:
    with open(path) as f:
        return f.read()


def metrics(workdir) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def process_with_id(index: int, workdir: str) -> int:
    """The pid of main.py process `index` of the run in `workdir` (from /proc's environments)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = read(f"/proc/{pid}/cmdline").split("\0")
            environment = read(f"/proc/{pid}/environ").split("\0")
        except OSError:
            continue
        if f"--workdir={workdir}" in command and f"JAX_PROCESS_ID={index}" in environment:
            return int(pid)
    raise AssertionError(f"no process {index} of {workdir}")


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """Two processes asked for up to 4 updates; after the second, SIGTERM reaches process 1
    only. Not tied to the suite's short run (conftest): under pytest-xdist the two go to
    different workers, so neither waits for the other. Returns the run's workdir."""
    workdir = str(tmp_path_factory.mktemp("launch") / "run")
    flags = [f for f in QUICK if not f.startswith("--config.rl.groups_per_batch")]   # the script's: one per process
    flags.append("--config.learner.rows_per_microbatch=2")   # one row of every microbatch from each process
    shots = os.path.join(workdir, "screenshots")   # one file store that both "hosts" share
    script = subprocess.Popen(["bash", os.path.join(LAUNCH, "local_multiprocess.sh"), "2", workdir, *flags,
                               "--config.train.max_updates=4", "--config.screenshots.driver=file",
                               f"--config.screenshots.path={shots}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 900
        while len(metrics(workdir)) < 2 and script.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if script.poll() is None:
            os.kill(process_with_id(1, workdir), signal.SIGTERM)
        out, err = script.communicate(timeout=600)
    finally:
        script.kill()
    logs = "".join(read(os.path.join(workdir, f"process_{i}.log"))[-3000:] for i in range(2)
                   if os.path.exists(os.path.join(workdir, f"process_{i}.log")))
    assert script.returncode == 0, err + logs
    return workdir


def test_two_processes_train_one_learner_and_stop_together(two_process_run):
    records = metrics(two_process_run)
    assert [r["update"] for r in records] in ([1, 2], [1, 2, 3])     # stopped by the SIGTERM, before 4
    assert [r["version"] for r in records] == [r["update"] for r in records]
    for record in records:   # each process brought one group of 2 episodes of 2 steps: 8 rows
        assert record["processes"] == 2 and record["rows"] == 8
        assert record["staleness_max"] <= 2
    fingerprints = {read(os.path.join(two_process_run, f"fingerprint.{i}")) for i in range(2)}
    assert len(fingerprints) == 1                                      # the same global parameters on both
    with open(os.path.join(two_process_run, "episodes.jsonl")) as f:
        assert sum(1 for _ in f) == 4 * len(records)                   # process 0 logs everyone's episodes
    logs = [read(os.path.join(two_process_run, f"process_{i}.log")) for i in range(2)]
    assert "SIGTERM" in logs[1] and "SIGTERM" not in logs[0]           # only process 1 was signalled ...
    saved = max(int(name) for name in os.listdir(os.path.join(two_process_run, "checkpoints")) if name.isdigit())
    assert saved == records[-1]["update"]                              # ... both stopped after the same update, saved
    assert all(f"stopped after update {saved}" in log for log in logs)
    assert "[rl]" in logs[0] and "[rl]" not in logs[1]                 # one writer, one progress line
    shots = os.path.join(two_process_run, "screenshots")
    assert {"host0", "host1"} <= set(os.listdir(shots))                 # the shared store, kept apart by host
    assert os.listdir(os.path.join(shots, "host1")) == ["rl"]


def test_a_single_process_resumes_the_two_process_checkpoint(two_process_run):
    """Restorable on another process count: the final checkpoint of the two-process run,
    restored in one process, gives the same parameter fingerprint."""
    written = read(os.path.join(two_process_run, "fingerprint.0"))
    saved = metrics(two_process_run)[-1]["update"]
    done = subprocess.run(main_py(two_process_run, "--config.rl.groups_per_batch=2",
                                  f"--config.train.max_updates={saved}", "--config.train.fingerprint=True"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed from checkpoint {saved}: update {saved}, version {saved}" in done.stdout
    assert "checkpoint of 2 processes restored on 1" in done.stderr
    assert read(os.path.join(two_process_run, "fingerprint.0")) == written


def dry_run(script, *arguments, **environment):
    done = subprocess.run(["bash", os.path.join(LAUNCH, script), *arguments], capture_output=True, text=True,
                          env={**os.environ, "DRY_RUN": "1", **environment}, timeout=60)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_local_multiprocess_commands():
    code, lines, _ = dry_run("local_multiprocess.sh", "3", "/tmp/w", "--config.sft.steps=0", PORT="4321")
    assert code == 0 and len(lines) == 3
    for index, line in enumerate(lines):
        assert f"JAX_COORDINATOR_ADDRESS=127.0.0.1:4321 JAX_NUM_PROCESSES=3 JAX_PROCESS_ID={index} " in line
        assert line.index("--config.rl.groups_per_batch=3") < line.index("--config.sft.steps=0")   # the caller's win
        assert "--config.train.fingerprint=True" in line and "--workdir=/tmp/w" in line
    assert not os.path.exists("/tmp/w/process_0.log")
    assert dry_run("local_multiprocess.sh", "zero", "/tmp/w")[0] == 2


def test_gpu_hosts_commands(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("gpu-a   # the coordinator\n\ngpu-b\n")
    code, lines, _ = dry_run("gpu_hosts.sh", "run", str(hostfile), "/shared/run", "--config=configs/instruct.py",
                             PROCESSES_PER_HOST="2", REMOTE_DIR="/opt/asyncwebrl")
    assert code == 0 and len(lines) == 4
    for index, line in enumerate(lines):
        host, rank = ("gpu-a", "gpu-b")[index // 2], index % 2
        assert line.startswith(f"ssh {host} 'cd /opt/asyncwebrl && env ")
        assert (f"JAX_COORDINATOR_ADDRESS=gpu-a:29500 JAX_NUM_PROCESSES=4 JAX_PROCESS_ID={index} "
                f"CUDA_VISIBLE_DEVICES={rank} ") in line
        assert "main.py --workdir=/shared/run --config=configs/instruct.py" in line
    code, lines, _ = dry_run("gpu_hosts.sh", "run", str(hostfile), "/shared/run")   # one process per host
    assert code == 0 and len(lines) == 2 and not any("CUDA_VISIBLE_DEVICES" in line for line in lines)
    code, lines, _ = dry_run("gpu_hosts.sh", "stop", str(hostfile), "/shared/run")
    assert code == 0 and [line.split()[1] for line in lines] == ["gpu-a", "gpu-b"]
    assert all("pkill -TERM -f main.py" in line for line in lines)
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    assert dry_run("gpu_hosts.sh", "run", str(empty), "/shared/run")[0] == 2
    assert dry_run("gpu_hosts.sh", "start", str(hostfile), "/shared/run")[0] == 2


def test_tpu_pod_commands():
    settings = {"ZONE": "us-central2-b", "ACCELERATOR": "v4-16", "PROJECT": "lab"}
    commands = {}
    for action in ("create", "copy", "setup", "run", "stop", "delete"):
        code, lines, err = dry_run("tpu_pod.sh", action, "pod1", "/mnt/shared/run", "--config=configs/instruct.py",
                                   **settings)
        assert code == 0, err
        commands[action] = lines
        assert all(line.startswith("gcloud compute tpus tpu-vm ") and "--zone=us-central2-b" in line
                   and "--project=lab" in line for line in lines)
    assert "create pod1" in commands["create"][0] and "--accelerator-type=v4-16" in commands["create"][0]
    assert re.search(r"scp \S+\.tar\.gz pod1:asyncwebrl\.tar\.gz .*--worker=all", commands["copy"][0])
    assert "tar -xzf asyncwebrl.tar.gz -C asyncwebrl" in commands["copy"][1]
    assert "JAX_EXTRA=tpu bash launch/setup.sh" in commands["setup"][0]
    run = commands["run"][0]
    assert "--worker=all" in run and ("main.py --coordinator=auto --workdir=/mnt/shared/run "
                                      "--config=configs/instruct.py") in run
    assert "pkill -TERM -f" in commands["stop"][0] and "delete pod1" in commands["delete"][0]
    assert dry_run("tpu_pod.sh", "run", "pod1", **settings)[0] == 2      # no WORKDIR
    assert dry_run("tpu_pod.sh", "create", "pod1")[0] == 2               # no ZONE
