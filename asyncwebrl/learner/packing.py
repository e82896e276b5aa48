"""Step rows -> fixed-shape packed microbatches.

A step row is one agent step as the learner trains on it: the prompt exactly as the
sampler saw it (image placeholders expanded) followed by the response it wrote. A
microbatch is `rows_per_microbatch` sequences of `row_length` tokens plus at most
`images_per_microbatch` images of `patches_per_image` patches: every microbatch has the
same shapes, so one compilation serves a whole run. A sequence holds one or more rows,
each its own segment (attention never crosses rows, positions restart per row).

Rows are placed first-fit, in the order given, preferring the microbatches that already
hold one of the row's screenshots: with history, consecutive steps of an episode show
the same screenshot, and rows that share it in one microbatch share its encoding (with
1280x720 screenshots the vision tower is a large share of the learner's work). Rows name
their images by `image_keys`; rows without keys share nothing.

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
    image_keys: tuple[str, ...] = ()   # the screenshots' store keys, one per image (or none)
    # identical steps this row stands for (merge_duplicates): its advantage is their sum, and
    # its response tokens count this many times in token means and metrics
    count: int = 1
    # supervised rows only: the weight of the prompt's text tokens in the loss (a language-model
    # loss on the page, next to the response's). The prompt repeats the task and the page repeats
    # its own structure, so every prompt token is a copying exercise: dense signal for the
    # attention that finds a named line, where the response alone gives one id per row.
    # 0 = the response alone; RL rows must keep 0 (their losses have no advantage there)
    prompt_weight: float = 0.0

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def num_images(self) -> int:
        return len(self.image_grid_thw)

    def image_identities(self, index: int) -> list:
        """What makes two images one: the store key (with the grid, in case a key were
        processed at two sizes), or, without keys, the row and position (never shared)."""
        if self.image_keys:
            return [(key, tuple(grid)) for key, grid in zip(self.image_keys, self.image_grid_thw.tolist())]
        return [(index, j) for j in range(self.num_images)]


@struct.dataclass
class Microbatch:
    inputs: ModelInputs
    targets: np.ndarray            # [R, L] int32: the next token of the same row
    loss_mask: np.ndarray          # [R, L] float32: where the target is a response token, its row's count (else 0;
                                   # a supervised row's prompt text targets: count x prompt_weight)
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

    @classmethod
    def from_config(cls, config) -> PackingShape:
        """config.learner's microbatch, holding images of the sampler's patch count."""
        learner = config.learner
        return cls(row_length=learner.row_length, rows_per_microbatch=learner.rows_per_microbatch,
                   images_per_microbatch=learner.images_per_microbatch,
                   patches_per_image=config.sampler.patches_per_image)


def pack(rows: list[StepRow], shape: PackingShape, config: ModelConfig, first_image: int = 0) -> list[Microbatch]:
    """All rows, in fixed-shape microbatches (first fit, rows sharing screenshots together).
    first_image: where these microbatches' images start in the microbatch they are part of
    (several processes each pack a part: learner.py), so that the placeholders point at
    their own images' vision tokens there."""
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
        if row.image_keys and len(row.image_keys) != row.num_images:
            raise ValueError(f"step row {index} names {len(row.image_keys)} image keys for {row.num_images} images")
        if not len(row.response_ids) == len(row.behave_logprobs) == len(row.versions):
            raise ValueError(f"step row {index}: response, behave_logprobs and versions differ in length")
    return [_assemble(rows, layout.sequences, shape, config, first_image) for layout in place(rows, shape)]


def empty_microbatch(shape: PackingShape, config: ModelConfig, first_image: int = 0) -> Microbatch:
    """A microbatch of no rows (loss mask 0 everywhere): a process with fewer microbatches
    than another feeds these, so that all take part in every step."""
    return _assemble([], [], shape, config, first_image)


# behaviour log-probs of one token in two copies of a step may differ by this much and the
# copies still merge (sampled at one version, they differ only by the sampler's batch
# arithmetic); the merged row keeps the first copy's, so a staleness weight moves by <= 0.01%
MERGE_LOGPROB_TOLERANCE = 1e-4


def merge_duplicates(rows: list[StepRow], tolerance: float = MERGE_LOGPROB_TOLERANCE) -> list[StepRow]:
    """Identical steps as one row: the same prompt, screenshots, response and versions,
    behaviour log-probs within `tolerance`, advantages of one sign. The merged row's
    advantage is the copies' sum and its count their number; first-seen order is kept.

    The episodes of a group run one task, and a policy sure of its first moves writes the
    same steps in most of them: every copy is a full forward and backward pass that adds
    nothing new. Merging is exact for the losses here: a token's clipped loss is
    -A * f(ratio) with f fixed by the sign of A (clip, dual clip and behaviour cap alike),
    so identical tokens of one sign add up to the loss of their summed advantage, and the
    cross-entropy weights tokens by count; token means and metrics count every copy
    (Microbatch.loss_mask). Copies of opposite signs stay two rows."""
    merged: list[StepRow] = []
    seen: dict[tuple, list[int]] = {}   # identity -> indices in `merged` of rows with it
    for row in rows:
        identity = (row.prompt_ids.tobytes(), row.response_ids.tobytes(), row.versions.tobytes(),
                    row.image_keys or row.pixel_values.tobytes(), row.image_grid_thw.tobytes(),
                    float(np.sign(row.advantage)), row.prompt_weight)
        for index in seen.get(identity, []):
            kept = merged[index]
            if np.max(np.abs(kept.behave_logprobs - row.behave_logprobs), initial=0.0) <= tolerance:
                merged[index] = dataclasses.replace(kept, advantage=kept.advantage + row.advantage,
                                                    count=kept.count + row.count)
                break
        else:
            seen.setdefault(identity, []).append(len(merged))
            merged.append(row)
    return merged


