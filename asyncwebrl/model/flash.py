"""Flash attention for packed rows: a Pallas (Triton) kernel that visits only the tiles
where some query and some key share a segment.

Why it exists: the learner packs many step rows (segments) into one long row, and
attention never crosses a segment. jax's stock Pallas kernel (pallas/ops/gpu/attention.py)
masks by segment but still computes every tile below the causal diagonal: a 16,384-token
row of ~1,024-token segments did ~8x the useful attention work (22% MFU against 51% for
2,048-token rows, issue 25). Here each query tile loops only over the key tiles that can
hold a key of one of its segments (and, causal, not above the diagonal); the backward's
dk/dv pass loops only over the query tiles that can see a key tile, and its dq pass over
the key tiles, as the forward does.

The loop bounds are computed outside the kernels from the segment ids, for any layout
(segments need not be contiguous): each position's segment spans [first, last] (its
first and last position); a query tile visits the key tiles from min(first) to max(last)
over its queries (clipped to the diagonal when causal), a key tile the query tiles from
its keys' min(first) to max(last). The kernels still mask by segment equality (and
causality) inside every tile they visit, so correctness never depends on the skipping:
too wide a range costs time, never accuracy.

GQA: query head n reads kv head n // (N // K) inside the kernels (no repeated k, v); the
dk/dv pass loops over the query heads of its kv head. Head dims that are not a power of
two (the 8B vision tower's 72) are zero-padded to one, sequence lengths to the tile size
(the padding forms a segment of its own). Scores, softmax and accumulators are float32;
float32 inputs multiply at full precision (no TF32), so they match the XLA path closely.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

MASKED = -1e30            # finite: a row masked so far keeps a finite running maximum
LOG2_E = math.log2(math.e)  # the kernels use exp2: e^x = 2^(x log2 e)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Tile sizes (powers of two). The forward runs one program per `query` positions and
    steps over `key` positions; the dk/dv pass runs one program per `backward_outer` keys
    stepping over `backward_inner` queries, the dq pass the other way round."""
    # 128 x 64 forward tiles, 64 x 64 backward tiles, 4 warps: on an H100, a 16k row of 1k
    # segments trains (forward + backward) 1.69x (8B heads) and 1.39x (2B) faster than 128 x 128
    # with 8 warps, the best of 19 settings tried (BENCHMARKS.md "Packed-row flash attention")
    query: int = 128
    key: int = 64
    backward_outer: int = 64
    backward_inner: int = 64
    warps: int = 4
    stages: int = 2

    @property
    def multiple(self) -> int:
        """What the sequence length is padded to: every tile divides it."""
        return max(self.query, self.key, self.backward_outer, self.backward_inner)


@dataclasses.dataclass(frozen=True)
class _Call:
    """The static settings one attention call passes to its kernels."""
    causal: bool
    scale: float                  # softmax scale (1/sqrt of the unpadded head dim)
    tiles: Tiles
    interpret: bool


# -- loop bounds (plain XLA, outside the kernels) ------------------------------------------

def segment_spans(segment_ids):
    """For every position, the first and last position of its segment: two [B, T] int32.

    Works for any layout: a stable sort groups each segment's positions in order, so a
    run of equal ids in sorted order starts at the segment's first position and ends at
    its last."""
    length = segment_ids.shape[1]
    order = jnp.argsort(segment_ids, axis=1, stable=True).astype(jnp.int32)
    ids = jnp.take_along_axis(segment_ids, order, axis=1)
    slots = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), ids.shape)
    starts_run = jnp.concatenate([jnp.ones_like(ids[:, :1], bool), ids[:, 1:] != ids[:, :-1]], axis=1)
    ends_run = jnp.concatenate([ids[:, 1:] != ids[:, :-1], jnp.ones_like(ids[:, :1], bool)], axis=1)
    run_start = lax.cummax(jnp.where(starts_run, slots, 0), axis=1)
    run_end = lax.cummin(jnp.where(ends_run, slots, length - 1), axis=1, reverse=True)
    first_sorted = jnp.take_along_axis(order, run_start, axis=1)
    last_sorted = jnp.take_along_axis(order, run_end, axis=1)
    rows = jnp.arange(segment_ids.shape[0])[:, None]
    first = jnp.zeros_like(order).at[rows, order].set(first_sorted)
    last = jnp.zeros_like(order).at[rows, order].set(last_sorted)
    return first, last


