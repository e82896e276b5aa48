"""Forward and KV-cache decode speed of a Qwen3-VL preset (random weights).

    .venv/bin/python benchmarks/model_forward.py [--preset tiny] [--dtype float32]
        [--batch 4] [--text 320] [--image 720x1280] [--decode 64]

Each row is one agent step as the learner sees it: `--text` text tokens plus one
screenshot, sized by the preset's processor rule (the embedded processor for tiny, the
Qwen3-VL default otherwise). Measures, after compilation:
- forward: the whole row (vision tower + decoder + logits), rows/s and tokens/s;
- prefill: the same rows written into a KV cache;
- decode: one new token per row per step against the cache, tokens/s.
Prints one JSON object; BENCHMARKS.md records it with machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.model import ModelInputs, Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.inputs import sequence_positions, vision_inputs, vision_source  # noqa: E402
from benchmarks.workload import ordinary_token_limit, screenshot_processor  # noqa: E402
from configs.default import bare  # noqa: E402


def step_rows(config, batch: int, text_tokens: int, image_hw: tuple[int, int], rng) -> ModelInputs:
    """`batch` rows of [text/2, one image, text/2] with random pixels and token ids."""
    processor = screenshot_processor(config)
    image = rng.integers(0, 256, (*image_hw, 3), dtype=np.uint8)
    encoded = processor(images=[image] * batch, return_tensors="np")
    grids = encoded["image_grid_thw"]
    image_tokens = int(grids[0].prod()) // config.vision.merge_unit
    half = text_tokens // 2
    types = np.array([0] * half + [1] * image_tokens + [0] * (text_tokens - half))
    ids = rng.integers(0, ordinary_token_limit(config), (batch, types.size)).astype(np.int32)
    ids[:, types == 1] = config.image_token_id
    positions, _ = sequence_positions(types, grids[:1], config.vision.spatial_merge_size)
    vision = vision_inputs(encoded["pixel_values"], grids, config.vision)
    image_mask = np.broadcast_to(types == 1, ids.shape)
    return ModelInputs(tokens=ids, positions=np.broadcast_to(positions[:, None], (3,) + ids.shape).copy(),
                       segment_ids=np.ones_like(ids),
                       vision_source=vision_source(image_mask, grids, config.vision, vision.tokens_per_image),
                       vision=vision)


def timed(fn, *args, repeats: int):
    """Median seconds per call after one compiling call; results are blocked on."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--text", type=int, default=320)
    parser.add_argument("--image", default="720x1280", help="screenshot HxW")
    parser.add_argument("--decode", type=int, default=64, help="decode steps to time")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    config = preset(args.preset)
    dtype = jnp.dtype(args.dtype)
    model = Qwen3VL(config, dtype=dtype, param_dtype=dtype, residual_dtype=bare().model.residual_dtype, remat="none",
                    attention="xla", rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    rows = step_rows(config, args.batch, args.text, tuple(int(x) for x in args.image.split("x")),
                     np.random.default_rng(0))
    batch, length = rows.tokens.shape

    @jax.jit
    def forward(params, rows):
        return nnx.merge(graphdef, params).forward(rows)

    @jax.jit
    def prefill(params, rows, cache):
        return nnx.merge(graphdef, params).hidden_states(rows, cache)[1]

    @jax.jit
    def decode(params, token, position, cache):
        m = nnx.merge(graphdef, params)
        step = ModelInputs(tokens=token, positions=jnp.broadcast_to(position, (3,) + token.shape),
                           segment_ids=jnp.ones_like(token), vision_source=jnp.full_like(token, -1))
        hidden, cache = m.hidden_states(step, cache)
        return jnp.argmax(m.logits(hidden)[:, -1], -1).astype(jnp.int32)[:, None], cache

    forward_s = timed(forward, params, rows, repeats=args.repeats)
    empty = model.init_cache(batch, length + args.decode + 1)
    prefill_s = timed(prefill, params, rows, empty, repeats=args.repeats)
    cache = prefill(params, rows, empty)
    next_position = int(rows.positions.max()) + 1
    token = jnp.zeros((batch, 1), jnp.int32)
    token, cache_after = decode(params, token, jnp.int32(next_position), cache)  # compile
    jax.block_until_ready(token)
    start = time.perf_counter()
    for i in range(args.decode):
        token, cache = decode(params, token, jnp.int32(next_position + i), cache)
    jax.block_until_ready(token)
    decode_s = (time.perf_counter() - start) / args.decode

    print(json.dumps({
        "preset": args.preset, "dtype": args.dtype, "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind), "cpu_count": os.cpu_count(), "machine": platform.machine(),
        "parameters": int(sum(x.size for x in jax.tree.leaves(params))),
        "batch": batch, "tokens_per_row": length, "image_tokens_per_row": int((rows.vision_source[0] >= 0).sum()),
        "forward_ms": round(forward_s * 1e3, 2), "forward_tokens_per_s": round(batch * length / forward_s),
        "prefill_ms": round(prefill_s * 1e3, 2),
        "decode_ms_per_step": round(decode_s * 1e3, 3), "decode_tokens_per_s": round(batch / decode_s, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
