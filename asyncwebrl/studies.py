"""Studies: every arm of an experiment for several seeds, each run a `main.py` of its own,
then one report.

    python -m asyncwebrl.studies run configs/studies/update_steps.py --out runs/studies/steps --parallel 2
    python -m asyncwebrl.studies curve configs/studies/async_sync.py --out runs/studies/async_sync --parallel 2
    python -m asyncwebrl.studies report configs/studies/update_steps.py --out runs/studies/steps

A study is a Python file (configs/studies/) with four names: BASE, the config file every
run starts from; FLAGS, config keys set for every run; ARMS, arm name -> the keys that make
that arm; SEEDS, the seeds each arm runs. Run `arm`, seed `s` is
`main.py --config=BASE --workdir=OUT/arm/seed<s> --config.seed=s --config.key=value ...`
(FLAGS, then the arm's keys). `run` starts `--parallel` of them at a time, each logging to
its workdir's `main.log`, and skips those already finished (a summary.json); one stopped
halfway resumes from its checkpoint, as main.py does. `report` reads every finished run's
summary.json, eval_before.json, eval.json and metrics.jsonl and writes OUT/report.md (a
table per arm: held-out success before and after, pooled over seeds with a 95% interval,
and each seed's change; task by task, the tasks solved only after and only before RL and
between every two arms, with the exact sign test's p), OUT/report.json (the same, for
notebooks) and OUT/report.png (the policy's success over updates, and held-out success
before and after, by arm).

`curve` evaluates, greedy on the same held-out tasks, every checkpoint a finished run kept
between its first and last update (a study keeps them with train.keep_checkpoints), into
W/heldout/update<u>/: the report then sets held-out success against the RL phase's wall clock
and the episodes collected (the asynchronous-against-synchronous question: which arm gets
there sooner), not only before against after.

report.json also gives each arm's keys and the SETTINGS it ran with, so that a reader can
set arms that differ in one setting alone side by side (paired_arms). Notebooks read it
with load_report(OUT), which builds it when it is missing or older than the runs, from the
study file or, without one, from the runs' own config.json (study_from_runs). A number a
run did not record is null there, never 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

from asyncwebrl.runtime.evaluate import paired_change, wilson_interval
from asyncwebrl.runtime.rundir import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOP_GRACE_S = 300.0   # how long a stopped run may take to finish its update and checkpoint


@dataclasses.dataclass(frozen=True)
class Study:
    name: str
    base: str                 # the config file every run starts from
    flags: dict               # config key -> value, for every run
    arms: dict                # arm -> {config key: value}
    seeds: tuple


def load_study(path: str) -> Study:
    """The study file's BASE, FLAGS, ARMS and SEEDS, checked (a ValueError names the field)."""
    module = _module_at(path)
    missing = [name for name in ("BASE", "FLAGS", "ARMS", "SEEDS") if not hasattr(module, name)]
    if missing:
        raise ValueError(f"{path}: a study defines BASE, FLAGS, ARMS and SEEDS; missing {missing}")
    if not os.path.exists(os.path.join(ROOT, module.BASE.split(":")[0])):
        raise ValueError(f"{path}: BASE {module.BASE!r} is not a config file of the repository")
    if not module.ARMS or not all(isinstance(keys, dict) for keys in module.ARMS.values()):
        raise ValueError(f"{path}: ARMS must map each arm's name to a dict of config keys")
    if not module.SEEDS:
        raise ValueError(f"{path}: SEEDS is empty")
    shared = set(module.FLAGS) & {key for keys in module.ARMS.values() for key in keys}
    if shared:   # an arm's key would silently override a shared one, or be overridden
        raise ValueError(f"{path}: keys in both FLAGS and an arm: {sorted(shared)}")
    config = base_config(module.BASE)
    for where, keys in [("FLAGS", module.FLAGS)] + [(f"ARMS[{arm!r}]", keys) for arm, keys in module.ARMS.items()]:
        unknown = [key for key in keys if not has_key(config, key)]
        if unknown:
            raise ValueError(f"{path}: {where} sets keys the base config does not have: {unknown}")
    return Study(name=os.path.splitext(os.path.basename(path))[0], base=module.BASE, flags=dict(module.FLAGS),
                 arms={arm: dict(keys) for arm, keys in module.ARMS.items()}, seeds=tuple(module.SEEDS))


def base_config(base: str):
    """The ConfigDict of "configs/x.py" or "configs/x.py:variant", as main.py would load it."""
    path, _, variant = base.partition(":")
    module = _module_at(os.path.join(ROOT, path))
    return module.get_config(variant) if variant else module.get_config()


