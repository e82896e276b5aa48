"""Decode attention over the stacked KV cache: a Pallas (Triton) kernel for one new token
per row that reads each row only up to its own length, in one layer of the cache.

Why it exists: the scanned decoder carries the cache of every layer as one [L, B, K, S, H]
array. jax's stock decode kernel (pallas/ops/gpu/decode_attention.py, used before the
layers were scanned) takes one layer's [B, S, K, H]. A kernel's operand is a whole buffer,
so handing it `keys[layer]` from inside the scan would make XLA materialise the layer's
whole cache (every slot, every position up to the capacity) as a buffer of its own, in
every layer of every step: the very traffic the kernel exists to avoid. This kernel takes
the stacked arrays and the layer's index and reads that layer's blocks where they lie.

The kernel is the stock one's algorithm: one program per (row, kv head, split) of the
positions; a program visits the 128-position blocks of its split that lie below the row's
`visible` length (none past it), keeps an online softmax in base 2, and writes its
unnormalised output with the running maximum and sum; the splits are combined outside.
GQA: a program holds the kv head's group of query heads, padded to 16 rows (Triton dots
are at least 16 wide).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

MASKED = -1e30              # finite: a split that sees nothing keeps a finite maximum
LOG2_E = math.log2(math.e)  # e^x = 2^(x log2 e)
MIN_ROWS = 16               # Triton's smallest dot
BLOCK = 128                 # positions per visited block (the capacity is whole blocks)


def _dot(a, b):
    """A tile product with float32 accumulation; float32 operands at full precision (no TF32)."""
    return plgpu.dot(a, b, precision=lax.Precision.HIGHEST if a.dtype == jnp.float32 else None)


def _split_kernel(layer_ref, visible_ref, q_ref, k_ref, v_ref, out_ref, max_ref, sum_ref, *, block: int,
                  scale: float):
    """One (row, kv head, split): q_ref [rows, H] (the head's query group, zero-padded);
    k_ref, v_ref [L, split, H] (this row's and head's split of every layer); reads layer
    layer_ref[()] up to position visible_ref[()]."""
    split = k_ref.shape[1]
    layer = layer_ref[()]
    start = pl.program_id(2) * split
    seen = jnp.clip(visible_ref[()] - start, 0, split)   # positions of this split the row has written
    q = q_ref[...]

    def visit(index, carry):
        acc, running_max, total = carry
        positions = pl.ds(index * block, block)
        scores = _dot(q, k_ref[layer, positions, :].T) * (scale * LOG2_E)
        allowed = (index * block + jnp.arange(block) < seen)[None, :]
        scores = jnp.where(allowed, scores, MASKED)
        new_max = jnp.maximum(running_max, jnp.max(scores, axis=1))
        weights = jnp.where(allowed, jnp.exp2(scores - new_max[:, None]), 0.0)
        rescale = jnp.exp2(running_max - new_max)
        v = v_ref[layer, positions, :]
        acc = acc * rescale[:, None] + _dot(weights.astype(v.dtype), v)
        return acc, new_max, total * rescale + jnp.sum(weights, axis=1)

    rows, head_dim = q_ref.shape
    initial = (jnp.zeros((rows, head_dim), jnp.float32), jnp.full((rows,), MASKED, jnp.float32),
               jnp.zeros((rows,), jnp.float32))
    acc, running_max, total = lax.fori_loop(0, pl.cdiv(seen, block), visit, initial)
    out_ref[...] = acc
    max_ref[...] = running_max
    sum_ref[...] = total


def splits_of(capacity: int, block: int) -> int:
    """Parts the positions are split into: the most (up to 16) that divide the blocks."""
    return max(d for d in range(1, 17) if (capacity // block) % d == 0)


@functools.partial(jax.jit, static_argnames=("interpret",))
def _decode_attention(q, keys, values, layer, visible, interpret: bool):
    b, _, n, h = q.shape
    _, _, kv_heads, capacity, _ = keys.shape
    groups = n // kv_heads
    rows = max(MIN_ROWS, pl.next_power_of_2(groups))
    splits = splits_of(capacity, BLOCK)
    split = capacity // splits
    queries = q.reshape(b, kv_heads, groups, h)
    queries = jnp.pad(queries, ((0, 0), (0, 0), (0, rows - groups), (0, 0)))   # zero rows: outputs unused
    layers = keys.shape[0]
    cache_split = pl.BlockSpec((layers, None, None, split, h), lambda row, head, part: (0, row, head, part, 0))
    stats = pl.BlockSpec((None, None, None, rows), lambda row, head, part: (row, head, part, 0))
    out, running_max, total = pl.pallas_call(
        functools.partial(_split_kernel, block=BLOCK, scale=h**-0.5),
        grid=(b, kv_heads, splits),
        in_specs=[pl.BlockSpec((None,), lambda row, head, part: (0,)),
                  pl.BlockSpec((None,), lambda row, head, part: (row,)),
                  pl.BlockSpec((None, None, rows, h), lambda row, head, part: (row, head, 0, 0)),
                  cache_split, cache_split],
        out_specs=[pl.BlockSpec((None, None, None, rows, h), lambda row, head, part: (row, head, part, 0, 0)),
                   stats, stats],
        out_shape=[jax.ShapeDtypeStruct((b, kv_heads, splits, rows, h), jnp.float32),
                   jax.ShapeDtypeStruct((b, kv_heads, splits, rows), jnp.float32),
                   jax.ShapeDtypeStruct((b, kv_heads, splits, rows), jnp.float32)],
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
        interpret=interpret, name="stacked_cache_decode",
    )(jnp.reshape(layer, (1,)).astype(jnp.int32), visible.astype(jnp.int32), queries.astype(keys.dtype),
      keys, values)
    # combine the splits: every row sees position 0, so split 0 has a positive sum
    overall = running_max.max(axis=2, keepdims=True)
    weight = jnp.exp2(running_max - overall)                                   # [B, K, splits, rows]
    combined = (out * weight[..., None]).sum(axis=2) / (total * weight).sum(axis=2)[..., None]
    return combined[:, :, :groups].reshape(b, 1, n, h).astype(q.dtype)


def decode_attention(q, keys, values, layer, visible, *, interpret: bool | None = None):
    """One new token per row: q [B, 1, N, H]; keys, values [L, B, K, S, H] (the stacked
    cache, this step's token already written); layer: the int32 layer to read; row b sees
    its first visible[b] >= 1 positions, and blocks past them are never read.

    S must be a multiple of 128 (the engine allocates whole 512s, which keep at least four
    splits per row); interpret (default: on CPU) runs the Pallas interpreter."""
    if visible.shape != (q.shape[0],) or q.shape[1] != 1:
        raise ValueError(f"decode_attention takes one token per row, got q {q.shape} and visible {visible.shape}")
    if keys.shape[3] % BLOCK:
        raise ValueError(f"the cache capacity {keys.shape[3]} must be a multiple of {BLOCK} for the decode kernel")
    return _decode_attention(q, keys, values, layer, visible,
                             interpret=jax.default_backend() == "cpu" if interpret is None else interpret)
