"""The Qwen3 text decoder: RMSNorm, grouped-query attention with q/k norms, SwiGLU, and
interleaved multimodal rotary positions (M-RoPE); an optional KV cache for decoding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.ad_checkpoint import checkpoint_name

from asyncwebrl.model.config import TextConfig
from asyncwebrl.model.layers import (MASKED, Compute, Einsum, RMSNorm, heads_first_attention, inverse_frequencies, rotate,
                                     segment_attention)


def mrope_angles(positions, cfg: TextConfig):
    """[3, B, L] (t, h, w) positions -> [B, L, head_dim/2] rotary angles.

    Frequency j takes its position from h when j % 3 == 1 and j < 3 * section_h, from w
    when j % 3 == 2 and j < 3 * section_w, and from t otherwise (the interleaved layout)."""
    inv = jnp.asarray(inverse_frequencies(cfg.head_dim, cfg.rope_theta))
    j = jnp.arange(cfg.head_dim // 2)
    _, sec_h, sec_w = cfg.mrope_section
    axis = jnp.where((j % 3 == 1) & (j < 3 * sec_h), 1, jnp.where((j % 3 == 2) & (j < 3 * sec_w), 2, 0))
    chosen = jnp.take(positions, axis, axis=0)                  # [head_dim/2, B, L]
    return jnp.moveaxis(chosen, 0, -1).astype(jnp.float32) * inv


@struct.dataclass
class KVCache:
    """Keys and values of every layer for B rows of up to S tokens each, stacked along a
    leading layers axis as the layers' parameters are: the scanned decoder carries the two
    arrays whole and each layer writes and reads its own slice, in place.

    Layout [L, B, K, S, H] (heads before positions): a decode step's attention is then a
    plain batched matmul over (B, K) that reads the cache where it lies; [B, S, K, H]
    made XLA transpose the whole cache in every layer of every step."""
    keys: jnp.ndarray          # [L, B, K, S, H]
    values: jnp.ndarray        # [L, B, K, S, H]
    lengths: jnp.ndarray       # [B] int32: tokens already written per row

    @classmethod
    def empty(cls, cfg: TextConfig, batch: int, capacity: int, dtype=jnp.bfloat16) -> "KVCache":
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, capacity, cfg.head_dim)
        return cls(keys=jnp.zeros(shape, dtype), values=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]


@struct.dataclass
class LayerCache:
    """One layer's place in the stacked cache, inside the scan over layers: the whole
    [L, B, K, S, H] arrays, the layer's index and where each row's new tokens go."""
    keys: jnp.ndarray          # [L, B, K, S, H]
    values: jnp.ndarray        # [L, B, K, S, H]
    layer: jnp.ndarray         # int32 scalar
    starts: jnp.ndarray        # [B] int32: tokens already written per row

    def write(self, k, v) -> "LayerCache":
        """The new tokens' keys and values, k and v [B, T, K, H], written into this layer's
        slice at each row's start (a scatter of B x T vectors: the rest stays in place).
        Positions past the capacity would be dropped: the engine never writes there."""
        rows = jnp.arange(k.shape[0])[:, None]
        positions = self.starts[:, None] + jnp.arange(k.shape[1])[None, :]
        # the advanced indices (layer, rows, positions) broadcast to [B, T] and lead the
        # indexed shape, followed by the sliced K and H: [B, T, K, H], k's own layout;
        # they are sorted and distinct, which XLA may use to write them in parallel
        def put(buffer, new):
            return buffer.at[self.layer, rows, :, positions].set(new.astype(buffer.dtype), indices_are_sorted=True,
                                                                  unique_indices=True)
        return self.replace(keys=put(self.keys, k), values=put(self.values, v))

    def layer_keys(self):
        return jax.lax.dynamic_index_in_dim(self.keys, self.layer, keepdims=False)

    def layer_values(self):
        return jax.lax.dynamic_index_in_dim(self.values, self.layer, keepdims=False)


def cached_attention(q, keys, values, allowed):
    """q: [B, T, N, H]; keys, values: [B, K, S, H] (one layer of the cache); allowed: [B, T, S]."""
    b, t, n, h = q.shape
    if t == 1:
        grouped = q.reshape(b, keys.shape[1], n // keys.shape[1], h)
        return _one_token_attention(grouped, keys, values, allowed[:, 0]).reshape(b, t, n, h)
    return heads_first_attention(q, keys.astype(q.dtype), values.astype(q.dtype), allowed)


def _one_token_attention(q, keys, values, allowed):
    """A decode step's attention, one new token per row: q [B, K, G, H] (grouped query heads),
    keys and values [B, K, S, H], allowed [B, S]; returns [B, K, G, H] in q's dtype.
    Both products are written as multiply-and-sum in float32 rather than as einsums: XLA's CPU
    backend made the weights x values einsum one single-threaded dot that took half of the
    embedded model's decode step, and fuses this form over both cores, 2.0-2.4x faster a step
    (BENCHMARKS.md, "The sampler's decode step"). On the GPU the Pallas kernel decodes instead."""
    scores = jnp.sum(q.astype(jnp.float32)[:, :, :, None, :] * keys.astype(jnp.float32)[:, :, None], axis=-1)
    scores = jnp.where(allowed[:, None, None, :], scores * (q.shape[-1] ** -0.5), MASKED)   # [B, K, G, S]
    weights = jax.nn.softmax(scores, axis=-1)
    attended = jnp.sum(weights[..., None] * values.astype(jnp.float32)[:, :, None], axis=3)
    return attended.astype(q.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: TextConfig, compute: Compute, rngs: nnx.Rngs):
        d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.implementation = compute.attention
        self.q_proj = Einsum("btd,dnh->btnh", (d, n, h), ("embed", "heads", "head_dim"), compute=compute, rngs=rngs)
        self.k_proj = Einsum("btd,dkh->btkh", (d, k, h), ("embed", "kv_heads", "head_dim"), compute=compute,
                             rngs=rngs)
        self.v_proj = Einsum("btd,dkh->btkh", (d, k, h), ("embed", "kv_heads", "head_dim"), compute=compute,
                             rngs=rngs)
        self.o_proj = Einsum("btnh,nhd->btd", (n, h, d), ("heads", "head_dim", "embed"), compute=compute,
                             rngs=rngs)
        self.q_norm = RMSNorm(h, "head_dim", eps=cfg.rms_norm_eps, compute=compute)
        self.k_norm = RMSNorm(h, "head_dim", eps=cfg.rms_norm_eps, compute=compute)

    def __call__(self, x, angles, mask, cache: LayerCache | None = None):
        """x: [B, T, D]; angles: [B, T, head_dim/2].

        Without a cache, mask is the segment ids [B, T] (causal attention inside a segment).
        With one, this step's keys and values are written into the layer's cache rows at
        `cache.starts` first, and mask is [B, T, S]: which cache slots each token sees."""
        q = rotate(self.q_norm(self.q_proj(x)), angles)
        k = rotate(self.k_norm(self.k_proj(x)), angles)
        v = self.v_proj(x)
        if cache is None:
            return self.o_proj(segment_attention(q, k, v, mask, causal=True, implementation=self.implementation)), None
        cache = cache.write(k, v)
        if self.implementation == "pallas" and q.shape[1] == 1:   # a decode step: read each row's own length
            # the GPU kernel (decode.py), on a mesh each device on its slots and kv heads
            # (kernel_mesh.py); imported only when asked for
            from asyncwebrl.model.kernel_mesh import decode_attention_on_mesh

            visible = jnp.minimum(cache.starts + 1, cache.keys.shape[3])
            attended = decode_attention_on_mesh(q, cache.keys, cache.values, cache.layer, visible)
            return self.o_proj(attended), cache
        return self.o_proj(cached_attention(q, cache.layer_keys(), cache.layer_values(), mask)), cache


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: TextConfig, compute: Compute, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.input_norm = RMSNorm(d, "embed", eps=cfg.rms_norm_eps, compute=compute)
        self.attn = Attention(cfg, compute, rngs)
        self.post_attention_norm = RMSNorm(d, "embed", eps=cfg.rms_norm_eps, compute=compute)
        self.gate_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), compute=compute, rngs=rngs)
        self.up_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), compute=compute, rngs=rngs)
        self.down_proj = Einsum("btf,fd->btd", (f, d), ("mlp", "embed"), compute=compute, rngs=rngs)

    def __call__(self, x, angles, mask, cache: LayerCache | None = None):
        """x: the residual stream [B, T, D] in the model's residual dtype (Qwen3VL.embed_inputs
        sets it), returned in that dtype: the two sublayers' outputs (compute dtype) are added
        to it there, so a float32 stream does not round each sum to bf16."""
        attended, cache = self.attn(self.input_norm(x), angles, mask, cache)
        x = x + attended.astype(x.dtype)
        h = self.post_attention_norm(x)
        gate = checkpoint_name(self.gate_proj(h), "mlp_gate")  # names for the "mlp" remat policy
        up = checkpoint_name(self.up_proj(h), "mlp_up")
        return x + self.down_proj(jax.nn.silu(gate) * up).astype(x.dtype), cache
