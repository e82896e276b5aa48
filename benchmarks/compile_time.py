"""Compile time of the learner's update and the sampler's decode step, at a preset's depth.

    .venv/bin/python benchmarks/compile_time.py --preset 8b                  # 36 layers, 27 vision blocks
    .venv/bin/python benchmarks/compile_time.py --preset 8b --layers 4,12,36 --images
    python3 benchmarks/compile_time.py --preset 8b --attention pallas --skip learner   # GPU: the kernels' decode

The model has the preset's depth (text layers, vision blocks, DeepStack taps) at a narrow
width (--hidden; 4 heads of 32, a 64-wide vision tower), so it fits a CPU: XLA's compile
time follows the number of operations in the program, not the width of its arrays. For
each depth it builds a Learner and an Engine on random weights and times, for each
jitted function the first update or the first decode step compiles, `jit.lower(...)`
(tracing and lowering to StableHLO) and `.compile()` (XLA) apart, the median of
--repeats (JAX's caches cleared before each; compile times on a shared 2-core VM vary by
tens of percent from one run to the next):
- learner: `accumulate` (the loss and its gradient over one microbatch), `apply` (AdamW),
  `logprobs` (the proximal pass, compiled when an update takes several optimiser steps);
- sampler: `decode` (a call of up to --decode-steps steps for every slot, one attention
  window) and `prefill` (a first prompt chunk of one bucket).
Nothing is run on the device besides building the model and the learner's state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.learner.learner import Learner, LearnerSettings  # noqa: E402
from asyncwebrl.learner.packing import PackingShape, pack  # noqa: E402
from asyncwebrl.learner.train import LossSettings, OptimizerSettings, zeros_like_params  # noqa: E402
from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.qwen3_vl import REMAT_POLICIES  # noqa: E402
from asyncwebrl.sampler.engine import Engine, EngineSettings  # noqa: E402
from asyncwebrl.sampler.sampling import SamplingSettings  # noqa: E402
from benchmarks.learner import SCREEN_GRID, synthetic_rows  # noqa: E402
from benchmarks.workload import at_depth  # noqa: E402
from configs.default import bare  # noqa: E402


def narrow(config, hidden: int, layers: int):
    """The preset's depth (text layers, vision blocks, DeepStack taps) at a CPU-sized width;
    hidden 0 keeps the preset's own widths (a GPU's compile, where XLA's autotuner and the
    kernels' tiles depend on the shapes)."""
    if hidden == 0:
        return at_depth(config, layers)
    text = dataclasses.replace(config.text, hidden_size=hidden, intermediate_size=3 * hidden, num_layers=layers,
                               num_heads=4, num_kv_heads=2, head_dim=32, mrope_section=(6, 5, 5))
    vision = dataclasses.replace(config.vision, hidden_size=64, intermediate_size=128, num_heads=4,
                                 out_hidden_size=hidden, num_position_embeddings=256)
    return dataclasses.replace(config, text=text, vision=vision)


REPEATS = 3   # set by --repeats


def timed_compile(jitted, *args, **kwargs) -> dict:
    """Seconds to trace and lower, then to compile, one jitted function for these arguments
    (medians of REPEATS, each from cold caches)."""
    times = []
    for _ in range(REPEATS):
        jax.clear_caches()
        started = time.perf_counter()
        lowered = jitted.lower(*args, **kwargs)
        lowered_at = time.perf_counter()
        lowered.compile()
        times.append((lowered_at - started, time.perf_counter() - lowered_at))
    lower, compile_ = (float(np.median(t)) for t in zip(*times))
    return {"lower_s": round(lower, 2), "compile_s": round(compile_, 2), "total_s": round(lower + compile_, 2),
            "totals_s": [round(a + b, 2) for a, b in times]}


