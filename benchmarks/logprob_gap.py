"""Sampler/learner log-prob gap at equal weights: the train-inference mismatch.

    .venv/bin/python benchmarks/logprob_gap.py --model-path assets/warm_start --dtype float32,bfloat16   # CPU
    python3 benchmarks/logprob_gap.py --preset 8b --param-dtype bfloat16 --dtype bfloat16 --attention pallas \\
        --requests 64 --prompt-tokens 300 --images 2 --new-tokens 200 --sharpen 8

The sampler engine (asyncwebrl/sampler/engine.py, built by asyncwebrl/runtime/build.py as a
run builds it) answers `--requests` prompts at temperature 1, top-p 1, top-k 0, so each
token's recorded log-prob is the plain softmax of the logits. The same token ids become
step rows (as asyncwebrl/runtime/rows.py makes them) and a learner built from the same
model (version 0, no update between) scores them through its own packing and log-prob
function (Learner.response_logprobs: an update's proximal pass). Per token,
d = learner - sampler in nats; the staleness weight the loss applies is exp(d) here (the
sampler's version equals the learner's), so every token with exp(d) > loss.behave_cap is
dropped from the loss and every |d| > 0 is a weight that should be 1.

Random weights (seed 0) give a near-uniform next-token distribution, where log-probs of
all tokens are alike and errors hardly show; `--sharpen X` multiplies the final RMSNorm's
scale by X (the logits by X) so that the distribution is peaked like a trained model's
(the sampler's mean -log-prob per token is reported as `sampled_nll`). `--model-path`
loads a checkpoint instead (e.g. assets/warm_start, the trained 6.1M model); prompts are
random token ids either way, with `--images` random 1280x720 screenshots as in
benchmarks/sampler.py. `--layers N` gives the random preset N text layers (a narrow model
at the 2B preset's depth, 28, runs on a CPU), and `--residual-dtype bfloat16,float32`
measures model.residual_dtype both ways in one run. One JSON line per (attention, dtype,
residual dtype), then a summary.
"""

from __future__ import annotations

import argparse
import copy
import json
import itertools
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.learner.packing import StepRow  # noqa: E402
from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.tokenizer import Processor  # noqa: E402
from asyncwebrl.runtime.build import build_model, make_engine, make_learner  # noqa: E402
from benchmarks.sampler import make_requests  # noqa: E402
from benchmarks.workload import at_depth  # noqa: E402
from configs.default import bare  # noqa: E402

INFORMATIVE_RATIO = 1.2   # also reported: the share of tokens with exp(d) outside [1/1.2, 1.2]


def run_config(preset: str, model_path: str, param_dtype: str, dtype: str, attention: str, *, requests: int,
               prompt_tokens: int, new_tokens: int, images: int, residual_dtype: str | None = None):
    """The run's config for this measurement: the bare system's keys (residual_dtype None:
    the bare config's), one device for both roles, a sampler with a slot per request and a
    learner whose rows hold any step."""
    config = bare()
    config.model.preset, config.model.path = preset, model_path
    config.model.dtype, config.model.compute_dtype, config.model.attention = param_dtype, dtype, attention
    config.model.residual_dtype = residual_dtype or config.model.residual_dtype
    config.devices.count, config.devices.sampler = 1, 0
    config.rl.temperature = 1.0
    prompt = prompt_tokens + images * 1000   # an upper bound; the bucket is set from the requests
    config.sampler.slots = requests
    config.sampler.max_images = images
    config.sampler.prefill_rows = 1
    config.sampler.max_new_tokens = new_tokens
    config.sampler.prompt_buckets = (prompt,)
    config.sampler.capacity = prompt + new_tokens
    config.learner.images_per_microbatch = images
    config.learner.rows_per_microbatch = 1
    # The learner builds its optimiser state, which the log-prob pass never reads: bf16 moments
    # let an 8B learner (16 GB of bf16 weights, 32 GB of moments) fit an 80 GB card (float32
    # moments ran it out of memory in the pass)
    config.optimizer.moment_dtype = "bfloat16"
    return config


