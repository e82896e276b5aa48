"""What each compiled sampler step holds besides the KV cache: does a step copy the cache?

    .venv/bin/python benchmarks/sampler_memory.py --preset tiny --slots 16 --capacity 2048          # CPU
    python3 benchmarks/sampler_memory.py --preset 8b --dtype bfloat16 --attention pallas --slots 64 \
        --capacity 2560 --buckets 2112 --hlo $OUT/decode.hlo

Builds an engine (random weights), compiles its decode call for each block of slots and
window and its prefill for each bucket (nothing runs), and prints XLA's memory analysis of
each: the temporary buffer a call needs beside its arguments, as a share of the KV cache.
The cache is donated to every call and updated in place, so a step whose temporaries reach
the cache's size is copying it (memory the GPU may not have, and bandwidth every call).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.sampler import Engine, EngineSettings, SamplingSettings  # noqa: E402
from configs.default import bare  # noqa: E402


def analysed(compiled) -> dict:
    memory = compiled.memory_analysis()
    return {"temp_bytes": int(memory.temp_size_in_bytes), "argument_bytes": int(memory.argument_size_in_bytes),
            "alias_bytes": int(memory.alias_size_in_bytes)}


def decode_memory(engine: Engine, rows: int, window: int):
    compiled = engine._decode.lower(*engine.idle_decode_arguments(rows), rows=rows, window=window).compile()
    return compiled, analysed(compiled)


def prefill_memory(engine: Engine, bucket: int, first: bool) -> dict:
    zeros = np.zeros((1, bucket), np.int32)
    compiled = engine._prefill.lower(engine._params, engine._cache, np.int32(0), np.int32(0), zeros,
                                     np.zeros((3, 1, bucket), np.int32), zeros + 1, zeros - 1, None, engine._key(),
                                     first=first).compile()
    return analysed(compiled)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--attention", default="xla", choices=["xla", "pallas"])
    parser.add_argument("--remat", default="none", help="the model's remat policy (a run's engine shares the "
                        "learner's model: none, full, dots, mlp)")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=2048)
    parser.add_argument("--buckets", default="512", help="prefill buckets (comma-separated)")
    parser.add_argument("--decode-steps", type=int, default=8)
    parser.add_argument("--all-blocks", action="store_true", help="every block of slots, not only the smallest "
                        "and the largest")
    parser.add_argument("--hlo", default="", help="write the full block's optimised decode HLO here")
    args = parser.parse_args()

    config = preset(args.preset)
    model = Qwen3VL(config, dtype=args.dtype, param_dtype=args.dtype, residual_dtype=bare().model.residual_dtype,
                    remat=args.remat, attention=args.attention, rngs=nnx.Rngs(0))
    settings = EngineSettings(slots=args.slots, capacity=args.capacity,
                              prompt_buckets=tuple(int(b) for b in args.buckets.split(",")), max_images=0,
                              patches_per_image=4, prefill_rows=1, prefill_cache=0, decode_steps=args.decode_steps,
                              param_dtype="", seed=0, sampling=SamplingSettings(temperature=1.0, top_p=1.0),
                              stop_token_ids=())
    engine = Engine(model, settings)
    del model
    cache_bytes = engine._cache.keys.nbytes + engine._cache.values.nbytes
    print(json.dumps({"device": jax.devices()[0].device_kind, "host": platform.node(), "preset": args.preset,
                      "dtype": args.dtype, "attention": args.attention, "remat": args.remat,
                      "cache_shape": list(engine._cache.keys.shape), "cache_bytes": cache_bytes}), flush=True)
    blocks = engine.blocks if args.all_blocks else sorted({engine.blocks[0], engine.blocks[-1]})
    for rows in blocks:
        for window in sorted({engine.windows[0], engine.windows[-1]}):
            compiled, memory = decode_memory(engine, rows, window)
            print(json.dumps({"call": "decode", "rows": rows, "window": window, **memory,
                              "temp_over_cache": round(memory["temp_bytes"] / cache_bytes, 3)}), flush=True)
            if args.hlo and rows == engine.blocks[-1] and window == engine.windows[-1]:
                with open(args.hlo, "w") as f:
                    f.write(compiled.as_text())
    for bucket in engine.buckets:
        for first in (True, False):
            memory = prefill_memory(engine, bucket, first)
            print(json.dumps({"call": "prefill", "bucket": bucket, "first": first, **memory,
                              "temp_over_cache": round(memory["temp_bytes"] / cache_bytes, 3)}), flush=True)


if __name__ == "__main__":
    main()
