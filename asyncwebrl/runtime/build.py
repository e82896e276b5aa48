"""Config -> the model-side parts of a run: model and processor, sampler engine, model
policy, learner. One definition each, shared by evaluation and training."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from asyncwebrl.learner.learner import Learner, LearnerSettings
from asyncwebrl.model import Qwen3VL, load_pretrained, preset
from asyncwebrl.model.config import with_vocabulary
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.parallel import make_mesh
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.model_policy import ModelPolicy
from asyncwebrl.runtime.settings import prompt_builder
from asyncwebrl.sampler import Engine, EngineSettings


def build_model(config) -> tuple[nnx.Module, Processor]:
    """The checkpoint at config.model.path, or a randomly initialised preset (the embedded default)."""
    dtype = jnp.dtype(config.model.dtype)
    compute_dtype = jnp.dtype(config.model.compute_dtype or config.model.dtype)
    if config.model.path:
        model = load_pretrained(config.model.path, dtype=dtype, compute_dtype=compute_dtype,
                                attention=config.model.attention, remat=config.model.remat,
                                residual_dtype=config.model.residual_dtype)
        processor = Processor.from_pretrained(config.model.path)
        processor.check_normalisation(model.config.vision)
        return model, processor
    logging.warning("no model.path: starting from a randomly initialised %s model", config.model.preset)
    processor, model_config = Processor.embedded(), preset(config.model.preset)
    if config.model.tokenizer:   # a fitted tokenizer directory: the preset takes its vocabulary size
        processor = Processor.from_pretrained(config.model.tokenizer)
        model_config = with_vocabulary(model_config, len(processor.tokenizer))
    model = Qwen3VL(model_config, dtype=compute_dtype, param_dtype=dtype, attention=config.model.attention,
                    remat=config.model.remat, residual_dtype=config.model.residual_dtype, rngs=nnx.Rngs(config.seed))
    return model, processor


def restore_trained(config, model: nnx.Module) -> nnx.Module:
    """The model with the parameters of a checkpoint under config.model.checkpoint (a training
    run's W/checkpoints): the one saved at update config.model.checkpoint_step, or the latest
    readable one (-1); unchanged when model.checkpoint is empty."""
    if not config.model.checkpoint:
        return model
    from asyncwebrl.learner.checkpoints import CheckpointStore

    learner = make_learner(config, model, "rl")   # the checkpoint holds a learner's whole state
    with CheckpointStore(config.model.checkpoint, keep=config.train.keep_checkpoints) as store:   # (only read)
        step, kept = config.model.checkpoint_step, store.steps()
        if step >= 0 and step not in kept:
            raise FileNotFoundError(f"model.checkpoint_step={step}: {config.model.checkpoint} holds the steps {kept}")
        restored = store.restore(learner.state, None if step < 0 else step)
    if restored is None:
        raise FileNotFoundError(f"no checkpoint under {config.model.checkpoint}")
    state, _, step = restored
    learner.restore(state)
    print(f"model: checkpoint {step} (version {learner.version}) from {config.model.checkpoint}", flush=True)
    return learner.model()


def device_meshes(config) -> tuple[Mesh, Mesh]:
    """(sampler mesh, learner mesh) of config.devices (docs/architecture.md#devices-and-sharding).

    devices.count: how many devices of each host (process) the run uses, the first ones
    (-1: all). devices.sampler: of those, the first N serve this host's sampler and the
    rest the learner; 0 = both use every one (and with a single device they always share
    it). The sampler mesh holds this host's sampler devices only; the learner's mesh is
    config.mesh (data x fsdp x tensor, one axis may be -1 = fill) over the learner devices
    of every host. The sampler keeps its weights tensor-parallel over its devices."""
    d = config.devices
    local = jax.local_devices()
    count = len(local) if d.count == -1 else d.count
    if not 1 <= count <= len(local):
        raise ValueError(f"devices.count = {d.count}, but this host has {len(local)} devices")
    if not (d.sampler == 0 or count == 1 or 0 < d.sampler < count):
        raise ValueError(f"devices.sampler = {d.sampler}: give the sampler 1 to {count - 1} of the {count} devices, "
                         "or 0 to share them all with the learner")
    split = 0 if d.sampler == 0 or count == 1 else d.sampler

    def roles(devices):   # (sampler devices, learner devices) of one host
        used = devices[:count]
        return (used[:split], used[split:]) if split else (used, used)

    sampler = roles(local)[0]
    hosts = sorted({device.process_index for device in jax.devices()})
    learner = [device for host in hosts
               for device in roles([x for x in jax.devices() if x.process_index == host])[1]]
    m = config.mesh
    return make_mesh({"tensor": -1}, sampler), make_mesh({"data": m.data, "fsdp": m.fsdp, "tensor": m.tensor}, learner)


def make_engine(config, model: nnx.Module, processor: Processor, temperature: float, top_p: float,
                version: int = 0) -> Engine:
    settings = EngineSettings.from_config(config, temperature=temperature, top_p=top_p,
                                          stop_token_ids=(processor.special.eos,))
    return Engine(model, settings, mesh=device_meshes(config)[0], version=version)


def make_model_policy(config, engine: Engine, processor: Processor, store: ScreenshotStore) -> ModelPolicy:
    return ModelPolicy(engine, processor, store, prompt_builder(config, processor), max_new_tokens=config.sampler.max_new_tokens)


def make_learner(config, model: nnx.Module, mode: str) -> Learner:
    """mode "sft": the warm start's cross-entropy (config.sft); "rl": config.loss.kind, with config.loss."""
    if config.learner.row_length < config.sampler.capacity:
        raise ValueError(f"learner.row_length ({config.learner.row_length}) must be >= sampler.capacity "
                         f"({config.sampler.capacity}): every step the sampler completes must fit one row")
    return Learner(model, LearnerSettings.from_config(config, mode), mesh=device_meshes(config)[1])
