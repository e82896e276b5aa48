"""The Qwen3-VL vision tower: patch embedding, learned + 2-D rotary positions, ViT blocks,
the 2x2 patch merger, and the DeepStack mergers whose outputs feed early text layers.

Images are batched as [I, P, ...] (each padded to P patches); attention stays inside an
image, which is what transformers' per-image `cu_seqlens` does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from asyncwebrl.model.config import VisionConfig
from asyncwebrl.model.inputs import VisionInputs, still_patch_pixels
from asyncwebrl.model.layers import (Compute, Einsum, LayerNorm, gelu_exact, gelu_tanh, inverse_frequencies, rotate,
                                     scan_layers, segment_attention, stack_layers)


class VisionBlock(nnx.Module):
    def __init__(self, cfg: VisionConfig, compute: Compute, rngs: nnx.Rngs):
        d, n, h, f = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size
        self.attention = compute.attention
        self.norm1 = LayerNorm(d, "vision_embed", compute=compute)
        self.qkv = Einsum("ipd,dcnh->ipcnh", (d, 3, n, h), ("vision_embed", None, "vision_heads", "head_dim"),
                          bias=True, compute=compute, rngs=rngs)
        self.proj = Einsum("ipnh,nhd->ipd", (n, h, d), ("vision_heads", "head_dim", "vision_embed"),
                           bias=True, compute=compute, rngs=rngs)
        self.norm2 = LayerNorm(d, "vision_embed", compute=compute)
        self.fc1 = Einsum("ipd,df->ipf", (d, f), ("vision_embed", "vision_mlp"), bias=True, compute=compute,
                          rngs=rngs)
        self.fc2 = Einsum("ipf,fd->ipd", (f, d), ("vision_mlp", "vision_embed"), bias=True, compute=compute,
                          rngs=rngs)

    def __call__(self, x, angles, valid):
        """x: [I, P, D] (the residual stream, kept in its dtype as the text layers keep theirs);
        angles: [I, P, head_dim/2]; valid: [I, P] int32 (1 = a real patch)."""
        qkv = self.qkv(self.norm1(x))
        q, k, v = rotate(qkv[:, :, 0], angles), rotate(qkv[:, :, 1], angles), qkv[:, :, 2]
        x = x + self.proj(segment_attention(q, k, v, valid, causal=False, implementation=self.attention)).astype(x.dtype)
        return x + self.fc2(gelu_tanh(self.fc1(self.norm2(x)))).astype(x.dtype)


class PatchMerger(nnx.Module):
    """Concatenate each 2x2 block of patches and map it to the text width.

    The final merger normalises each patch before concatenating; the DeepStack mergers
    normalise the concatenated block ("post-shuffle")."""

    def __init__(self, cfg: VisionConfig, *, postshuffle_norm: bool, compute: Compute, rngs: nnx.Rngs):
        d, unit = cfg.hidden_size, cfg.merge_unit
        self.unit = unit
        self.postshuffle_norm = postshuffle_norm
        self.norm = LayerNorm(d * unit if postshuffle_norm else d, "vision_merged" if postshuffle_norm else "vision_embed",
                              compute=compute)
        self.fc1 = Einsum("imc,cf->imf", (d * unit, d * unit), ("vision_merged", "vision_mlp"), bias=True,
                          compute=compute, rngs=rngs)
        self.fc2 = Einsum("imf,fe->ime", (d * unit, cfg.out_hidden_size), ("vision_mlp", "embed"), bias=True,
                          compute=compute, rngs=rngs)

    def __call__(self, x):
        """x: [I, P, D] -> [I, P / unit, out_hidden]."""
        images, patches, d = x.shape
        if not self.postshuffle_norm:
            x = self.norm(x)
        x = x.reshape(images, patches // self.unit, d * self.unit)
        if self.postshuffle_norm:
            x = self.norm(x)
        return self.fc2(gelu_exact(self.fc1(x)))


class VisionTower(nnx.Module):
    def __init__(self, cfg: VisionConfig, compute: Compute, rngs: nnx.Rngs, remat_policy=None):
        self.cfg = cfg
        self.remat_policy = remat_policy
        d = cfg.hidden_size
        self.patch_embed = Einsum("ipc,cd->ipd", (cfg.patch_dim, d), ("patch", "vision_embed"), bias=True,
                                  compute=compute, rngs=rngs)
        table = jnp.zeros((cfg.num_position_embeddings, d), jnp.float32)
        self.pos_embed = nnx.Param(table.astype(compute.param_dtype), axes=(None, "vision_embed"))
        # every block's parameters stacked along a leading "layers" axis, run by one scan
        self.blocks = stack_layers([VisionBlock(cfg, compute, rngs) for _ in range(cfg.depth)])
        self.merger = PatchMerger(cfg, postshuffle_norm=False, compute=compute, rngs=rngs)
        self.deepstack_mergers = nnx.List([PatchMerger(cfg, postshuffle_norm=True, compute=compute, rngs=rngs)
                                           for _ in cfg.deepstack_layers])
        self.dtype = compute.dtype
        self.residual_dtype = compute.residual_dtype

    def rotary_angles(self, rope_hw):
        """[I, P, 2] patch (row, col) -> [I, P, head_dim/2]: row angles then column angles."""
        inv = jnp.asarray(inverse_frequencies(self.cfg.head_dim // 2, self.cfg.rope_theta))
        rows = rope_hw[..., 0:1].astype(jnp.float32) * inv
        cols = rope_hw[..., 1:2].astype(jnp.float32) * inv
        return jnp.concatenate([rows, cols], axis=-1)

    def __call__(self, vision: VisionInputs):
        """-> (tokens [I, P/4, D_text], [one [I, P/4, D_text] per DeepStack layer])."""
        patches = vision.patches
        if patches.dtype == jnp.uint8:   # still patches from our Processor: normalised here, on the device
            patches = still_patch_pixels(patches, self.cfg)
        x = self.patch_embed(patches).astype(self.residual_dtype)
        table = self.pos_embed[...][vision.interp_index].astype(jnp.float32)      # [I, P, 4, D]
        x = x + jnp.einsum("ipkd,ipk->ipd", table, vision.interp_weight).astype(x.dtype)
        angles = self.rotary_angles(vision.rope_hw)
        valid = vision.patch_valid.astype(jnp.int32)
        taps = jnp.zeros((len(self.cfg.deepstack_layers), *x.shape), x.dtype)

        def step(block, carry, index):
            x, taps = carry
            x = block(x, angles, valid)
            return x, record_tap(taps, x, index, self.cfg.deepstack_layers)

        x, taps = scan_layers(self.blocks, step, (x, taps), jnp.arange(self.cfg.depth), remat_policy=self.remat_policy)
        return self.merger(x), [merger(tap) for merger, tap in zip(self.deepstack_mergers, taps)]


def record_tap(taps, x, block, tapped: tuple[int, ...]):
    """taps [k, I, P, D] with x written at slot j if `block` is tapped[j] (else unchanged).

    Why the block outputs the DeepStack mergers read travel in the scan's carry: the taps
    lie inside the tower (blocks 8, 16, 24 of 27 in 8B), so the alternatives were scan
    outputs (every block's [I, P, D], kept until the mergers ran) or one scan per stretch
    between taps (XLA copies each stretch's slice of the stacked weights, and compiles a
    body per stretch). Here one slot moves per block: slot j is read and written back
    whole (the nearest tap at or after the block), and since a tap's value enters only
    linearly, the backward pass keeps no copy of the taps per block."""
    if not tapped:
        return taps
    order = jnp.asarray(np.asarray(tapped, np.int32))
    slot = jnp.minimum(jnp.searchsorted(order, block), len(tapped) - 1)
    current = jax.lax.dynamic_index_in_dim(taps, slot, keepdims=False)
    return jax.lax.dynamic_update_index_in_dim(taps, jnp.where(order[slot] == block, x, current), slot, 0)
