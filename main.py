"""AsyncWebRL entry point.

    python main.py                                     # embedded default (train mode)
    python main.py --mode=eval --config.policy=oracle  # evaluate on the local test sites
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os

from absl import app, flags
from ml_collections import config_flags

from asyncwebrl.records import Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy
from asyncwebrl.rollout.prompts import PromptBuilder
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import format_table, run_tasks, summarize, write_eval
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks, select_balanced, write_jsonl

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment configuration file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/default", "Run directory (tasks, results, checkpoints).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval"], "What to run.")


def make_policy(config, web: LocalWeb, store: ScreenshotStore):
    if config.policy == "oracle":
        return OraclePolicy(web.session)
    if config.policy == "random":
        return RandomPolicy(seed=config.seed)
    if config.policy == "model":
        return model_policy(config, store)
    raise app.UsageError(f"unknown policy {config.policy!r}: choose model, oracle or random")


def model_policy(config, store: ScreenshotStore):
    """The Qwen3-VL policy behind a sampler engine (started by run_episodes)."""
    import jax.numpy as jnp  # JAX and transformers load only when a model is asked for
    from flax import nnx

    from asyncwebrl.model import Qwen3VL, load_pretrained, preset
    from asyncwebrl.model.tokenizer import Processor
    from asyncwebrl.runtime.model_policy import ModelPolicy
    from asyncwebrl.sampler import Engine, EngineSettings, SamplingSettings

    dtype = jnp.dtype(config.model.dtype)
    if config.model.path:
        model, processor = load_pretrained(config.model.path, dtype=dtype), Processor.from_pretrained(config.model.path)
    else:  # random weights of a preset: a real code path, an untrained policy
        logging.warning("no model.path: the policy is a randomly initialised %s model", config.model.preset)
        model = Qwen3VL(preset(config.model.preset), dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(config.seed))
        processor = Processor.embedded()
    settings = EngineSettings(
        slots=config.sampler.slots, capacity=config.sampler.capacity, prompt_buckets=tuple(config.sampler.prompt_buckets),
        max_images=config.sampler.max_images, patches_per_image=config.sampler.patches_per_image,
        sampling=SamplingSettings(temperature=config.eval.temperature), stop_token_ids=(processor.special.eos,),
        seed=config.seed)
    return ModelPolicy(Engine(model, settings), processor, store, PromptBuilder(config.agent.interaction),
                       max_new_tokens=config.sampler.max_new_tokens)


def load_split(config, split: str, workdir: str):
    if config.tasks.source != "local":
        raise app.UsageError(f"task source {config.tasks.source!r} is not supported yet (only 'local')")
    if split not in ("train", "test"):
        raise app.UsageError(f"split must be train or test, got {split!r}")
    sites = config.tasks.train_sites_per_variant if split == "train" else config.tasks.test_sites_per_variant
    tasks = generate_tasks(split, sites)
    os.makedirs(os.path.join(workdir, "tasks"), exist_ok=True)
    write_jsonl(tasks, os.path.join(workdir, "tasks", f"{split}.jsonl"))
    logging.info("%d %s tasks on %d sites", len(tasks), split, len({t.local["site"] for t in tasks}))
    return tasks


def episode_settings(config, phase: str) -> EpisodeSettings:
    return EpisodeSettings(
        interaction=config.agent.interaction,
        phase=phase,
        viewport=(config.agent.viewport_width, config.agent.viewport_height),
        timeout_s=config.browser.timeout_s,
        step_deadline_s=config.browser.step_deadline_s,
    )


def run_episodes(config, tasks, web: LocalWeb, phase: str) -> tuple[list[Trajectory], float]:
    store = ScreenshotStore()
    policy = make_policy(config, web, store)
    engine = getattr(policy, "engine", None)
    with engine if engine is not None else contextlib.nullcontext():
        return asyncio.run(run_tasks(
            tasks, policy, web, episode_settings(config, phase), store=store,
            concurrency=config.eval.concurrency, pages_per_browser=config.browser.pages_per_browser,
            recycle_after=config.browser.recycle_after, executable_path=config.browser.executable_path,
        ))


def evaluate(config, workdir: str) -> dict:
    tasks = select_balanced(load_split(config, config.eval.split, workdir), config.eval.num_tasks, config.seed)
    with LocalWeb() as web:
        trajectories, wall = run_episodes(config, tasks, web, phase="test")
    summary = summarize(trajectories, wall)
    print(f"policy={config.policy} interaction={config.agent.interaction} split={config.eval.split}")
    print(format_table(summary))
    write_eval(workdir, summary, trajectories)
    return summary


def train(config, workdir: str) -> None:
    """The training flow, as far as it is built: oracle demonstrations for the warm start.

    The RL phases (model, sampler, learner, orchestrator) are later issues; this mode says
    so instead of pretending to train."""
    tasks = select_balanced(load_split(config, "train", workdir), config.train.num_demo_tasks, config.seed)
    load_split(config, "test", workdir)
    with LocalWeb() as web:
        demos, wall = run_episodes(_oracle(config), tasks, web, phase="train")
    path = os.path.join(workdir, "demonstrations.jsonl")
    with open(path, "w") as f:
        for trajectory in demos:
            if trajectory.success:
                f.write(json.dumps({**trajectory.summary(), "instruction": trajectory.task.task_name,
                                    "steps": [dataclasses.asdict(s) for s in trajectory.steps]}) + "\n")
    summary = summarize(demos, wall)
    print(f"oracle demonstrations: {sum(t.success for t in demos)}/{len(demos)} solved "
          f"({summary['total_steps']} steps, {summary['steps_per_second']} steps/s) -> {path}")
    print("RL training (model, sampler, learner, orchestrator) is not built yet: see the open issues.")


def _oracle(config):
    oracle = config.copy_and_resolve_references()
    oracle.policy = "oracle"
    return oracle


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    os.makedirs(_WORKDIR.value, exist_ok=True)
    with open(os.path.join(_WORKDIR.value, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
    if _MODE.value == "eval":
        evaluate(config, _WORKDIR.value)
    else:
        train(config, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
