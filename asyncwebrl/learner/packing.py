"""Step rows -> fixed-shape packed microbatches.

A step row is one agent step as the learner trains on it: the prompt exactly as the
sampler saw it (image placeholders expanded) followed by the response it wrote. Rows are
packed first-fit-decreasing into sequences of `row_length` tokens; each row is its own
segment (attention never crosses rows, positions restart per row). A microbatch is
`rows_per_microbatch` packed sequences plus at most `images_per_microbatch` images of
`patches_per_image` patches: every microbatch has the same shapes, so one compilation
serves a whole run.

Per-token arrays are aligned to the *input* position that predicts the token: position t
carries target = token t+1 of the same row, and the loss mask is 1 where that target is a
response token.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from flax import struct

from asyncwebrl.model.config import ModelConfig
from asyncwebrl.model.inputs import IMAGE, ModelInputs, sequence_positions, vision_inputs


@dataclasses.dataclass
class StepRow:
    prompt_ids: np.ndarray         # [p] int32, image placeholders expanded
    response_ids: np.ndarray       # [r] int32
    pixel_values: np.ndarray       # [patches, still_patch_dim] uint8 still patches (0 rows without images)
    image_grid_thw: np.ndarray     # [images, 3]
    behave_logprobs: np.ndarray    # [r] float32: log-prob of each response token under the sampler
    versions: np.ndarray           # [r] int32: weight version that wrote each response token
    advantage: float = 0.0         # the same for every response token of the step

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def num_images(self) -> int:
        return len(self.image_grid_thw)


@struct.dataclass
class Microbatch:
    inputs: ModelInputs
    targets: np.ndarray            # [R, L] int32: the next token of the same row
    loss_mask: np.ndarray          # [R, L] float32: 1 where the target is a response token
    behave_logprobs: np.ndarray    # [R, L] float32
    advantages: np.ndarray         # [R, L] float32
    versions: np.ndarray           # [R, L] int32


@dataclasses.dataclass(frozen=True)
class PackingShape:
    row_length: int
    rows_per_microbatch: int
    images_per_microbatch: int
    patches_per_image: int

    @property
    def tokens(self) -> int:
        return self.row_length * self.rows_per_microbatch


def pack(rows: list[StepRow], shape: PackingShape, config: ModelConfig) -> list[Microbatch]:
    """All rows, packed into as few fixed-shape microbatches as first-fit-decreasing finds."""
    for index, row in enumerate(rows):
        if len(row) > shape.row_length:
            raise ValueError(f"step row {index} has {len(row)} tokens; row_length is {shape.row_length}")
        if row.num_images > shape.images_per_microbatch:
            raise ValueError(f"step row {index} has {row.num_images} images; a microbatch holds "
                             f"{shape.images_per_microbatch}")
        if len(row.image_grid_thw) and row.image_grid_thw.prod(axis=1).max() > shape.patches_per_image:
            raise ValueError(f"step row {index} has an image of {row.image_grid_thw.prod(axis=1).max()} patches; "
                             f"patches_per_image is {shape.patches_per_image}")
        if row.pixel_values.dtype != np.uint8:   # one kind of patches: one compilation, 1/8 of the bytes
            raise ValueError(f"step row {index} carries {row.pixel_values.dtype} pixels; step rows carry the "
                             f"uint8 still patches of Processor.process_images")
        if not len(row.response_ids) == len(row.behave_logprobs) == len(row.versions):
            raise ValueError(f"step row {index}: response, behave_logprobs and versions differ in length")
    sequences = _first_fit(rows, shape)
    microbatches, current, images = [], [], 0
    for sequence in sequences:
        sequence_images = sum(rows[i].num_images for i in sequence)
        if current and (len(current) == shape.rows_per_microbatch
                        or images + sequence_images > shape.images_per_microbatch):
            microbatches.append(_assemble([[rows[i] for i in s] for s in current], shape, config))
            current, images = [], 0
        current.append(sequence)
        images += sequence_images
    if current:
        microbatches.append(_assemble([[rows[i] for i in s] for s in current], shape, config))
    return microbatches


def _first_fit(rows: list[StepRow], shape: PackingShape) -> list[list[int]]:
    """Row indices grouped into sequences of at most row_length tokens (and the image cap)."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
    sequences, free, images = [], [], []
    for i in order:
        for s in range(len(sequences)):
            if free[s] >= len(rows[i]) and images[s] + rows[i].num_images <= shape.images_per_microbatch:
                sequences[s].append(i)
                free[s] -= len(rows[i])
                images[s] += rows[i].num_images
                break
        else:
            sequences.append([i])
            free.append(shape.row_length - len(rows[i]))
            images.append(rows[i].num_images)
    return sequences


def _assemble(sequences: list[list[StepRow]], shape: PackingShape, config: ModelConfig) -> Microbatch:
    R, L = shape.rows_per_microbatch, shape.row_length
    tokens = np.zeros((R, L), np.int32)
    positions = np.zeros((3, R, L), np.int32)
    segments = np.zeros((R, L), np.int32)
    source = np.full((R, L), -1, np.int32)
    targets = np.zeros((R, L), np.int32)
    loss_mask = np.zeros((R, L), np.float32)
    behave = np.zeros((R, L), np.float32)
    advantages = np.zeros((R, L), np.float32)
    versions = np.zeros((R, L), np.int32)
    pixels, grids = [], []
    stride = shape.patches_per_image // config.vision.merge_unit
    for r, sequence in enumerate(sequences):
        offset = 0
        for segment, row in enumerate(sequence, start=1):
            ids = np.concatenate([row.prompt_ids, row.response_ids]).astype(np.int32)
            span = slice(offset, offset + len(ids))
            types = np.zeros(len(ids), np.int32)  # a response is text, even if it spells an image pad
            types[:len(row.prompt_ids)] = (row.prompt_ids == config.image_token_id) * IMAGE
            tokens[r, span], segments[r, span] = ids, segment
            positions[:, r, span], _ = sequence_positions(types, row.image_grid_thw, config.vision.spatial_merge_size)
            image_slots = np.flatnonzero(types)
            if len(image_slots):
                per_image = row.image_grid_thw.prod(axis=1) // config.vision.merge_unit
                first = len(grids)
                source[r, offset + image_slots] = np.concatenate(
                    [(first + i) * stride + np.arange(n) for i, n in enumerate(per_image)])
                pixels.append(row.pixel_values)
                grids.extend(row.image_grid_thw)
            # input position t predicts token t+1; the response starts at prompt length p
            p, n = len(row.prompt_ids), len(row.response_ids)
            predict = slice(offset + p - 1, offset + p - 1 + n)
            targets[r, offset:offset + len(ids) - 1] = ids[1:]
            loss_mask[r, predict] = 1.0
            behave[r, predict] = row.behave_logprobs
            advantages[r, predict] = row.advantage
            versions[r, predict] = row.versions
            offset += len(ids)
    vision = None
    if shape.images_per_microbatch:  # present even when empty, so every microbatch has one structure
        patch_rows = np.concatenate(pixels) if pixels else np.zeros((0, config.vision.still_patch_dim), np.uint8)
        vision = vision_inputs(patch_rows, np.asarray(grids).reshape(-1, 3), config.vision,
                               patches_per_image=shape.patches_per_image, num_images=shape.images_per_microbatch)
    inputs = ModelInputs(tokens=tokens, positions=positions, segment_ids=segments, vision_source=source, vision=vision)
    return Microbatch(inputs=inputs, targets=targets, loss_mask=loss_mask, behave_logprobs=behave,
                      advantages=advantages, versions=versions)