def _module_at(path: str):
    """The Python file at `path`, run as a module of its own (study and config files, which
    import their siblings as `configs.x` and `configs.studies._x`)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_key(config, key: str) -> bool:
    node = config
    for part in key.split("."):
        if not hasattr(node, "keys") or part not in node:
            return False
        node = node[part]
    return True


def flag_value(value) -> str:
    """A config value as absl's --config.key= reads it back."""
    if isinstance(value, tuple):   # strings quoted: absl reads (short,) as one string, ("short",) as a tuple
        items = [json.dumps(v) if isinstance(v, str) else flag_value(v) for v in value]
        return "(" + ",".join(items) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def workdir(out: str, arm: str, seed: int) -> str:
    return os.path.join(out, arm, f"seed{seed}")


def command(study: Study, arm: str, seed: int, out: str) -> list[str]:
    keys = {**study.flags, **study.arms[arm], "seed": seed}
    return [sys.executable, os.path.join(ROOT, "main.py"), f"--config={os.path.join(ROOT, study.base)}",
            f"--workdir={workdir(out, arm, seed)}", *(f"--config.{key}={flag_value(v)}" for key, v in keys.items())]


def finished(out: str, arm: str, seed: int) -> bool:
    return os.path.exists(os.path.join(workdir(out, arm, seed), "summary.json"))


def run(study: Study, out: str, parallel: int = 1) -> list[tuple[str, int, int]]:
    """Every (arm, seed) not yet finished, `parallel` at a time; returns (arm, seed, exit code)."""
    out = os.path.abspath(out)   # the runs start in the repository's root
    pending = [(arm, seed) for arm in study.arms for seed in study.seeds if not finished(out, arm, seed)]
    print(f"[study] {study.name}: {len(pending)} of {len(study.arms) * len(study.seeds)} runs to go, "
          f"{parallel} at a time", flush=True)
    jobs = [Job(f"{arm} seed {seed}", command(study, arm, seed, out), workdir(out, arm, seed), (arm, seed))
            for arm, seed in pending]
    # each run checkpoints on SIGTERM and resumes on the next `run`
    return [(*job.key, code) for job, code in run_jobs(jobs, parallel, "`run` again resumes them")]


@dataclasses.dataclass(frozen=True)
class Job:
    label: str          # for the progress lines
    argv: list          # the main.py command
    directory: str      # where it logs (main.log)
    key: tuple          # what the caller knows it by


