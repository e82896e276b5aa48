"""A decode step's linear maps reading one layer's weights where they lie in the stacked
parameters: y = x @ w[layer], a Pallas (Triton) kernel.

Why it exists: the decoder's layers are one scan over parameters stacked along a leading
layers axis (layers.py). Inside the scan a layer's weight is a dynamic slice of the stacked
array, and XLA's GPU backend materialises every such slice as a buffer of its own before
cuBLAS reads it. In a decode step the matmuls read every weight once for a few rows, so the
copy (read, write, read again) is most of the step: 8B, one request, H100, 216
device-to-device copies a step, ~8.7 of 16.5 ms (BENCHMARKS.md, "On an H100 the same day").
This kernel takes the stacked weight and the layer's index and reads that layer's tiles in
place, as decode.py does for the stacked KV cache.

The work: one program per (block of rows, block of output columns, part of the
contraction). A program walks its part of K in tiles, accumulating in float32, and writes a
float32 partial; the parts are summed outside (a few rows, so the partials are small beside
the weight). Splitting K gives a matrix of few rows enough programs to fill the GPU: a
decode step's 4,096 x 4,096 map in 128-column blocks is only 32 programs.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

MIN_ROWS = 16   # Triton's smallest dot


@dataclasses.dataclass(frozen=True)
class Tiling:
    """Tile sizes (powers of two; a block is cut down to the dimension when that is smaller)
    and the number of programs the K split aims for (a few per streaming multiprocessor)."""
    # 64 x 64 tiles, K split to ~256 programs, 4 warps, 4 stages: of 23 settings tried for the
    # 8B decode step's maps on an H200, the best at 16 and 64 rows and within 3% of the best at
    # one row (BENCHMARKS.md, "Decode matmuls that read the stacked weights in place")
    block_n: int = 64
    block_k: int = 64
    max_rows: int = 64        # rows per program; more rows take more programs
    programs: int = 256
    warps: int = 4
    stages: int = 4


def _kernel(layer_ref, x_ref, w_ref, out_ref, *, block_k: int):
    """x_ref [rows, part] (this program's rows, its part of K); w_ref [L, part, block_n]
    (that part of K and this program's columns, in every layer); out_ref [rows, block_n]."""
    layer = layer_ref[()]
    x_dtype = x_ref.dtype
    # float32 operands multiply at full precision (no TF32), as the XLA path does
    precision = lax.Precision.HIGHEST if x_dtype == jnp.float32 else None

    def visit(index, acc):
        ks = pl.ds(index * block_k, block_k)
        return acc + plgpu.dot(x_ref[:, ks], w_ref[layer, ks, :].astype(x_dtype), precision=precision)

    steps = x_ref.shape[1] // block_k
    out_ref[...] = lax.fori_loop(0, steps, visit, jnp.zeros(out_ref.shape, jnp.float32))


def tileable(*dimensions: int) -> bool:
    """Whether maps with these K and N dimensions can run through the kernel (multiples of 16)."""
    return all(size % 16 == 0 for size in dimensions)


def _block(size: int, largest: int) -> int:
    """The largest power of two <= `largest` that divides `size` (at least 16)."""
    block = largest
    while block > 16 and size % block:
        block //= 2
    if size % block:
        raise ValueError(f"layer_matmul needs dimensions that are multiples of 16, got {size}")
    return block


def _parts(k: int, block_k: int, rows: int, programs: int, target: int) -> int:
    """Parts of K (a power of two dividing the K tiles) to reach `target` programs, but no
    more than keep the float32 partials (parts x rows x 4 bytes a column) within a quarter
    of the bf16 weight (k x 2 bytes a column): with many rows a narrow map (the 8B's 1,024
    kv columns) would otherwise write and read half its weight's bytes again."""
    parts = 1
    while (programs * parts < target and (k // block_k) % (parts * 2) == 0
           and parts * 2 * rows * 4 <= k * 2 // 4):
        parts *= 2
    return parts


@functools.partial(jax.jit, static_argnames=("tiling", "interpret"))
def _layer_matmul(x, stacked, layer, tiling: Tiling, interpret: bool):
    m, k = x.shape
    layers, _, n = stacked.shape
    block_m = min(tiling.max_rows, max(MIN_ROWS, pl.next_power_of_2(m)))
    padded = -(-m // block_m) * block_m
    block_n, block_k = _block(n, tiling.block_n), _block(k, tiling.block_k)
    parts = _parts(k, block_k, padded, (padded // block_m) * (n // block_n), tiling.programs)
    part = k // parts
    rows = jnp.pad(x, ((0, padded - m), (0, 0)))   # zero rows: their outputs are dropped
    partials = pl.pallas_call(
        functools.partial(_kernel, block_k=block_k),
        grid=(padded // block_m, n // block_n, parts),
        in_specs=[pl.BlockSpec((None,), lambda i, j, p: (0,)),
                  pl.BlockSpec((block_m, part), lambda i, j, p: (i, p)),
                  pl.BlockSpec((layers, part, block_n), lambda i, j, p: (0, p, j))],
        out_specs=pl.BlockSpec((None, block_m, block_n), lambda i, j, p: (p, i, j)),
        out_shape=jax.ShapeDtypeStruct((parts, padded, n), jnp.float32),
        compiler_params=plgpu.CompilerParams(num_warps=tiling.warps, num_stages=tiling.stages),
        interpret=interpret, name="stacked_weight_matmul",
    )(jnp.reshape(layer, (1,)).astype(jnp.int32), rows, stacked)
    return partials.sum(axis=0)[:m]


def layer_matmul(x, stacked, layer, *, tiling: Tiling = Tiling(), interpret: bool | None = None):
    """x [M, K] @ stacked[layer] ([L, K, N]) -> [M, N] in float32 (accumulated in float32;
    the weight's tiles are cast to x's dtype as they are read).

    K and N must be multiples of 16; interpret (default: on CPU) runs the Pallas interpreter."""
    if x.ndim != 2 or stacked.ndim != 3 or x.shape[1] != stacked.shape[1]:
        raise ValueError(f"layer_matmul takes x [M, K] and stacked [L, K, N], got {x.shape} and {stacked.shape}")
    return _layer_matmul(x, stacked, layer, tiling,
                         interpret=jax.default_backend() == "cpu" if interpret is None else interpret)
