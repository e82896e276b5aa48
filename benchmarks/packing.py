"""Packing step rows into microbatches: host seconds, fill, and shared screenshot encodings.

    .venv/bin/python benchmarks/packing.py                                  # the three shapes below
    .venv/bin/python benchmarks/packing.py --episodes 128 --shape 16384,1,6 --row-tokens 2000,5000

Synthetic episodes of 1-29 steps with history 1 (step j shows screenshots j-1 and j, named
by key), row lengths uniform in --row-tokens. Only the placement is timed (no arrays are
built): it runs on the learner's critical path once per update. Reported: rows,
microbatches, seconds, fill (row tokens / microbatch tokens) and images encoded per
image shown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from asyncwebrl.learner.packing import PackingShape, StepRow, place  # noqa: E402

RESPONSE_TOKENS = 200
# (row_length, rows_per_microbatch, images_per_microbatch), row token range: the embedded
# default, the GPU end-to-end benchmark, and configs/instruct.py's learner
SHAPES = [((4096, 1, 4), (1500, 3600)), ((3072, 4, 5), (2100, 2600)), ((16384, 1, 6), (2000, 5000))]


def episode_rows(episodes: int, row_tokens: tuple[int, int], seed: int = 0) -> list[StepRow]:
    rng = np.random.default_rng(seed)
    rows = []
    for episode in range(episodes):
        for step in range(int(rng.integers(1, 30))):
            keys = (f"e{episode}s{step - 1}", f"e{episode}s{step}") if step else (f"e{episode}s0",)
            length = int(rng.integers(*row_tokens))
            rows.append(StepRow(prompt_ids=np.zeros(length - RESPONSE_TOKENS, np.int32),
                                response_ids=np.zeros(RESPONSE_TOKENS, np.int32),
                                pixel_values=np.zeros((0, 1), np.uint8),
                                image_grid_thw=np.ones((len(keys), 3), np.int64),
                                behave_logprobs=np.zeros(RESPONSE_TOKENS, np.float32),
                                versions=np.zeros(RESPONSE_TOKENS, np.int32), image_keys=keys))
    return rows


def measure(episodes: int, shape: tuple[int, int, int], row_tokens: tuple[int, int]) -> dict:
    rows = episode_rows(episodes, row_tokens)
    packing = PackingShape(*shape, patches_per_image=1)
    started = time.perf_counter()
    layouts = place(rows, packing)
    seconds = time.perf_counter() - started
    return {"shape": list(shape), "row_tokens": list(row_tokens), "rows": len(rows), "microbatches": len(layouts),
            "seconds": round(seconds, 3),
            "fill": round(sum(len(r) for r in rows) / (len(layouts) * packing.tokens), 3),
            "encoded_per_shown": round(sum(len(layout.images) for layout in layouts)
                                       / sum(r.num_images for r in rows), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--shape", help="row_length,rows_per_microbatch,images_per_microbatch (default: three)")
    parser.add_argument("--row-tokens", default="2000,5000", help="min,max tokens of a row (with --shape)")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shape:
        shapes = [(tuple(int(x) for x in args.shape.split(",")), tuple(int(x) for x in args.row_tokens.split(",")))]
    for shape, row_tokens in shapes:
        print(json.dumps(measure(args.episodes, shape, row_tokens)), flush=True)


if __name__ == "__main__":
    main()
