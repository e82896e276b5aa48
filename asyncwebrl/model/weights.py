"""Hugging Face Qwen3-VL checkpoints in and out.

`load_pretrained(path, dtype=..., compute_dtype=..., residual_dtype=..., remat=..., attention=...)` reads
config.json and model.safetensors (or a sharded index) through memory maps and places
every tensor straight onto its target sharding: each device receives only its own slice,
so no process ever holds a full copy per device.
`save_pretrained(model, path)` writes config.json + model.safetensors that transformers'
Qwen3VLForConditionalGeneration loads.

Our kernels keep named einsum layouts ([in..., out...]); transformers keeps nn.Linear
[out, in] and a Conv3d patch embedding. Every conversion below is a transpose or a
reshape that only splits or merges adjacent dimensions, so on load it stays a view of
the memory map until a device slice is copied out.

Our decoder layers and vision blocks are stacked (one parameter per kind, with a leading
layers axis: asyncwebrl.model.layers.stack_layers); transformers keeps one tensor per
layer (`model.language_model.layers.{i}....`). A Tensor names its layer, and a stacked
parameter is assembled on load from its layers' tensors (each device slice from the
layers' memory maps) and cut back into them on save.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx

from asyncwebrl.model.config import ModelConfig, from_hf_dict, to_hf_dict
from asyncwebrl.model.qwen3_vl import Qwen3VL

# ---------------------------------------------------------------- safetensors files

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read_safetensors(path) -> dict[str, np.ndarray]:
    """name -> read-only memory-mapped array (nothing is read until sliced)."""
    path = pathlib.Path(path)
    with open(path, "rb") as f:
        header_size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_size))
    header.pop("__metadata__", None)
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path.name}: tensor {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        tensors[name] = raw[begin:end].view(_DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors


def write_safetensors(path, shapes: dict[str, tuple[tuple[int, ...], np.dtype]], produce) -> None:
    """Write tensors one at a time: shapes gives name -> (shape, dtype); produce(name) -> array."""
    header, offset = {}, 0
    for name, (shape, dtype) in shapes.items():
        size = math.prod(shape) * np.dtype(dtype).itemsize
        header[name] = {"dtype": _NAMES[np.dtype(dtype)], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    partial = pathlib.Path(str(path) + ".partial")
    with open(partial, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for name, (shape, dtype) in shapes.items():
            array = np.ascontiguousarray(produce(name), dtype=dtype)
            if array.shape != tuple(shape):
                raise ValueError(f"{name}: produced shape {array.shape}, declared {tuple(shape)}")
            f.write(array.tobytes())
    os.replace(partial, path)  # a crash mid-write never leaves a truncated model.safetensors


def checkpoint_tensors(directory) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint directory (one file or a sharded index), memory mapped."""
    directory = pathlib.Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{directory} has neither model.safetensors nor model.safetensors.index.json")
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(directory / name))
    return tensors


# ---------------------------------------------------------------- name and layout map

@dataclasses.dataclass(frozen=True)
class Tensor:
    """One transformers tensor <-> one of our parameters (or one layer's slice of a stacked one)."""
    hf_name: str
    path: tuple            # our nnx state path
    layout: str            # "same" (reshape only), "linear" ([out, in]), "conv" (Conv3d)
    inputs: int = 1        # leading input dimensions of our kernel (2 for [heads, head_dim, out])
    layer: int | None = None  # the index along a stacked parameter's leading layers axis

    def layer_shape(self, shape) -> tuple[int, ...]:
        """The shape of this tensor's part of our parameter of `shape`."""
        return tuple(shape[1:] if self.layer is not None else shape)

    def to_ours(self, hf: np.ndarray, shape) -> np.ndarray:
        if self.layout == "linear":
            return hf.T.reshape(shape)
        if self.layout == "conv":
            return hf.reshape(hf.shape[0], -1).T
        return hf.reshape(shape)

    def to_hf(self, ours: np.ndarray, config: ModelConfig) -> np.ndarray:
        if self.layout == "linear":
            return ours.reshape(math.prod(ours.shape[:self.inputs]), -1).T
        if self.layout == "conv":
            v = config.vision
            return ours.T.reshape(v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size)
        return ours.reshape(-1) if self.hf_name.endswith("bias") else ours

    def hf_shape(self, shape, config: ModelConfig) -> tuple[int, ...]:
        return self.to_hf(np.empty(shape, np.int8), config).shape


def _linear(hf: str, path: tuple, inputs: int = 1, bias: bool = False, layer: int | None = None) -> list[Tensor]:
    tensors = [Tensor(f"{hf}.weight", path + ("kernel",), "linear", inputs, layer)]
    return tensors + ([Tensor(f"{hf}.bias", path + ("bias",), "same", layer=layer)] if bias else [])


