"""Model inputs: the arrays a jitted forward takes, and how to build them on the host.

Everything data-dependent (multimodal rotary positions, which vision token fills which
placeholder, per-image patch positions and position-embedding interpolation taps) is
computed here with NumPy, so the jitted model sees only fixed-shape arrays.

Conventions that match transformers' Qwen3-VL:
- Image patches arrive in spatial-merge-block order (the processor's output), so every
  run of `merge_unit` consecutive patches becomes one language-model token.
- Images are consumed in order: row by row, left to right.
- A text token after an image continues at (image start + max(h, w) / merge).
"""

from __future__ import annotations

import functools
import itertools

import jax.numpy as jnp
import numpy as np
from flax import struct

from asyncwebrl.model.config import ModelConfig, VisionConfig

TEXT, IMAGE, VIDEO = 0, 1, 2  # mm_token_type_ids values


@struct.dataclass
class VisionInputs:
    """I images, each padded to P patches (P a multiple of the merge unit)."""
    patches: jnp.ndarray        # [I, P, still_patch_dim] uint8 still patches, or [I, P, patch_dim] float
    patch_valid: jnp.ndarray    # [I, P] bool
    rope_hw: jnp.ndarray        # [I, P, 2] int32: patch row and column for the 2-D rotary
    interp_index: jnp.ndarray   # [I, P, 4] int32: bilinear taps into the learned position grid
    interp_weight: jnp.ndarray  # [I, P, 4] float32

    @property
    def tokens_per_image(self) -> int:
        return self.patches.shape[1]


@struct.dataclass
class VisionFeatures:
    """The vision tower's output for some images, flattened over images."""
    tokens: jnp.ndarray         # [N, D_text]: language-model tokens of the images
    deepstack: tuple = ()       # one [N, D_text] per DeepStack layer


@struct.dataclass
class ModelInputs:
    tokens: jnp.ndarray         # [B, L] int32
    positions: jnp.ndarray      # [3, B, L] int32: (t, h, w) rotary positions
    segment_ids: jnp.ndarray    # [B, L] int32: 0 = padding; attention stays within a segment
    vision_source: jnp.ndarray  # [B, L] int32: index into the flattened [I * P/merge] vision tokens, -1 = text
    vision: VisionInputs | None = None


# ---------------------------------------------------------------- rotary positions

