"""The packed-row flash attention kernel (asyncwebrl/model/flash.py) against the XLA path.

On CPU the kernels run in the Pallas interpreter (small shapes and 16-position tiles, so
each row spans several tiles); on a GPU the same tests run the compiled Triton kernels.
Outputs and gradients (dq, dk, dv of a scalar) must match the XLA reference; the tile
bounds are also checked on their own, since the outputs stay right even when the bounds
skip nothing (the masks inside visited tiles keep them exact)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asyncwebrl.model import flash, layers

TILES = flash.Tiles(query=16, key=16, backward_outer=16, backward_inner=16)
TOLERANCE = 1e-4   # outputs (tests/test_model.py's); gradients: atol 1e-4, rtol 1e-3 as there


def random_inputs(length, heads, kv_heads, head_dim, dtype=jnp.float32, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, length, heads, head_dim))
    k, v = (rng.normal(size=(batch, length, kv_heads, head_dim)) for _ in range(2))
    probe = rng.normal(size=(batch, length, heads, head_dim))  # weights of the scalar whose gradient we take
    return [jnp.asarray(a, dtype) for a in (q, k, v)], jnp.asarray(probe, jnp.float32)


def outputs_and_gradients(attend, q, k, v, probe):
    def scalar(q, k, v):
        return jnp.sum(attend(q, k, v).astype(jnp.float32) * probe)
    out = attend(q, k, v)
    return [np.asarray(a, np.float32) for a in (out, *jax.grad(scalar, argnums=(0, 1, 2))(q, k, v))]


def kernel_and_reference(segments, *, causal, heads=2, kv_heads=2, head_dim=32, dtype=jnp.float32,
                         tiles=TILES):
    """(kernel, XLA reference) outputs and gradients; the reference at full float32 precision
    (on a GPU XLA would otherwise multiply float32 in TF32)."""
    segments = jnp.asarray(segments, jnp.int32)
    (q, k, v), probe = random_inputs(segments.shape[1], heads, kv_heads, head_dim, dtype, segments.shape[0])
    kernel = outputs_and_gradients(
        lambda q, k, v: flash.flash_segment_attention(q, k, v, segments, causal=causal, tiles=tiles), q, k, v, probe)
    with jax.default_matmul_precision("highest"):
        reference = outputs_and_gradients(
            lambda q, k, v: layers.segment_attention(q, k, v, segments, causal=causal, implementation="xla"),
            *(a.astype(jnp.float32) for a in (q, k, v)), probe)
    return kernel, reference


def assert_matches_xla(segments, *, causal, **shapes):
    kernel, reference = kernel_and_reference(segments, causal=causal, **shapes)
    np.testing.assert_allclose(kernel[0], reference[0], atol=TOLERANCE, rtol=0)
    for name, actual, expected in zip(("dq", "dk", "dv"), kernel[1:], reference[1:]):
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-3, err_msg=name)


@pytest.mark.parametrize("causal", [True, False])
def test_packed_segments_of_unequal_lengths_with_padding(causal):
    """Segments of 21, 37 and 9 positions then padding (segment 0), a length that is no
    multiple of the tile (the kernel pads it), and a row of one segment."""
    rows = [[1] * 21 + [2] * 37 + [3] * 9 + [0] * 21, [7] * 88]
    assert_matches_xla(rows, causal=causal)


@pytest.mark.parametrize("causal", [True, False])
def test_segments_that_are_not_contiguous(causal):
    """Segment 1 holds the first 8 and the last 8 positions, and the last tile opens with
    segment 4: its segment-1 queries must reach back to key tile 0 (so the lower bound is
    a minimum over the tile's queries, not its first query's), and, not causal, tile 0's
    segment-1 queries forward to the last tile although the tile ends in segment 2. The
    second row interleaves three ids at random. Bounds that assumed contiguous segments
    would miss keys."""
    first = [1] * 8 + [2] * 30 + [3] * 10 + [2] * 16 + [4] * 8 + [1] * 8
    interleaved = np.random.default_rng(1).integers(1, 4, size=80).tolist()
    spans = flash.segment_spans(jnp.asarray([first], jnp.int32))
    lo, _ = flash.key_tiles_per_query_tile(spans, 16, 16, causal)
    assert int(lo[0, -1]) == 0   # the last query tile reaches back to the first key tile
    assert_matches_xla([first, interleaved], causal=causal)


def test_grouped_query_heads():
    """GQA: 8 query heads on 2 kv heads; the kernels index the kv head per query head
    (forward, dq) and sum the group's heads into dk, dv."""
    assert_matches_xla([[1] * 40 + [2] * 24], causal=True, heads=8, kv_heads=2)


