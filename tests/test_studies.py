"""The study runner (asyncwebrl/studies.py): a study file's arms and seeds become main.py
runs, each in its own workdir, and one report reads them all."""

import ast
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


def test_every_arm_of_the_shipped_studies_passes_main_pys_checks():
    """Each arm's config as its runs get it, through validate_config: the agent settings
    included, which must be those its warm start records (asyncwebrl/runtime/agent_record.py)."""
    from asyncwebrl.runtime.validate import validate_config

    folder = os.path.join(studies.ROOT, "configs", "studies")
    for name in sorted(name for name in os.listdir(folder) if name.endswith(".py") and not name.startswith("_")):
        study = studies.load_study(os.path.join(folder, name))
        for arm, keys in study.arms.items():
            config = studies.base_config(study.base)
            for key, value in {**study.flags, **keys}.items():
                section, field = key.rsplit(".", 1)
                node = config
                for part in section.split("."):
                    node = node[part]
                node[field] = value
            try:
                validate_config(config)
            except ValueError as error:
                raise AssertionError(f"{name} arm {arm}: {error}") from None


def test_an_arm_and_seed_become_one_main_py_command(tmp_path):
    study = studies.load_study(write_study(tmp_path, STUDY.format(FLAGS={"agent.train_step_limits": (2, 3, 4)})))
    line = studies.command(study, "async", 0, "/out")
    assert line[2].endswith("configs/default.py:bare") and "--workdir=/out/async/seed0" in line
    assert line[-3:] == ["--config.agent.train_step_limits=(2,3,4)", "--config.rl.eta=1", "--config.seed=0"]
    assert studies.flag_value((5,)) == "(5,)"
    # strings in a tuple stay strings (absl reads an unquoted (short,) as the one string "(short,)")
    assert ast.literal_eval(studies.flag_value(("short",))) == ("short",)


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """(study file, out) of a real two-arm study run, each arm 2 updates with every
    checkpoint kept: one run for the tests of `run`, `report` and `curve` below."""
    folder = tmp_path_factory.mktemp("study")
    flags = {**quick_flags(), "train.max_updates": "2", "train.checkpoint_every": "1", "train.keep_checkpoints": "3"}
    path, out = write_study(folder, STUDY.format(FLAGS=flags)), str(folder / "study")
    assert studies.main(["run", path, "--out", out, "--parallel", "2"]) == 0
    return path, out


def test_every_arm_runs_in_a_workdir_of_its_own_and_one_report_reads_them(study_run):
    path, out = study_run
    for arm, eta in (("sync", 0), ("async", 1)):
        config = json.load(open(os.path.join(out, arm, "seed0", "config.json")))
        assert config["rl"]["eta"] == eta and config["train"]["max_updates"] == 2
    report = json.load(open(os.path.join(out, "report.json")))
    assert [arm["arm"] for arm in report["arms"]] == ["sync", "async"]
    for arm in report["arms"]:
        assert arm["seeds_finished"] == [0]
        assert arm["before"]["episodes"] == arm["after"]["episodes"] == 1    # the one task, before and after
        assert len(arm["change_per_seed"]) == 1 and arm["update_seconds"] > 0
        # the dynamics over training are the run's own per-update values (one seed: no averaging)
        logged = [json.loads(line) for line in open(os.path.join(out, arm["arm"], "seed0", "metrics.jsonl"))]
        update = next(record for record in logged if record.get("phase") == "rl" and record.get("update") == 1)
        assert arm["dynamics_by_update"]["response_tokens_per_step"]["1"] == update["response_tokens_per_step"] > 0
    table = open(os.path.join(out, "report.md")).read()
    assert "| sync | `rl.eta=0` | 1 |" in table and "| async | `rl.eta=1` | 1 |" in table
    assert open(os.path.join(out, "report.png"), "rb").read(4) == b"\x89PNG"
    # finished runs are not run again
    assert studies.run(studies.load_study(path), out, parallel=2) == []


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


# ---------------------------------------------------------------- the report, as notebooks read it