@dataclasses.dataclass(eq=False)   # compared and hashed by identity
class Layout:
    """One microbatch being filled: row indices per sequence, and the images it encodes."""
    sequences: list[list[int]]
    free: list[int]                # tokens left per sequence
    images: set

    def seat(self, row: StepRow, images: list, shape: PackingShape) -> int | None:
        """The sequence that can take the row (len(sequences) = a new one), or None."""
        if len(self.images.union(images)) > shape.images_per_microbatch:
            return None
        for s, free in enumerate(self.free):
            if free >= len(row):
                return s
        return len(self.sequences) if len(self.sequences) < shape.rows_per_microbatch else None

    def add(self, index: int, row: StepRow, images: list, seat: int, shape: PackingShape) -> None:
        if seat == len(self.sequences):
            self.sequences.append([])
            self.free.append(shape.row_length)
        self.sequences[seat].append(index)
        self.free[seat] -= len(row)
        self.images.update(images)


RECENT_LAYOUTS = 64   # first fit looks at this many newest microbatches (besides those sharing a screenshot)


def place(rows: list[StepRow], shape: PackingShape) -> list[Layout]:
    """First fit in row order, trying first the microbatches that share the row's
    screenshots (most shared first), then the newest few: rows come episode by episode, so
    an older microbatch rarely has room left, and looking at all of them would make
    packing quadratic in the rows of an update."""
    layouts: list[Layout] = []
    holders: dict = {}   # image identity -> the microbatches that encode it
    for index, row in enumerate(rows):
        images = row.image_identities(index)
        sharing = [layout for image in images for layout in holders.get(image, [])]
        by_sharing = sorted(dict.fromkeys(sharing), key=lambda layout: -len(layout.images.intersection(images)))
        candidates = by_sharing + [layout for layout in layouts[-RECENT_LAYOUTS:] if layout not in by_sharing]
        for layout in candidates:
            seat = layout.seat(row, images, shape)
            if seat is not None:
                break
        else:
            layout, seat = Layout([], [], set()), 0
            layouts.append(layout)
        new_images = [image for image in images if image not in layout.images]
        layout.add(index, row, images, seat, shape)
        for image in new_images:
            holders.setdefault(image, []).append(layout)
    return layouts


def _assemble(rows: list[StepRow], sequences: list[list[int]], shape: PackingShape, config: ModelConfig,
              first_image: int) -> Microbatch:
    """The arrays of one microbatch: sequences of row indices; each distinct image once."""
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
    pixels, grids, encoded = [], [], {}   # encoded: image identity -> its index in the microbatch
    stride = shape.patches_per_image // config.vision.merge_unit
    for r, sequence in enumerate(sequences):
        offset = 0
        for segment, index in enumerate(sequence, start=1):
            row = rows[index]
            ids = np.concatenate([row.prompt_ids, row.response_ids]).astype(np.int32)
            span = slice(offset, offset + len(ids))
            types = np.zeros(len(ids), np.int32)  # a response is text, even if it spells an image pad
            types[:len(row.prompt_ids)] = (row.prompt_ids == config.image_token_id) * IMAGE
            tokens[r, span], segments[r, span] = ids, segment
            positions[:, r, span], _ = sequence_positions(types, row.image_grid_thw, config.vision.spatial_merge_size)
            image_slots = np.flatnonzero(types)
            if len(image_slots):
                patches = row.image_grid_thw.prod(axis=1)
                starts = np.concatenate([[0], np.cumsum(patches)])
                slots = []
                for j, identity in enumerate(row.image_identities(index)):
                    if identity not in encoded:
                        encoded[identity] = len(grids)
                        pixels.append(row.pixel_values[starts[j]:starts[j + 1]])
                        grids.append(row.image_grid_thw[j])
                    slots.append((first_image + encoded[identity]) * stride + np.arange(patches[j] // config.vision.merge_unit))
                source[r, offset + image_slots] = np.concatenate(slots)
            # input position t predicts token t+1; the response starts at prompt length p
            p, n = len(row.prompt_ids), len(row.response_ids)
            predict = slice(offset + p - 1, offset + p - 1 + n)
            targets[r, offset:offset + len(ids) - 1] = ids[1:]
            loss_mask[r, predict] = row.count
            if row.prompt_weight:   # the prompt's text targets, image placeholders left out
                text_targets = offset + np.flatnonzero(types[1:p] == 0)
                loss_mask[r, text_targets] = row.count * row.prompt_weight
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
