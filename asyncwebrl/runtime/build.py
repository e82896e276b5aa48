"""Config -> the model-side parts of a run: model and processor, sampler engine, model
policy, learner. One definition each, shared by evaluation and training."""

from __future__ import annotations

import logging

import jax.numpy as jnp
from flax import nnx

from asyncwebrl.learner.learner import Learner, LearnerSettings
from asyncwebrl.learner.packing import PackingShape
from asyncwebrl.learner.train import LossSettings, OptimizerSettings
from asyncwebrl.model import Qwen3VL, load_pretrained, preset
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.model_policy import ModelPolicy
from asyncwebrl.runtime.settings import prompt_builder
from asyncwebrl.sampler import Engine, EngineSettings, SamplingSettings


def build_model(config) -> tuple[nnx.Module, Processor]:
    """The checkpoint at config.model.path, or a randomly initialised preset (the embedded default)."""
    dtype = jnp.dtype(config.model.dtype)
    if config.model.path:
        return (load_pretrained(config.model.path, dtype=dtype, attention=config.model.attention),
                Processor.from_pretrained(config.model.path))
    logging.warning("no model.path: starting from a randomly initialised %s model", config.model.preset)
    model = Qwen3VL(preset(config.model.preset), dtype=dtype, param_dtype=dtype, attention=config.model.attention,
                    rngs=nnx.Rngs(config.seed))
    return model, Processor.embedded()


def restore_trained(config, model: nnx.Module) -> nnx.Module:
    """The model with the parameters of the latest checkpoint under config.model.checkpoint
    (a training run's W/checkpoints), or unchanged when that key is empty."""
    if not config.model.checkpoint:
        return model
    from asyncwebrl.learner.checkpoints import CheckpointStore

    learner = make_learner(config, model, "rl")   # the checkpoint holds a learner's whole state
    with CheckpointStore(config.model.checkpoint) as store:
        restored = store.restore(learner.state)
    if restored is None:
        raise FileNotFoundError(f"no checkpoint under {config.model.checkpoint}")
    state, _, step = restored
    learner.restore(state)
    print(f"model: checkpoint {step} (version {learner.version}) from {config.model.checkpoint}", flush=True)
    return learner.model()


def make_engine(config, model: nnx.Module, processor: Processor, temperature: float, version: int = 0) -> Engine:
    s = config.sampler
    settings = EngineSettings(
        slots=s.slots, capacity=s.capacity, prompt_buckets=tuple(s.prompt_buckets), max_images=s.max_images,
        patches_per_image=s.patches_per_image, sampling=SamplingSettings(temperature=temperature),
        stop_token_ids=(processor.special.eos,), seed=config.seed)
    return Engine(model, settings, version=version)


def make_model_policy(config, engine: Engine, processor: Processor, store: ScreenshotStore) -> ModelPolicy:
    return ModelPolicy(engine, processor, store, prompt_builder(config), max_new_tokens=config.sampler.max_new_tokens)


def make_learner(config, model: nnx.Module, mode: str) -> Learner:
    """mode "sft": the warm start's cross-entropy; "rl": decoupled-IS GRPO (config.loss)."""
    p, loss, opt = config.learner, config.loss, config.optimizer
    if p.row_length < config.sampler.capacity:
        raise ValueError(f"learner.row_length ({p.row_length}) must be >= sampler.capacity "
                         f"({config.sampler.capacity}): every step the sampler completes must fit one row")
    packing = PackingShape(row_length=p.row_length, rows_per_microbatch=p.rows_per_microbatch,
                           images_per_microbatch=p.images_per_microbatch, patches_per_image=config.sampler.patches_per_image)
    if mode == "sft":
        optimizer = OptimizerSettings(learning_rate=config.sft.learning_rate, weight_decay=opt.weight_decay,
                                      max_grad_norm=opt.max_grad_norm, total_steps=max(config.sft.steps, 1),
                                      final_lr_fraction=opt.final_lr_fraction)
        return Learner(model, LearnerSettings(packing=packing, loss=LossSettings(mode="sft"), optimizer=optimizer,
                                              seed=config.seed))
    optimizer = OptimizerSettings(
        learning_rate=opt.learning_rate, weight_decay=opt.weight_decay, b1=opt.b1, b2=opt.b2,
        max_grad_norm=opt.max_grad_norm, warmup_steps=opt.warmup_steps,
        total_steps=max(config.train.max_updates * p.epochs * p.minibatches, 1), final_lr_fraction=opt.final_lr_fraction)
    settings = LossSettings(mode="rl", decoupled=loss.decoupled, eps=loss.eps, eps_high=loss.eps_high,
                            dual_clip=loss.dual_clip, behave_cap=loss.behave_cap, temperature=config.rl.temperature)
    return Learner(model, LearnerSettings(packing=packing, loss=settings, optimizer=optimizer, epochs=p.epochs,
                                          minibatches=p.minibatches, seed=config.seed))
