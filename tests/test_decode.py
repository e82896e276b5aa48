"""The decode-attention kernel over the stacked KV cache (asyncwebrl/model/decode.py)
against the XLA path (text.cached_attention on the layer's slice).

On CPU the kernel runs in the Pallas interpreter; its lowering to Triton is checked too,
by exporting for CUDA (lowering needs no GPU; compiling the Triton IR does)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asyncwebrl.model.decode import decode_attention
from asyncwebrl.model.text import cached_attention


def stacked_cache(layers, rows, kv_heads, capacity, head_dim, seed=0, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    keys, values = (jnp.asarray(rng.normal(size=(layers, rows, kv_heads, capacity, head_dim)), dtype) for _ in range(2))
    return keys, values, rng


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (8, 2), (2, 2)], ids=["groups-of-2", "groups-of-4", "mha"])
def test_kernel_reads_one_layer_up_to_each_rows_length(heads, kv_heads):
    """Rows of different lengths (one position, a split's edge, past a block, the whole
    capacity), each layer of the stack: the XLA path's output on that layer's slice. The
    positions past a row's length hold large values, so reading one would show."""
    layers, rows, capacity, head_dim = 3, 4, 512, 32
    keys, values, rng = stacked_cache(layers, rows, kv_heads, capacity, head_dim)
    visible = jnp.asarray([1, 128, 300, capacity], jnp.int32)
    beyond = jnp.arange(capacity)[None, None, None, :, None] >= visible[None, :, None, None, None]
    keys, values = jnp.where(beyond, 1e4, keys), jnp.where(beyond, 1e4, values)
    q = jnp.asarray(rng.normal(size=(rows, 1, heads, head_dim)), jnp.float32)
    allowed = (jnp.arange(capacity)[None, :] < visible[:, None])[:, None, :]       # [B, 1, S]
    for layer in range(layers):
        actual = decode_attention(q, keys, values, jnp.int32(layer), visible)
        with jax.default_matmul_precision("highest"):
            expected = cached_attention(q, keys[layer], values[layer], allowed)
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=1e-5, rtol=0)


def test_kernel_inside_a_scan_over_layers():
    """The decoder calls the kernel with the scan's layer index (a traced scalar)."""
    layers, rows, kv_heads, heads, capacity, head_dim = 3, 2, 2, 4, 256, 32
    keys, values, rng = stacked_cache(layers, rows, kv_heads, capacity, head_dim, seed=1)
    q = jnp.asarray(rng.normal(size=(layers, rows, 1, heads, head_dim)), jnp.float32)
    visible = jnp.asarray([5, 200], jnp.int32)

    def body(_, scanned):
        layer, query = scanned
        return None, decode_attention(query, keys, values, layer, visible)

    _, outputs = jax.jit(lambda: jax.lax.scan(body, None, (jnp.arange(layers), q)))()
    for layer in range(layers):
        expected = decode_attention(q[layer], keys, values, jnp.int32(layer), visible)
        np.testing.assert_allclose(np.asarray(outputs[layer]), np.asarray(expected), atol=1e-6, rtol=0)


def test_kernel_lowers_to_triton():
    """The kernel as the GPU would compile it: Pallas lowers it to Triton IR here (load
    and dot shapes, the dynamic layer index), as a custom call of the CUDA program."""
    layers, rows, kv_heads, heads, capacity, head_dim = 4, 8, 8, 32, 1024, 128
    cache = jax.ShapeDtypeStruct((layers, rows, kv_heads, capacity, head_dim), jnp.bfloat16)
    q = jax.ShapeDtypeStruct((rows, 1, heads, head_dim), jnp.bfloat16)
    step = jax.jit(lambda q, k, v, layer, visible: decode_attention(q, k, v, layer, visible, interpret=False))
    exported = jax.export.export(step, platforms=["cuda"],
                                 disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
        q, cache, cache, jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((rows,), jnp.int32))
    assert "stacked_cache_decode" in exported.mlir_module()


def test_kernel_refuses_more_than_one_token_per_row():
    keys, values, _ = stacked_cache(1, 2, 2, 128, 32)
    with pytest.raises(ValueError, match="one token per row"):
        decode_attention(jnp.zeros((2, 3, 4, 32)), keys, values, jnp.int32(0), jnp.ones(2, jnp.int32))