def image_positions(start: int, grid_thw, merge: int) -> np.ndarray:
    """[3, n] rotary positions of one image's merged tokens, starting at `start`."""
    t, h, w = (int(x) for x in grid_thw)
    if t != 1:
        raise ValueError(f"only still images are supported (grid t=1), got grid {tuple(grid_thw)}")
    rows, cols = np.meshgrid(np.arange(h // merge), np.arange(w // merge), indexing="ij")
    return np.stack([np.zeros(rows.size, np.int64), rows.ravel(), cols.ravel()]) + start


def sequence_positions(token_types, grids, merge: int) -> tuple[np.ndarray, int]:
    """Rotary positions of one unpadded sequence, and the position the next token gets.

    token_types: [n] (0 text, 1 image); grids: one (t, h, w) per image run, in order.
    Returns ([3, n] int32, next_position)."""
    grids = iter(grids)
    pieces, start = [], 0
    for kind, run in itertools.groupby(np.asarray(token_types).tolist()):
        length = len(list(run))
        if kind == TEXT:
            pieces.append(np.broadcast_to(np.arange(length) + start, (3, length)))
            start += length
        elif kind == IMAGE:
            grid = next(grids, None)
            if grid is None:
                raise ValueError("more image placeholder runs than image grids")
            block = image_positions(start, grid, merge)
            if block.shape[1] != length:
                raise ValueError(f"an image with grid {tuple(grid)} needs {block.shape[1]} placeholder tokens, "
                                 f"the sequence has a run of {length}")
            pieces.append(block)
            start += max(int(grid[1]), int(grid[2])) // merge
        else:
            raise ValueError("video inputs are not supported")
    if next(grids, None) is not None:
        raise ValueError("more image grids than image placeholder runs")
    positions = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
    next_position = int(positions.max()) + 1 if positions.size else 0
    return positions.astype(np.int32), next_position


# ---------------------------------------------------------------- vision side

def patch_rope_hw(grid_thw, merge: int) -> np.ndarray:
    """[h*w, 2] (row, col) of each patch, in spatial-merge-block order."""
    _, h, w = (int(x) for x in grid_thw)
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    block = (h // merge, merge, w // merge, merge)
    order = lambda a: a.reshape(block).transpose(0, 2, 1, 3).ravel()  # noqa: E731
    return np.stack([order(rows), order(cols)], axis=-1).astype(np.int32)


def _axis_taps(index, size: int, side: int):
    """Bilinear (align_corners=True) taps of `index` on an axis of `size` resampled from `side`."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(src)
    taps = floor.astype(np.int64)[:, None] + np.arange(2)
    weights = np.clip(1.0 - np.abs(src[:, None] - taps), 0.0, None)
    return np.clip(taps, 0, side - 1), weights.astype(np.float32)


def interpolation_taps(grid_thw, side: int, merge: int) -> tuple[np.ndarray, np.ndarray]:
    """The learned side x side position grid resampled to this image: [P, 4] indices and weights."""
    _, h, w = (int(x) for x in grid_thw)
    hw = patch_rope_hw(grid_thw, merge)
    row_taps, row_weights = _axis_taps(hw[:, 0], h, side)
    col_taps, col_weights = _axis_taps(hw[:, 1], w, side)
    index = (row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4)
    weight = (row_weights[:, :, None] * col_weights[:, None, :]).reshape(-1, 4)
    return index.astype(np.int32), weight


@functools.lru_cache(maxsize=64)
def _patch_layout(grid_thw: tuple, side: int, merge: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rope (row, col), interpolation indices and weights of an image's patches. They depend
    on the grid only, and a run sees few grids (one per screenshot size): computed once
    each (7 ms per 1280x720 image otherwise, on every sampler request)."""
    return (patch_rope_hw(grid_thw, merge),) + interpolation_taps(grid_thw, side, merge)


# ---------------------------------------------------------------- pixels

def still_patch_pixels(patches, vision: VisionConfig) -> jnp.ndarray:
    """uint8 still-image patches [..., C*p*p] (resized pixels, channel-major) -> the float32
    patches [..., C*T*p*p] that transformers' processor makes of an image: x / 255,
    normalised per channel, the frame repeated over the temporal patch."""
    c, area = vision.in_channels, vision.patch_size**2
    x = jnp.asarray(patches).astype(jnp.float32).reshape(*patches.shape[:-1], c, 1, area) * (1.0 / 255.0)
    mean = jnp.asarray(vision.image_mean, jnp.float32)[:, None, None]
    std = jnp.asarray(vision.image_std, jnp.float32)[:, None, None]
    x = jnp.broadcast_to((x - mean) / std, (*patches.shape[:-1], c, vision.temporal_patch_size, area))
    return x.reshape(*patches.shape[:-1], vision.patch_dim)


def _patch_array(pixel_values, vision: VisionConfig) -> tuple[np.ndarray, int]:
    """(patches, their width): uint8 still patches stay uint8; anything else is taken as
    transformers' float layout."""
    array = np.asarray(pixel_values)
    if array.dtype == np.uint8:
        return array, vision.still_patch_dim
    return array.astype(np.float32, copy=False), vision.patch_dim


def vision_inputs(pixel_values, image_grid_thw, vision: VisionConfig, *, patches_per_image: int | None = None,
                  num_images: int | None = None) -> VisionInputs:
    """Split flat patches [N, width] into per-image rows padded to a fixed P: uint8 still
    patches (width still_patch_dim, the Processor's) or float ones (width patch_dim,
    transformers' processor's).

    patches_per_image / num_images pad further (fixed shapes for jit); by default P is the
    largest image and I the number of images."""
    grids = np.asarray(image_grid_thw, np.int64).reshape(-1, 3)
    counts = grids.prod(axis=1)
    pixel_values, width = _patch_array(pixel_values, vision)
    if pixel_values.shape != (counts.sum(), width):
        raise ValueError(f"pixel_values ({pixel_values.dtype}) has shape {pixel_values.shape}; the grids "
                         f"{grids.tolist()} need ({counts.sum()}, {width})")
    largest = int(counts.max()) if len(counts) else 0
    size = patches_per_image or largest
    images = num_images or len(grids)
    if size < largest or size % vision.merge_unit or images < len(grids):
        raise ValueError(f"cannot fit {len(grids)} images of up to {largest} patches into "
                         f"{images} x {size} (P must also be a multiple of {vision.merge_unit})")
    side = round(vision.num_position_embeddings**0.5)
    exact = counts.tolist() == [size] * images   # nothing to pad: skip a copy of ~20 MB per screenshot
    patches = (pixel_values.reshape(images, size, width) if exact
               else np.zeros((images, size, width), pixel_values.dtype))
    valid = np.zeros((images, size), bool)
    rope_hw = np.zeros((images, size, 2), np.int32)
    index = np.zeros((images, size, 4), np.int32)
    weight = np.zeros((images, size, 4), np.float32)
    for i, (grid, start) in enumerate(zip(grids, np.concatenate([[0], np.cumsum(counts)[:-1]]))):
        n = int(counts[i])
        if not exact:
            patches[i, :n] = pixel_values[start:start + n]
        valid[i, :n] = True
        rope_hw[i, :n], index[i, :n], weight[i, :n] = _patch_layout(tuple(int(g) for g in grid), side,
                                                                    vision.spatial_merge_size)
    return VisionInputs(patches=patches, patch_valid=valid, rope_hw=rope_hw, interp_index=index,
                        interp_weight=weight)


def vision_source(image_mask, image_grid_thw, vision: VisionConfig, patches_per_image: int) -> np.ndarray:
    """[B, L] index of the vision token that fills each image placeholder (-1 elsewhere).

    Placeholders are filled in row-major order from image 0 on; image i's tokens sit at
    i * (P / merge) + j in the flattened vision output."""
    image_mask = np.asarray(image_mask, bool)
    grids = np.asarray(image_grid_thw, np.int64).reshape(-1, 3)
    per_image = grids.prod(axis=1) // vision.merge_unit
    if image_mask.sum() != per_image.sum():
        raise ValueError(f"image features and image tokens do not match: {int(image_mask.sum())} placeholder "
                         f"tokens, {int(per_image.sum())} image tokens from image_grid_thw")
    stride = patches_per_image // vision.merge_unit
    flat = np.concatenate([i * stride + np.arange(n) for i, n in enumerate(per_image)]) if len(grids) else []
    source = np.full(image_mask.shape, -1, np.int32)
    source[image_mask] = flat
    return source


# ---------------------------------------------------------------- Hugging Face keyword inputs

def from_hf_kwargs(config: ModelConfig, input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None,
                   mm_token_type_ids=None, pixel_values_videos=None, video_grid_thw=None) -> ModelInputs:
    """ModelInputs from the keyword inputs a transformers Qwen3-VL takes (numpy or torch arrays).

    Padding may be on either side: positions count only attended tokens, as transformers does."""
    if pixel_values_videos is not None or video_grid_thw is not None:
        raise ValueError("video inputs are not supported")
    ids = _numpy(input_ids).astype(np.int32)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {ids.shape}")
    mask = np.ones_like(ids, bool) if attention_mask is None else _numpy(attention_mask).astype(bool)
    has_images = pixel_values is not None
    if has_images and (image_grid_thw is None or mm_token_type_ids is None):
        raise ValueError("pixel_values need image_grid_thw and mm_token_type_ids (1 at image placeholders)")
    types = np.zeros_like(ids) if mm_token_type_ids is None else _numpy(mm_token_type_ids).astype(np.int32)
    # mm_token_type_ids decides what is an image placeholder; an image-pad id typed 0 (a
    # model may write one in its response) is an ordinary text token
    if (types == IMAGE).any() != has_images or ((types == IMAGE) & (ids != config.image_token_id)).any():
        raise ValueError("mm_token_type_ids may be 1 only at image placeholder tokens, "
                         "and image placeholders need pixel_values")
    grids = np.zeros((0, 3), np.int64) if image_grid_thw is None else _numpy(image_grid_thw).reshape(-1, 3)

    positions = np.zeros((3,) + ids.shape, np.int32)
    merge = config.vision.spatial_merge_size
    consumed = 0
    for row in range(ids.shape[0]):
        row_types = types[row][mask[row]]
        runs = sum(1 for kind, _ in itertools.groupby(row_types.tolist()) if kind == IMAGE)
        positions[:, row, mask[row]], _ = sequence_positions(row_types, grids[consumed:consumed + runs], merge)
        consumed += runs

    vision, source = None, np.full(ids.shape, -1, np.int32)
    if has_images:
        vision = vision_inputs(_numpy(pixel_values), grids, config.vision)
        source = vision_source((types == IMAGE) & mask, grids, config.vision, vision.tokens_per_image)
    return ModelInputs(tokens=ids, positions=positions, segment_ids=mask.astype(np.int32),
                       vision_source=source, vision=vision)


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu()
        x = x.float() if x.is_floating_point() else x
        return x.numpy()
    return np.asarray(x)