def _norm(hf: str, path: tuple, bias: bool = False, layer: int | None = None) -> list[Tensor]:
    tensors = [Tensor(f"{hf}.weight", path + ("scale",), "same", layer=layer)]
    return tensors + ([Tensor(f"{hf}.bias", path + ("bias",), "same", layer=layer)] if bias else [])


def _merger(hf: str, path: tuple) -> list[Tensor]:
    return (_norm(f"{hf}.norm", path + ("norm",), bias=True) + _linear(f"{hf}.linear_fc1", path + ("fc1",), bias=True)
            + _linear(f"{hf}.linear_fc2", path + ("fc2",), bias=True))


def tensor_map(config: ModelConfig) -> list[Tensor]:
    text, visual = "model.language_model", "model.visual"
    tensors = [Tensor(f"{text}.embed_tokens.weight", ("embed",), "same"),
               *_norm(f"{text}.norm", ("norm",))]
    for i in range(config.text.num_layers):
        hf, ours = f"{text}.layers.{i}", ("layers",)
        tensors += [*_norm(f"{hf}.input_layernorm", ours + ("input_norm",), layer=i),
                    *_norm(f"{hf}.post_attention_layernorm", ours + ("post_attention_norm",), layer=i),
                    *_linear(f"{hf}.self_attn.q_proj", ours + ("attn", "q_proj"), layer=i),
                    *_linear(f"{hf}.self_attn.k_proj", ours + ("attn", "k_proj"), layer=i),
                    *_linear(f"{hf}.self_attn.v_proj", ours + ("attn", "v_proj"), layer=i),
                    *_linear(f"{hf}.self_attn.o_proj", ours + ("attn", "o_proj"), inputs=2, layer=i),
                    *_norm(f"{hf}.self_attn.q_norm", ours + ("attn", "q_norm"), layer=i),
                    *_norm(f"{hf}.self_attn.k_norm", ours + ("attn", "k_norm"), layer=i),
                    *_linear(f"{hf}.mlp.gate_proj", ours + ("gate_proj",), layer=i),
                    *_linear(f"{hf}.mlp.up_proj", ours + ("up_proj",), layer=i),
                    *_linear(f"{hf}.mlp.down_proj", ours + ("down_proj",), layer=i)]
    if not config.tie_word_embeddings:
        tensors += _linear("lm_head", ("lm_head",))
    tensors += [Tensor(f"{visual}.patch_embed.proj.weight", ("visual", "patch_embed", "kernel"), "conv"),
                Tensor(f"{visual}.patch_embed.proj.bias", ("visual", "patch_embed", "bias"), "same"),
                Tensor(f"{visual}.pos_embed.weight", ("visual", "pos_embed"), "same"),
                *_merger(f"{visual}.merger", ("visual", "merger"))]
    for i in range(config.vision.depth):
        hf, ours = f"{visual}.blocks.{i}", ("visual", "blocks")
        tensors += [*_norm(f"{hf}.norm1", ours + ("norm1",), bias=True, layer=i),
                    *_norm(f"{hf}.norm2", ours + ("norm2",), bias=True, layer=i),
                    *_linear(f"{hf}.attn.qkv", ours + ("qkv",), bias=True, layer=i),
                    *_linear(f"{hf}.attn.proj", ours + ("proj",), inputs=2, bias=True, layer=i),
                    *_linear(f"{hf}.mlp.linear_fc1", ours + ("fc1",), bias=True, layer=i),
                    *_linear(f"{hf}.mlp.linear_fc2", ours + ("fc2",), bias=True, layer=i)]
    for k in range(len(config.vision.deepstack_layers)):
        tensors += _merger(f"{visual}.deepstack_merger_list.{k}", ("visual", "deepstack_mergers", k))
    return tensors


# ---------------------------------------------------------------- load and save

def read_config(directory) -> ModelConfig:
    """config.json, with the pixel normalisation of preprocessor_config.json when it has one
    (the model applies it to still-image patches on the device)."""
    path = pathlib.Path(directory) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{directory} is not a Hugging Face checkpoint directory (no config.json)")
    config = from_hf_dict(json.loads(path.read_text()))
    preprocessor = pathlib.Path(directory) / "preprocessor_config.json"
    if preprocessor.exists():
        pixels = json.loads(preprocessor.read_text())
        normalisation = {k: tuple(float(x) for x in pixels[k]) for k in ("image_mean", "image_std") if k in pixels}
        config = dataclasses.replace(config, vision=dataclasses.replace(config.vision, **normalisation))
    return config