def run_jobs(jobs: list[Job], parallel: int, on_stop: str) -> list[tuple[Job, int]]:
    """Run the jobs `parallel` at a time, each logging to its directory's main.log; returns
    (job, exit code) as each ends. SIGTERM or Ctrl-C stops the running ones (main.py
    checkpoints on SIGTERM) and waits for them; `on_stop` says what then resumes them."""
    env = dict(os.environ)
    if parallel > 1:   # JAX takes 75% of a GPU's memory per process by default: runs sharing one get a share each
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / parallel:.2f}")
    pending, running, results = list(jobs), {}, []
    previous_handler = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                os.makedirs(job.directory, exist_ok=True)
                log = open(os.path.join(job.directory, "main.log"), "a")
                process = subprocess.Popen(job.argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
                running[process] = (job, log, time.monotonic())
            time.sleep(1.0)
            for process in [p for p in running if p.poll() is not None]:
                job, log, started = running.pop(process)
                log.close()
                results.append((job, process.returncode))
                print(f"[study] {job.label}: exit {process.returncode} after {time.monotonic() - started:.0f} s "
                      f"({job.directory}/main.log)", flush=True)
    except (KeyboardInterrupt, _Stop):
        print(f"[study] stopping {len(running)} running job(s); {on_stop}", flush=True)
        for process in running:
            process.terminate()
        for process, (job, log, _) in running.items():
            try:   # a training run finishes its update in progress before it checkpoints
                code = process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            results.append((job, code))
            log.close()
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    return results


# W/heldout/update<u>/eval.json: the held-out evaluation of the checkpoint run W saved at update u
HELD_OUT_CURVE = "heldout"


def kept_updates(directory: str) -> list[int]:
    """The updates whose checkpoints run `directory` kept (orbax names a step's folder by its
    number; the steps are updates), oldest first."""
    return sorted(_numbered(os.path.join(directory, "checkpoints")))


def _numbered(folder: str, prefix: str = "") -> set[int]:
    """N of every entry named prefix + N (N digits) in `folder` (none if it does not exist)."""
    names = os.listdir(folder) if os.path.isdir(folder) else ()
    return {int(name[len(prefix):]) for name in names if name.startswith(prefix) and name[len(prefix):].isdigit()}


def curve_command(study: Study, arm: str, seed: int, out: str, update: int) -> list[str]:
    """The run's own main.py command turned into a greedy evaluation of its checkpoint at
    `update`, on the same held-out tasks (a seed draws them whatever the mode)."""
    run_dir = workdir(out, arm, seed)
    line = [part for part in command(study, arm, seed, out) if not part.startswith("--workdir=")]
    return [*line, "--mode=eval", f"--workdir={os.path.join(run_dir, HELD_OUT_CURVE, f'update{update}')}",
            "--config.policy=model", f"--config.model.checkpoint={os.path.join(run_dir, 'checkpoints')}",
            f"--config.model.checkpoint_step={update}"]


def curve(study: Study, out: str, parallel: int = 1) -> list[tuple[str, int, int, int]]:
    """Evaluate every finished run's kept checkpoints between its first and last update (those
    two are its eval_before.json and eval.json) that have no evaluation yet, `parallel` at a
    time: the held-out success over training, which the report sets against the RL phase's
    wall clock and the episodes collected. A study keeps them with train.keep_checkpoints
    (train.checkpoint_every apart). Returns (arm, seed, update, exit code)."""
    out = os.path.abspath(out)
    jobs = []
    for arm in study.arms:
        for seed in study.seeds:
            run_dir = workdir(out, arm, seed)
            summary = _read_json(os.path.join(run_dir, "summary.json"))
            if summary is None:
                continue
            for update in kept_updates(run_dir):
                evaluated = os.path.join(run_dir, HELD_OUT_CURVE, f"update{update}", "eval.json")
                if 0 < update < summary.get("updates", 0) and not os.path.exists(evaluated):
                    jobs.append(Job(f"{arm} seed {seed} update {update}", curve_command(study, arm, seed, out, update),
                                    os.path.dirname(evaluated), (arm, seed, update)))
    print(f"[study] {study.name}: {len(jobs)} checkpoints to evaluate, {parallel} at a time", flush=True)
    return [(*job.key, code) for job, code in run_jobs(jobs, parallel, "`curve` again evaluates the rest")]


class _Stop(Exception):
    """SIGTERM reached the study runner."""


def _raise_stop(signum, frame):
    raise _Stop()


# ---------------------------------------------------------------- the report

def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _successes(evaluation: dict | None) -> tuple[int, int] | None:
    """(successes, scored episodes) of an eval.json (None if it has no scored episode)."""
    if not evaluation or evaluation.get("success_rate") is None:
        return None
    return round(evaluation["success_rate"] * evaluation["episodes"]), evaluation["episodes"]


def _pooled(counts: list[tuple[int, int]]) -> dict:
    successes, episodes = sum(c for c, _ in counts), sum(n for _, n in counts)
    if not episodes:
        return {"success": None, "interval_95": None, "episodes": 0}
    return {"success": successes / episodes, "interval_95": wilson_interval(successes, episodes), "episodes": episodes}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# What the paper's findings are about (docs/algorithm.md): per update, averaged over the
# updates of a run, then over seeds; name -> how the report's second table heads it
DYNAMICS = {
    "steps_per_success": "steps / success", "steps_per_failure": "steps / failure",
    "response_tokens_per_step": "response tokens / step", "clip_ratio": "clipped tokens",
    "behave_cap_ratio": "behaviour weight capped", "staleness_mean": "staleness",
    "memory_generic_key_share": "generic Memory keys", "memory_key_persistence": "Memory key persistence",
    "memory_adjacent_unchanged": "Memory unchanged between steps", "memory_keys_per_step": "Memory keys / step",
    "credit_mean": "facts right (trained episodes)",
}
# The settings the paper's comparisons turn on: report.json gives each arm's value (arm_settings)
SETTINGS = ("loss.kind", "loss.normalizer", "loss.decoupled", "rl.eta", "agent.train_step_limits", "rl.reward")


def _run_mean(records: list[dict], key: str) -> float | None:
    return _mean([record.get(key) for record in records])


def arm_report(out: str, arm: str, seeds) -> dict:
    """One arm over its finished seeds: pooled held-out success before and after, each seed's
    change, and the training curves averaged over seeds."""
    runs = []
    for seed in seeds:
        directory = workdir(out, arm, seed)
        summary = _read_json(os.path.join(directory, "summary.json"))
        if summary is None:
            continue
        before, after = (_read_json(os.path.join(directory, name)) for name in ("eval_before.json", "eval.json"))
        runs.append({"seed": seed, "summary": summary, "metrics": read_metrics(os.path.join(directory, "metrics.jsonl")),
                     "before": _successes(before), "after": _successes(after),
                     "tasks_before": (before or {}).get("task_success"), "tasks_after": (after or {}).get("task_success"),
                     "evaluated": _evaluations_by_update(directory, summary, before, after)})
        runs[-1]["by_update"] = _records_by_update(runs[-1]["metrics"])
    changes = [r["summary"]["success_after"] - r["summary"]["success_before"] for r in runs
               if r["summary"].get("success_after") is not None and r["summary"].get("success_before") is not None]
    curves, walls, dynamics = {}, {}, {key: {} for key in DYNAMICS}
    for r in runs:
        for record in r["metrics"]:
            if record.get("phase") != "rl":
                continue
            if record.get("collected_success_rate") is not None:
                curves.setdefault(record["update"], []).append(record["collected_success_rate"])
                walls.setdefault(record["update"], []).append(record.get("wall_seconds"))
            for key, by_update in dynamics.items():
                by_update.setdefault(record["update"], []).append(record.get(key))
    rl = [record for r in runs for record in r["metrics"] if record.get("phase") == "rl"]
    return {
        "arm": arm, "seeds_finished": [r["seed"] for r in runs],
        "before": _pooled([r["before"] for r in runs if r["before"]]),
        "after": _pooled([r["after"] for r in runs if r["after"]]),
        "change_per_seed": [round(c, 4) for c in changes],
        "change_mean": _mean(changes),
        # the same tasks before and after, pooled over seeds, task by task (null for runs whose
        # eval json has no per-task results)
        "paired_change": paired_change(_by_seed_and_task(runs, "tasks_before"), _by_seed_and_task(runs, "tasks_after")),
        # each seed's tasks after RL ("seed/task" -> success) for arms_compared; report() keeps
        # it out of report.json
        "tasks_after": _by_seed_and_task(runs, "tasks_after"),
        # each seed's own evaluation as its summary.json keeps it (also where eval*.json were not kept)
        "per_seed": [{"seed": r["seed"], **{key: r["summary"].get(key) for key in (
            "success_before", "interval_95_before", "success_after", "interval_95_after")}} for r in runs],
        "collected_success_by_update": {u: _mean(v) for u, v in sorted(curves.items())},
        # held-out success at each update some seed evaluated (0, the last, and the checkpoints
        # `curve` evaluated), pooled over the seeds that did, with their RL wall clock and episodes
        "held_out_by_update": _held_out_curve(runs),
        # the same for each seed alone: the plot draws these where not every seed evaluated a point
        "held_out_by_seed": {r["seed"]: _held_out_curve([r]) for r in runs},
        "wall_seconds_by_update": {u: _mean(v) for u, v in sorted(walls.items())},   # the RL phase's clock (metrics.jsonl wall_seconds)
        "steps_per_episode": _mean([r["summary"].get("steps_per_episode") for r in runs]),
        "response_tokens_per_step": _mean([r["summary"].get("mean_response_tokens_per_step_after") for r in runs]),
        "update_seconds": _mean([record.get("update_seconds") for record in rl]),
        # the RL phase's wall clock per update (collection and learning), the paper's "per training step"
        "wall_seconds_per_update": _mean([_wall_per_update(r["metrics"]) for r in runs]),
        "trajectories_per_hour": _mean([r["summary"].get("trajectories_per_hour") for r in runs]),
        # train.split=eval: RL trained on the evaluated tasks, which are then not held out
        "held_out": all(r["summary"].get("train_split", "train") != "eval" for r in runs),
        "dynamics": {key: _mean([_run_mean([m for m in r["metrics"] if m.get("phase") == "rl"], key) for r in runs])
                     for key in DYNAMICS},
        # the same per update, over seeds (None where no seed logged it): the dynamics over training
        "dynamics_by_update": {key: {u: _mean(v) for u, v in sorted(by_update.items())}
                               for key, by_update in dynamics.items()},
    }


def _evaluations_by_update(directory: str, summary: dict, before: dict | None, after: dict | None) -> dict:
    """update -> the run's held-out eval.json at that update: before RL (0), after its last
    update, and each checkpoint `curve` evaluated in between. A checkpoint evaluated on other
    tasks than the run's own (another eval.num_tasks or seed) is refused, naming both."""
    evaluations = {0: before}
    if summary.get("updates"):
        evaluations[summary["updates"]] = after
    for update in sorted(_numbered(os.path.join(directory, HELD_OUT_CURVE), "update")):
        path = os.path.join(directory, HELD_OUT_CURVE, f"update{update}", "eval.json")
        evaluation = _read_json(path)
        if evaluation is None or update in evaluations:
            continue
        tasks, tasks_before = (e.get("task_success") if e else None for e in (evaluation, before))
        if tasks is not None and tasks_before is not None and set(tasks) != set(tasks_before):
            raise ValueError(f"{path}: evaluated other tasks than {directory}/eval_before.json")
        evaluations[update] = evaluation
    return {update: evaluation for update, evaluation in sorted(evaluations.items()) if evaluation is not None}


def _held_out_curve(runs: list[dict]) -> list[dict]:
    """One point per update some run evaluated: success pooled over the seeds that evaluated
    it (`seeds` says which; `episodes` are the evaluated ones), and the mean over them of the RL
    phase's wall clock and of the episodes collected by then (0 and 0 before RL)."""
    points = []
    for update in sorted({u for r in runs for u in r["evaluated"]}):
        having = [r for r in runs if update in r["evaluated"]]
        logged = [r["by_update"].get(update, {}) for r in having]
        points.append({"update": update, "seeds": [r["seed"] for r in having],
                       **_pooled([_successes(r["evaluated"][update]) for r in having
                                  if _successes(r["evaluated"][update])]),
                       "wall_seconds": 0.0 if update == 0 else _mean([m.get("wall_seconds") for m in logged]),
                       "episodes_collected": 0 if update == 0 else _mean([m.get("episodes") for m in logged])})
    return points


def _records_by_update(metrics: list[dict]) -> dict:
    """update -> a run's metrics line of that RL update, the last one written (a run resumed
    from an earlier checkpoint logs the updates after it again), without wall clocks if the
    run's RL clock goes back along its updates (runs resumed before the clock was checkpointed
    began again at 0: their times are not comparable with a run's that went through)."""
    kept = {m["update"]: m for m in metrics if m.get("phase") == "rl" and m.get("update") is not None}
    walls = [kept[u]["wall_seconds"] for u in sorted(kept) if kept[u].get("wall_seconds") is not None]
    if any(later < earlier for earlier, later in zip(walls, walls[1:])):
        return {u: {**record, "wall_seconds": None} for u, record in kept.items()}
    return kept


def _by_seed_and_task(runs: list[dict], key: str) -> dict | None:
    """"seed/task id" -> success, from each run's per-task results under `key`; None when a
    run's evaluation kept none."""
    if not runs or any(r[key] is None for r in runs):
        return None
    return {f"{r['seed']}/{task}": value for r in runs for task, value in r[key].items()}


def arms_compared(arms: list[dict]) -> list[dict]:
    """Every pair of arms, task by task after RL on the seeds both finished (the same tasks: a
    seed draws its tasks whatever the arm): tasks solved only by the first, only by the
    second, and the sign test's p (paired_change of the second against the first)."""
    pairs = []
    for i, first in enumerate(arms):
        for second in arms[i + 1:]:
            seeds = sorted(set(first["seeds_finished"]) & set(second["seeds_finished"]))
            on_seeds = [{task: value for task, value in (arm["tasks_after"] or {}).items()
                         if int(task.split("/")[0]) in seeds} for arm in (first, second)]
            compared = paired_change(*on_seeds)
            if compared is not None:
                pairs.append({"arms": [first["arm"], second["arm"]], "seeds": seeds, "tasks": compared["tasks"],
                              "only_first": compared["lost"], "only_second": compared["gained"],
                              "p_value": compared["p_value"]})
    return pairs


def _wall_per_update(records: list[dict]) -> float | None:
    timed = [r for r in records if r.get("phase") == "rl" and r.get("wall_seconds") is not None and r.get("update")]
    return timed[-1]["wall_seconds"] / timed[-1]["update"] if timed else None


def _flat(config: dict, prefix: str = "") -> dict:
    """A nested config dict (config.json) as {"loss.kind": value, ...}."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def arm_settings(study: Study, out: str, arm: str, seeds, defaults: dict) -> dict:
    """The SETTINGS an arm ran with: its first finished run's config.json (what main.py
    resolved), else the study's keys over `defaults` (its base config, flat); None where
    neither says."""
    for seed in seeds:
        config = _read_json(os.path.join(workdir(out, arm, seed), "config.json"))
        if config is not None and finished(out, arm, seed):
            flat = _flat(config)
            return {key: flat.get(key) for key in SETTINGS}
    settings = {}
    for key in SETTINGS:
        value = study.arms[arm].get(key, study.flags.get(key, defaults.get(key)))
        settings[key] = list(value) if isinstance(value, tuple) else value   # as JSON reads it back
    return settings


def paired_arms(report: dict, key: str) -> list[tuple[dict, dict]]:
    """Pairs of a report's arms (report.json's) that differ in the setting `key` alone: the
    same other SETTINGS and the same arm keys but `key`, e.g. ("decoupled_eta2", "coupled_eta2")
    for loss.decoupled. Each pair in the report's order of arms."""
    def rest(arm):
        keys = {k: v for k, v in arm.get("keys", {}).items() if k != key}
        return json.dumps([keys, {k: v for k, v in arm["settings"].items() if k != key}], sort_keys=True)
    arms = [arm for arm in report["arms"] if arm.get("settings", {}).get(key) is not None]
    return [(a, b) for i, a in enumerate(arms) for b in arms[i + 1:]
            if a["settings"][key] != b["settings"][key] and rest(a) == rest(b)]