def fake_run(out, arm, seed, loss=None, memory_share=None, wall=(10.0, 30.0), summary=None):
    """A finished run's files as main.py leaves them: config.json (when `loss` is given),
    metrics.jsonl (two RL updates), summary.json; no eval json (a study whose evaluations
    were not kept)."""
    directory = os.path.join(out, arm, f"seed{seed}")
    os.makedirs(directory)
    if loss is not None:
        config = {"seed": seed, "loss": {"kind": "grpo", "normalizer": "const", "decoupled": True, **loss},
                  "rl": {"eta": 2, "reward": "success"}, "agent": {"train_step_limits": [6, 10, 14]}}
        json.dump(config, open(os.path.join(directory, "config.json"), "w"))
    with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
        for update, seconds in enumerate(wall, start=1):
            f.write(json.dumps({"phase": "rl", "update": update, "wall_seconds": seconds, "clip_ratio": 0.01 * update,
                                "memory_generic_key_share": memory_share, "collected_success_rate": 0.5}) + "\n")
    json.dump(summary or {"success_before": 0.25, "success_after": 0.5, "interval_95_before": [0.1, 0.4],
                          "interval_95_after": [0.3, 0.7]}, open(os.path.join(directory, "summary.json"), "w"))
    return directory


def test_a_study_without_its_file_is_read_from_its_runs_and_arms_that_differ_in_one_setting_pair_up(tmp_path):
    out = str(tmp_path / "study")
    fake_run(out, "const", 0, loss={}, memory_share=0.1)
    fake_run(out, "const", 1, loss={}, memory_share=0.3)
    fake_run(out, "traj", 0, loss={"normalizer": "traj"})              # logged no readable Memory
    fake_run(out, "coupled", 0, loss={"decoupled": False}, memory_share=0.2)
    report = studies.load_report(out)
    assert json.load(open(os.path.join(out, "report.json"))) == json.loads(json.dumps(report))
    assert os.path.exists(os.path.join(out, "report.md")) and os.path.exists(os.path.join(out, "report.png"))
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert sorted(arms) == ["const", "coupled", "traj"] and arms["const"]["seeds_finished"] == [0, 1]
    # an arm's keys: where its config differs from the others' (the seed is no arm's key)
    assert arms["traj"]["keys"] == {"loss.decoupled": True, "loss.normalizer": "traj"}
    assert arms["coupled"]["settings"] == {"loss.kind": "grpo", "loss.normalizer": "const", "loss.decoupled": False,
                                           "rl.eta": 2, "agent.train_step_limits": [6, 10, 14], "rl.reward": "success"}
    assert arms["const"]["dynamics"]["memory_generic_key_share"] == pytest.approx(0.2)
    assert arms["traj"]["dynamics"]["memory_generic_key_share"] is None          # no data: null, not 0
    assert arms["const"]["dynamics"]["clip_ratio"] == pytest.approx(0.015)
    assert arms["const"]["wall_seconds_per_update"] == pytest.approx(15.0)      # 30 s at update 2
    # no eval json kept: nothing pooled, and each seed's own evaluation from its summary.json
    assert arms["const"]["before"] == {"success": None, "interval_95": None, "episodes": 0}
    assert arms["const"]["per_seed"][1] == {"seed": 1, "success_before": 0.25, "interval_95_before": [0.1, 0.4],
                                            "success_after": 0.5, "interval_95_after": [0.3, 0.7]}
    names = lambda pairs: [(a["arm"], b["arm"]) for a, b in pairs]
    assert names(studies.paired_arms(report, "loss.normalizer")) == [("const", "traj")]
    assert names(studies.paired_arms(report, "loss.decoupled")) == [("const", "coupled")]
    assert studies.paired_arms(report, "rl.eta") == []


