"""Qwen3-VL dimensions: the embedded presets (tiny, small, medium) and the published
2B/4B/8B ones.

The field names are ours; `from_hf_dict` / `to_hf_dict` translate to and from the
`config.json` of a Hugging Face Qwen3-VL checkpoint (docs/architecture.md#model-presets
has the published numbers).
"""

from __future__ import annotations

import dataclasses

# Special token ids of the real Qwen3-VL vocabulary (docs/architecture.md#model-presets).
QWEN_IDS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                vision_end_token_id=151653)
# The embedded byte-level tokenizer puts Qwen's special tokens right after the 256 bytes
# (asyncwebrl.model.tokenizer): endoftext 256, im_start 257, im_end 258, vision_start 259,
# vision_end 260, image_pad 261, video_pad 262.
# The byte tokenizer's vocabulary: 256 bytes, 7 special tokens, 17 tool-call pieces (280),
# rounded up to a multiple of 16 so the tiny model's embedding table tiles evenly.
BYTE_VOCAB_SIZE = 288
BYTE_IDS = dict(image_token_id=261, video_token_id=262, vision_start_token_id=259, vision_end_token_id=260)
# Qwen3-VL's pixel normalisation (its preprocessor_config.json): (x / 255 - mean) / std
QWEN3_VL_IMAGE_MEAN = (0.5, 0.5, 0.5)
QWEN3_VL_IMAGE_STD = (0.5, 0.5, 0.5)


@dataclasses.dataclass(frozen=True)
class TextConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    mrope_section: tuple[int, int, int]  # rotary frequency pairs given to (t, h, w), interleaved
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 262_144


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int                 # = the text hidden size
    deepstack_layers: tuple[int, ...]    # vision blocks whose features feed text layers 0, 1, ...
    num_position_embeddings: int = 2304  # a square grid of learned positions, resampled per image
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    rope_theta: float = 10_000.0
    # The processor's normalisation, applied on the device to uint8 still-image patches
    # (inputs.still_patch_pixels); a checkpoint's preprocessor_config.json may set it
    image_mean: tuple[float, ...] = QWEN3_VL_IMAGE_MEAN
    image_std: tuple[float, ...] = QWEN3_VL_IMAGE_STD

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        """Length of one flattened pixel patch: channels x temporal x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def still_patch_dim(self) -> int:
        """Length of one still-image patch as the host sends it: channels x patch x patch (uint8)."""
        return self.in_channels * self.patch_size**2

    @property
    def merge_unit(self) -> int:
        """Patches merged into one language-model token (2 x 2)."""
        return self.spatial_merge_size**2


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    text: TextConfig
    vision: VisionConfig
    tie_word_embeddings: bool
    image_token_id: int
    video_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int

    def __post_init__(self):
        check_config(self)


def check_config(config: ModelConfig) -> None:
    """Reject dimension combinations the architecture cannot run, naming the field."""
    text, vision = config.text, config.vision
    problems = []
    if sum(text.mrope_section) * 2 != text.head_dim:
        problems.append(f"sum(mrope_section)={sum(text.mrope_section)} must be head_dim/2={text.head_dim // 2}")
    if text.num_heads % text.num_kv_heads:
        problems.append(f"num_heads={text.num_heads} must be a multiple of num_kv_heads={text.num_kv_heads}")
    if vision.hidden_size % vision.num_heads or vision.head_dim % 4:
        problems.append("vision head_dim must be a whole multiple of 4 (2-D rotary over h and w)")
    if vision.out_hidden_size != text.hidden_size:
        problems.append(f"vision out_hidden_size={vision.out_hidden_size} != text hidden_size={text.hidden_size}")
    if len(vision.deepstack_layers) > text.num_layers or any(not 0 <= i < vision.depth for i in vision.deepstack_layers):
        problems.append(f"deepstack_layers={vision.deepstack_layers} must index vision blocks (depth {vision.depth}) "
                        f"and be no more than the {text.num_layers} text layers")
    if list(vision.deepstack_layers) != sorted(set(vision.deepstack_layers)):
        problems.append(f"deepstack_layers={vision.deepstack_layers} must increase (tap j feeds text layer j)")
    side = round(vision.num_position_embeddings**0.5)
    if side * side != vision.num_position_embeddings:
        problems.append(f"num_position_embeddings={vision.num_position_embeddings} must be a perfect square")
    ids = (config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id)
    if any(not 0 <= i < text.vocab_size for i in ids):
        problems.append(f"special token ids {ids} must lie inside the vocabulary ({text.vocab_size})")
    if problems:
        raise ValueError("invalid Qwen3-VL config: " + "; ".join(problems))


def _published(hidden, mlp, layers, heads, tied, v_depth, v_hidden, v_mlp, deepstack) -> ModelConfig:
    text = TextConfig(vocab_size=151_936, hidden_size=hidden, intermediate_size=mlp, num_layers=layers,
                      num_heads=heads, num_kv_heads=8, head_dim=128, rope_theta=5_000_000.0,
                      mrope_section=(24, 20, 20))
    vision = VisionConfig(depth=v_depth, hidden_size=v_hidden, intermediate_size=v_mlp, num_heads=16,
                          out_hidden_size=hidden, deepstack_layers=deepstack)
    return ModelConfig(text=text, vision=vision, tie_word_embeddings=tied, **QWEN_IDS)


def _embedded(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, mrope_section) -> ModelConfig:
    """Qwen3-VL's architecture at the embedded sizes: byte-vocabulary ids (resized to a fitted
    tokenizer by with_vocabulary), a 3x MLP, and the same two-block vision tower."""
    text = TextConfig(vocab_size=BYTE_VOCAB_SIZE, hidden_size=hidden, intermediate_size=3 * hidden, num_layers=layers,
                      num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rope_theta=10_000.0,
                      mrope_section=mrope_section, max_position_embeddings=32_768)
    vision = VisionConfig(depth=2, hidden_size=64, intermediate_size=256, num_heads=4, out_hidden_size=hidden,
                          deepstack_layers=(0, 1), num_position_embeddings=256)
    return ModelConfig(text=text, vision=vision, tie_word_embeddings=True, **BYTE_IDS)


def tiny() -> ModelConfig:
    """The embedded default: Qwen3-VL's architecture at a size that trains on 2 CPU cores."""
    return _embedded(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, mrope_section=(6, 5, 5))


