"""Chat messages + screenshots -> Qwen3-VL model inputs, as numpy arrays.

Two sources for the tokenizer and image processor:
    embedded   a byte-level tokenizer built in code (id == byte value, Qwen's special
               tokens at 256..262, the tool call's fixed pieces at 263..279) and a
               small-image processor: no files, no downloads, for the tiny CPU model and
               the tests.
    checkpoint a real Qwen3-VL directory (tokenizer.json, preprocessor_config.json, ...).

`Processor` is the one way the rest of the code turns a PromptBuilder prompt (chat
`messages` whose image parts carry screenshot keys) plus the fetched screenshots into
`input_ids`, `mm_token_type_ids`, `pixel_values` and `image_grid_thw`. One difference
from transformers: `pixel_values` are still-image patches, the resized uint8 pixels
[N, C*patch*patch]; the model normalises them and repeats them over the temporal patch
on the device (`inputs.still_patch_pixels` gives transformers' float32 layout).

Nothing here imports JAX or needs torch: only transformers' tokenizer and PIL image
processor classes are used, always with numpy outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import numpy as np
from PIL import Image
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2VLImageProcessorPil

# Qwen3-VL checkpoints normalise with mean = std = 0.5 (not the class's CLIP default).
from asyncwebrl.model.config import QWEN3_VL_IMAGE_MEAN, QWEN3_VL_IMAGE_STD
from asyncwebrl.rollout.response import tool_call_pieces

# Qwen's special tokens. The byte tokenizer gives them ids 256..262 in this order.
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)

NUM_BYTES = 256

# Embedded image processor: a MiniWoB 160x210 screenshot becomes 35 image tokens and a
# 1280x720 one 60 (at most 64 = 256*256 / 32**2), which keeps a prompt with a few
# screenshots within a tiny CPU model's reach; 64*64 guarantees at least a 2x2 merged grid.
EMBEDDED_MIN_PIXELS = 64 * 64
EMBEDDED_MAX_PIXELS = 256 * 256

PREPROCESSOR_CONFIG = "preprocessor_config.json"

# Qwen's ChatML, as Qwen3-VL's template renders text and images (without its tool-call
# branches): "<|im_start|>{role}\n{content}<|im_end|>\n" per message, each image part as
# one vision_start/image_pad/vision_end triple (the Processor expands the pad).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}"
    "{{- message.content -}}"
    "{%- else -%}"
    "{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part.type == 'text' -%}"
    "{{- part.text -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)


# ---------------------------------------------------------------------------------------
# Special ids


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    pad: int           # <|endoftext|>
    eos: int           # <|im_end|>: an assistant turn ends here
    im_start: int
    vision_start: int
    vision_end: int
    image_pad: int
    video_pad: int


def _token_id(tokenizer, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    # Unknown tokens come back as None or as the unk id, depending on the tokenizer.
    if token_id is None or (tokenizer.unk_token_id is not None and token_id == tokenizer.unk_token_id):
        raise ValueError(f"the tokenizer has no {token!r} token: not a Qwen-style vocabulary")
    return int(token_id)


def special_ids(tokenizer) -> SpecialIds:
    """Looks up Qwen's special token ids in any tokenizer (the byte one or a real Qwen one)."""
    return SpecialIds(pad=_token_id(tokenizer, ENDOFTEXT), eos=_token_id(tokenizer, IM_END),
                      im_start=_token_id(tokenizer, IM_START), vision_start=_token_id(tokenizer, VISION_START),
                      vision_end=_token_id(tokenizer, VISION_END), image_pad=_token_id(tokenizer, IMAGE_PAD),
                      video_pad=_token_id(tokenizer, VIDEO_PAD))


