"""Qwen3-VL: vision tower + Qwen3 text decoder with DeepStack, in Flax NNX.

Two ways in:
- `model(input_ids=..., attention_mask=..., pixel_values=..., image_grid_thw=...,
  mm_token_type_ids=...)` takes transformers' keyword inputs and returns logits
  [batch, length, vocab] (host-side preparation, then the forward).
- `model.forward(inputs)` / `model.hidden_states(inputs, cache)` take prepared
  `ModelInputs` (fixed shapes, jit-friendly): the learner and the sampler use these.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from asyncwebrl.model.config import ModelConfig
from asyncwebrl.model.inputs import ModelInputs, VisionFeatures, VisionInputs, from_hf_kwargs
from asyncwebrl.model.layers import (ATTENTION_IMPLEMENTATIONS, INIT_STD, Compute, Einsum, RMSNorm, scan_layers,
                                     stack_layers)
from asyncwebrl.model.text import DecoderLayer, KVCache, LayerCache, mrope_angles
from asyncwebrl.model.vision import VisionTower

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    # keep every projection's output (no recomputed matmuls; the most memory)
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # keep only the SwiGLU gate and up projections: 2/3 of the MLP's matmuls (the bulk of a
    # layer's FLOPs) are not recomputed, for 2 x intermediate_size values per token and layer
    "mlp": jax.checkpoint_policies.save_only_these_names("mlp_gate", "mlp_up"),
    # half of "mlp": the up projection kept, the gate recomputed (1/4 of a layer's matmuls
    # not recomputed, for intermediate_size values per token and layer)
    "mlp_up": jax.checkpoint_policies.save_only_these_names("mlp_up"),
    # "mlp" with the two projections copied to the host's pinned memory in the forward and
    # back in the backward: the device keeps what "full" keeps, and the copies may overlap
    # the next layer's matmuls (they cost time where the host link is slower than the compute)
    "mlp_offload": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["mlp_gate", "mlp_up"],
        offload_src="device", offload_dst="pinned_host"),
    # the up projection kept on the device, the gate offloaded: "mlp"'s recomputation at
    # "mlp_up"'s device memory
    "mlp_up_offload_gate": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=["mlp_up"], names_which_can_be_offloaded=["mlp_gate"],
        offload_src="device", offload_dst="pinned_host"),
}


class Qwen3VL(nnx.Module):
    def __init__(self, config: ModelConfig, *, dtype, param_dtype, residual_dtype, remat: str, attention: str,
                 rngs: nnx.Rngs):
        """dtype: the matmuls'; param_dtype: storage; residual_dtype: the residual streams
        between layers (asyncwebrl/model/layers.py says why float32); remat: a key of
        REMAT_POLICIES; attention: "xla" or "pallas" (config.model's keys)."""
        if remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {sorted(REMAT_POLICIES)}, got {remat!r}")
        if attention not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLEMENTATIONS}, got {attention!r}")
        self.config = config
        self.remat = remat
        self.attention = attention
        compute = Compute(dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype),
                          residual_dtype=jnp.dtype(residual_dtype), attention=attention)
        self.dtype = compute.dtype
        self.residual_dtype = compute.residual_dtype
        text = config.text
        table = jax.random.normal(rngs.params(), (text.vocab_size, text.hidden_size), jnp.float32) * INIT_STD
        self.embed = nnx.Param(table.astype(compute.param_dtype), axes=("vocab", "embed"))
        self.visual = VisionTower(config.vision, compute, rngs, remat_policy=REMAT_POLICIES[remat])
        # every decoder layer's parameters stacked along a leading "layers" axis, run by one scan
        self.layers = stack_layers([DecoderLayer(text, compute, rngs) for _ in range(text.num_layers)])
        self.norm = RMSNorm(text.hidden_size, "embed", eps=text.rms_norm_eps, compute=compute)
        self.lm_head = nnx.data(None)  # tied: the logits reuse the embedding table
        if not config.tie_word_embeddings:
            self.lm_head = Einsum("btd,dv->btv", (text.hidden_size, text.vocab_size), ("embed", "vocab"),
                                  compute=compute, rngs=rngs)

    # ------------------------------------------------------------ entry points

    def __call__(self, input_ids=None, attention_mask=None, pixel_values=None, image_grid_thw=None,
                 mm_token_type_ids=None, **unsupported):
        """Hugging Face keyword inputs -> logits [batch, length, vocab] (float32)."""
        if unsupported:
            raise TypeError(f"unsupported inputs: {sorted(unsupported)}")
        if input_ids is None:
            raise ValueError("input_ids is required")
        inputs = from_hf_kwargs(self.config, input_ids, attention_mask, pixel_values, image_grid_thw,
                                mm_token_type_ids)
        return self.forward(inputs)

    def forward(self, inputs: ModelInputs):
        hidden, _ = self.hidden_states(inputs)
        return self.logits(hidden)

    def init_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache.empty(self.config.text, batch, capacity, self.dtype)

    # ------------------------------------------------------------ the network

    def hidden_states(self, inputs: ModelInputs, cache: KVCache | None = None,
                      features: VisionFeatures | None = None, weights_in_place: bool | None = None):
        """Final-norm hidden states [B, L, D] and the updated cache (None without one).

        Attention is causal inside each segment (segment_ids, 0 = padding). With a cache,
        the valid (non-zero segment) tokens of each row must be a prefix of the row; they
        are appended after the row's cached tokens. `features` (from encode_images, e.g.
        a sampler's vision cache) replace running the vision tower on inputs.vision.

        weights_in_place: the decoder's linear maps read each layer's weights where they lie
        in the stacked parameters (a Pallas kernel, layer_matmul.py) instead of XLA's copy of
        the layer's slice. None: for a decode step on the GPU (one new token per row, Pallas
        attention), where that copy was half the step."""
        if weights_in_place is None:
            weights_in_place = self._decodes_in_place(inputs, cache)
        x, deepstack = self.embed_inputs(inputs, features)
        angles = mrope_angles(inputs.positions, self.config.text)
        if cache is None:
            mask, starts, keys, values = inputs.segment_ids, None, None, None
        else:
            mask, starts = cache_attention_mask(inputs.segment_ids, cache), cache.lengths
            keys, values = cache.keys, cache.values

        def step(layer, carry, index):
            x, keys, values = carry
            if keys is None:
                x, _ = layer(x, angles, mask)
            else:   # the cache rides in the carry: each layer updates its own slice in place
                x, written = layer(x, angles, mask, LayerCache(keys=keys, values=values, layer=index, starts=starts))
                keys, values = written.keys, written.values
            return add_deepstack(x, deepstack, index), keys, values

        x, keys, values = scan_layers(self.layers, step, (x, keys, values), jnp.arange(self.config.text.num_layers),
                                      remat_policy=REMAT_POLICIES[self.remat], weights_in_place=weights_in_place)
        if cache is not None:
            cache = KVCache(keys=keys, values=values,
                            lengths=cache.lengths + (inputs.segment_ids != 0).sum(-1).astype(jnp.int32))
        return self.norm(x), cache

    def _decodes_in_place(self, inputs: ModelInputs, cache: KVCache | None) -> bool:
        """A decode step (one new token per row, with a cache) with the Pallas kernels, for a
        decoder whose maps the kernel can tile: on a mesh, every device's share of them."""
        if cache is None or inputs.tokens.shape[1] != 1 or self.attention != "pallas":
            return False
        from asyncwebrl.model.kernel_mesh import splits_tile
        from asyncwebrl.model.layer_matmul import tileable

        text = self.config.text
        return tileable(text.hidden_size) and splits_tile(text.intermediate_size, text.num_heads * text.head_dim,
                                                          text.num_kv_heads * text.head_dim)

    def encode_images(self, vision: VisionInputs) -> VisionFeatures:
        """The vision tower's output, flattened: image i's token j sits at i * P/4 + j."""
        merged, deepstack = self.visual(vision)
        flat = lambda f: f.reshape(-1, f.shape[-1])  # noqa: E731
        return VisionFeatures(tokens=flat(merged), deepstack=tuple(flat(f) for f in deepstack))

    def embed_inputs(self, inputs: ModelInputs, features: VisionFeatures | None = None):
        """Token embeddings with vision tokens placed at the image placeholders: the residual
        stream's start, in the residual dtype; and the DeepStack features as full-length
        additions [k, B, L, D] in the compute dtype (zero off the images; None without images)."""
        x = self.embed[...][inputs.tokens].astype(self.residual_dtype)
        if features is None:
            if inputs.vision is None:
                return x, None
            features = self.encode_images(inputs.vision)
        is_vision = (inputs.vision_source >= 0)[..., None]
        source = jnp.maximum(inputs.vision_source, 0)

        x = jnp.where(is_vision, features.tokens[source].astype(x.dtype), x)   # [N, D] -> [B, L, D] at the placeholders
        if not features.deepstack:
            return x, None
        deepstack = jnp.stack(features.deepstack)[:, source].astype(self.dtype)  # [k, N, D] -> [k, B, L, D]
        return x, jnp.where(is_vision[None], deepstack, 0)

    def logits(self, hidden):
        """[B, L, D] -> [B, L, vocab] in float32, as one 2-D matmul (why: layers.Einsum)."""
        rows = hidden.reshape(-1, hidden.shape[-1])
        if self.lm_head is None:
            table = self.embed[...].astype(self.dtype)   # [vocab, D]: contract both on D
            logits = jax.lax.dot_general(rows, table, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        else:
            logits = jnp.dot(rows, self.lm_head.kernel[...].astype(self.dtype), preferred_element_type=jnp.float32)
        return logits.reshape(*hidden.shape[:-1], -1)


def add_deepstack(x, deepstack, layer):
    """x after decoder layer `layer`, plus that layer's DeepStack feature: the first k
    layers have one (deepstack [k, B, L, D]), the others none.

    Why an index into the k features rather than other ways of feeding them to the scan:
    scan xs would need all [num_layers, B, L, D] (zeros past k); two scans (the first k
    layers, then the rest) would slice the stacked weights, and XLA copies each slice
    before its loop (the whole decoder's weights, once more, in every forward) and compiles
    two bodies. Read by index, the k features are what the unrolled decoder held, and the
    gradient goes back as an in-place accumulation into one slice per layer (XLA turns
    add(g, dynamic-update-slice(0, d, i)) into an update of g's slice i)."""
    if deepstack is None:
        return x
    depth = deepstack.shape[0]
    feature = jax.lax.dynamic_index_in_dim(deepstack, jnp.minimum(layer, depth - 1), keepdims=False)
    return x + jnp.where(layer < depth, feature, 0).astype(x.dtype)


def cache_attention_mask(segment_ids, cache: KVCache):
    """[B, T] new tokens (valid ones first) -> [B, T, S] over the cache after they are written."""
    starts = cache.lengths[:, None, None]
    new_length = starts + (segment_ids != 0).sum(-1)[:, None, None]
    slot = jnp.arange(cache.capacity)[None, None, :]
    query = starts + jnp.arange(segment_ids.shape[1])[None, :, None]
    return (slot < new_length) & (slot <= query)
