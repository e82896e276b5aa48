"""What the benchmark scripts share about their synthetic agent steps."""

from __future__ import annotations

import dataclasses

from asyncwebrl.model.tokenizer import EMBEDDED_MAX_PIXELS, EMBEDDED_MIN_PIXELS, Processor, byte_tokenizer, make_image_processor


def is_embedded(config) -> bool:
    """The embedded presets (and the warm start, with its fitted tokenizer) use the byte
    tokenizer's special ids and the embedded (small-image) processor."""
    return config.image_token_id < 1000


def screenshot_processor(config):
    """The image processor a preset sees screenshots through: the embedded one for tiny,
    Qwen3-VL's default pixel bounds (56x56 .. 16384 tokens of 32x32 px) otherwise."""
    if is_embedded(config):
        return make_image_processor(EMBEDDED_MIN_PIXELS, EMBEDDED_MAX_PIXELS)
    return make_image_processor(56 * 56, 16384 * 32 * 32)


def synthetic_processor(config) -> Processor:
    """The byte tokenizer (synthetic prompts are token ids already) with the preset's
    screenshot processor: 880 vision tokens per 1280x720 screenshot for 2B and 8B (44 x 80
    patches: 720 rounds to 704)."""
    return Processor(byte_tokenizer(), screenshot_processor(config))


def ordinary_token_limit(config) -> int:
    """Random text tokens are drawn below this id: below every special token."""
    return 256 if is_embedded(config) else 150_000


def at_depth(config, text_layers: int = 0, vision_blocks: int = 0):
    """A model config with `text_layers` text layers and `vision_blocks` vision blocks
    instead of its own (0: as it is), widths unchanged. DeepStack taps feed text layers 0, 1,
    ...: those the cut depths no longer have are dropped."""
    text = dataclasses.replace(config.text, num_layers=text_layers or config.text.num_layers)
    depth = vision_blocks or config.vision.depth
    taps = tuple(i for i in config.vision.deepstack_layers if i < depth)[:text.num_layers]
    vision = dataclasses.replace(config.vision, depth=depth, deepstack_layers=taps)
    return dataclasses.replace(config, text=text, vision=vision)
