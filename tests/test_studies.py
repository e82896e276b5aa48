"""The study runner (asyncwebrl/studies.py): a study file's arms and seeds become main.py
runs, each in its own workdir, and one report reads them all."""

import json
import os

import pytest

from asyncwebrl import studies
from conftest import QUICK

STUDY = '''
BASE = "configs/default.py:bare"
FLAGS = {FLAGS}
ARMS = {{"sync": {{"rl.eta": 0}}, "async": {{"rl.eta": 1}}}}
SEEDS = (0,)
'''


def quick_flags() -> dict:
    """The tests' quick run (conftest.QUICK) as study keys, plus one update and a one-task,
    one-step evaluation before and after."""
    flags = dict(flag.removeprefix("--config.").split("=", 1) for flag in QUICK if flag.startswith("--config."))
    flags.update({"train.max_updates": "1", "eval.num_tasks": "1", "agent.test_step_limits": "(1,1,1)"})
    return flags


def write_study(tmp_path, text: str) -> str:
    path = tmp_path / "eta.py"
    path.write_text(text)
    return str(path)


def test_a_bad_study_file_names_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match=r"missing \['SEEDS'\]"):
        studies.load_study(write_study(tmp_path, 'BASE = "configs/default.py"\nFLAGS = {}\nARMS = {"a": {}}\n'))
    with pytest.raises(ValueError, match="keys in both FLAGS and an arm: \\['rl.eta'\\]"):
        studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={"rl.eta": 2})))
    with pytest.raises(ValueError, match="BASE 'configs/nowhere.py' is not a config file"):
        studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={}).replace("configs/default.py:bare",
                                                                               "configs/nowhere.py")))


def test_a_key_the_base_config_lacks_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match=r"ARMS\['async'\] sets keys the base config does not have: \['rl.etta'\]"):
        studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={}).replace('"rl.eta": 1', '"rl.etta": 1')))


def test_the_shipped_studies_load():
    folder = os.path.join(studies.ROOT, "configs", "studies")
    names = sorted(name for name in os.listdir(folder) if name.endswith(".py") and not name.startswith("_"))
    assert names and all(studies.load_study(os.path.join(folder, name)).arms for name in names)


def test_an_arm_and_seed_become_one_main_py_command(tmp_path):
    study = studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={"agent.train_step_limits": (2, 3, 4)})))
    line = studies.command(study, "async", 0, "/out")
    assert line[2].endswith("configs/default.py:bare") and "--workdir=/out/async/seed0" in line
    assert line[-3:] == ["--config.agent.train_step_limits=(2,3,4)", "--config.rl.eta=1", "--config.seed=0"]
    assert studies.flag_value((5,)) == "(5,)"


def test_every_arm_runs_in_a_workdir_of_its_own_and_one_report_reads_them(tmp_path):
    study = studies.load_study(write_study(tmp_path, STUDY.format(FLAGS=quick_flags())))
    out = str(tmp_path / "study")
    assert studies.main(["run", write_study(tmp_path, STUDY.format(FLAGS=quick_flags())), "--out", out,
                         "--parallel", "2"]) == 0
    for arm, eta in (("sync", 0), ("async", 1)):
        config = json.load(open(os.path.join(out, arm, "seed0", "config.json")))
        assert config["rl"]["eta"] == eta and config["train"]["max_updates"] == 1
    report = json.load(open(os.path.join(out, "report.json")))
    assert [arm["arm"] for arm in report["arms"]] == ["sync", "async"]
    for arm in report["arms"]:
        assert arm["seeds_finished"] == [0]
        assert arm["before"]["episodes"] == arm["after"]["episodes"] == 1    # the one task, before and after
        assert len(arm["change_per_seed"]) == 1 and arm["update_seconds"] > 0
    table = open(os.path.join(out, "report.md")).read()
    assert "| sync | `rl.eta=0` | 1 |" in table and "| async | `rl.eta=1` | 1 |" in table
    assert open(os.path.join(out, "report.png"), "rb").read(4) == b"\x89PNG"
    # finished runs are not run again
    assert studies.run(study, out, parallel=2) == []


def test_a_stopped_study_stops_its_runs_and_waits_for_their_checkpoints(tmp_path, monkeypatch):
    """SIGTERM to the runner reaches every running run (main.py checkpoints on it) and the
    runner waits for them, so no run is left behind writing to its workdir."""
    import signal
    import sys
    import threading
    study = studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={})))
    run_script = ("import signal, sys, time\n"
                  "def stop(*_):\n"
                  "    open(sys.argv[1], 'w').write('checkpointed'); sys.exit(0)\n"
                  "signal.signal(signal.SIGTERM, stop)\n"
                  "open(sys.argv[1] + '.started', 'w').close()\n"
                  "time.sleep(60)\n")
    monkeypatch.setattr(studies, "command", lambda study, arm, seed, out: [
        sys.executable, "-c", run_script, os.path.join(studies.workdir(out, arm, seed), "stopped")])
    out = str(tmp_path / "study")
    markers = [os.path.join(out, arm, "seed0", "stopped") for arm in ("sync", "async")]

    def stop_when_both_started():
        while not all(os.path.exists(m + ".started") for m in markers):
            threading.Event().wait(0.1)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=stop_when_both_started, daemon=True).start()
    results = studies.run(study, out, parallel=2)
    assert sorted(results) == [("async", 0, 0), ("sync", 0, 0)]
    assert all(open(m).read() == "checkpointed" for m in markers)
    assert signal.getsignal(signal.SIGTERM) is not studies._raise_stop   # the runner's handler is gone
