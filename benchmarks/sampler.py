"""Sampler throughput and latency against concurrency, the bandwidth bound, and transformers.

    .venv/bin/python benchmarks/sampler.py --preset tiny --concurrency 1,4,16     # CPU
    python3 benchmarks/sampler.py --preset 8b --dtype bfloat16 --concurrency 1,16,64,256 --hf dynamic,static
    # the decode call's arms on the embedded model's shape (CPU): steps per call x block of slots
    PYTHONPATH=. .venv/bin/python benchmarks/sampler.py --preset small --vocabulary 3072 --images 0 --text 300 \
        --text-max 700 --new-tokens 60 --concurrency 1,2,8 --slots 8 --capacity 1024 --buckets 512,1024 \
        --decode-steps 1,8 --blocks off,on

Random weights. Each request is an agent step: `--text` prompt tokens and `--images`
screenshots of 1280x720 (sized by the preset's processor rule: 880 image tokens each for
the published presets, 60 for tiny), then exactly `--new-tokens` generated tokens (no
stop token). For each concurrency c, c requests are submitted at once to an engine with
max(concurrency) slots; reported: output tokens/s end to end, per-request latency, and
the decode-only rate (engine decode time, all slots).

Arms (`--decode-steps 1,8 --blocks off,on`): every pair gets an engine of its own, run
over every concurrency level; `--blocks off` decodes all slots in every call (the engine
before its blocks). Each arm's decode tokens/s and wall at each level are also reported
as ratios to the first arm's, measured in the same run.

Bandwidth bound: a decode step must read the text weights once plus every active slot's
KV cache (its actual length); bytes per step / the copy bandwidth measured in the same
run = the fastest possible decode step. `--hf` adds transformers `generate` (PyTorch,
same dtype, same batch, greedy; dynamic and/or static cache) on the same device, run
first in a child process so that the two never share the GPU's memory.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.model import Qwen3VL, preset  # noqa: E402
from asyncwebrl.model.config import to_hf_dict, with_vocabulary  # noqa: E402
from asyncwebrl.model.inputs import still_patch_pixels  # noqa: E402
from benchmarks.workload import ordinary_token_limit, synthetic_processor  # noqa: E402
from asyncwebrl.sampler import Engine, EngineSettings, Image, Request, SamplingSettings  # noqa: E402
from configs.default import bare  # noqa: E402


def copy_bandwidth(megabytes: int = 2048, repeats: int = 10) -> float:
    """Bytes/s of a device-to-device copy, counting bytes read plus bytes written."""
    if jax.default_backend() == "cpu":
        megabytes = 256
    x = jnp.ones((megabytes * 2**20 // 4,), jnp.float32)
    copy = jax.jit(lambda a: a + 1)
    jax.block_until_ready(copy(x))
    start = time.perf_counter()
    for _ in range(repeats):
        y = copy(x)
    jax.block_until_ready(y)
    return 2 * x.nbytes * repeats / (time.perf_counter() - start)


def make_requests(config, count: int, text: int, images: int, new_tokens: int, rng,
                  distinct_screenshots: int = 16, text_max: int = 0) -> list[Request]:
    """Requests of random text (`text` tokens, or from `text` to `text_max` drawn uniformly)
    and screenshots. A few distinct screenshots are reused (the processor takes 0.13 s each
    on a CPU); with no screenshot key every one is still encoded."""
    processor = synthetic_processor(config)
    ordinary = ordinary_token_limit(config)
    screenshots = []
    for _ in range(min(distinct_screenshots, count * images)):
        pixels, grids = processor.process_images([rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)])
        screenshots.append(Image(pixel_values=pixels, grid_thw=tuple(int(g) for g in grids[0])))
    requests = []
    for r in range(count):
        length = int(rng.integers(text, text_max + 1)) if text_max > text else text
        ids, pictures = list(rng.integers(0, ordinary, length // 2)), []
        for i in range(images):
            picture = screenshots[(r * images + i) % len(screenshots)]
            grid = picture.grid_thw
            pictures.append(picture)
            ids += [config.vision_start_token_id] + [config.image_token_id] * (math.prod(grid) // 4) + [
                config.vision_end_token_id]
        ids += list(rng.integers(0, ordinary, length - length // 2))
        requests.append(Request(input_ids=np.array(ids, np.int32), images=pictures, max_new_tokens=new_tokens))
    return requests


def decode_weights(model) -> int:
    """Parameters a decode step reads: the text stack and the LM head."""
    text = model.config.text
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model.layers, nnx.Param))) + \
        text.vocab_size * text.hidden_size


def decode_bytes(config, weights: int, concurrency: int, prompt: int, new_tokens: int, dtype) -> float:
    """Weights read per decode step + the mean KV cache in use."""
    text = config.text
    itemsize = jnp.dtype(dtype).itemsize
    mean_length = prompt + new_tokens / 2
    kv = concurrency * mean_length * text.num_layers * 2 * text.num_kv_heads * text.head_dim
    return (weights + kv) * itemsize


def make_engine(model, slots: int, capacity: int, buckets: tuple[int, ...], patches: int, images: int,
                prefill_rows: int = 1, decode_steps: int = 1, blocks: bool = True) -> Engine:
    settings = EngineSettings(slots=slots, capacity=capacity, prompt_buckets=buckets, max_images=images,
                              patches_per_image=patches, prefill_rows=prefill_rows, prefill_cache=0,
                              decode_steps=decode_steps, param_dtype="", seed=0,
                              sampling=SamplingSettings(temperature=1.0, top_p=1.0), stop_token_ids=())
    engine = Engine(model, settings)
    if not blocks:   # every call decodes all slots, as before the blocks (set before warm_up compiles them)
        engine.blocks = (slots,)
    return engine


def run_ours(engine: Engine, requests) -> dict:
    """One concurrency level on a started engine (one engine serves every level: its cache
    is sized for the largest, and a second engine would not fit beside it)."""
    [f.result() for f in [engine.submit(r) for r in requests[:1]]]   # compile prefill, encode, decode
    engine.stats.clear()
    started = time.perf_counter()
    responses = [f.result() for f in [engine.submit(r) for r in requests]]
    wall = time.perf_counter() - started
    stats = dict(engine.stats)
    generated = sum(len(r.tokens) for r in responses)
    return {"tokens_per_s": round(generated / wall, 1),
            "latency_s_median": round(float(np.median([r.latency_s for r in responses])), 3),
            "decode_step_ms": round(1e3 * stats["decode_seconds"] / max(stats["decode_steps"], 1), 2),
            "decode_tokens_per_s": round(stats["decode_slot_steps"] / max(stats["decode_seconds"], 1e-9), 1),
            "decode_calls": stats.get("decode_calls", 0), "decode_steps": stats.get("decode_steps", 0),
            "decode_rows_per_step": round(stats.get("decode_slot_rows", 0) / max(stats.get("decode_steps", 0), 1), 2),
            "prefill_s_total": round(stats.get("prefill_seconds", 0.0), 2),
            "vision_s_total": round(stats.get("vision_seconds", 0.0), 2), "wall_s": round(wall, 2)}


def dump_decode_step(engine: Engine, directory: str) -> dict:
    """The compiled decode step's HLO and XLA's cost estimate, and its device time alone
    (no host work), for reading where a step's time goes."""
    slots, steps = engine.settings.slots, engine.settings.decode_steps
    window = engine.windows[-1]
    zeros, active, room = np.zeros(slots, np.int32), np.ones(slots, bool), np.full(slots, steps, np.int32)
    call = lambda: (engine._params, engine._cache, zeros, zeros, active, room, engine._keys(steps),  # noqa: E731
                    np.int32(steps), np.bool_(False))
    compiled = engine._decode.lower(*call(), rows=slots, window=window).compile()
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "decode_step.hlo.txt"), "w") as f:
        f.write(compiled.as_text())
    cost = compiled.cost_analysis()   # of the call: XLA may count its loop's body once
    cost = cost[0] if isinstance(cost, list) else cost
    times = []
    for _ in range(5):
        started = time.perf_counter()
        engine._cache, token, _, _ = engine._decode(*call(), rows=slots, window=window)
        token.block_until_ready()
        times.append(time.perf_counter() - started)
    return {"xla_bytes_accessed_gb": round(cost.get("bytes accessed", 0) / 1e9, 2),
            "xla_flops_t": round(cost.get("flops", 0) / 1e12, 3),
            "decode_step_device_ms_all_slots": round(1e3 * min(times[1:]) / steps, 2)}