def test_a_fresh_report_is_read_and_a_stale_one_rebuilt_from_the_study_it_names(tmp_path):
    out = str(tmp_path / "decoupling_runs")
    summary = fake_run(out, "coupled_eta2", 0) + "/summary.json"      # no config.json: the study file says
    fake_run(out, "decoupled_eta2", 0)
    path = os.path.join(out, "report.json")
    json.dump({"study": "decoupling", "arms": []}, open(path, "w"))
    os.utime(summary, (os.path.getmtime(path) - 10,) * 2)
    assert studies.load_report(out) == {"study": "decoupling", "arms": []}   # newer than every run: as it is
    os.utime(summary, (os.path.getmtime(path) + 10,) * 2)
    report = studies.load_report(out)                                  # a run finished since: rebuilt
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert report["study"] == "decoupling" and list(arms) == list(studies.load_study(
        os.path.join(studies.ROOT, "configs", "studies", "decoupling.py")).arms)
    assert arms["coupled_eta2"]["seeds_finished"] == [0] and arms["coupled_eta4"]["seeds_finished"] == []
    # settings: the arm's keys, then the study's FLAGS, then the base config's defaults
    assert arms["coupled_eta2"]["settings"]["loss.decoupled"] is False and arms["coupled_eta2"]["settings"]["rl.eta"] == 2
    assert arms["coupled_eta2"]["settings"]["loss.normalizer"] == "const" and arms["coupled_eta2"]["settings"]["loss.kind"] == "grpo"
    base = studies.base_config("configs/warm_start.py")
    assert arms["coupled_eta2"]["settings"]["agent.train_step_limits"] == list(base.agent.train_step_limits)
    pairs = [(a["arm"], b["arm"]) for a, b in studies.paired_arms(report, "loss.decoupled")]
    assert pairs == [("decoupled_eta2", "coupled_eta2"), ("decoupled_eta4", "coupled_eta4"),
                     ("decoupled_eta4_unpaced", "coupled_eta4_unpaced")]   # paired within rl.pace_admission too


def test_the_report_compares_the_same_tasks_before_and_after_and_arms_with_each_other(tmp_path):
    """Each seed's tasks, pooled as "seed/task": within an arm before -> after, between arms
    after against after on the seeds both finished, with the sign test's p; an arm whose eval
    json kept no per-task results has none (null, not 0)."""
    out = str(tmp_path / "study")
    tasks = [f"t{i}" for i in range(12)]

    def evaluate(directory, name, solved):
        json.dump({"episodes": len(tasks), "success_rate": len(solved) / len(tasks),
                   "task_success": {t: float(t in solved) for t in tasks}}, open(os.path.join(directory, name), "w"))

    for seed in (0, 1):
        a = fake_run(out, "a", seed, loss={})
        evaluate(a, "eval_before.json", {"t0", "t1"})
        evaluate(a, "eval.json", {"t0", "t1", "t2", "t3", "t4", "t5", "t6"})      # +5 a seed
        b = fake_run(out, "b", seed, loss={"normalizer": "traj"})
        evaluate(b, "eval_before.json", {"t0", "t1"})
        evaluate(b, "eval.json", {"t1", "t2"})                                      # +1, -1 a seed
    fake_run(out, "c", 0, loss={"decoupled": False})                               # no eval json kept
    report = studies.load_report(out)
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert arms["a"]["paired_change"] == {"tasks": 24, "gained": 10, "lost": 0, "p_value": 0.001953}
    assert arms["b"]["paired_change"] == {"tasks": 24, "gained": 2, "lost": 2, "p_value": 1.0}
    assert arms["c"]["paired_change"] is None
    assert report["compared"] == [{"arms": ["a", "b"], "seeds": [0, 1], "tasks": 24, "only_first": 10,
                                   "only_second": 0, "p_value": 0.001953}]
    markdown = open(os.path.join(out, "report.md")).read()
    assert "| a | 24 | 10 | 0 | 0.00195 |" in markdown and "| a vs b | 24 | 10 | 0 | 0.00195 |" in markdown