def _percent(pooled: dict) -> str:
    if pooled["success"] is None:
        return "-"
    low, high = pooled["interval_95"]
    return f"{pooled['success']:.1%} [{low:.0%}-{high:.0%}] of {pooled['episodes']}"


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(study: Study, arms: list[dict], comparisons: list[dict] = ()) -> str:
    base = f"Base `{study.base}`" if study.base else "Base unknown (the study was read from its runs)"
    lines = [f"# Study `{study.name}`", "",
             f"{base}, seeds {list(study.seeds)}; shared keys: "
             + ", ".join(f"`{k}={flag_value(v)}`" for k, v in study.flags.items()), "",
             f"| arm | keys | seeds done | {_evaluated(arms)} before (pooled) | after (pooled) | change per seed | "
             "steps / episode | response tokens / step | s / update |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        keys = ", ".join(f"`{k}={flag_value(v)}`" for k, v in study.arms[arm["arm"]].items())
        change = ", ".join(f"{c:+.1%}" for c in arm["change_per_seed"]) or "-"
        lines.append(f"| {arm['arm']} | {keys} | {len(arm['seeds_finished'])} | {_percent(arm['before'])} | "
                     f"{_percent(arm['after'])} | {change} | {_number(arm['steps_per_episode'], '.2f')} | "
                     f"{_number(arm['response_tokens_per_step'], '.1f')} | {_number(arm['update_seconds'], '.2f')} |")
    lines += ["", f"Pooled: the seeds' {_evaluated(arms)} episodes together, with a 95% Wilson interval. An arm "
              "whose intervals before and after overlap has not shown a change."]
    if not all(arm["held_out"] for arm in arms):
        lines += ["", "Trained-on: RL drew its tasks from the evaluated ones (`train.split=eval`), so the change "
                  "measures fitting, not success on tasks held out."]
    paired = [arm for arm in arms if arm.get("paired_change")]
    if paired:
        lines += ["", "Task by task (each seed's tasks before and after, pooled): solved only after, only before, "
                  "and the exact sign test's p (below 0.05: more than the spread of this many tasks).", "",
                  "| arm | tasks | solved only after | only before | p |", "|---|---|---|---|---|"]
        lines += [f"| {arm['arm']} | {arm['paired_change']['tasks']} | {arm['paired_change']['gained']} | "
                  f"{arm['paired_change']['lost']} | {arm['paired_change']['p_value']:.3g} |" for arm in paired]
    if comparisons:
        lines += ["", "Arms against each other after RL, task by task on the seeds both finished:", "",
                  "| arms | tasks | solved by the first only | by the second only | p |", "|---|---|---|---|---|"]
        lines += [f"| {c['arms'][0]} vs {c['arms'][1]} | {c['tasks']} | {c['only_first']} | {c['only_second']} | "
                  f"{c['p_value']:.3g} |" for c in comparisons]
    if any(len(arm["held_out_by_update"]) > 2 for arm in arms):
        lines += ["", f"{_evaluated(arms).capitalize()} success over training (the checkpoints `curve` evaluated; "
                  "RL wall clock and episodes collected by then, the mean over the seeds evaluated):", "",
                  "| arm | update | seeds | success (pooled) | RL wall clock | episodes |", "|---|---|---|---|---|---|"]
        lines += [f"| {arm['arm']} | {point['update']} | {len(point['seeds'])} | {_percent(point)} | "
                  f"{_number(point['wall_seconds'], '.0f')} s | {_number(point['episodes_collected'], '.0f')} |"
                  for arm in arms for point in arm["held_out_by_update"]]
    lines += ["", "Training dynamics, the mean over each run's updates, then over seeds:", "",
              "| arm | " + " | ".join(DYNAMICS.values()) + " |", "|---|" + "---|" * len(DYNAMICS)]
    for arm in arms:
        lines.append(f"| {arm['arm']} | " + " | ".join(_number(arm["dynamics"][key], ".3g") for key in DYNAMICS) + " |")
    return "\n".join(lines) + "\n"


def _evaluated(arms: list[dict]) -> str:
    return "held-out" if all(arm["held_out"] for arm in arms) else "trained-on"


def plot(arms: list[dict], path: str) -> None:
    # a Figure of its own, not pyplot's: choosing a backend here would take a notebook's
    # inline display away from the notebook that called `report` (load_report)
    from matplotlib.figure import Figure

    arms = [arm for arm in arms if arm["seeds_finished"]]   # an arm not yet run has nothing to draw
    figure = Figure(figsize=(22, 9), layout="constrained")
    (curves, clock, held_out_clock, bars), (*over_training, held_out_episodes) = figure.subplots(2, 4)
    for arm in arms:
        points, walls = arm["collected_success_by_update"], arm["wall_seconds_by_update"]
        curves.plot(list(points), list(points.values()), "-o", markersize=3, label=arm["arm"])
        timed = [(walls[u], rate) for u, rate in points.items() if walls.get(u) is not None]
        clock.plot([w / 60 for w, _ in timed], [rate for _, rate in timed], "-o", markersize=3, label=arm["arm"])
    curves.set_title("Success of the collected episodes (mean over seeds)")
    curves.set_xlabel("update")
    clock.set_title("... against the RL phase's wall-clock time")
    clock.set_xlabel("minutes")
    for axes in (curves, clock):
        axes.set_ylim(0, 1)
        axes.grid(alpha=0.3)
    _plot_held_out(arms, held_out_clock, held_out_episodes)
    width = 0.38
    for i, arm in enumerate(arms):
        for offset, key, colour in ((-width / 2, "before", "#9aa5b1"), (width / 2, "after", "#2f6fb0")):
            pooled = arm[key]
            if pooled["success"] is None:
                continue
            low, high = pooled["interval_95"]
            bars.bar(i + offset, pooled["success"], width, color=colour, label=key if i == 0 else None,
                     yerr=[[pooled["success"] - low], [high - pooled["success"]]], capsize=3)
    # more than three arms' names run into each other side by side: slanted, ending at their bar
    slanted = {"rotation": 30, "ha": "right", "fontsize": 8} if len(arms) > 3 else {}
    bars.set_xticks(range(len(arms)), [arm["arm"] for arm in arms], **slanted)
    bars.set_ylim(0, 1)
    bars.set_title(f"{_evaluated(arms).capitalize()} success, pooled over seeds (95% Wilson)")
    if curves.get_legend_handles_labels()[0]:
        curves.legend(fontsize=8)
        clock.legend(fontsize=8)
    if bars.get_legend_handles_labels()[0]:
        bars.legend(fontsize=8)
    _plot_dynamics(arms, over_training)
    figure.savefig(path, dpi=110)


def _plot_held_out(arms: list[dict], clock, episodes) -> None:
    """Held-out success at each update that every finished seed evaluated (95% interval as error
    bars), against the RL phase's wall clock and against the episodes collected: which arm
    gets there sooner; each seed's own curve faint behind it where it has points between.
    (The report's table also gives the points fewer seeds evaluated.)"""
    for index, arm in enumerate(arms):
        # each seed's own curve, faint: the checkpoints `curve` evaluated for some seeds only
        for seed_points in arm.get("held_out_by_seed", {}).values():
            timed = [p for p in seed_points if p["success"] is not None and p["wall_seconds"] is not None]
            if len(timed) > 2:
                for axes, xs in ((clock, [p["wall_seconds"] / 60 for p in timed]), (episodes, [p["episodes_collected"] for p in timed])):
                    axes.plot(xs, [p["success"] for p in timed], "-", marker=".", linewidth=0.8, alpha=0.35, color=f"C{index}")
        # one line a set of seeds: the points every finished seed of the arm evaluated
        points = [p for p in arm["held_out_by_update"] if p["success"] is not None and p["wall_seconds"] is not None
                  and p["seeds"] == arm["seeds_finished"]]
        if not points:
            continue
        rates = [p["success"] for p in points]
        errors = [[p["success"] - p["interval_95"][0] for p in points], [p["interval_95"][1] - p["success"] for p in points]]
        for axes, xs in ((clock, [p["wall_seconds"] / 60 for p in points]), (episodes, [p["episodes_collected"] for p in points])):
            axes.errorbar(xs, rates, yerr=errors, fmt="-o", markersize=3, capsize=2, color=f"C{index}", label=arm["arm"])
    clock.set_title(f"{_evaluated(arms).capitalize()} success against the RL phase's wall clock")
    clock.set_xlabel("minutes")
    episodes.set_title(f"{_evaluated(arms).capitalize()} success against episodes collected")
    episodes.set_xlabel("episodes")
    for axes in (clock, episodes):
        axes.set_ylim(0, min(1.0, axes.get_ylim()[1]))   # from 0, up to the data: gains of a few points stay visible
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)


