"""The config's values checked before anything is built (main.py calls validate_config
first): a bad value is one ValueError naming its key, not a ZeroDivisionError deep in the
pool, a run that evaluates every task, or a loss kind or a task source refused after the
model is built and the first group collected. No JAX here (evaluating the oracle must
not load it), and no environment or loss kind: envs.SOURCES and learner/choices.LOSSES
name them without their playwright (~1 s) or JAX."""

from __future__ import annotations

from asyncwebrl.envs import SOURCES
from asyncwebrl.runtime import agent_record
from asyncwebrl.learner.choices import LOSSES, NORMALIZERS
from asyncwebrl.records import TRAINED_REWARDS
from asyncwebrl.runtime.groups import TASK_SAMPLING

# key -> the least value it takes: a count that must be at least 1, or a bound that may be 0
MINIMUMS = {
    "browser.pages": 1,
    "browser.pages_per_browser": 1,   # the pool divides by it
    "eval.num_tasks": 0,              # 0: no evaluation; negative would slice off the end
    "eval.samples": 1,                # episodes per evaluated task
    "train.checkpoint_every": 1,      # an update modulo it
    "train.keep_checkpoints": 1,      # 0 deleted every checkpoint as it was written
    "rl.eta": 0,                      # 0 = synchronous RL
    "rl.group_size": 2,               # the advantage is relative to the group
    "rl.groups_per_batch": 1,
    "rl.max_running_groups": 1,
    "model.checkpoint_step": -1,      # -1 = the latest; an update number otherwise
}
CHOICES = {
    "loss.kind": LOSSES.keys(),       # a view, as SOURCES'; the warm start's "sft" is not one
    "loss.normalizer": NORMALIZERS,
    "rl.task_sampling": TASK_SAMPLING,
    "rl.reward": TRAINED_REWARDS.keys(),
    "tasks.source": SOURCES.keys(),   # a view: a source registered later is a choice too
}


def _value(config, key: str):
    value = config
    for part in key.split("."):
        value = value[part]
    return value


def _check_minimum(key: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value}")


def validate_config(config) -> None:
    """Raise ValueError("browser.pages_per_browser must be >= 1, got 0") for the first bad value."""
    for key, minimum in MINIMUMS.items():
        _check_minimum(key, _value(config, key), minimum)
    for key, choices in CHOICES.items():
        value, choices = _value(config, key), tuple(choices)
        if value not in choices:
            raise ValueError(f"{key} must be one of {choices}, got {value!r}")
    if config.rl.reward != "success" and config.loss.kind == "raft":
        raise ValueError(f"rl.reward={config.rl.reward!r} needs a group-relative loss: loss.kind=raft (RAFT++) "
                         "trains on successes alone, and partial credit is not one")
    if not 0 < config.eval.top_p <= 1:
        raise ValueError(f"eval.top_p must be in (0, 1], got {config.eval.top_p}")
    if config.model.path and config.model.check_agent:
        problem = agent_record.mismatch(config.model.path, config.agent)
        if problem:
            raise ValueError(problem)
