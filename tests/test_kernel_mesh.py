"""The Pallas kernels under shard_map (asyncwebrl/model/kernel_mesh.py) on meshes of the 8
fake CPU devices, against the XLA attention paths: rows (slots) over data x fsdp, heads
over tensor. The kernels run in the Pallas interpreter, so the shapes are tiny.

Every row has its own segment layout and its own length, and the kv heads differ, so a
device handed another device's rows or heads would give other outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from asyncwebrl.model.kernel_mesh import (decode_attention_on_mesh, flash_attention_on_mesh, layer_matmul_on_mesh,
                                          weight_split)
from asyncwebrl.model.layers import segment_attention
from asyncwebrl.model.text import cached_attention
from asyncwebrl.parallel import make_mesh, traced_on

MESHES = {"2x2x2": {"data": 2, "fsdp": 2, "tensor": 2}, "fsdp4-tensor2": {"fsdp": 4, "tensor": 2}}


def on_mesh(mesh, *arrays):
    """The arrays committed to the mesh's devices (replicated), as the learner's and engine's are."""
    return jax.device_put(arrays, NamedSharding(mesh, PartitionSpec()))


def packed_rows(rows=4, length=48, heads=4, kv_heads=2, head_dim=16, seed=0):
    """q, k, v and segment ids of `rows` packed rows: each row a different cut into segments,
    with trailing padding (segment 0) in some."""
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(rows, length, heads, head_dim)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(rows, length, kv_heads, head_dim)), jnp.float32) for _ in range(2))
    cuts = [(5, 20, 30), (12, 40), (1, 2, 3, 47), (30,)]
    segment_ids = np.zeros((rows, length), np.int32)
    for row in range(rows):
        ends = list(cuts[row % len(cuts)]) + [length - 3 * (row % 2)]
        start = 0
        for segment, end in enumerate(ends, start=1):
            segment_ids[row, start:end] = segment
            start = end
    return q, k, v, jnp.asarray(segment_ids)


def flash_loss(attend):
    """A scalar of the attention output that weighs every output element differently."""
    def loss(q, k, v, segment_ids):
        out = attend(q, k, v, segment_ids)
        return jnp.sum(out * jnp.sin(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape))
    return loss


@pytest.mark.parametrize("shape", list(MESHES.values()), ids=list(MESHES))
def test_sharded_flash_attention_and_its_gradient_match_xla(shape):
    mesh = make_mesh(shape)
    q, k, v, segment_ids = on_mesh(mesh, *packed_rows())
    pallas = traced_on(mesh, flash_loss(lambda *a: flash_attention_on_mesh(*a, causal=True)))
    xla = flash_loss(lambda *a: segment_attention(*a, causal=True, implementation="xla"))
    assert "shard_map" in str(jax.make_jaxpr(pallas)(q, k, v, segment_ids))
    actual_loss, actual = jax.jit(jax.value_and_grad(pallas, argnums=(0, 1, 2)))(q, k, v, segment_ids)
    with jax.default_matmul_precision("highest"):
        expected_loss, expected = jax.jit(jax.value_and_grad(xla, argnums=(0, 1, 2)))(q, k, v, segment_ids)
    np.testing.assert_allclose(actual_loss, expected_loss, rtol=1e-5)
    for name, a, b in zip("qkv", actual, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=0, err_msg=f"d{name}")


def test_one_device_mesh_calls_the_kernel_as_is():
    mesh = make_mesh({"fsdp": 1}, devices=jax.devices()[:1])
    q, k, v, segment_ids = packed_rows()
    jaxpr = str(jax.make_jaxpr(traced_on(mesh, lambda *a: flash_attention_on_mesh(*a, causal=False)))(
        q, k, v, segment_ids))
    assert "shard_map" not in jaxpr and "pallas_call" in jaxpr


def test_kv_heads_that_do_not_split_over_tensor_are_named():
    mesh = make_mesh({"data": 2, "tensor": 4})
    q, k, v, segment_ids = on_mesh(mesh, *packed_rows(kv_heads=2))
    with pytest.raises(ValueError, match=r"2 kv heads do not split over tensor = 4.*mesh\.tensor"):
        jax.jit(traced_on(mesh, lambda *a: flash_attention_on_mesh(*a, causal=True)))(q, k, v, segment_ids)


