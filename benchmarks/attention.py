"""Packed-row attention alone: forward and forward+backward time of one long row of many
segments, per implementation (issue 25 item 1).

    python3 benchmarks/attention.py [--presets 8b,2b] [--row-length 16384] [--segment 1024]
        [--implementations xla,pallas_stock,pallas] [--tiles 128,64,64,64[,4] ...]
    .venv/bin/python benchmarks/attention.py --presets tiny --row-length 512 --segment 128 --repeats 1  # CPU

One row of `--row-length` tokens packed with segments of `--segment` tokens on average
(lengths drawn between 0.5x and 1.5x, so they are unequal and cut tiles anywhere), bf16,
the presets' text attention (heads, kv heads, head dim; causal). Implementations:
- xla: layers.segment_attention's reference path (query blocks of layers.xla_query_block, causal key cut);
- pallas_stock: jax's stock Pallas kernel (pallas/ops/gpu/attention.py `mha`, k and v
  repeated to the query heads), the learner's kernel before this one; here only;
- pallas: asyncwebrl/model/flash.py at its default tiles, or at each `--tiles`
  (query,key,backward_outer,backward_inner) given.
Reported per implementation: median seconds of the forward and of forward+backward
(dq, dk, dv of a scalar), `work`: the query-key pairs the kernel computes over the causal
triangle's T(T+1)/2 (forward; the backward's passes alongside for pallas), and useful
TFLOP/s: only same-segment causal pairs counted, 4 * pairs * heads * head_dim for a
forward and 2.5x that for a backward (FlashAttention's convention: 2 and 5 matmuls).
Prints one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from asyncwebrl.model import flash, layers, preset  # noqa: E402

STOCK_TILE = 128   # the stock kernel's forward tile (its default BlockSizes)


def packed_segments(length: int, mean: int, rng) -> np.ndarray:
    """[1, length] segment ids 1, 2, ... of lengths drawn in [mean/2, 3 mean/2]."""
    ids, segment = [], 1
    while len(ids) < length:
        ids += [segment] * int(rng.integers(mean // 2, 3 * mean // 2 + 1))
        segment += 1
    return np.asarray([ids[:length]], np.int32)


def useful_pairs(segments: np.ndarray) -> int:
    """Same-segment causal (query, key) pairs: sum of L (L + 1) / 2 over segments."""
    lengths = np.unique(segments[0], return_counts=True)[1].astype(np.int64)
    return int(np.sum(lengths * (lengths + 1) // 2))


def stock_attention(q, k, v, segment_ids):
    """The learner's attention before flash.py: jax's stock kernel, tiles below the diagonal."""
    from jax.experimental.pallas.ops.gpu.attention import mha

    groups = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    length, pad = q.shape[1], -q.shape[1] % STOCK_TILE
    if pad:
        q, k, v = (jnp.pad(a, ((0, 0), (0, pad), (0, 0), (0, 0))) for a in (q, k, v))
        segment_ids = jnp.pad(segment_ids, ((0, 0), (0, pad)), constant_values=-1)
    out = mha(q, k, v, segment_ids, sm_scale=q.shape[-1] ** -0.5, causal=True,
              interpret=jax.default_backend() == "cpu")
    return out[:, :length]


def computed_pairs(name: str, segments, tiles: flash.Tiles | None) -> dict:
    """Query-key pairs each pass computes, as a fraction of the causal triangle."""
    length = segments.shape[1]
    triangle = length * (length + 1) / 2
    if name == "xla":   # query blocks read every key up to the block's end
        block = layers.xla_query_block(length)
        pairs = sum(min(block, length - s) * min(s + block, length) for s in range(0, length, block))
        return {"forward": pairs / triangle}
    if name == "pallas_stock":
        count = -(-length // STOCK_TILE)
        return {"forward": count * (count + 1) / 2 * STOCK_TILE**2 / triangle}
    padded = jnp.pad(jnp.asarray(segments), ((0, 0), (0, -length % tiles.multiple)), constant_values=0)
    spans = flash.segment_spans(padded)
    passes = {"forward": (flash.key_tiles_per_query_tile(spans, tiles.query, tiles.key, True), tiles.query * tiles.key),
              "dkv": (flash.query_tiles_per_key_tile(spans, tiles.backward_outer, tiles.backward_inner, True),
                      tiles.backward_outer * tiles.backward_inner),
              "dq": (flash.key_tiles_per_query_tile(spans, tiles.backward_outer, tiles.backward_inner, True),
                     tiles.backward_outer * tiles.backward_inner)}
    return {name: int(flash.visited_tiles(bounds)[0]) * area / triangle for name, (bounds, area) in passes.items()}


def median_seconds(function, args, repeats: int) -> float:
    jax.block_until_ready(function(*args))   # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(function(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(attend, q, k, v, repeats: int) -> tuple[float, float]:
    """(forward s, forward+backward s) of attend(q, k, v)."""
    probe = jnp.ones(q.shape, jnp.float32) / q.size
    forward = jax.jit(attend)
    training = jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(attend(q, k, v).astype(jnp.float32) * probe),
                                          argnums=(0, 1, 2)))
    return median_seconds(forward, (q, k, v), repeats), median_seconds(training, (q, k, v), repeats)


def implementations(names, tile_settings):
    """(label, attend(q, k, v, segment_ids), tiles or None) per implementation asked for."""
    for name in names:
        if name == "xla":
            yield name, lambda q, k, v, s: layers.segment_attention(q, k, v, s, causal=True), None
        elif name == "pallas_stock":
            yield name, stock_attention, None
        elif name == "pallas":
            for tiles in tile_settings:
                label = f"pallas[{tiles.query},{tiles.key},{tiles.backward_outer},{tiles.backward_inner},{tiles.warps}]"
                yield label, (lambda t: lambda q, k, v, s: flash.flash_segment_attention(q, k, v, s, causal=True,
                                                                                        tiles=t))(tiles), tiles
        else:
            raise ValueError(f"unknown implementation {name!r}")


def parse_tiles(text: str) -> flash.Tiles:
    """'query,key,backward_outer,backward_inner[,warps]' -> Tiles (warps: the default's)."""
    query, key, outer, inner, *warps = (int(x) for x in text.split(","))
    return flash.Tiles(query=query, key=key, backward_outer=outer, backward_inner=inner,
                       **({"warps": warps[0]} if warps else {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="8b,2b")
    parser.add_argument("--row-length", type=int, default=16384)
    parser.add_argument("--segment", type=int, default=1024, help="mean segment (step row) length")
    parser.add_argument("--implementations", default="xla,pallas_stock,pallas")
    parser.add_argument("--tiles", nargs="*", default=None,
                        help="pallas tiles: query,key,backward_outer,backward_inner[,warps]")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tile_settings = [parse_tiles(t) for t in args.tiles] if args.tiles else [flash.Tiles()]

    rng = np.random.default_rng(0)
    segments = packed_segments(args.row_length, args.segment, rng)
    pairs = useful_pairs(segments)
    for name in args.presets.split(","):
        text = preset(name).text
        keys = jax.random.split(jax.random.key(0), 3)
        q = jax.random.normal(keys[0], (1, args.row_length, text.num_heads, text.head_dim), args.dtype)
        k, v = (jax.random.normal(key, (1, args.row_length, text.num_kv_heads, text.head_dim), args.dtype)
                for key in keys[1:])
        forward_flops = 4 * pairs * text.num_heads * text.head_dim
        for label, attend, tiles in implementations(args.implementations.split(","), tile_settings):
            segment_ids = jnp.asarray(segments)
            forward_s, training_s = measure(lambda q, k, v: attend(q, k, v, segment_ids), q, k, v, args.repeats)
            work = computed_pairs(label.split("[")[0], segments, tiles)
            print(json.dumps({
                "preset": name, "implementation": label, "backend": jax.default_backend(), "dtype": args.dtype,
                "row_length": args.row_length, "segments": int(segments.max()), "heads": text.num_heads,
                "kv_heads": text.num_kv_heads, "head_dim": text.head_dim,
                "forward_s": round(forward_s, 5), "forward_backward_s": round(training_s, 5),
                "work": {pass_: round(x, 4) for pass_, x in work.items()},
                "useful_forward_tflops": float(f"{forward_flops / forward_s / 1e12:.3g}"),
                "useful_forward_backward_tflops": float(f"{3.5 * forward_flops / training_s / 1e12:.3g}"),
            }), flush=True)


if __name__ == "__main__":
    main()