def small() -> ModelConfig:
    """The warm-started embedded model: the tiny model wider and deeper (6.1M parameters with
    the fitted 3,072-token tokenizer), still cheap to run on 2 CPU cores."""
    return _embedded(hidden=256, layers=6, heads=8, kv_heads=4, head_dim=32, mrope_section=(6, 5, 5))


def medium() -> ModelConfig:
    """The small model twice as wide and a third deeper (27.6M parameters with the fitted
    tokenizer): the size that tests whether capacity limits the warm start."""
    return _embedded(hidden=512, layers=8, heads=8, kv_heads=4, head_dim=64, mrope_section=(12, 10, 10))


def with_vocabulary(config: ModelConfig, size: int) -> ModelConfig:
    """A preset resized to a tokenizer of `size` tokens (rounded up to a multiple of 16)."""
    return dataclasses.replace(config, text=dataclasses.replace(config.text, vocab_size=-(-size // 16) * 16))


# Instruct and Thinking checkpoints share their dimensions; only the weights differ.
PRESETS = {
    "tiny": tiny,
    "small": small,
    "medium": medium,
    "2b": lambda: _published(2048, 6144, 28, 16, True, 24, 1024, 4096, (5, 11, 17)),
    "4b": lambda: _published(2560, 9728, 36, 32, True, 24, 1024, 4096, (5, 11, 17)),
    "8b": lambda: _published(4096, 12288, 36, 32, False, 27, 1152, 4304, (8, 16, 24)),
}


def preset(name: str) -> ModelConfig:
    """A preset by name: tiny, small, medium, 2b, 4b or 8b (also accepted: "qwen3-vl-8b-thinking" etc.)."""
    key = name.lower().removeprefix("qwen3-vl-")
    for suffix in ("-instruct", "-thinking"):
        key = key.removesuffix(suffix)
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
    return PRESETS[key]()


def from_hf_dict(hf: dict) -> ModelConfig:
    """Read a Hugging Face Qwen3-VL `config.json` (already parsed)."""
    if hf.get("model_type") not in ("qwen3_vl", None):
        raise ValueError(f"expected a qwen3_vl checkpoint, config.json says model_type={hf.get('model_type')!r}")
    t, v = hf["text_config"], hf["vision_config"]
    rope = t.get("rope_parameters") or {"rope_theta": t.get("rope_theta", 500_000.0), **(t.get("rope_scaling") or {})}
    if rope.get("rope_type", "default") not in ("default", "mrope"):
        raise ValueError(f"rope_type {rope.get('rope_type')!r} is not supported (only the default M-RoPE)")
    text = TextConfig(vocab_size=t["vocab_size"], hidden_size=t["hidden_size"],
                      intermediate_size=t["intermediate_size"], num_layers=t["num_hidden_layers"],
                      num_heads=t["num_attention_heads"],
                      num_kv_heads=t.get("num_key_value_heads") or t["num_attention_heads"],
                      head_dim=t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
                      rope_theta=float(rope["rope_theta"]),
                      mrope_section=tuple(rope.get("mrope_section", (24, 20, 20))),
                      rms_norm_eps=t.get("rms_norm_eps", 1e-6),
                      max_position_embeddings=t.get("max_position_embeddings", 262_144))
    vision = VisionConfig(depth=v["depth"], hidden_size=v["hidden_size"], intermediate_size=v["intermediate_size"],
                          num_heads=v["num_heads"], out_hidden_size=v["out_hidden_size"],
                          deepstack_layers=tuple(v.get("deepstack_visual_indexes", (8, 16, 24))),
                          num_position_embeddings=v.get("num_position_embeddings", 2304),
                          patch_size=v.get("patch_size", 16), temporal_patch_size=v.get("temporal_patch_size", 2),
                          spatial_merge_size=v.get("spatial_merge_size", 2), in_channels=v.get("in_channels", 3),
                          rope_theta=float((v.get("rope_parameters") or {}).get("rope_theta", 10_000.0)))
    for name, act in (("text", t.get("hidden_act", "silu")), ("vision", v.get("hidden_act", "gelu_pytorch_tanh"))):
        if act != {"text": "silu", "vision": "gelu_pytorch_tanh"}[name]:
            raise ValueError(f"{name} hidden_act={act!r} is not the Qwen3-VL activation")
    if t.get("attention_bias"):
        raise ValueError("attention_bias=True is not part of Qwen3-VL")
    tied = hf.get("tie_word_embeddings", t.get("tie_word_embeddings", False))
    return ModelConfig(text=text, vision=vision, tie_word_embeddings=bool(tied),
                       **{k: hf.get(k, QWEN_IDS[k]) for k in QWEN_IDS})


def to_hf_dict(config: ModelConfig, dtype: str = "float32") -> dict:
    """The `config.json` transformers needs to rebuild this model."""
    text, vision = config.text, config.vision
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "dtype": dtype,
        "tie_word_embeddings": config.tie_word_embeddings,
        **{k: getattr(config, k) for k in QWEN_IDS},
        "text_config": {
            "model_type": "qwen3_vl_text", "vocab_size": text.vocab_size, "hidden_size": text.hidden_size,
            "intermediate_size": text.intermediate_size, "num_hidden_layers": text.num_layers,
            "num_attention_heads": text.num_heads, "num_key_value_heads": text.num_kv_heads,
            "head_dim": text.head_dim, "hidden_act": "silu", "rms_norm_eps": text.rms_norm_eps,
            "max_position_embeddings": text.max_position_embeddings, "attention_bias": False,
            "tie_word_embeddings": config.tie_word_embeddings, "dtype": dtype,
            "rope_parameters": {"rope_type": "default", "rope_theta": text.rope_theta,
                                "mrope_section": list(text.mrope_section), "mrope_interleaved": True},
        },
        "vision_config": {
            "model_type": "qwen3_vl_vision", "depth": vision.depth, "hidden_size": vision.hidden_size,
            "intermediate_size": vision.intermediate_size, "num_heads": vision.num_heads,
            "out_hidden_size": vision.out_hidden_size, "hidden_act": "gelu_pytorch_tanh",
            "deepstack_visual_indexes": list(vision.deepstack_layers),
            "num_position_embeddings": vision.num_position_embeddings, "patch_size": vision.patch_size,
            "temporal_patch_size": vision.temporal_patch_size, "spatial_merge_size": vision.spatial_merge_size,
            "in_channels": vision.in_channels,
            "rope_parameters": {"rope_type": "axial", "rope_theta": vision.rope_theta},
        },
    }