# The second row of a study's plot: what the paper's findings are about, per update (mean
# over seeds); each panel's series, and the line style telling a panel's series apart
DYNAMICS_PANELS = (
    ("Steps per episode: success (solid), failure (dashed)", ("steps_per_success", "steps_per_failure")),
    ("Response tokens per step", ("response_tokens_per_step",)),
    ("Clipped tokens (solid), behaviour weight capped (dashed)", ("clip_ratio", "behave_cap_ratio")),
)


def _plot_dynamics(arms: list[dict], panels) -> None:
    for axes, (title, keys) in zip(panels, DYNAMICS_PANELS):
        for index, arm in enumerate(arms):
            colour = f"C{index}"
            for key, style in zip(keys, ("-", "--")):
                points = {u: v for u, v in arm.get("dynamics_by_update", {}).get(key, {}).items() if v is not None}
                if points:
                    axes.plot(list(points), list(points.values()), style, color=colour, marker="o", markersize=2,
                              label=arm["arm"] if key == keys[0] else None)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("update")
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)


def report(study: Study, out: str) -> dict:
    # the base's defaults, for the settings an arm's keys leave to it (none for a study read
    # from its runs, whose base is unknown)
    defaults = _flat(base_config(study.base).to_dict()) if study.base else {}
    arms = [{**arm_report(out, arm, study.seeds), "keys": study.arms[arm],
             "settings": arm_settings(study, out, arm, study.seeds, defaults)} for arm in study.arms]
    comparisons = arms_compared(arms)
    for arm in arms:
        del arm["tasks_after"]   # per-task data: compared above, not carried into report.json
    result = {"study": study.name, "base": study.base, "flags": study.flags, "arms": arms, "compared": comparisons}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(study, arms, comparisons))
    plot(arms, os.path.join(out, "report.png"))
    return result