def _tile_extent(first, last, tile: int):
    """Per tile of `tile` positions: the lowest first and the highest last position of the
    segments its positions belong to ([B, T / tile] each)."""
    b, t = first.shape
    return first.reshape(b, t // tile, tile).min(-1), last.reshape(b, t // tile, tile).max(-1)


def key_tiles_per_query_tile(spans, query_tile: int, key_tile: int, causal: bool):
    """[lo, hi): the key tiles each query tile visits ([B, T / query_tile] int32 each)."""
    lowest, highest = _tile_extent(*spans, query_tile)
    if causal:  # no key after the tile's last query
        tile_last = (jnp.arange(highest.shape[1], dtype=jnp.int32) + 1) * query_tile - 1
        highest = jnp.minimum(highest, tile_last)
    return lowest // key_tile, highest // key_tile + 1


def query_tiles_per_key_tile(spans, key_tile: int, query_tile: int, causal: bool):
    """[lo, hi): the query tiles that can see each key tile ([B, T / key_tile] int32 each)."""
    lowest, highest = _tile_extent(*spans, key_tile)
    if causal:  # no query before the tile's first key
        tile_first = jnp.arange(lowest.shape[1], dtype=jnp.int32) * key_tile
        lowest = jnp.maximum(lowest, tile_first)
    return lowest // query_tile, highest // query_tile + 1


def visited_tiles(bounds) -> jax.Array:
    """How many (tile, tile) pairs a pass with these [lo, hi) bounds computes, per row."""
    lo, hi = bounds
    return jnp.sum(jnp.maximum(hi - lo, 0), axis=-1)


# -- kernels -------------------------------------------------------------------------------

def _dot(a, b, *, trans_b: bool = False):
    """A tile product with float32 accumulation; float32 operands at full precision."""
    precision = lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    return plgpu.dot(a, b.T if trans_b else b, precision=precision)


def _allowed(query_segments, key_segments, query_start, key_start, causal: bool):
    """[queries, keys] bool: same segment, and (causal) the key not after the query."""
    allowed = query_segments[:, None] == key_segments[None, :]
    if causal:
        queries = query_start + jnp.arange(query_segments.shape[0])
        keys = key_start + jnp.arange(key_segments.shape[0])
        allowed = allowed & (queries[:, None] >= keys[None, :])
    return allowed


def _forward_kernel(lo_ref, hi_ref, q_ref, k_ref, v_ref, segments_ref, out_ref, lse_ref, *, call: _Call):
    """One query tile of one head: online softmax over the visited key tiles.

    Writes the output and the base-2 log-sum-exp of the scaled scores (the backward's)."""
    query_tile, head_dim = q_ref.shape
    key_tile = call.tiles.key
    query_start = pl.program_id(0) * query_tile
    q = q_ref[...]
    query_segments = segments_ref[pl.ds(query_start, query_tile)]

    def visit(key_block, carry):
        acc, running_max, total = carry
        keys = pl.ds(key_block * key_tile, key_tile)
        scores = _dot(q, k_ref[keys, :], trans_b=True) * (call.scale * LOG2_E)
        allowed = _allowed(query_segments, segments_ref[keys], query_start, key_block * key_tile, call.causal)
        scores = jnp.where(allowed, scores, MASKED)
        new_max = jnp.maximum(running_max, jnp.max(scores, axis=1))
        # masked entries count zero even while a row has seen no allowed key yet
        weights = jnp.where(allowed, jnp.exp2(scores - new_max[:, None]), 0.0)
        rescale = jnp.exp2(running_max - new_max)
        v = v_ref[keys, :]
        acc = acc * rescale[:, None] + _dot(weights.astype(v.dtype), v)
        return acc, new_max, total * rescale + jnp.sum(weights, axis=1)

    initial = (jnp.zeros((query_tile, head_dim), jnp.float32), jnp.full((query_tile,), MASKED, jnp.float32),
               jnp.zeros((query_tile,), jnp.float32))
    # every query sees at least itself, so `total` ends positive
    acc, running_max, total = lax.fori_loop(lo_ref[()], hi_ref[()], visit, initial)
    out_ref[...] = (acc / total[:, None]).astype(out_ref.dtype)
    lse_ref[...] = running_max + jnp.log2(total)


def _key_values_kernel(lo_ref, hi_ref, q_ref, k_ref, v_ref, segments_ref, dout_ref, lse_ref, delta_ref,
                       dk_ref, dv_ref, *, call: _Call):
    """dk, dv of one key tile of one kv head: over its query heads and the query tiles
    that can see it."""
    key_tile = k_ref.shape[0]
    query_tile = call.tiles.backward_inner
    groups = q_ref.shape[1]
    key_start = pl.program_id(0) * key_tile
    k, v = k_ref[...], v_ref[...]
    key_segments = segments_ref[pl.ds(key_start, key_tile)]

    def visit(head, query_block, carry):
        dk, dv = carry
        queries = pl.ds(query_block * query_tile, query_tile)
        q, dout = q_ref[queries, head, :], dout_ref[queries, head, :]
        scores = _dot(q, k, trans_b=True) * (call.scale * LOG2_E)
        allowed = _allowed(segments_ref[queries], key_segments, query_block * query_tile, key_start, call.causal)
        probabilities = jnp.where(allowed, jnp.exp2(scores - lse_ref[head, queries][:, None]), 0.0)
        dv = dv + _dot(probabilities.astype(dout.dtype).T, dout)
        dprobabilities = _dot(dout, v, trans_b=True)
        dscores = probabilities * (dprobabilities - delta_ref[head, queries][:, None])
        return dk + _dot(dscores.astype(q.dtype).T, q), dv

    def over_queries(head, carry):
        return lax.fori_loop(lo_ref[()], hi_ref[()], functools.partial(visit, head), carry)

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(0, groups, over_queries, (zeros, zeros))
    dk_ref[...] = (dk * call.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _queries_kernel(lo_ref, hi_ref, q_ref, k_ref, v_ref, segments_ref, dout_ref, lse_ref, delta_ref, dq_ref, *,
                    call: _Call):
    """dq of one query tile of one head, over the key tiles it visits."""
    query_tile = q_ref.shape[0]
    key_tile = call.tiles.backward_inner
    query_start = pl.program_id(0) * query_tile
    q, dout = q_ref[...], dout_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    query_segments = segments_ref[pl.ds(query_start, query_tile)]

    def visit(key_block, dq):
        keys = pl.ds(key_block * key_tile, key_tile)
        k = k_ref[keys, :]
        scores = _dot(q, k, trans_b=True) * (call.scale * LOG2_E)
        allowed = _allowed(query_segments, segments_ref[keys], query_start, key_block * key_tile, call.causal)
        probabilities = jnp.where(allowed, jnp.exp2(scores - lse[:, None]), 0.0)
        dprobabilities = _dot(dout, v_ref[keys, :], trans_b=True)
        dscores = probabilities * (dprobabilities - delta[:, None])
        return dq + _dot(dscores.astype(k.dtype), k)

    dq = lax.fori_loop(lo_ref[()], hi_ref[()], visit, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = (dq * call.scale).astype(dq_ref.dtype)


# -- pallas calls --------------------------------------------------------------------------

def _per_tile_scalar():
    """A [B, tiles] bound array read as one scalar per program (grid: tile, batch, head)."""
    return pl.BlockSpec((None, None), lambda tile, b, head: (b, tile))


def _whole_row(length: int, head_dim: int, head_of):
    """All positions of one head of one row; head_of maps the grid's head to the array's."""
    return pl.BlockSpec((None, length, None, head_dim), lambda tile, b, head: (b, 0, head_of(head), 0))


def _one_tile(tile: int, head_dim: int):
    return pl.BlockSpec((None, tile, None, head_dim), lambda i, b, head: (b, i, head, 0))


def _params(call: _Call):
    return plgpu.CompilerParams(num_warps=call.tiles.warps, num_stages=call.tiles.stages)


def _forward(q, k, v, segment_ids, spans, call: _Call):
    batch, length, heads, head_dim = q.shape
    groups = heads // k.shape[2]
    tile = call.tiles.query
    lo, hi = key_tiles_per_query_tile(spans, tile, call.tiles.key, call.causal)
    kv_head = lambda head: lax.div(head, groups)  # noqa: E731
    out, lse = pl.pallas_call(
        functools.partial(_forward_kernel, call=call),
        grid=(length // tile, batch, heads),
        in_specs=[_per_tile_scalar(), _per_tile_scalar(), _one_tile(tile, head_dim),
                  _whole_row(length, head_dim, kv_head), _whole_row(length, head_dim, kv_head),
                  pl.BlockSpec((None, length), lambda i, b, head: (b, 0))],
        out_specs=[_one_tile(tile, head_dim), pl.BlockSpec((None, None, tile), lambda i, b, head: (b, head, i))],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads, length), jnp.float32)],
        compiler_params=_params(call), interpret=call.interpret, name="segment_flash_forward",
    )(lo, hi, q, k, v, segment_ids)
    return out, lse


def _key_value_gradients(q, k, v, segment_ids, spans, dout, lse, delta, call: _Call):
    batch, length, kv_heads, head_dim = k.shape
    groups = q.shape[2] // kv_heads
    tile = call.tiles.backward_outer
    lo, hi = query_tiles_per_key_tile(spans, tile, call.tiles.backward_inner, call.causal)
    # the query heads of kv head `head` are heads [head * groups, (head + 1) * groups)
    query_group = pl.BlockSpec((None, length, groups, head_dim), lambda i, b, head: (b, 0, head, 0))
    row_stats = pl.BlockSpec((None, groups, length), lambda i, b, head: (b, head, 0))
    return pl.pallas_call(
        functools.partial(_key_values_kernel, call=call),
        grid=(length // tile, batch, kv_heads),
        in_specs=[_per_tile_scalar(), _per_tile_scalar(), query_group, _one_tile(tile, head_dim),
                  _one_tile(tile, head_dim), pl.BlockSpec((None, length), lambda i, b, head: (b, 0)), query_group,
                  row_stats, row_stats],
        out_specs=[_one_tile(tile, head_dim), _one_tile(tile, head_dim)],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        compiler_params=_params(call), interpret=call.interpret, name="segment_flash_dkv",
    )(lo, hi, q, k, v, segment_ids, dout, lse, delta)


def _query_gradients(q, k, v, segment_ids, spans, dout, lse, delta, call: _Call):
    batch, length, heads, head_dim = q.shape
    groups = heads // k.shape[2]
    tile = call.tiles.backward_outer
    lo, hi = key_tiles_per_query_tile(spans, tile, call.tiles.backward_inner, call.causal)
    kv_head = lambda head: lax.div(head, groups)  # noqa: E731
    row_stats = pl.BlockSpec((None, None, tile), lambda i, b, head: (b, head, i))
    return pl.pallas_call(
        functools.partial(_queries_kernel, call=call),
        grid=(length // tile, batch, heads),
        in_specs=[_per_tile_scalar(), _per_tile_scalar(), _one_tile(tile, head_dim),
                  _whole_row(length, head_dim, kv_head), _whole_row(length, head_dim, kv_head),
                  pl.BlockSpec((None, length), lambda i, b, head: (b, 0)), _one_tile(tile, head_dim),
                  row_stats, row_stats],
        out_specs=_one_tile(tile, head_dim),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=_params(call), interpret=call.interpret, name="segment_flash_dq",
    )(lo, hi, q, k, v, segment_ids, dout, lse, delta)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attend(q, k, v, segment_ids, call: _Call):
    return _forward(q, k, v, segment_ids, segment_spans(segment_ids), call)[0]


def _attend_forward(q, k, v, segment_ids, call: _Call):
    spans = segment_spans(segment_ids)
    out, lse = _forward(q, k, v, segment_ids, spans, call)
    return out, (q, k, v, segment_ids, spans, out, lse)


def _attend_backward(call: _Call, residuals, dout):
    q, k, v, segment_ids, spans, out, lse = residuals
    # delta = rowsum(out * dout): the softmax backward's correction term, [B, N, T] like lse
    delta = jnp.einsum("btnh,btnh->bnt", out.astype(jnp.float32), dout.astype(jnp.float32))
    dk, dv = _key_value_gradients(q, k, v, segment_ids, spans, dout, lse, delta, call)
    dq = _query_gradients(q, k, v, segment_ids, spans, dout, lse, delta, call)
    return dq, dk, dv, None


_attend.defvjp(_attend_forward, _attend_backward)


def flash_segment_attention(q, k, v, segment_ids, *, causal: bool, tiles: Tiles = Tiles(),
                            interpret: bool | None = None):
    """Attention where position t sees s iff segment_ids[t] == segment_ids[s] (and s <= t
    when causal). q: [B, T, N, H]; k, v: [B, T, K, H] with N a multiple of K;
    segment_ids: [B, T] int. Returns [B, T, N, H] in q's dtype; differentiable in q, k, v.

    interpret (default: on CPU) runs the kernels in the Pallas interpreter."""
    batch, length, heads, head_dim = q.shape
    if heads % k.shape[2]:
        raise ValueError(f"query heads ({heads}) must be a multiple of kv heads ({k.shape[2]})")
    call = _Call(causal=causal, scale=head_dim**-0.5, tiles=tiles,
                 interpret=jax.default_backend() == "cpu" if interpret is None else interpret)
    segment_ids = segment_ids.astype(jnp.int32)
    # Triton tiles are powers of two (and dots at least 16 wide): zero columns change no score
    padded_dim = max(16, pl.next_power_of_2(head_dim))
    pad = -length % tiles.multiple
    if pad:  # the padding is a segment of its own, so no real position sees it
        segment_ids = jnp.pad(segment_ids, ((0, 0), (0, pad)), constant_values=jnp.min(segment_ids) - 1)
    q, k, v = (jnp.pad(a, ((0, 0), (0, pad), (0, 0), (0, padded_dim - head_dim))) if pad or padded_dim != head_dim
               else a for a in (q, k.astype(q.dtype), v.astype(q.dtype)))
    out = _attend(q, k, v, segment_ids, call)
    return out[:, :length, :, :head_dim]
