"""Settings from the config, once: every settings dataclass has one `from_config`, each of
its fields without a default is set by a key of configs/default.py:bare() (where every
default lives), and no field that a key sets carries a default of its own.

The mapping is found, not listed: each from_config is run on a config that notes the keys
it reads, then on copies of bare() with one of those keys changed, and a field belongs to
the keys whose change moves it.

Functions and classes that callers hand config values to (the pool, the prompts, the
checkpoint store, ...) are checked by their signatures: a parameter named as a key of the
config section it comes from has no default either."""

import dataclasses
import importlib
import inspect
import pathlib
import pkgutil

import pytest
from ml_collections import config_dict

import asyncwebrl
from asyncwebrl.envs.judge import JudgeSettings
from asyncwebrl.envs.miniwob import MiniWobEnvironment
from asyncwebrl.envs.webgym import WebGymEnvironment, load_webgym
from asyncwebrl.learner.checkpoints import CheckpointStore
from asyncwebrl.learner.learner import LearnerSettings
from asyncwebrl.learner.packing import PackingShape
from asyncwebrl.learner.train import LossSettings, OptimizerSettings
from asyncwebrl.model.layers import Compute
from asyncwebrl.model.qwen3_vl import Qwen3VL
from asyncwebrl.model.web_tokenizer import oracle_steps
from asyncwebrl.model.weights import load_pretrained
from asyncwebrl.rollout.browser import find_chromium, launch_browser
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.http_tab import HttpPool
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy
from asyncwebrl.rollout.pool import BrowserPool, PoolSettings
from asyncwebrl.rollout.prompts import PromptBuilder, system_prompt
from asyncwebrl.rollout.sandbox import UrlPolicy
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.rollout.response import format_response
from asyncwebrl.runtime.groups import LearnableTaskSampler, TaskSampler
from asyncwebrl.runtime.orchestrator import RLSettings
from asyncwebrl.runtime.training import closing_summary
from asyncwebrl.sampler.engine import EngineSettings, Request
from asyncwebrl.sampler.sampling import SamplingSettings
from asyncwebrl.web.tasks import select_balanced
from configs.default import bare

# How each settings class is built from a config, and its fields that are from_config's
# own arguments or constants rather than config keys.
BUILDS = {
    "EpisodeSettings train": (lambda c: EpisodeSettings.from_config(c, "train"), {"phase"}),
    "EpisodeSettings test": (lambda c: EpisodeSettings.from_config(c, "test"), {"phase"}),
    "PoolSettings": (PoolSettings.from_config, set()),
    "RLSettings": (RLSettings.from_config, set()),
    "EngineSettings": (lambda c: EngineSettings.from_config(c, temperature=0.5, top_p=1.0, stop_token_ids=(7,)),
                       {"sampling", "stop_token_ids"}),
    "PackingShape": (PackingShape.from_config, set()),
    "LossSettings": (LossSettings.from_config, set()),
    "OptimizerSettings": (OptimizerSettings.from_config, set()),
    "LearnerSettings rl": (lambda c: LearnerSettings.from_config(c, "rl"), set()),
    # the warm start: one optimiser step per call, whatever learner.epochs and minibatches say
    "LearnerSettings sft": (lambda c: LearnerSettings.from_config(c, "sft"), {"epochs", "minibatches"}),
    "JudgeSettings": (JudgeSettings.from_config, set()),
}

# Sections that settings classes alone read: every key of theirs must be read by one.
# (The others are also read by functions: agent.* by the prompt builder, rl.* by the group
# buffer, sampler.max_new_tokens by the model policy, ...)
OWNED_SECTIONS = ("loss", "optimizer", "learner", "judge", "browser")

# A changed value for keys whose values are checked against a list of choices
CHOICES = {"agent.interaction": "coordinates", "agent.observation": "text", "loss.kind": "raft",
           "loss.normalizer": "traj", "browser.driver": "http", "optimizer.moment_dtype": "bfloat16",
           "sampler.param_dtype": "bfloat16"}


class Reading:
    """A config that notes the dotted name of every value it hands out."""

    def __init__(self, config, read: set, prefix: str = ""):
        self._config, self._read, self._prefix = config, read, prefix

    def __getattr__(self, name):
        value = getattr(self._config, name)
        key = self._prefix + name
        if isinstance(value, config_dict.ConfigDict):
            return Reading(value, self._read, key + ".")
        self._read.add(key)
        return value

    __getitem__ = __getattr__


def keys_read(build) -> set:
    read = set()
    build(Reading(bare(), read))
    return read


def leaf_keys(config, prefix: str = "") -> set:
    keys = set()
    for name, value in config.items():
        keys |= leaf_keys(value, f"{prefix}{name}.") if isinstance(value, config_dict.ConfigDict) else {prefix + name}
    return keys


def changed(key: str, value):
    if key in CHOICES:
        return CHOICES[key]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, tuple):
        return tuple(changed(key, v) for v in value)
    raise TypeError(f"{key}: no changed value for {value!r}")


def with_key_changed(key: str) -> config_dict.ConfigDict:
    config = bare()
    *sections, name = key.split(".")
    section = config
    for part in sections:
        section = section[part]
    section[name] = changed(key, section[name])
    return config


