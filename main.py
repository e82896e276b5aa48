"""AsyncWebRL entry point.

    python main.py                                     # embedded default (train mode)
    python main.py --mode=eval --config.policy=oracle  # evaluate on the local test sites
    python main.py --mode=eval --config=configs/miniwob.py --config.policy=random   # MiniWoB++

Several processes (hosts, or launch/local_multiprocess.sh on one machine) run the same
command with --coordinator=HOST:PORT --num_processes=N --process_id=I, or with the
JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables, or
--coordinator=auto on Cloud TPU (asyncwebrl/distributed.py). Process 0 writes the run
directory; every process writes its part of the checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from absl import app, flags, logging
from ml_collections import config_flags

from asyncwebrl.envs import MissingSetting, environment_class
from asyncwebrl.records import Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy
from asyncwebrl.rollout.pool import PoolSettings
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.compile_cache import use_compile_cache
from asyncwebrl.runtime.evaluate import format_table, run_tasks, summarize, write_eval
from asyncwebrl.runtime.settings import make_environment, screenshot_store
from asyncwebrl.runtime.validate import validate_config
from asyncwebrl.web.server import LocalWeb

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment configuration file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/default", "Run directory (tasks, results, checkpoints).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval"], "What to run.")
_COORDINATOR = flags.DEFINE_string("coordinator", "", "host:port of process 0 of a multi-process run, or 'auto' "
                                   "(Cloud TPU); default: $JAX_COORDINATOR_ADDRESS, else one process.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 0, "Processes in the run (default: $JAX_NUM_PROCESSES).")
_PROCESS_ID = flags.DEFINE_integer("process_id", -1, "This process's index (default: $JAX_PROCESS_ID).")


def make_policy(config, web: LocalWeb, store: ScreenshotStore):
    source = environment_class(config.tasks.source)
    if config.policy == "oracle":
        if not source.oracle:
            raise app.UsageError("the oracle only knows the local web's tasks: use --config.policy=model or random")
        return OraclePolicy(web.session, config.agent.response_format)
    if config.policy == "random":
        return RandomPolicy(seed=config.seed)
    if config.policy == "scripted":
        if source.scripted_policy is None:
            raise app.UsageError("the scripted policy solves a few MiniWoB++ pages: use --config=configs/miniwob.py")
        return source.scripted_policy()
    if config.policy == "model":
        from asyncwebrl.runtime.build import (build_model, make_engine, make_model_policy,  # JAX loads only for a model
                                              restore_trained)

        model, processor = build_model(config)
        model = restore_trained(config, model)
        engine = make_engine(config, model, processor, config.eval.temperature, config.eval.top_p)
        return make_model_policy(config, engine, processor, store)   # its engine is started by run_episodes
    raise app.UsageError(f"unknown policy {config.policy!r}: choose model, oracle, random or scripted")


def load_split(config, split: str, workdir: str | None, field: str = "eval.split"):
    """The split's tasks; a source may record them under workdir (local: workdir/tasks), unless
    workdir is None. field: the config key that named the split, for the error."""
    source = environment_class(config.tasks.source)
    if split not in source.splits:
        raise app.UsageError(f"{field}: tasks.source={config.tasks.source} has the splits {source.splits}, "
                             f"not {split!r}")
    try:
        return source.tasks(config, split, workdir)
    except MissingSetting as error:
        raise app.UsageError(str(error)) from None


def evaluation_tasks(config, split: str, workdir: str | None):
    """The tasks evaluated: eval.num_tasks of the split, as the source picks them (spread
    over difficulty levels; MiniWoB++: cycling over the configured pages, a new seed each round),
    each eval.samples times in a row."""
    tasks = load_split(config, split, workdir)
    chosen = environment_class(config.tasks.source).evaluated(tasks, config.eval.num_tasks, config.seed)
    return [task for task in chosen for _ in range(config.eval.samples)]


def run_episodes(config, tasks, web: LocalWeb, phase: str) -> tuple[list[Trajectory], float]:
    store = screenshot_store(config, "eval")
    policy = make_policy(config, web, store)
    engine = getattr(policy, "engine", None)
    with engine if engine is not None else contextlib.nullcontext():
        return asyncio.run(run_tasks(
            tasks, policy, make_environment(config, web, store), EpisodeSettings.from_config(config, phase),
            pool=PoolSettings.from_config(config), store=store))


def serving(web: LocalWeb, config):
    """The local web's server runs for Chromium; the browser-free driver calls it in process."""
    return contextlib.nullcontext(web) if config.browser.driver == "http" else web


def evaluate(config, workdir: str) -> dict:
    tasks = evaluation_tasks(config, config.eval.split, workdir)
    with serving(LocalWeb(), config) as web:
        trajectories, wall = run_episodes(config, tasks, web, phase="test")
    summary = summarize(trajectories, wall)
    print(f"policy={config.policy} interaction={config.agent.interaction} observation={config.agent.observation} "
          f"driver={config.browser.driver} split={config.eval.split}")
    print(format_table(summary, families=environment_class(config.tasks.source).by_family))
    write_eval(workdir, summary, trajectories)
    return summary


def train(config, workdir: str, leader: bool) -> None:
    """Warm start on oracle demonstrations, then asynchronous RL, evaluated before and after
    on the held-out sites of eval.split (asyncwebrl/runtime/training.py)."""
    from asyncwebrl.runtime.training import train as train_run  # JAX loads only when training

    record = workdir if leader else None   # process 0 writes the task lists
    test_tasks = evaluation_tasks(config, config.eval.split, record)
    if config.train.split == "eval":   # a check that RL can fit tasks, not a held-out result
        print(f"train.split=eval: RL trains on the {len(test_tasks)} evaluated tasks; "
              "their success before -> after is not held out")
        train_tasks = test_tasks
    else:
        train_tasks = load_split(config, config.train.split, record, field="train.split")
    train_run(config, workdir, train_tasks, test_tasks)


def join_process_group() -> bool:
    """Join the multi-process run these flags or JAX_* variables describe (before anything
    uses a device); True if this process is its leader (process 0) or runs alone."""
    if not (_COORDINATOR.value or os.environ.get("JAX_COORDINATOR_ADDRESS")):
        return True   # one process (and JAX stays unloaded unless a model is used)
    from asyncwebrl.distributed import process_group

    try:
        group = process_group(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    if _MODE.value == "eval":
        raise app.UsageError("--mode=eval runs as one process: leave out --coordinator and JAX_COORDINATOR_ADDRESS")
    import jax

    from asyncwebrl.distributed import initialize

    initialize(group)
    logging.warning("process %d of %d (%d local devices, %d in all)", jax.process_index(), jax.process_count(),
                    jax.local_device_count(), jax.device_count())
    return jax.process_index() == 0


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    try:   # every value checked before a process group, a directory, a browser or a model exists
        validate_config(config)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    if not flags.FLAGS["verbosity"].present:   # libraries' info logs drown the progress lines
        logging.set_verbosity(logging.WARNING)
    use_compile_cache(config.compile_cache)   # before JAX compiles anything
    leader = join_process_group()
    os.makedirs(_WORKDIR.value, exist_ok=True)
    if leader:
        with open(os.path.join(_WORKDIR.value, "config.json"), "w") as f:
            f.write(config.to_json_best_effort(indent=2))
    if _MODE.value == "eval":
        evaluate(config, _WORKDIR.value)
    else:
        train(config, _WORKDIR.value, leader)


if __name__ == "__main__":
    app.run(main)