def learner_compile_times(model, args) -> dict:
    config = model.config
    base = bare()
    images = 1 if args.images else 0
    patches = -(-int(np.prod(SCREEN_GRID)) // 128) * 128
    shape = PackingShape(row_length=args.row_length, rows_per_microbatch=1, images_per_microbatch=images,
                         patches_per_image=patches if images else 0)
    settings = LearnerSettings(packing=shape, loss=LossSettings.from_config(base),
                               optimizer=dataclasses.replace(OptimizerSettings.from_config(base), moment_dtype=args.dtype),
                               epochs=1, minibatches=1,
                               merge_duplicates=base.learner.merge_duplicates, seed=0)
    learner = Learner(model, settings)
    prompt = args.row_length - 240 - (int(np.prod(SCREEN_GRID)) // 4 + 2 if images else 0) - 8
    rows = synthetic_rows(config, 1, prompt, bool(images), np.random.default_rng(0))
    microbatch = learner._place(pack(rows, shape, config)[0])
    params = learner.state.params
    grads = zeros_like_params(params, settings.gradient_dtype)
    accumulate = timed_compile(learner._accumulate, params, grads, microbatch, None)
    _, metrics = jax.eval_shape(learner._accumulate, params, grads, microbatch, None)
    return {"accumulate": accumulate,
            "apply": timed_compile(learner._apply, learner.state, grads, metrics),
            "logprobs": timed_compile(learner._logprobs, params, microbatch)}


def sampler_compile_times(model, args) -> dict:
    settings = EngineSettings(slots=args.slots, capacity=args.capacity, prompt_buckets=(args.bucket,),
                              max_images=0, patches_per_image=0, prefill_rows=1, prefill_cache=0,
                              decode_steps=args.decode_steps, param_dtype="", seed=0,
                              sampling=SamplingSettings(temperature=1.0, top_p=1.0), stop_token_ids=(0,))
    engine = Engine(model, settings)
    decode = timed_compile(engine._decode, *engine.idle_decode_arguments(args.slots, args.decode_steps),
                           rows=args.slots, window=engine.windows[-1])
    zeros = np.zeros((1, args.bucket), np.int32)
    prefill = timed_compile(engine._prefill, engine._params, engine._cache, np.int32(0), np.int32(0), zeros,
                            np.zeros((3, 1, args.bucket), np.int32), zeros + 1, zeros - 1, None, np.int32(0),
                            first=True)
    return {"decode": decode, "prefill": prefill}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="8b", help="whose depth: text layers, vision blocks, DeepStack taps")
    parser.add_argument("--layers", default="", help="comma-separated text depths (default: the preset's)")
    parser.add_argument("--hidden", type=int, default=256, help="text width (0: the preset's own widths)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="parameters and compute (the residual stream stays float32)")
    parser.add_argument("--remat", default="full", choices=sorted(REMAT_POLICIES))
    parser.add_argument("--row-length", type=int, default=2048)
    parser.add_argument("--images", action="store_true", help="one screenshot in the learner's microbatch")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=1024)
    parser.add_argument("--decode-steps", type=int, default=8, help="sampler.decode_steps")
    parser.add_argument("--bucket", type=int, default=256)
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: learner, sampler")
    parser.add_argument("--repeats", type=int, default=3, help="compiles per function (the median is reported)")
    parser.add_argument("--attention", default="xla", choices=["xla", "pallas"],
                        help="model.attention: pallas compiles the GPU kernels (flash attention in the learner; "
                             "decode attention and the in-place decode matmuls in the sampler)")
    args = parser.parse_args()
    global REPEATS
    REPEATS = args.repeats

    config = preset(args.preset)
    depths = [int(d) for d in args.layers.split(",")] if args.layers else [config.text.num_layers]
    skip = set(filter(None, args.skip.split(",")))
    for layers in depths:
        narrowed = narrow(config, args.hidden, layers)
        model = Qwen3VL(narrowed, dtype=args.dtype, param_dtype=args.dtype, residual_dtype="float32", remat=args.remat,
                        attention=args.attention, rngs=nnx.Rngs(0))
        result = {"preset": args.preset, "text_layers": layers, "vision_blocks": narrowed.vision.depth,
                  "deepstack": list(narrowed.vision.deepstack_layers), "hidden": narrowed.text.hidden_size, "dtype": args.dtype,
                  "remat": args.remat,
                  "row_length": args.row_length, "images": args.images, "repeats": args.repeats,
                  "attention": args.attention,
                  "backend": jax.default_backend(),
                  "cpu_count": os.cpu_count(), "machine": platform.machine(), "jax": jax.__version__}
        if "learner" not in skip:
            result["learner"] = learner_compile_times(model, args)
        if "sampler" not in skip:
            result["sampler"] = sampler_compile_times(model, args)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