def fields_moved_by(build, key: str) -> set:
    base, moved = build(bare()), build(with_key_changed(key))
    return {f.name for f in dataclasses.fields(base) if getattr(base, f.name) != getattr(moved, f.name)}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_field_is_a_config_key_or_has_its_only_default(name):
    build, given = BUILDS[name]
    read = keys_read(build)
    assert read <= leaf_keys(bare())
    set_by_config = set().union(*(fields_moved_by(build, key) for key in read))
    fields = dataclasses.fields(build(bare()))
    defaulted = {f.name for f in fields
                 if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    required = {f.name for f in fields} - defaulted - given
    assert required <= set_by_config, f"{name}: fields no config key sets: {sorted(required - set_by_config)}"
    assert not defaulted & set_by_config, \
        f"{name}: fields set from the config that also carry a default: {sorted(defaulted & set_by_config)}"


def test_the_sections_settings_own_are_read_whole():
    read = set().union(*(keys_read(build) for build, _ in BUILDS.values()))
    owned = {key for key in leaf_keys(bare()) if key.split(".")[0] in OWNED_SECTIONS}
    assert owned - read == set(), f"config keys no settings class reads: {sorted(owned - read)}"


def test_every_settings_class_with_from_config_is_checked():
    """A new settings class with a from_config gets a line in BUILDS."""
    checked = {build(bare()).__class__ for build, _ in BUILDS.values()}
    found = set()
    for module in pkgutil.walk_packages(asyncwebrl.__path__, "asyncwebrl."):
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and "from_config" in vars(value):
                found.add(value)
    assert found - checked == set()


# Callables that take config values from their callers: (callable, the config section its
# values come from ("" = the top level), parameter -> key where the names differ).
TAKES_CONFIG = [
    (BrowserPool, "browser", {}),
    (HttpPool, "browser", {"concurrency": "pages"}),
    (launch_browser, "browser", {}),
    (find_chromium, "browser", {"configured": "executable_path"}),
    (PromptBuilder, "agent", {}),
    (system_prompt, "agent", {}),
    (OraclePolicy, "agent", {}),
    (format_response, "agent", {}),
    (oracle_steps, "agent", {}),
    (CheckpointStore, "train", {"keep": "keep_checkpoints"}),
    (closing_summary, "train", {"train_split": "split"}),
    (Request, "sampler", {}),
    (SamplingSettings, "eval", {}),   # temperature and top_p (RL passes its own temperature, top_p 1)
    (MiniWobEnvironment, "miniwob", {}),
    (WebGymEnvironment, "sandbox", {}),
    (load_webgym, "tasks", {}),
    (select_balanced, "", {}),
    (TaskSampler, "", {}),
    (LearnableTaskSampler, "", {}),
    (RandomPolicy, "", {}),
    # the model's matmul dtype is model.compute_dtype (its "" = model.dtype, resolved by the caller)
    (Qwen3VL.__init__, "model", {"dtype": "compute_dtype", "param_dtype": "dtype"}),   # nnx hides the class signature
    (Compute, "model", {"dtype": "compute_dtype", "param_dtype": "dtype"}),
    (load_pretrained, "model", {}),
    (ScreenshotStore, "screenshots", {}),
    (UrlPolicy, "sandbox", {}),
]


def section_keys(section: str) -> set:
    config = bare()[section] if section else bare()
    return {name for name, value in config.items() if not isinstance(value, config_dict.ConfigDict)}


@pytest.mark.parametrize("taken, section, renamed", TAKES_CONFIG,
                         ids=[taken.__qualname__ for taken, _, _ in TAKES_CONFIG])
def test_a_parameter_a_config_key_sets_has_no_default(taken, section, renamed):
    parameters = inspect.signature(taken).parameters.values()
    from_config = [p for p in parameters if renamed.get(p.name, p.name) in section_keys(section)]
    assert from_config, f"{taken.__qualname__} takes no parameter named as a key of config.{section or '(top)'}"
    defaulted = [p.name for p in from_config if p.default is not inspect.Parameter.empty]
    assert not defaulted, (f"{taken.__qualname__}: parameters config.{section or '(top)'} sets carry defaults: "
                           f"{defaulted}")


SHIPPED = [("default", ""), ("default", "bare"), ("instruct", ""), ("instruct", "one_gpu"), ("thinking", ""),
           ("miniwob", ""), ("warm_start", "")]


@pytest.mark.parametrize("name, variant", SHIPPED, ids=[f"{n}:{v}" if v else n for n, v in SHIPPED])
def test_every_shipped_config_passes_the_checks_its_settings_make(name, variant):
    """Each configs/*.py (and variant) passes validate_config and builds every settings
    class (their own checks: e.g. the dtypes of configs/instruct.py's recipes)."""
    from asyncwebrl.runtime.validate import validate_config

    module = importlib.import_module(f"configs.{name}")
    config = module.get_config(variant) if variant else module.get_config()
    validate_config(config)
    for build, _ in BUILDS.values():
        build(config)


def test_every_config_file_is_in_the_shipped_list():
    configs = pathlib.Path(__file__).resolve().parents[1] / "configs"
    assert {path.stem for path in configs.glob("*.py")} - {"__init__"} == {name for name, _ in SHIPPED}
