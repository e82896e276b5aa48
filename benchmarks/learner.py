"""Learner throughput: training tokens/s and model FLOPs utilisation (MFU) of a full RL update.

    python benchmarks/learner.py --preset 8b --row-length 16384 --attention pallas --remat full \\
        --param-dtype bfloat16 --moment-dtype bfloat16 [--images]
    .venv/bin/python benchmarks/learner.py --preset tiny --row-length 2048     # CPU
    python benchmarks/learner.py --mesh 1,2,1 --rows-per-microbatch 2 ...     # FSDP over 2 devices

Random weights; synthetic step rows shaped like the agent's
(docs/algorithm.md#training-hyperparameters): a prompt of `--prompt` text tokens (plus one
1280x720 screenshot = 880 image tokens with --images) and a 240-token response, packed
into rows of `--row-length`. One update = gradient accumulation over `--microbatches`
microbatches + one AdamW step (and, when the learner takes more than one optimiser step
per update, a proximal log-prob pass before them; not with this script's one minibatch
and one epoch), timed end to end after a warm-up update (compilation excluded).

Model FLOPs per update (the MFU numerator; recomputation from remat is not counted):
- dense: 2 x matmul parameters per token for a forward (the proximal pass, if the learner
  ran it), 6 x for training
  (text stack incl. the LM head; vision tower per patch when there are images);
- attention as MaxText counts it: 4 * s^2 * heads * head_dim per layer for a forward over
  a segment of s tokens, halved when causal, x3 for training; s = each packed step row
  (attention never crosses rows), P = the image's patches for the vision tower.
The denominator is the matmul peak in the compute dtype measured in the same run (an
8192^3 product; 2048^3 on CPU) on one device, times the devices of --mesh. `mfu_datasheet`
divides by the device's published dense bf16 peak instead, as MaxText quotes it (DATASHEET_BF16;
null for a device or compute dtype without one).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.learner.learner import Learner, LearnerSettings  # noqa: E402
from asyncwebrl.learner.choices import loss_kind  # noqa: E402
from asyncwebrl.learner.packing import PackingShape, StepRow  # noqa: E402
from asyncwebrl.learner.train import LossSettings, OptimizerSettings  # noqa: E402
from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.qwen3_vl import REMAT_POLICIES  # noqa: E402
from asyncwebrl.parallel import MESH_AXES, make_mesh  # noqa: E402
from benchmarks.workload import at_depth, ordinary_token_limit  # noqa: E402
from configs.default import bare  # noqa: E402

RESPONSE_TOKENS = 240        # ~240 response tokens per step (docs/algorithm.md#memory-drift)
# a 1280x720 screenshot under Qwen3-VL's processor (720 rounds to 704): 3,520 patches, 880 tokens
SCREEN_GRID = (1, 44, 80)


# Dense bf16 matmul peaks from the vendors' datasheets (without sparsity), by jax device_kind
DATASHEET_BF16 = {"NVIDIA H200": 989e12, "NVIDIA H100 80GB HBM3": 989e12}


def datasheet_mfu(flops_per_second: float, device_kind: str, compute_dtype: str, devices: int) -> float | None:
    peak = DATASHEET_BF16.get(device_kind) if compute_dtype == "bfloat16" else None
    return round(flops_per_second / (peak * devices), 4) if peak else None


def measured_matmul_peak(dtype=jnp.bfloat16, size: int = 8192, repeats: int = 10) -> float:
    """FLOP/s of a large square matmul on random data (the MFU denominator; smaller on CPU)."""
    if jax.default_backend() == "cpu":
        size, repeats = 2048, 3
    keys = jax.random.split(jax.random.key(0), 2)
    a, b = (jax.random.normal(k, (size, size), dtype) for k in keys)
    matmul = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(matmul(a, b))
    start = time.perf_counter()
    for _ in range(repeats):
        out = matmul(a, b)
    jax.block_until_ready(out)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def synthetic_rows(config, count: int, prompt_tokens: int, images: bool, rng) -> list[StepRow]:
    rows = []
    for _ in range(count):
        ordinary = ordinary_token_limit(config)
        prompt = rng.integers(0, ordinary, prompt_tokens).astype(np.int32)
        pixels, grids = np.zeros((0, config.vision.still_patch_dim), np.uint8), np.zeros((0, 3), np.int64)
        if images:
            grids = np.array([SCREEN_GRID])
            pixels = rng.integers(0, 256, (math.prod(SCREEN_GRID), config.vision.still_patch_dim), dtype=np.uint8)
            placeholder = [config.vision_start_token_id] + [config.image_token_id] * (
                math.prod(SCREEN_GRID) // config.vision.merge_unit) + [config.vision_end_token_id]
            half = prompt_tokens // 2
            prompt = np.concatenate([prompt[:half], placeholder, prompt[half:]]).astype(np.int32)
        rows.append(StepRow(prompt_ids=prompt, response_ids=rng.integers(0, ordinary, RESPONSE_TOKENS).astype(np.int32),
                            pixel_values=pixels, image_grid_thw=grids,
                            behave_logprobs=-rng.uniform(0.5, 2.0, RESPONSE_TOKENS).astype(np.float32),
                            versions=np.zeros(RESPONSE_TOKENS, np.int32), advantage=float(rng.normal())))
    return rows


def matmul_parameters(model) -> tuple[int, int]:
    """(text matmul parameters incl. the LM head, vision matmul parameters)."""
    def count(module):
        return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(module, nnx.Param)))
    config = model.config
    text = count(model.layers) + config.text.vocab_size * config.text.hidden_size   # the layers are stacked
    return text, count(model.visual) - math.prod(model.visual.pos_embed.shape)


def forward_flops(model, rows: list[StepRow]) -> float:
    """Model FLOPs of one forward over these rows (training is 3x; the proximal pass 1x)."""
    text_params, vision_params = matmul_parameters(model)
    text, vision = model.config.text, model.config.vision
    forward = 0.0
    for row in rows:
        s = len(row)
        forward += 2 * text_params * s + 4 * s * s * text.num_heads * text.head_dim * text.num_layers / 2
        for grid in row.image_grid_thw:
            p = int(np.prod(grid))
            forward += 2 * vision_params * p + 4 * p * p * vision.num_heads * vision.head_dim * vision.depth
    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--row-length", type=int, default=16384)
    parser.add_argument("--rows-per-microbatch", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=2, help="per minibatch (= per update here)")
    parser.add_argument("--prompt", type=int, default=1800, help="text tokens per step prompt")
    parser.add_argument("--images", action="store_true", help="one 1280x720 screenshot per step row")
    parser.add_argument("--param-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--compute-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--residual-dtype", default=bare().model.residual_dtype, choices=["float32", "bfloat16"],
                        help="model.residual_dtype: the residual stream between layers")
    parser.add_argument("--moment-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--gradient-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--remat", default="full", choices=sorted(REMAT_POLICIES))
    parser.add_argument("--attention", default="xla", choices=["xla", "pallas"])
    parser.add_argument("--logit-chunk", type=int, default=1024)
    parser.add_argument("--mesh", default="1,1,1",
                        help="the learner mesh's data,fsdp,tensor sizes over the first devices (rows split over "
                             "data x fsdp: give --rows-per-microbatch a multiple of it)")
    parser.add_argument("--loss", default="grpo", help="a loss kind (asyncwebrl/learner/choices.py, LOSSES); sft: the warm start's update")
    parser.add_argument("--updates", type=int, default=3, help="timed updates after one warm-up")
    parser.add_argument("--layers", type=int, default=0,
                        help="text layers (default: the preset's); fewer fit a smaller GPU at the same row shapes")
    parser.add_argument("--trace", default="", help="profile the timed updates into this directory "
                        "(a Perfetto trace; benchmarks/trace_summary.py reads it)")
    args = parser.parse_args()

    config = at_depth(preset(args.preset), args.layers)
    rng = np.random.default_rng(0)
    per_step = args.prompt + RESPONSE_TOKENS + (math.prod(SCREEN_GRID) // 4 + 2 if args.images else 0)
    steps_per_row = args.row_length // per_step
    if steps_per_row == 0:
        raise SystemExit(f"a step row ({per_step} tokens) does not fit --row-length {args.row_length}")
    count = steps_per_row * args.rows_per_microbatch * args.microbatches
    patches = math.ceil(math.prod(SCREEN_GRID) / 128) * 128  # the Pallas kernel's block multiple
    shape = PackingShape(row_length=args.row_length, rows_per_microbatch=args.rows_per_microbatch,
                         images_per_microbatch=steps_per_row * args.rows_per_microbatch if args.images else 0,
                         patches_per_image=patches if args.images else 0)
    base = bare()   # the bare config's clips and AdamW (configs/default.py), at the paper's learning rate
    settings = LearnerSettings(
        packing=shape, loss=dataclasses.replace(LossSettings.from_config(base), kind=args.loss,
                                                logit_chunk=args.logit_chunk),
        optimizer=dataclasses.replace(OptimizerSettings.from_config(base), learning_rate=5e-6, warmup_steps=10,
                                      total_steps=1000, moment_dtype=args.moment_dtype),
        epochs=1, minibatches=1, merge_duplicates=base.learner.merge_duplicates, seed=0,
        gradient_dtype=args.gradient_dtype)

    built = time.perf_counter()
    model = Qwen3VL(config, dtype=args.compute_dtype, param_dtype=args.param_dtype, remat=args.remat,
                    attention=args.attention, residual_dtype=args.residual_dtype, rngs=nnx.Rngs(0))
    sizes = dict(zip(MESH_AXES, (int(size) for size in args.mesh.split(","))))
    devices = math.prod(sizes.values())
    learner = Learner(model, settings, mesh=make_mesh(sizes, devices=jax.devices()[:devices]))
    setup_seconds = time.perf_counter() - built
    batches = [synthetic_rows(config, count, args.prompt, args.images, rng) for _ in range(2)]
    forward = forward_flops(model, batches[0])
    del model

    started = time.perf_counter()
    warm = learner.update(batches[0])  # compiles
    compile_seconds = time.perf_counter() - started
    flops_per_update = forward * (3 + warm["proximal_pass"])
    timings = []
    if args.trace:
        jax.profiler.start_trace(args.trace, create_perfetto_trace=True)
    for i in range(args.updates):
        measured = learner.update(batches[(i + 1) % 2])
        timings.append(measured)
    if args.trace:
        jax.profiler.stop_trace()
    seconds = float(np.median([m["seconds"] for m in timings]))
    tokens = sum(len(r) for r in batches[0])
    peak = measured_matmul_peak(jnp.dtype(args.compute_dtype))   # one device's
    device = jax.devices()[0]
    memory = device.memory_stats() if hasattr(device, "memory_stats") else None
    result = {
        "preset": args.preset, "backend": jax.default_backend(), "device": device.device_kind,
        "cpu_count": os.cpu_count(), "machine": platform.machine(), "jax": jax.__version__,
        "settings": {k: v for k, v in vars(args).items()},
        "step_rows_per_update": count, "tokens_per_update": tokens, "response_tokens_per_update": count * RESPONSE_TOKENS,
        "fill": round(warm["fill"], 4),
        "setup_s": round(setup_seconds, 1), "first_update_s (compile)": round(compile_seconds, 1),
        "update_s": round(seconds, 3),
        "proximal_pass": warm["proximal_pass"],
        "update_parts_s": {"pack": round(float(np.median([m["pack_seconds"] for m in timings])), 3),
                           "prox": round(float(np.median([m["prox_seconds"] for m in timings])), 3)},
        "tokens_per_s": round(tokens / seconds), "model_tflops_per_update": round(flops_per_update / 1e12, 2),
        "achieved_tflops": round(flops_per_update / seconds / 1e12, 1),
        "devices": devices, "measured_peak_tflops": round(peak / 1e12, 3),
        "mfu": round(flops_per_update / seconds / (peak * devices), 4),
        "mfu_datasheet": datasheet_mfu(flops_per_update / seconds, device.device_kind, args.compute_dtype, devices),
        "loss_finite": bool(np.isfinite(timings[-1][loss_kind(args.loss).objective])),
        "peak_memory_gib": round(memory["peak_bytes_in_use"] / 2**30, 1) if memory else None,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
