"""A synchronous helper over the engine, for tests, scripts and outside checks.

    responses = generate(model, [{"input_ids": ids, "pixel_values": pv, "image_grid_thw": grid}, ...],
                         max_new_tokens=64)
    responses[0].tokens, responses[0].logprobs, responses[0].versions
"""

from __future__ import annotations

import numpy as np

from asyncwebrl.sampler.engine import Engine, EngineSettings, Image, Request, Response
from asyncwebrl.sampler.sampling import SamplingSettings


def as_request(fields: dict, max_new_tokens: int) -> Request:
    """HF-processor-style fields (input_ids [L] or [1, L], pixel_values, image_grid_thw) -> Request."""
    ids = np.asarray(fields["input_ids"]).reshape(-1).astype(np.int32)
    images = []
    if fields.get("pixel_values") is not None:
        grids = np.asarray(fields["image_grid_thw"]).reshape(-1, 3)
        pixels = np.asarray(fields["pixel_values"])   # uint8 still patches or transformers' float ones
        bounds = np.concatenate([[0], np.cumsum(grids.prod(axis=1))])
        images = [Image(pixel_values=pixels[a:b], grid_thw=tuple(int(x) for x in g))
                  for g, a, b in zip(grids, bounds[:-1], bounds[1:])]
    return Request(input_ids=ids, images=images, max_new_tokens=max_new_tokens)


def generate(model, requests: list[dict], *, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
             stop_token_ids: tuple[int, ...] = (), slots: int | None = None, decode_steps: int = 8) -> list[Response]:
    """Generate for every request with a continuous-batching engine sized to fit them all
    (decode_steps: EngineSettings')."""
    batch = [as_request(fields, max_new_tokens) for fields in requests]
    longest = max(len(r.input_ids) for r in batch)
    patches = max([int(np.prod(im.grid_thw)) for r in batch for im in r.images] or [0])
    merge = model.config.vision.merge_unit
    settings = EngineSettings(
        slots=slots or min(len(batch), 16),
        capacity=_round_up(longest + max_new_tokens, 64),
        prompt_buckets=(64, 256, 1024),
        max_images=max(len(r.images) for r in batch),
        patches_per_image=_round_up(max(patches, merge), merge),
        prefill_rows=1, prefill_cache=0, decode_steps=decode_steps, param_dtype="", seed=seed,
        sampling=SamplingSettings(temperature=temperature, top_p=1.0),
        stop_token_ids=tuple(stop_token_ids))
    with Engine(model, settings) as engine:
        futures = [engine.submit(r) for r in batch]
        return [f.result() for f in futures]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