def run_transformers(config, requests, new_tokens: int, dtype: str, cache: str) -> dict:
    """transformers generate on the same device, this batch: output tokens/s end to end,
    and decode-only tokens/s (from the first generated token's logits to the last's)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf = Qwen3VLConfig(**to_hf_dict(config, dtype=dtype))
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(hf).to(torch_dtype).eval()
    ids = torch.as_tensor(np.stack([r.input_ids for r in requests]), device=device, dtype=torch.long)
    kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                  min_new_tokens=new_tokens, do_sample=False)
    if requests[0].images:
        pixels = np.asarray(still_patch_pixels(np.concatenate([im.pixel_values for r in requests for im in r.images]),
                                               config.vision))   # transformers takes the float layout
        grids = np.array([im.grid_thw for r in requests for im in r.images])
        kwargs.update(pixel_values=torch.as_tensor(pixels, device=device, dtype=torch_dtype),
                      image_grid_thw=torch.as_tensor(grids, device=device),
                      mm_token_type_ids=(ids == config.image_token_id).long())
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    stamps = []

    def stamp(input_ids, scores):   # a logits processor: called once per generated token
        if device == "cuda":
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        return scores

    def timed() -> tuple[float, int]:
        stamps.clear()
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**kwargs, logits_processor=[stamp])
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started, (out.shape[1] - ids.shape[1]) * ids.shape[0]

    # the same call twice: a static cache makes generate compile its forward for this
    # cache length, and the first call pays for that
    timed()
    seconds, generated = timed()
    return {"tokens_per_s": round(generated / seconds, 1),
            "decode_tokens_per_s": round(len(requests) * (len(stamps) - 1) / (stamps[-1] - stamps[0]), 1)}


def transformers_in_child(levels) -> dict:
    """Run this script again with --hf-only (same arguments, same requests from the same
    seed) and read its rates: transformers and our engine never share the GPU's memory.

    The child builds its requests with JAX before any torch work; without preallocation off,
    JAX would take XLA_PYTHON_CLIENT_MEM_FRACTION of the GPU there and leave torch ~3 GiB
    (the 8B run of 2026-12-04 died so)."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    child = subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--hf-only",
                            f"--hf-concurrency={','.join(map(str, levels))}"], capture_output=True, text=True, env=env)
    if child.returncode != 0:
        raise SystemExit(f"the transformers run failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--text", type=int, default=300, help="text tokens per prompt")
    parser.add_argument("--text-max", type=int, default=0, help="draw each prompt's text tokens from --text to this")
    parser.add_argument("--vocabulary", type=int, default=0, help="the preset with a fitted vocabulary of this size "
                        "(the embedded tokenizer's: 3072)")
    parser.add_argument("--images", type=int, default=2, help="1280x720 screenshots per prompt")
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--hf", default="", help="also time transformers generate with these caches, "
                        "e.g. dynamic,static")
    parser.add_argument("--hf-concurrency", default="", help="levels at which to time transformers (default: all)")
    parser.add_argument("--hf-only", action="store_true", help=argparse.SUPPRESS)   # the child process
    parser.add_argument("--dump", default="", help="write the compiled decode step's HLO here and time it alone")
    parser.add_argument("--prefill-rows", type=int, default=1,
                        help="requests prefilled together in one call (EngineSettings.prefill_rows)")
    parser.add_argument("--attention", default="xla", choices=["xla", "pallas"],
                        help="pallas: the decode kernel that reads each slot up to its own length (GPU)")
    parser.add_argument("--slots", type=int, default=0, help="the engine's slots (default: the largest concurrency)")
    parser.add_argument("--capacity", type=int, default=0, help="tokens per slot (default: the longest prompt's "
                        "bucket of 64 + --new-tokens + 8)")
    parser.add_argument("--buckets", default="", help="prefill buckets (default: that bucket and the capacity)")
    parser.add_argument("--decode-steps", default="8", help="arms: decode steps per call (sampler.decode_steps)")
    parser.add_argument("--blocks", default="on", help="arms: on (decode the occupied block of slots), "
                        "off (all slots), or both: off,on")
    args = parser.parse_args()

    config = with_vocabulary(preset(args.preset), args.vocabulary) if args.vocabulary else preset(args.preset)
    levels = [int(c) for c in args.concurrency.split(",")]
    rng = np.random.default_rng(0)
    requests = make_requests(config, max(levels), args.text, args.images, args.new_tokens, rng,
                             text_max=args.text_max)
    prompt = round(float(np.mean([len(r.input_ids) for r in requests])))
    bucket = -(-max(len(r.input_ids) for r in requests) // 64) * 64
    # a bucket as large as the capacity: no room is allocated for a chunk's overhang (none is chunked)
    capacity = args.capacity or bucket + args.new_tokens + 8
    buckets = tuple(int(b) for b in args.buckets.split(",")) if args.buckets else (bucket, capacity)
    arms = [(int(steps), blocks) for steps in args.decode_steps.split(",") for blocks in args.blocks.split(",")]
    if args.hf and args.text_max:
        raise SystemExit("--hf batches the prompts in one tensor: they need one length (no --text-max)")
    if any(blocks not in ("on", "off") for _, blocks in arms):
        raise SystemExit(f"--blocks takes on and/or off, got {args.blocks!r}")
    patches = max([math.prod(im.grid_thw) for im in requests[0].images] or [4])
    hf_levels = [int(c) for c in args.hf_concurrency.split(",")] if args.hf_concurrency else levels
    if args.hf_only:   # the child process of transformers_in_child
        print(json.dumps({f"{c}/{cache}": run_transformers(config, requests[:c], args.new_tokens, args.dtype, cache)
                          for c in hf_levels for cache in args.hf.split(",")}))
        return
    # transformers first, in a child process, before JAX takes the GPU's memory
    transformers_rates = transformers_in_child(hf_levels) if args.hf else {}
    model = Qwen3VL(config, dtype=args.dtype, param_dtype=args.dtype, residual_dtype=bare().model.residual_dtype,
                    remat="none", attention=args.attention, rngs=nnx.Rngs(0))   # no remat: decoding takes no gradient
    bandwidth = copy_bandwidth()
    weights = decode_weights(model)
    rows, probe = [], {}
    for number, (steps, blocks) in enumerate(arms):
        engine = make_engine(model, args.slots or max(levels), capacity, buckets, patches, args.images,
                             args.prefill_rows, steps, blocks == "on")
        if number == len(arms) - 1:
            del model   # the engine holds its own copy; two would not fit beside a 256-slot cache of the 8B preset
        engine.warm_up()   # every shape, the batched prefill's row counts among them, before any timing
        engine.start()
        for c in levels:
            row = {"steps_per_call": steps, "blocks": blocks, "concurrency": c, **run_ours(engine, requests[:c])}
            bound_step = decode_bytes(config, weights, c, prompt, args.new_tokens, args.dtype) / bandwidth
            row["bound_tokens_per_s"] = round(c / bound_step, 1)
            row["decode_fraction_of_bound"] = round(row["decode_tokens_per_s"] / row["bound_tokens_per_s"], 3)
            for cache in args.hf.split(",") if args.hf and c in hf_levels else ():
                rates = transformers_rates[f"{c}/{cache}"]
                row[f"transformers_{cache}_tokens_per_s"] = rates["tokens_per_s"]
                row[f"transformers_{cache}_decode_tokens_per_s"] = rates["decode_tokens_per_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.dump and number == len(arms) - 1:
            probe = dump_decode_step(engine, args.dump)
            print(json.dumps(probe), flush=True)
        engine.stop()
        del engine
        gc.collect()   # the engine's cache (its jitted methods hold it in a cycle) before the next arm's
    print(json.dumps({"preset": args.preset, "vocabulary": config.text.vocab_size, "dtype": args.dtype,
                      "attention": args.attention, "backend": jax.default_backend(),
                      "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(),
                      "load_average": [round(x, 2) for x in os.getloadavg()], "machine": platform.machine(),
                      "mean_prompt_tokens": prompt, "new_tokens": args.new_tokens, "images_per_prompt": args.images,
                      "slots": args.slots or max(levels), "capacity": capacity, "buckets": buckets,
                      "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "decode_step_probe": probe, "rows": rows,
                      "ratios_to_first_arm": arm_ratios(rows)}, indent=1))


def arm_ratios(rows: list[dict]) -> list[dict]:
    """Each arm's decode tokens/s and wall speedup over the first arm's, level by level."""
    arm = lambda r: (r["steps_per_call"], r["blocks"])  # noqa: E731
    base = {r["concurrency"]: r for r in rows if arm(r) == arm(rows[0])}
    return [{"steps_per_call": r["steps_per_call"], "blocks": r["blocks"], "concurrency": r["concurrency"],
             "decode_tokens_per_s": round(r["decode_tokens_per_s"] / base[r["concurrency"]]["decode_tokens_per_s"], 2),
             "wall_speedup": round(base[r["concurrency"]]["wall_s"] / r["wall_s"], 2)}
            for r in rows if arm(r) != arm(rows[0])]


if __name__ == "__main__":
    main()