def study_from_runs(out: str) -> Study:
    """The study whose runs are in `out` (OUT/<arm>/seed<k>/ with a summary.json), when its
    file is not at hand: each arm's keys are where its config.json differs from the other
    arms' (the seed aside), the base and shared keys unknown."""
    arms = {}
    for arm in sorted(os.listdir(out)):
        if os.path.isdir(os.path.join(out, arm)):
            seeds = sorted(int(name[4:]) for name in os.listdir(os.path.join(out, arm))
                           if name.startswith("seed") and name[4:].isdigit() and finished(out, arm, int(name[4:])))
            if seeds:
                arms[arm] = seeds
    if not arms:
        raise FileNotFoundError(f"{out}: no finished run (OUT/<arm>/seed<k>/summary.json)")
    configs = {arm: _flat(_read_json(os.path.join(workdir(out, arm, seeds[0]), "config.json")) or {})
               for arm, seeds in arms.items()}
    every_key = sorted(set().union(*configs.values()) - {"seed"})
    differ = [key for key in every_key if len({json.dumps(c.get(key)) for c in configs.values()}) > 1]
    return Study(name=os.path.basename(os.path.normpath(out)), base="", flags={},
                 arms={arm: {key: configs[arm][key] for key in differ if key in configs[arm]} for arm in arms},
                 seeds=tuple(sorted({seed for seeds in arms.values() for seed in seeds})))