def test_curve_evaluates_the_checkpoints_between_first_and_last_update_on_the_same_tasks(study_run):
    """A run that kept its checkpoints: `curve` evaluates the one between update 0 and the
    last (those two are eval_before.json and eval.json) with the run's own keys, and the report
    sets held-out success at updates 0, 1, 2 against the run's RL wall clock; run again, it
    has nothing left to do."""
    path, out = study_run
    run_dir = os.path.join(out, "async", "seed0")
    assert studies.kept_updates(run_dir) == [0, 1, 2]
    assert studies.main(["curve", path, "--out", out, "--parallel", "2"]) == 0
    evaluated = json.load(open(os.path.join(run_dir, "heldout", "update1", "eval.json")))
    before = json.load(open(os.path.join(run_dir, "eval_before.json")))
    assert set(evaluated["task_success"]) == set(before["task_success"]) and evaluated["episodes"] == 1
    config = json.load(open(os.path.join(run_dir, "heldout", "update1", "config.json")))
    assert config["model"]["checkpoint_step"] == 1 and config["rl"]["eta"] == 1 and config["policy"] == "model"
    assert "model: checkpoint 1 (version 1)" in open(os.path.join(run_dir, "heldout", "update1", "main.log")).read()
    assert os.listdir(os.path.join(run_dir, "heldout")) == ["update1"]   # 0 and 2 are the run's own evaluations
    assert os.listdir(os.path.join(out, "sync", "seed0", "heldout")) == ["update1"]   # every arm's runs
    arm = json.load(open(os.path.join(out, "report.json")))["arms"][1]
    logged = {r["update"]: r for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
              if r.get("phase") == "rl"}
    assert [p["update"] for p in arm["held_out_by_update"]] == [0, 1, 2]
    middle = arm["held_out_by_update"][1]
    assert middle["seeds"] == [0] and middle["episodes"] == 1 and middle["wall_seconds"] == logged[1]["wall_seconds"]
    assert middle["episodes_collected"] == logged[1]["episodes"] > 0
    assert "| async | 1 | 1 |" in open(os.path.join(out, "report.md")).read()
    assert studies.curve(studies.load_study(path), out) == []


def test_a_curve_point_on_other_tasks_is_refused_and_points_pool_the_seeds_that_have_them(tmp_path):
    out = str(tmp_path / "study")

    def evaluate(path, tasks, solved):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        json.dump({"episodes": len(tasks), "success_rate": len(solved) / len(tasks),
                   "task_success": {t: float(t in solved) for t in tasks}}, open(path, "w"))

    tasks = ["t0", "t1", "t2", "t3"]
    for seed in (0, 1):
        run_dir = fake_run(out, "a", seed, loss={}, summary={"updates": 2, "success_before": 0.25, "success_after": 0.5})
        evaluate(os.path.join(run_dir, "eval_before.json"), tasks, {"t0"})
        evaluate(os.path.join(run_dir, "eval.json"), tasks, {"t0", "t1"})
    evaluate(os.path.join(out, "a", "seed0", "heldout", "update1", "eval.json"), tasks, {"t0", "t1", "t2"})
    points = studies.arm_report(out, "a", (0, 1))["held_out_by_update"]
    assert [(p["update"], p["seeds"], p["success"], p["wall_seconds"]) for p in points] == [
        (0, [0, 1], 0.25, 0.0), (1, [0], 0.75, 10.0), (2, [0, 1], 0.5, 30.0)]
    by_seed = studies.arm_report(out, "a", (0, 1))["held_out_by_seed"]   # each seed's own curve, for the plot
    assert [p["update"] for p in by_seed[0]] == [0, 1, 2] and [p["update"] for p in by_seed[1]] == [0, 2]
    with open(os.path.join(out, "a", "seed0", "metrics.jsonl"), "a") as f:   # resumed at update 2: its clock restarts
        f.write(json.dumps({"phase": "rl", "update": 2, "wall_seconds": 5.0, "episodes": 9}) + "\n")
    points = studies.arm_report(out, "a", (0, 1))["held_out_by_update"]
    assert [(p["update"], p["wall_seconds"], p["episodes_collected"]) for p in points] == [
        (0, 0.0, 0), (1, None, None), (2, 30.0, 9.0)]   # seed 0's clock dropped; its last update 2 counted
    evaluate(os.path.join(out, "a", "seed1", "heldout", "update1", "eval.json"), ["x0", "x1"], {"x0"})
    with pytest.raises(ValueError, match="seed1/heldout/update1/eval.json: evaluated other tasks"):
        studies.arm_report(out, "a", (0, 1))