def abstract_model(config: ModelConfig, **model_kwargs) -> Qwen3VL:
    """The model's structure with ShapeDtypeStructs instead of arrays (allocates nothing)."""
    return nnx.eval_shape(lambda: Qwen3VL(config, rngs=nnx.Rngs(0), **model_kwargs))


def load_pretrained(path, *, dtype, compute_dtype, residual_dtype, remat: str, attention: str, mesh=None,
                    rules=None) -> Qwen3VL:
    """A Qwen3VL with a local Hugging Face checkpoint's weights.

    dtype: parameter storage dtype; compute_dtype: matmul dtype; remat, attention and
    residual_dtype as in Qwen3VL (config.model's keys: runtime/build.py passes them).
    mesh + rules (asyncwebrl.parallel): each parameter is built shard by shard on its
    NamedSharding; without a mesh everything goes to the default device."""
    from asyncwebrl.parallel import param_shardings  # the model package stays importable without a mesh

    config = read_config(path)
    model = abstract_model(config, dtype=compute_dtype, param_dtype=dtype, remat=remat, attention=attention,
                           residual_dtype=residual_dtype)
    graphdef, state = nnx.split(model)
    if mesh is not None:
        shardings = nnx.to_flat_state(param_shardings(state, mesh, rules))
        shardings = {path_: s for path_, s in shardings}
    tensors = checkpoint_tensors(path)
    variables = dict(nnx.to_flat_state(state))
    expected = tensor_map(config)
    missing = [t.hf_name for t in expected if t.hf_name not in tensors]
    if missing:
        raise KeyError(f"{path}: checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
    for parameter, parts in parameters(expected).items():
        variable = variables[parameter]
        shape, target = variable.shape, jnp.dtype(dtype)
        views = [t.to_ours(tensors[t.hf_name], t.layer_shape(shape)) for t in parts]
        view = views[0] if parts[0].layer is None else StackedView(views)
        read = lambda index, v=view: np.asarray(v[index]).astype(target)  # noqa: E731
        if mesh is None:   # the whole parameter, onto the default device
            array = jnp.asarray(read(tuple(slice(None) for _ in shape)))
        else:              # each device's slice only, read from the memory maps
            array = jax.make_array_from_callback(shape, shardings[parameter], read)
        variable.set_value(array)
    unused = set(tensors) - {t.hf_name for t in expected}
    if config.tie_word_embeddings:
        unused.discard("lm_head.weight")  # some exports keep the tied copy
    if unused:
        raise KeyError(f"{path}: checkpoint has tensors this model does not use, e.g. {sorted(unused)[:3]}")
    return nnx.merge(graphdef, state)


def parameters(tensors: list[Tensor]) -> dict[tuple, list[Tensor]]:
    """Our parameter paths, each with its tensors (one, or a stacked one's layers in order)."""
    grouped: dict[tuple, list[Tensor]] = {}
    for t in tensors:
        grouped.setdefault(t.path, []).append(t)
    for path_, parts in grouped.items():
        if parts[0].layer is not None and [t.layer for t in parts] != list(range(len(parts))):
            raise ValueError(f"{path_}: layers {[t.layer for t in parts]} are not 0, 1, ... in order")
    return grouped


class StackedView:
    """A stacked parameter [layers, ...] over its layers' arrays (memory-map views), read
    only where indexed: a device's slice reads that slice of each of its layers."""

    def __init__(self, layers: list[np.ndarray]):
        self.layers = layers

    def __getitem__(self, index: tuple) -> np.ndarray:
        layers, rest = index[0], index[1:]
        return np.stack([np.asarray(layer[rest]) for layer in self.layers[layers]])


def save_pretrained(model: Qwen3VL, path, dtype=None) -> None:
    """Write config.json and model.safetensors (parameters in `dtype`, default their own)."""
    directory = pathlib.Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    variables = dict(nnx.to_flat_state(nnx.state(model)))
    tensors = tensor_map(config)
    first = variables[tensors[0].path][...]
    out_dtype = np.dtype(dtype or first.dtype)
    shapes = {t.hf_name: (t.hf_shape(t.layer_shape(variables[t.path].shape), config), out_dtype) for t in tensors}
    by_name = {t.hf_name: t for t in tensors}

    def produce(name: str) -> np.ndarray:
        t = by_name[name]
        value = variables[t.path][...]
        if t.layer is not None:
            value = value[t.layer]   # sliced where it lies: only this layer comes to the host
        return t.to_hf(np.asarray(jax.device_get(value)), config)

    write_safetensors(directory / "model.safetensors", shapes, produce)
    hf_config = to_hf_dict(config, dtype={"bfloat16": "bfloat16", "float16": "float16"}.get(out_dtype.name, "float32"))
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