@pytest.mark.parametrize("shape", [{"fsdp": 4, "tensor": 2}, {"tensor": 2}, {"data": 2, "fsdp": 2, "tensor": 2}],
                         ids=["fsdp4-tensor2", "tensor2", "2x2x2"])
def test_sharded_decode_kernel_matches_xla(shape):
    """Rows of different lengths, every layer of the stack; positions past a row's length
    hold large values, so reading one would show."""
    mesh = make_mesh(shape, devices=jax.devices()[:np.prod(list(shape.values()))])
    layers, rows, kv_heads, heads, capacity, head_dim = 2, 4, 2, 4, 256, 16
    rng = np.random.default_rng(1)
    keys, values = (jnp.asarray(rng.normal(size=(layers, rows, kv_heads, capacity, head_dim)), jnp.float32)
                    for _ in range(2))
    visible = jnp.asarray([1, 129, 60, capacity], jnp.int32)
    beyond = jnp.arange(capacity)[None, None, None, :, None] >= visible[None, :, None, None, None]
    keys, values = jnp.where(beyond, 1e4, keys), jnp.where(beyond, 1e4, values)
    q = jnp.asarray(rng.normal(size=(rows, 1, heads, head_dim)), jnp.float32)
    q, keys, values, visible = on_mesh(mesh, q, keys, values, visible)
    allowed = (jnp.arange(capacity)[None, :] < visible[:, None])[:, None, :]
    decode = jax.jit(traced_on(mesh, decode_attention_on_mesh))
    assert "shard_map" in str(jax.make_jaxpr(traced_on(mesh, decode_attention_on_mesh))(
        q, keys, values, jnp.int32(0), visible))
    for layer in range(layers):
        actual = decode(q, keys, values, jnp.int32(layer), visible)
        with jax.default_matmul_precision("highest"):
            expected = cached_attention(q, keys[layer], values[layer], allowed)
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [{"fsdp": 4, "tensor": 2}, {"data": 2, "fsdp": 2, "tensor": 2}],
                         ids=["fsdp4-tensor2", "2x2x2"])
@pytest.mark.parametrize("axes,split", [((("embed",), ("heads", "head_dim")), "out"),
                                         ((("heads", "head_dim"), ("embed",)), "in"),
                                         ((("embed",), ("head_dim",)), None)], ids=["columns", "sum", "whole"])
def test_sharded_decode_matmul_matches_the_slices_product(shape, axes, split):
    """The decode step's in-place linear map on a mesh: rows over the batch axes, the weight
    split as the sampler's rules split it (its columns, or its contraction with the parts
    added over tensor, or whole), each layer of the stack: x @ w[layer]. The other layers
    hold large values, so reading a wrong layer or share would show."""
    mesh = make_mesh(shape)
    layers, rows, k, n = 3, 8, 64, 96
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(rows, k)), jnp.float32)
    stacked = jnp.asarray(rng.normal(size=(layers, k, n)), jnp.float32)
    x_on, stacked_on = on_mesh(mesh, x, stacked)
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        assert weight_split(*axes, k, n) == split

    def product(x, w, layer):
        return layer_matmul_on_mesh(x, w, layer, weight_split(*axes, k, n))

    jitted = jax.jit(traced_on(mesh, product))
    assert "shard_map" in str(jax.make_jaxpr(traced_on(mesh, product))(x_on, stacked_on, jnp.int32(0)))
    for layer in range(layers):
        poisoned = jnp.where(jnp.arange(layers)[:, None, None] == layer, stacked_on, 1e4)
        actual = jitted(x_on, poisoned, jnp.int32(layer))
        with jax.default_matmul_precision("highest"):
            expected = x @ stacked[layer]
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=1e-4, rtol=0)


def test_a_decode_map_whose_share_cannot_be_tiled_is_named():
    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        with pytest.raises(ValueError, match="does not split into tileable shares over tensor = 4"):
            weight_split(("embed",), ("mlp",), 64, 40)
