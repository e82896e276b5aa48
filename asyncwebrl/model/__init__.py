"""Qwen3-VL in Flax NNX (docs/architecture.md#the-model-api): the policy model, its presets,
and Hugging Face weights in and out. Tokenization lives in asyncwebrl.model.tokenizer
(imported on demand: it loads transformers)."""

from asyncwebrl.model.config import ModelConfig, preset
from asyncwebrl.model.inputs import ModelInputs, VisionInputs
from asyncwebrl.model.qwen3_vl import Qwen3VL
from asyncwebrl.model.text import KVCache
from asyncwebrl.model.weights import load_pretrained, save_pretrained

__all__ = ["KVCache", "ModelConfig", "ModelInputs", "Qwen3VL", "VisionInputs", "load_pretrained", "preset",
           "save_pretrained"]
