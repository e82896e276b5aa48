"""Linear maps that read one layer's weights in place in the stacked parameters
(asyncwebrl/model/layer_matmul.py, layers.LayerSlice) against XLA's matmul on the layer's slice.

On CPU the kernel runs in the Pallas interpreter; its lowering to Triton is checked by
exporting for CUDA (lowering needs no GPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from asyncwebrl.model.config import preset
from asyncwebrl.model.inputs import ModelInputs
from asyncwebrl.model.layer_matmul import Tiling, layer_matmul
from asyncwebrl.model.qwen3_vl import Qwen3VL

SMALL_TILES = Tiling(block_n=32, block_k=32, max_rows=16, programs=64)   # several blocks, rows and parts


@pytest.mark.parametrize("rows", [1, 5, 40], ids=["one-row", "padded-rows", "row-blocks"])
def test_each_layer_is_the_slices_product(rows):
    """Every layer of the stack, rows padded to the kernel's 16 and split over row blocks,
    K split into parts: x @ w[layer] to float32 rounding. The other layers hold large values,
    so reading a wrong layer would show."""
    layers, k, n = 3, 128, 96
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(rows, k)), jnp.float32)
    stacked = jnp.asarray(rng.normal(size=(layers, k, n)), jnp.float32)
    for layer in range(layers):
        others = jnp.where(jnp.arange(layers)[:, None, None] == layer, stacked, 1e4)
        actual = layer_matmul(x, others, jnp.int32(layer), tiling=SMALL_TILES)
        with jax.default_matmul_precision("highest"):
            expected = x @ stacked[layer]
        assert actual.shape == (rows, n) and actual.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=1e-4, rtol=0)


def test_bfloat16_weights_are_read_in_the_inputs_dtype():
    """bf16 weights and inputs, float32 accumulation: the bf16 matmul's result to bf16 rounding."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(4, 256)), jnp.bfloat16)
    stacked = jnp.asarray(rng.normal(size=(2, 256, 64)) * 0.05, jnp.bfloat16)
    actual = layer_matmul(x, stacked, jnp.int32(1), tiling=SMALL_TILES)
    expected = jnp.dot(x, stacked[1], preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=2e-2, rtol=1e-2)


def test_refuses_shapes_it_cannot_tile():
    with pytest.raises(ValueError, match="multiples of 16"):
        layer_matmul(jnp.zeros((1, 40)), jnp.zeros((2, 40, 32)), jnp.int32(0))
    with pytest.raises(ValueError, match=r"x \[M, K\] and stacked \[L, K, N\]"):
        layer_matmul(jnp.zeros((1, 32)), jnp.zeros((2, 16, 32)), jnp.int32(0))


def test_a_decode_step_with_weights_in_place_is_the_sliced_step():
    """The decoder's scan with weights_in_place (every linear map through the kernel, norms
    through LayerSlice reads) against the scan over slices: the same hidden states and cache
    for a one-token step after a prefill, float32."""
    config = preset("tiny")
    model = Qwen3VL(config, dtype=jnp.float32, param_dtype=jnp.float32, residual_dtype=jnp.float32, remat="none",
                    attention="xla", rngs=nnx.Rngs(0))
    rows, prompt = 2, 6
    rng = np.random.default_rng(2)

    def step_inputs(tokens, start):
        length = tokens.shape[1]
        positions = jnp.broadcast_to(start + jnp.arange(length)[None, None, :], (3, rows, length))
        return ModelInputs(tokens=tokens, positions=positions, segment_ids=jnp.ones((rows, length), jnp.int32),
                           vision_source=jnp.full((rows, length), -1, jnp.int32))

    prefill = step_inputs(jnp.asarray(rng.integers(0, 200, (rows, prompt)), jnp.int32), 0)
    _, cache = model.hidden_states(prefill, model.init_cache(rows, 32))
    token = step_inputs(jnp.asarray(rng.integers(0, 200, (rows, 1)), jnp.int32), prompt)
    with jax.default_matmul_precision("highest"):
        expected, expected_cache = model.hidden_states(token, cache, weights_in_place=False)
        actual, actual_cache = model.hidden_states(token, cache, weights_in_place=True)
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=2e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(actual_cache.keys), np.asarray(expected_cache.keys), atol=2e-5, rtol=0)


def test_kernel_lowers_to_triton():
    """The kernel as the GPU would compile it, at the 8B decode step's MLP shape: Pallas lowers
    it to Triton IR here (tiles, the dynamic layer index) as a custom call of the CUDA program."""
    x = jax.ShapeDtypeStruct((16, 4096), jnp.bfloat16)
    stacked = jax.ShapeDtypeStruct((36, 4096, 12288), jnp.bfloat16)
    step = jax.jit(lambda x, w, layer: layer_matmul(x, w, layer, interpret=False))
    exported = jax.export.export(step, platforms=["cuda"],
                                 disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
        x, stacked, jax.ShapeDtypeStruct((), jnp.int32))
    assert "stacked_weight_matmul" in exported.mlir_module()


def test_decode_steps_choose_the_kernel_only_where_it_applies():
    """In place: a one-token step with a cache and Pallas attention on one device. Not: a
    prompt chunk, the XLA path, or a decoder whose widths the kernel cannot tile (40 wide)."""
    import dataclasses

    def model(attention, hidden=128):
        config = preset("tiny")
        config = dataclasses.replace(config, text=dataclasses.replace(config.text, hidden_size=hidden,
                                                                      intermediate_size=3 * hidden),
                                     vision=dataclasses.replace(config.vision, out_hidden_size=hidden))
        return Qwen3VL(config, dtype=jnp.float32, param_dtype=jnp.float32, residual_dtype=jnp.float32,
                       remat="none", attention=attention, rngs=nnx.Rngs(0))

    def inputs(length):
        return ModelInputs(tokens=jnp.zeros((1, length), jnp.int32), positions=jnp.zeros((3, 1, length), jnp.int32),
                           segment_ids=jnp.ones((1, length), jnp.int32),
                           vision_source=jnp.full((1, length), -1, jnp.int32))

    pallas = model("pallas")
    cache = pallas.init_cache(1, 128)
    assert pallas._decodes_in_place(inputs(1), cache)
    assert not pallas._decodes_in_place(inputs(4), cache)
    assert not pallas._decodes_in_place(inputs(1), None)
    assert not model("xla")._decodes_in_place(inputs(1), cache)
    assert not model("pallas", hidden=40)._decodes_in_place(inputs(1), cache)