def load_report(out: str, study: str | None = None) -> dict:
    """OUT's report.json, for notebooks; built with `report` (which also writes report.md and
    report.png) when it is missing or older than a finished run's summary.json. The study is
    then `study` (a study file), else configs/studies/<the name report.json gives> if its arms
    include every arm OUT has runs of, else the one OUT's runs make (study_from_runs)."""
    path = os.path.join(out, "report.json")
    existing = _read_json(path)
    summaries = [os.path.join(root, "summary.json") for root, _, files in os.walk(out) if "summary.json" in files]
    if existing is not None and study is None and all(os.path.getmtime(s) <= os.path.getmtime(path) for s in summaries):
        return existing
    if study is not None:
        return report(load_study(study), out)
    from_runs = study_from_runs(out)
    named = os.path.join(ROOT, "configs", "studies", f"{(existing or {}).get('study')}.py")
    if existing is not None and os.path.exists(named):
        study_file = load_study(named)
        if set(from_runs.arms) <= set(study_file.arms):
            return report(study_file, out)
    return report(from_runs, out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asyncwebrl.studies", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "curve", "report"),
                        help="run: the runs not yet finished; curve: evaluate their kept checkpoints; then the report")
    parser.add_argument("study", help="a study file, e.g. configs/studies/update_steps.py")
    parser.add_argument("--out", required=True, help="the study's directory: one workdir per arm and seed")
    parser.add_argument("--parallel", type=int, default=1, help="runs (run) or evaluations (curve) at once")
    parser.add_argument("--seeds", default="", help="a comma-separated subset of the study's seeds (default: all)")
    parser.add_argument("--arms", default="", help="a comma-separated subset of the study's arms (default: all)")
    args = parser.parse_args(argv)
    study = load_study(args.study)
    if args.seeds:
        chosen = tuple(int(seed) for seed in args.seeds.split(","))
        if not set(chosen) <= set(study.seeds):
            raise SystemExit(f"--seeds {args.seeds}: the study's seeds are {list(study.seeds)}")
        study = dataclasses.replace(study, seeds=chosen)
    if args.arms:
        names = args.arms.split(",")
        if not set(names) <= set(study.arms):
            raise SystemExit(f"--arms {args.arms}: the study's arms are {list(study.arms)}")
        study = dataclasses.replace(study, arms={name: study.arms[name] for name in names})
    os.makedirs(args.out, exist_ok=True)
    failed = []
    if args.action == "run":
        failed = [(arm, seed) for arm, seed, code in run(study, args.out, args.parallel) if code != 0]
    if args.action == "curve":
        failed = [(arm, seed, update) for arm, seed, update, code in curve(study, args.out, args.parallel) if code != 0]
    report(study, args.out)
    print(open(os.path.join(args.out, "report.md")).read(), flush=True)
    if failed:
        print(f"[study] failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