def fit_shapes(config, requests) -> None:
    """Size the sampler's bucket and slots and the learner's rows to these requests."""
    longest = max(len(r.input_ids) for r in requests)
    bucket = -(-longest // 64) * 64
    new_tokens = config.sampler.max_new_tokens
    config.sampler.prompt_buckets = (bucket,)
    config.sampler.capacity = bucket + new_tokens
    patches = max([math.prod(im.grid_thw) for r in requests for im in r.images] or [4])
    config.sampler.patches_per_image = -(-patches // 128) * 128   # the Pallas kernels' block multiple
    # a row of whole logit chunks (train.target_logprobs): up to 512 tokens any length, else 512s
    length = config.sampler.capacity
    config.learner.row_length = length if length <= 512 else -(-length // 512) * 512


def build_at_depth(config, layers: int, vision_layers: int = 0):
    """build_model's random preset, with `layers` text layers and `vision_layers` vision
    blocks instead of the preset's (0: as built): a narrow model at a published preset's
    depth (28 text layers and 24 vision blocks for 2B, 36 and 27 for 8B) runs on a CPU, and
    the gap's growth through bf16 layers is a matter of depth, not width."""
    if not layers and not vision_layers:
        return build_model(config)
    if config.model.path:
        raise ValueError("--layers and --vision-layers change a random preset's depth; they cannot apply to a "
                         "checkpoint")
    model_config = at_depth(preset(config.model.preset), layers, vision_layers)
    model = Qwen3VL(model_config, dtype=config.model.compute_dtype or config.model.dtype, param_dtype=config.model.dtype,
                    attention=config.model.attention, remat=config.model.remat,
                    residual_dtype=config.model.residual_dtype, rngs=nnx.Rngs(config.seed))
    return model, Processor.embedded()


def sample_rows(config, model, processor, requests) -> list[StepRow]:
    """The engine's answers as step rows: prompt, response, behaviour log-probs, versions, pixels."""
    engine = make_engine(config, model, processor, config.rl.temperature, top_p=1.0)
    with engine:
        responses = [f.result() for f in [engine.submit(r) for r in requests]]
    rows = []
    for request, response in zip(requests, responses):
        if len(response.tokens) == 0:
            continue
        pictures = request.images
        rows.append(StepRow(
            prompt_ids=np.asarray(request.input_ids, np.int32), response_ids=np.asarray(response.tokens, np.int32),
            pixel_values=(np.concatenate([p.pixel_values for p in pictures]) if pictures
                          else np.zeros((0, model.config.vision.still_patch_dim), np.uint8)),
            image_grid_thw=(np.array([p.grid_thw for p in pictures], np.int64) if pictures
                            else np.zeros((0, 3), np.int64)),
            behave_logprobs=np.asarray(response.logprobs, np.float32),
            versions=np.asarray(response.versions, np.int32)))
    return rows


def gap_stats(learner_logp: np.ndarray, sampler_logp: np.ndarray, cap: float) -> dict:
    """|learner - sampler| in nats, and the shares of tokens whose weight exp(d) the loss would drop."""
    d = learner_logp.astype(np.float64) - sampler_logp.astype(np.float64)
    a = np.abs(d)
    weight = np.exp(d)
    return {"tokens": int(d.size), "mean_abs": float(a.mean()), "p99_abs": float(np.quantile(a, 0.99)),
            "max_abs": float(a.max()), "mean_signed": float(d.mean()),
            "over_cap_share": float((weight > cap).mean()),
            "outside_1.2_share": float(((weight > INFORMATIVE_RATIO) | (weight < 1 / INFORMATIVE_RATIO)).mean()),
            "sampled_nll": float(-sampler_logp.mean())}


def sharpen(model, factor: float) -> None:
    """Multiply the final norm's scale by `factor`: every logit scales by it (the norm feeds only the head)."""
    if factor != 1.0:
        model.norm.scale[...] = model.norm.scale[...] * factor


def measure(config, *, requests: int, prompt_tokens: int, new_tokens: int, images: int, sharpen_by: float = 1.0,
            seed: int = 0, layers: int = 0, vision_layers: int = 0, transform=None, reference: bool = False) -> dict:
    """Sample, rescore with the learner at the same weights, and compare. `transform(rows)`
    (tests) changes the rows between the two, e.g. to score other tokens than were sampled.
    `reference`: also score them in float32 and report each side's distance from that."""
    model, processor = build_at_depth(config, layers, vision_layers)
    sharpen(model, sharpen_by)
    batch = make_requests(model.config, requests, prompt_tokens, images, new_tokens, np.random.default_rng(seed))
    fit_shapes(config, batch)
    started = time.perf_counter()
    rows = sample_rows(config, model, processor, batch)
    sampled = time.perf_counter() - started
    if transform is not None:
        rows = transform(rows)
    learner = make_learner(config, model, "rl")
    del model
    started = time.perf_counter()
    learner_logp, sampler_logp = learner.response_logprobs(rows)
    scored = time.perf_counter() - started
    stats = gap_stats(learner_logp, sampler_logp, config.loss.behave_cap)
    if reference:
        # the same weights scored in float32 compute: which side's rounding makes the gap
        del learner
        exact = reference_logprobs(config, rows, sharpen_by, layers, vision_layers)
        stats["sampler_vs_float32"] = float(np.abs(sampler_logp.astype(np.float64) - exact).mean())
        stats["learner_vs_float32"] = float(np.abs(learner_logp.astype(np.float64) - exact).mean())
    return {**stats, "behave_cap": config.loss.behave_cap, "rows": len(rows),
            "sample_s": round(sampled, 1), "score_s": round(scored, 1)}


def reference_logprobs(config, rows, sharpen_by: float, layers: int, vision_layers: int) -> np.ndarray:
    """The rows' response log-probs from a learner of the same weights computing in float32
    with XLA attention (the near-exact answer: float32 runs agree to ~1e-6, BENCHMARKS.md)."""
    exact = copy.deepcopy(config)
    exact.model.compute_dtype, exact.model.residual_dtype, exact.model.attention = "float32", "float32", "xla"
    model, _ = build_at_depth(exact, layers, vision_layers)
    sharpen(model, sharpen_by)
    logp, _ = make_learner(exact, model, "rl").response_logprobs(rows)
    return logp.astype(np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="tiny, small, 2b, 8b (random weights)")
    parser.add_argument("--model-path", default="", help="a checkpoint directory instead, e.g. assets/warm_start")
    parser.add_argument("--dtype", default="float32,bfloat16", help="compute dtypes, comma-separated")
    parser.add_argument("--param-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--residual-dtype", default=bare().model.residual_dtype,
                        help="model.residual_dtype values, comma-separated (bfloat16,float32: the stream off and on)")
    parser.add_argument("--attention", default="xla", help="xla and/or pallas (GPU), comma-separated")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64, help="text tokens per prompt")
    parser.add_argument("--new-tokens", type=int, default=32, help="at most (a sampled end-of-text stops earlier)")
    parser.add_argument("--images", type=int, default=0, help="random 1280x720 screenshots per prompt")
    parser.add_argument("--sharpen", type=float, default=1.0, help="scale the logits by this (final norm x X)")
    parser.add_argument("--layers", type=int, default=0,
                        help="text layers of the random preset (0: the preset's), e.g. --preset small --layers 28")
    parser.add_argument("--vision-layers", type=int, default=0,
                        help="vision blocks of the random preset (0: the preset's), e.g. --preset small --vision-layers 24")
    parser.add_argument("--seed", type=int, default=0, help="of the prompts (weights: config seed 0)")
    parser.add_argument("--reference", action="store_true",
                        help="also score the rows in float32 compute (XLA attention): each side's own error")
    args = parser.parse_args()

    results = []
    for attention, dtype, residual in itertools.product(args.attention.split(","), args.dtype.split(","),
                                                        args.residual_dtype.split(",")):
        config = run_config(args.preset, args.model_path, args.param_dtype, dtype, attention,
                            requests=args.requests, prompt_tokens=args.prompt_tokens,
                            new_tokens=args.new_tokens, images=args.images, residual_dtype=residual)
        stats = measure(config, requests=args.requests, prompt_tokens=args.prompt_tokens,
                        new_tokens=args.new_tokens, images=args.images, sharpen_by=args.sharpen, seed=args.seed,
                        layers=args.layers, vision_layers=args.vision_layers, reference=args.reference)
        row = {"model": args.model_path or args.preset, "param_dtype": args.param_dtype, "dtype": dtype,
               "residual_dtype": residual, "attention": attention, "images": args.images, "sharpen": args.sharpen,
               "layers": args.layers or None, "vision_layers": args.vision_layers or None,
               "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
               "cpu_count": os.cpu_count(), "machine": platform.machine(),
               **{k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in stats.items()}}
        results.append(row)
        print(json.dumps(row), flush=True)
    print("\nsampler vs learner log-prob at equal weights (nats; weight = exp(learner - sampler)):")
    for r in results:
        print(f"  {r['model']} params {r['param_dtype']} compute {r['dtype']:8s} residual {r['residual_dtype']:8s} "
              f"{r['attention']:6s} "
              f"{r['tokens']:6d} tokens: mean |d| {r['mean_abs']:.2e}, p99 {r['p99_abs']:.2e}, max {r['max_abs']:.2e}; "
              f"over cap {r['behave_cap']:g}: {100 * r['over_cap_share']:.3f}%, outside [1/1.2, 1.2]: "
              f"{100 * r['outside_1.2_share']:.2f}% (sampled nll {r['sampled_nll']:.2f})")
        if "sampler_vs_float32" in r:
            print(f"    from float32 compute: sampler {r['sampler_vs_float32']:.2e}, learner {r['learner_vs_float32']:.2e}")


if __name__ == "__main__":
    main()