# ---------------------------------------------------------------------------------------
# Tokenizers


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map: byte-level BPE vocabularies are spelled in it."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]  # '!'..'~', '¡'..'¬', '®'..'ÿ'
    mapping = {b: chr(b) for b in printable}
    # The remaining bytes (controls, space, ...) are shifted past 255 to printable code points.
    unprintable = [b for b in range(NUM_BYTES) if b not in mapping]
    mapping.update({b: chr(NUM_BYTES + i) for i, b in enumerate(unprintable)})
    return mapping


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with Qwen's special tokens: id == byte value for 0..255,
    the special tokens at 256..262, the tool call's fixed pieces at 263.., ChatML chat
    template. Needs no files.

    Why the pieces: in bytes a set-of-marks action is ~100 tokens of which all but the
    element id and any text are fixed syntax, and one wrong byte makes the action invalid;
    a model trained from scratch then spends its whole warm start learning punctuation. As
    whole tokens (much as Qwen's own vocabulary has <tool_call> and common JSON pieces) a
    click is 5-6 tokens. Matching is leftmost-longest, anywhere in the text."""
    alphabet = _bytes_to_unicode()
    # No merges: every byte stays its own token, so the vocabulary is exactly the 256 bytes.
    core = Tokenizer(models.BPE(vocab={alphabet[b]: b for b in range(NUM_BYTES)}, merges=[]))
    # No split regex: the pre-tokenizer only maps bytes to the alphabet; nothing to split for.
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    core.add_tokens([AddedToken(piece, normalized=False, special=False) for piece in tool_call_pieces()])
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=ENDOFTEXT,
                                   chat_template=CHAT_TEMPLATE)


def _processor_chat_template(path: str) -> str | None:
    """The chat template some checkpoints keep in the processor's chat_template.json only."""
    file = os.path.join(path, "chat_template.json")
    if not os.path.isfile(file):
        return None
    with open(file) as f:
        return json.load(f).get("chat_template")


def load_tokenizer(path: str):
    """The tokenizer of a local checkpoint directory (never downloads)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint directory at {path!r}")
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        raise FileNotFoundError(f"{path!r} holds no tokenizer.json or tokenizer_config.json")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.chat_template is None:
        tokenizer.chat_template = _processor_chat_template(path)
    return tokenizer


# ---------------------------------------------------------------------------------------
# Image processors


def make_image_processor(min_pixels: int, max_pixels: int, patch_size: int = 16, merge_size: int = 2,
                         temporal_patch_size: int = 2, *, image_mean: Sequence[float] = QWEN3_VL_IMAGE_MEAN,
                         image_std: Sequence[float] = QWEN3_VL_IMAGE_STD) -> Qwen2VLImageProcessorPil:
    """Qwen's image processor, PIL/numpy backend (no torch, no torchvision). Images are
    resized to multiples of patch_size*merge_size with min_pixels <= H*W <= max_pixels."""
    return Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size,
                                    merge_size=merge_size, temporal_patch_size=temporal_patch_size,
                                    image_mean=list(image_mean), image_std=list(image_std))


# preprocessor_config.json keys passed through unchanged; absent ones keep the class defaults,
# as transformers itself would load the file.
_PASSED_THROUGH = ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std", "do_resize",
                   "resample", "do_rescale", "rescale_factor", "do_normalize", "do_convert_rgb")


def _pixel_bounds(config: dict) -> dict:
    """min/max pixels from either spelling: size {shortest_edge, longest_edge} (Qwen3-VL) or
    min_pixels/max_pixels (Qwen2-VL era, top level or inside size); top level wins."""
    size = config.get("size") or {}
    bounds = {"min_pixels": size.get("shortest_edge", size.get("min_pixels")),
              "max_pixels": size.get("longest_edge", size.get("max_pixels"))}
    for key in bounds:
        if config.get(key) is not None:
            bounds[key] = config[key]
    return {k: v for k, v in bounds.items() if v is not None}


def load_image_processor(path: str) -> Qwen2VLImageProcessorPil:
    """The PIL image processor configured from a checkpoint's preprocessor_config.json.

    AutoImageProcessor is avoided on purpose: it may pick the torchvision-backed class."""
    file = os.path.join(path, PREPROCESSOR_CONFIG)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no {PREPROCESSOR_CONFIG} in {path!r}")
    with open(file) as f:
        config = json.load(f)
    kwargs = {k: config[k] for k in _PASSED_THROUGH if k in config}
    return Qwen2VLImageProcessorPil(**kwargs, **_pixel_bounds(config))


# ---------------------------------------------------------------------------------------
# Processor


def _is_image_part(part) -> bool:
    return isinstance(part, dict) and part.get("type") == "image"


def count_image_parts(messages: Sequence[dict]) -> int:
    """Image parts in chat messages (string contents hold none)."""
    return sum(_is_image_part(part) for m in messages if not isinstance(m["content"], str) for part in m["content"])


def _as_rgb_array(image) -> np.ndarray:
    """A PIL image or HxWx3 uint8 array -> HxWx3 uint8 array."""
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3 or array.dtype != np.uint8:
        raise ValueError(f"images must be HxWx3 uint8 arrays or PIL images, got {array.dtype} {array.shape}")
    return array


class Processor:
    """Tokenizer + image processor: chat messages and screenshots -> one model input sequence."""

    def __init__(self, tokenizer, image_processor: Qwen2VLImageProcessorPil):
        ip = image_processor
        if not (ip.do_resize and ip.do_rescale and ip.do_normalize and abs(ip.rescale_factor * 255 - 1) < 1e-9):
            # the model applies x / 255 and the normalisation itself (inputs.still_patch_pixels)
            raise ValueError("only Qwen's pixel pipeline is supported: resize, rescale by 1/255, normalise "
                             f"(got do_resize={ip.do_resize}, do_rescale={ip.do_rescale}, "
                             f"rescale_factor={ip.rescale_factor}, do_normalize={ip.do_normalize})")
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.special = special_ids(tokenizer)
        self.merge_size = int(image_processor.merge_size)

    # -- construction ----------------------------------------------------------------

    @classmethod
    def embedded(cls, min_pixels: int = EMBEDDED_MIN_PIXELS, max_pixels: int = EMBEDDED_MAX_PIXELS) -> Processor:
        """Byte tokenizer + small-image processor: the tiny model's inputs, no files needed."""
        return cls(byte_tokenizer(), make_image_processor(min_pixels, max_pixels))

    @classmethod
    def from_pretrained(cls, path: str) -> Processor:
        return cls(load_tokenizer(path), load_image_processor(path))

    def save_pretrained(self, path: str) -> None:
        """Writes the tokenizer files and preprocessor_config.json; from_pretrained reads them back."""
        os.makedirs(path, exist_ok=True)
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)

    # -- sizes -----------------------------------------------------------------------

    @property
    def still_patch_dim(self) -> int:
        """Length of one still-image patch from process_images: channels x patch_size**2."""
        return len(self.image_processor.image_mean) * self.image_processor.patch_size**2

    def check_normalisation(self, vision) -> None:
        """The model (a VisionConfig) must normalise still patches the way this processor's
        configuration says (weights.read_config takes it from the same checkpoint)."""
        ours = (tuple(vision.image_mean), tuple(vision.image_std))
        theirs = (tuple(self.image_processor.image_mean), tuple(self.image_processor.image_std))
        if not np.allclose(ours, theirs):
            raise ValueError(f"the model normalises pixels with mean/std {ours}, the image processor with {theirs}")

    def image_tokens(self, height: int, width: int) -> int:
        """How many <|image_pad|> tokens a height x width screenshot becomes (after the
        processor's resize to multiples of patch*merge within its pixel bounds)."""
        return self.image_processor.get_number_of_image_patches(height, width) // self.merge_size**2

    # -- text ------------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Token ids of plain text; special-token strings in it become special ids, nothing is added."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of token ids, special tokens included unless skipped."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens,
                                     clean_up_tokenization_spaces=False)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The chat template's text: one <|image_pad|> per image part, not yet expanded."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    # -- model inputs ----------------------------------------------------------------

    def process_images(self, images: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Images -> (still patches uint8 [N, still_patch_dim], image_grid_thw [n_images, 3]
        int64), the images' patches concatenated in order.

        Each image is resized exactly as Qwen's processor resizes it, then cut into
        patch_size squares in spatial-merge-block order, channel-major inside a patch. The
        rescale, normalisation and temporal repeat happen on the device, so the host builds,
        copies and sends 1/8 of the bytes of the processor's float32 output."""
        ip = self.image_processor
        p, m = ip.patch_size, ip.merge_size
        pieces, grids = [], []
        for image in images:
            channels_first = np.ascontiguousarray(_as_rgb_array(image).transpose(2, 0, 1))
            resized = np.asarray(ip.resize(channels_first, size=ip.size, resample=ip.resample, factor=p * m))
            if resized.dtype != np.uint8:
                raise TypeError(f"the image processor's resize returned {resized.dtype}, expected uint8 pixels")
            c, h, w = resized.shape
            gh, gw = h // p, w // p
            blocks = resized.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
            pieces.append(blocks.reshape(gh * gw, c * p * p))
            grids.append((1, gh, gw))
        if not pieces:
            return np.zeros((0, self.still_patch_dim), np.uint8), np.zeros((0, 3), np.int64)
        return np.concatenate(pieces), np.asarray(grids, np.int64)

    def _expand_image_pads(self, ids: np.ndarray, grid_thw: np.ndarray) -> np.ndarray:
        """Repeats the i-th <|image_pad|> once per merged patch of image i."""
        is_pad = ids == self.special.image_pad
        if int(is_pad.sum()) != len(grid_thw):
            raise ValueError(f"the rendered prompt holds {int(is_pad.sum())} {IMAGE_PAD} tokens for "
                             f"{len(grid_thw)} images (does a text part contain a literal {IMAGE_PAD}?)")
        repeats = np.ones(len(ids), np.int64)
        repeats[is_pad] = grid_thw.prod(axis=1) // self.merge_size**2
        return np.repeat(ids, repeats)

    def encode(self, messages: Sequence[dict], images: Sequence, add_generation_prompt: bool = True) -> dict:
        """One sequence of model inputs from chat messages and their images.

        images: one per image part, in order of appearance; HxWx3 uint8 arrays or PIL images.
        Returns numpy arrays:
            input_ids          [L] int32
            mm_token_type_ids  [L] int32, 1 at <|image_pad|> positions, else 0
            pixel_values       [N, C*P*P] uint8 still patches, N = total patches (0 rows without images)
            image_grid_thw     [n_images, 3] int64, (t, h, w) in patches per image
        """
        n_parts = count_image_parts(messages)
        if n_parts != len(images):
            raise ValueError(f"the messages have {n_parts} image parts but {len(images)} images were given")
        text = self.render(messages, add_generation_prompt)
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False), np.int32)
        pixel_values, grid_thw = self.process_images(images)
        ids = self._expand_image_pads(ids, grid_thw)
        return {"input_ids": ids, "mm_token_type_ids": (ids == self.special.image_pad).astype(np.int32),
                "pixel_values": pixel_values, "image_grid_thw": grid_thw}