def test_query_tile_whose_segment_starts_in_an_earlier_tile():
    """Segment 2 runs from position 5 to 60: query tiles 1-3 must start at key tile 0
    (causal) and key tile 0 must reach query tile 3 (the dk/dv pass)."""
    row = [1] * 5 + [2] * 56 + [3] * 3
    spans = flash.segment_spans(jnp.asarray([row], jnp.int32))
    lo, hi = flash.key_tiles_per_query_tile(spans, 16, 16, causal=True)
    assert lo.tolist() == [[0, 0, 0, 0]] and hi.tolist() == [[1, 2, 3, 4]]
    lo, hi = flash.query_tiles_per_key_tile(spans, 16, 16, causal=True)
    assert lo.tolist() == [[0, 1, 2, 3]] and hi.tolist() == [[4, 4, 4, 4]]
    assert_matches_xla([row], causal=True)


def test_vision_like_attention_with_a_head_dim_that_is_no_power_of_two():
    """The vision tower's call: not causal, valid patches (1) then padding (0); head dim 24
    is zero-padded to 32 inside, as the 8B tower's 72 is to 128."""
    assert_matches_xla([[1] * 70 + [0] * 26], causal=False, heads=4, kv_heads=4, head_dim=24)


def test_bfloat16_inputs():
    """bf16 in, bf16 out (float32 scores and accumulators): within bf16 rounding of the
    float32 reference on the same inputs."""
    kernel, reference = kernel_and_reference([[1] * 30 + [2] * 34], causal=True, heads=4, kv_heads=2,
                                             dtype=jnp.bfloat16)
    for name, actual, expected in zip(("out", "dq", "dk", "dv"), kernel, reference):
        scale = np.abs(expected).max()
        assert np.abs(actual - expected).max() < 2e-2 * scale, name


def test_segment_attention_runs_the_kernel_at_its_own_tiles():
    """layers.segment_attention(implementation="pallas") with the production tiles (128 x 64
    forward, 64 x 64 backward, 4 warps) on a 200-position row padded to 256."""
    segments = jnp.asarray([[1] * 70 + [2] * 100 + [0] * 30], jnp.int32)
    (q, k, v), probe = random_inputs(200, 4, 2, 32)
    run = lambda implementation: outputs_and_gradients(  # noqa: E731
        lambda q, k, v: layers.segment_attention(q, k, v, segments, causal=True, implementation=implementation),
        q, k, v, probe)
    with jax.default_matmul_precision("highest"):
        reference = run("xla")
    for actual, expected in zip(run("pallas"), reference):
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-3)


def test_segment_spans_of_an_interleaved_row():
    row = jnp.asarray([[4, 2, 4, 9, 2, 2, 4]], jnp.int32)
    first, last = flash.segment_spans(row)
    assert first.tolist() == [[0, 1, 0, 3, 1, 1, 0]]
    assert last.tolist() == [[6, 5, 6, 3, 5, 5, 6]]


@pytest.mark.parametrize("causal, expected, full", [(True, 12, 36), (False, 16, 64)])
def test_tile_bounds_skip_tiles_of_other_segments(causal, expected, full):
    """4 segments of 2 tiles each (8 tiles): each segment's tile pairs only, 3 causal (the
    triangle within the segment) or 4 not, in every pass; not the whole causal triangle
    (36 pairs) or square (64)."""
    row = jnp.asarray([np.repeat([1, 2, 3, 4], 32)], jnp.int32)
    spans = flash.segment_spans(row)
    forward = flash.key_tiles_per_query_tile(spans, 16, 16, causal)
    key_values = flash.query_tiles_per_key_tile(spans, 16, 16, causal)
    for bounds in (forward, key_values):
        assert int(flash.visited_tiles(bounds)[0]) == expected < full
