"""A decode step's linear maps alone: every layer's seven weight matrices read once for a
few rows, three ways (issue 25, the sampler's bandwidth goal).

    python3 benchmarks/layer_matmul.py --preset 8b --rows 1,16,64 [--tilings 128,128,512,4,3 ...]
    .venv/bin/python benchmarks/layer_matmul.py --preset tiny --rows 1,8 --repeats 2   # CPU (interpreter)

Ways, each one jitted loop over the preset's text layers (bf16 weights stacked [L, K, N] as
the model stores them; x [rows, K] bf16):
- slice: jnp.dot(x, dynamic_index(w, layer)), as the decoder's scan did: XLA copies each
  layer's slice out before cuBLAS reads it;
- separate: the same products on per-layer arrays (a Python loop over L arrays per map, no
  slice, cuBLAS, built once for every row count): what cuBLAS reaches when nothing is
  copied, at 2x the weights' memory;
- kernel: layer_matmul.py on the stacked weights (reads the layer in place), at its default
  tiling or at each `--tilings` (block_n,block_k,programs,warps,stages[,max_rows]).
Reported per rows x way: median ms for all layers' maps, GB/s of weights read (bytes of every
weight once / time), and that as a fraction of the copy bandwidth measured in the same run
(bytes read + written by a device-to-device copy / time): a decode step cannot read its
weights faster. Prints one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from asyncwebrl.model import preset  # noqa: E402
from asyncwebrl.model.layer_matmul import Tiling, layer_matmul  # noqa: E402
from benchmarks.attention import median_seconds  # noqa: E402
from benchmarks.sampler import copy_bandwidth  # noqa: E402


def map_shapes(text) -> dict[str, tuple[int, int]]:
    """(K, N) of a decoder layer's seven linear maps."""
    d, f = text.hidden_size, text.intermediate_size
    q, kv = text.num_heads * text.head_dim, text.num_kv_heads * text.head_dim
    return {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f), "down": (f, d)}


def all_layers(product, layers: int):
    """A jitted loop over the layers of every map's product(x, weights, layer); the outputs'
    sums are carried so that no product can be dropped."""
    def run(xs, weights):
        def body(layer, total):
            return total + sum(product(xs[name], weights[name], layer).astype(jnp.float32).sum() for name in weights)
        return jax.lax.fori_loop(0, layers, body, jnp.float32(0))
    return jax.jit(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="8b")
    parser.add_argument("--rows", default="1,16,64")
    parser.add_argument("--ways", default="slice,separate,kernel")
    parser.add_argument("--tilings", nargs="*", default=[], help="block_n,block_k,programs,warps,stages[,max_rows]")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    text = preset(args.preset).text
    layers = text.num_layers
    shapes = map_shapes(text)
    key = jax.random.PRNGKey(0)
    stacked = {name: (jax.random.normal(jax.random.fold_in(key, i), (layers, k, n), jnp.float32) * 0.02
                      ).astype(jnp.bfloat16) for i, (name, (k, n)) in enumerate(shapes.items())}
    weight_bytes = sum(w.nbytes for w in stacked.values())
    bandwidth = copy_bandwidth()
    names = ("block_n", "block_k", "programs", "warps", "stages", "max_rows")
    tilings = [Tiling(**dict(zip(names, map(int, spec.split(","))))) for spec in args.tilings] or [Tiling()]
    ways = args.ways.split(",")
    print(json.dumps({"preset": args.preset, "device": jax.devices()[0].device_kind, "layers": layers,
                      "weight_gb": round(weight_bytes / 1e9, 3), "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1)}),
          flush=True)

    if "separate" in ways:   # per-layer arrays (2x the weights' memory): no slice to copy
        separate = {name: [w[i] for i in range(layers)] for name, w in stacked.items()}
        unrolled = jax.jit(lambda xs, weights: sum(jnp.dot(xs[name], w).astype(jnp.float32).sum()
                                                   for name in weights for w in weights[name]))

    for rows in map(int, args.rows.split(",")):
        xs = {name: jax.random.normal(key, (rows, k), jnp.bfloat16) for name, (k, _) in shapes.items()}
        arms = []
        if "slice" in ways:
            sliced = lambda x, w, layer: jnp.dot(x, jax.lax.dynamic_index_in_dim(w, layer, keepdims=False))  # noqa: E731
            arms.append(("slice", None, all_layers(sliced, layers), (xs, stacked)))
        if "separate" in ways:
            arms.append(("separate", None, unrolled, (xs, separate)))
        if "kernel" in ways:
            for tiling in tilings:
                def in_place(x, w, layer, tiling=tiling):
                    return layer_matmul(x, w, layer, tiling=tiling)
                arms.append(("kernel", tiling, all_layers(in_place, layers), (xs, stacked)))
        for way, tiling, function, operands in arms:
            seconds = median_seconds(function, operands, args.repeats)
            print(json.dumps({"rows": rows, "way": way, "tiling": tiling and [getattr(tiling, n) for n in names],
                              "ms": round(seconds * 1e3, 3), "weights_gb_s": round(weight_bytes / seconds / 1e9, 1),
                              "fraction_of_copy_bandwidth": round(weight_bytes / seconds / bandwidth, 3)}), flush=True)


if __name__ == "__main__":
    main()
