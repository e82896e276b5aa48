"""The sampler's prefill cache on a GRPO-like load: G copies of each of a few prompts.

    PYTHONPATH=. .venv/bin/python benchmarks/prefill_cache.py              # CPU: the embedded model

The warm-started embedded model's shape (preset small with the fitted 3,072-token
vocabulary, random weights, float32) and its sampler settings (8 slots, capacity 1,024,
buckets 512 and 1,024), temperature 1. `--prompts` distinct prompts of `--prompt-tokens`
random tokens, each submitted `--group` times at once (as a group's episodes send the same
step), each copy generating exactly `--new-tokens` tokens; the same requests run on an
engine with sampler.prefill_cache off and on. Reported: the engine's prefill seconds
(real prefills + copies from the cache), decode seconds, wall seconds, and the ratios.
Every prompt here is copied G times; in real groups about half the step rows are copies
(benchmarks/merged_rows.py), so a run's saving is smaller than this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.config import with_vocabulary  # noqa: E402
from asyncwebrl.sampler import Engine, EngineSettings, Request, SamplingSettings  # noqa: E402


def run(model, requests, cache: int, slots: int) -> dict:
    settings = EngineSettings(slots=slots, capacity=1024, prompt_buckets=(512, 1024), max_images=0,
                              patches_per_image=0, prefill_rows=1, prefill_cache=cache, decode_steps=8, param_dtype="", seed=0,
                              sampling=SamplingSettings(temperature=1.0, top_p=1.0), stop_token_ids=())
    engine = Engine(model, settings)
    engine.warm_up()
    with engine:
        started = time.perf_counter()
        [f.result() for f in [engine.submit(r) for r in requests]]
        wall = time.perf_counter() - started
        stats = dict(engine.stats)
    return {"prefill_cache": cache, "prefills": stats.get("prefills", 0), "hits": stats.get("prefill_cache_hits", 0),
            "prefill_s": round(stats.get("prefill_seconds", 0.0), 3), "decode_s": round(stats["decode_seconds"], 3),
            "wall_s": round(wall, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=700)
    parser.add_argument("--new-tokens", type=int, default=17)
    args = parser.parse_args()
    config = with_vocabulary(preset("small"), 3072)
    model = Qwen3VL(config, dtype="float32", param_dtype="float32", residual_dtype="float32", remat="none",
                    attention="xla", rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 256, args.prompt_tokens).astype(np.int32) for _ in range(args.prompts)]
    requests = [Request(input_ids=ids, max_new_tokens=args.new_tokens) for ids in prompts for _ in range(args.group)]
    off, on = (run(model, requests, cache, slots=args.group) for cache in (0, 16))
    print(json.dumps({"cpu_count": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
                      "prompt_tokens": args.prompt_tokens, "copies": args.group, "new_tokens": args.new_tokens,
                      "off": off, "on": on, "prefill_speedup": round(off["prefill_s"] / on["prefill_s"], 2),
                      "busy_speedup": round((off["prefill_s"] + off["decode_s"]) / (on["prefill_s"] + on["decode_s"]), 2),
                      "wall_speedup": round(off["wall_s"] / on["wall_s"], 2)}, indent=1))


if __name__ == "__main__":
    main()
