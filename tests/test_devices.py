"""Devices split between sampler and learner (config.devices,
docs/architecture.md#devices-and-sharding), on the eight fake CPU devices of tests/conftest.py."""

import jax
import numpy as np
import pytest
from flax import nnx

from asyncwebrl.model import Qwen3VL, preset
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.runtime.build import device_meshes, make_engine, make_learner
from asyncwebrl.sampler import Request
from bare_settings import model_options  # tests/bare_settings.py
from configs import default


def config_with(count: int, sampler: int, attention: str = "xla"):
    config = default.bare()
    config.devices.count, config.devices.sampler = count, sampler
    config.model.attention = attention
    config.sampler.slots, config.sampler.capacity, config.sampler.prompt_buckets = 2, 512, (512,)
    config.learner.row_length = 512
    return config


def devices_of(mesh) -> list:
    return list(mesh.devices.flat)


def test_a_split_gives_the_first_devices_to_the_sampler_and_the_rest_to_the_learner():
    sampler, learner = device_meshes(config_with(count=4, sampler=1))
    assert devices_of(sampler) == jax.devices()[:1]
    assert sorted(devices_of(learner), key=lambda d: d.id) == jax.devices()[1:4]
    assert learner.shape["fsdp"] == 3 and sampler.shape["tensor"] == 1


def test_sampler_zero_shares_every_device_and_one_device_is_always_shared():
    sampler, learner = device_meshes(config_with(count=-1, sampler=0))
    assert len(devices_of(sampler)) == len(devices_of(learner)) == jax.device_count()
    assert sampler.shape["tensor"] == jax.device_count()
    sampler, learner = device_meshes(config_with(count=1, sampler=1))
    assert devices_of(sampler) == devices_of(learner) == jax.devices()[:1]


@pytest.mark.parametrize("count, sampler, message", [
    (4, 4, "give the sampler 1 to 3"),
    (99, 0, "devices.count = 99"),
])
def test_impossible_splits_are_refused(count, sampler, message):
    with pytest.raises(ValueError, match=message):
        device_meshes(config_with(count, sampler))


def test_pallas_attention_takes_multi_device_meshes():
    """The kernels run under shard_map (asyncwebrl/model/kernel_mesh.py): no role is held
    to one device."""
    sampler, learner = device_meshes(config_with(count=8, sampler=2, attention="pallas"))
    assert sampler.shape["tensor"] == 2 and learner.size == 6


def test_a_learner_on_other_devices_publishes_to_the_sampler():
    """Learner on devices 1-2 (FSDP), sampler on device 0: the published weights land on
    the sampler's device and decode exactly as an engine sharing one device does."""
    model = Qwen3VL(preset("tiny"), **model_options(), rngs=nnx.Rngs(3))
    processor = Processor.embedded()
    split = config_with(count=3, sampler=1)
    learner = make_learner(split, model, "rl")
    assert {d for leaf in jax.tree.leaves(learner.params) for d in leaf.devices()} == set(jax.devices()[1:3])
    request = Request(input_ids=np.arange(40, 90, dtype=np.int32), max_new_tokens=6)
    with make_engine(split, learner.model(), processor, temperature=0.0, top_p=1.0) as engine:
        engine.publish(learner.params, version=5)
        published = engine.submit(request).result()
        placed = {d for leaf in engine._params for d in leaf.devices()}
    assert placed == {jax.devices()[0]}
    with make_engine(config_with(count=1, sampler=0), model, processor, temperature=0.0, top_p=1.0) as reference:
        expected = reference.submit(request).result()
    np.testing.assert_array_equal(published.tokens, expected.tokens)
    assert set(published.versions.tolist()) == {5}
