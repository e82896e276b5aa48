"""The Qwen3 text decoder: RMSNorm, grouped-query attention with q/k norms, SwiGLU, and
interleaved multimodal rotary positions (M-RoPE); an optional KV cache for decoding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.ad_checkpoint import checkpoint_name

from asyncwebrl.model.config import TextConfig
from asyncwebrl.model.layers import MASKED, Compute, Einsum, RMSNorm, inverse_frequencies, rotate, segment_attention


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
    """Keys and values of every layer for B rows of up to S tokens each.

    Layout [B, K, S, H] (heads before positions): a decode step's attention is then a
    plain batched matmul over (B, K) that reads the cache where it lies; [B, S, K, H]
    made XLA transpose the whole cache in every layer of every step."""
    keys: list                 # per layer [B, K, S, H]
    values: list               # per layer [B, K, S, H]
    lengths: jnp.ndarray       # [B] int32: tokens already written per row

    @classmethod
    def empty(cls, cfg: TextConfig, batch: int, capacity: int, dtype=jnp.bfloat16) -> "KVCache":
        shape = (batch, cfg.num_kv_heads, capacity, cfg.head_dim)
        return cls(keys=[jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)],
                   values=[jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)],
                   lengths=jnp.zeros((batch,), jnp.int32))

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]


def write_rows(buffer, new, starts):
    """buffer [B, K, S, H] with new [B, T, K, H] written at per-row positions starts [B]."""
    new = new.swapaxes(1, 2).astype(buffer.dtype)  # [B, K, T, H]: only the new tokens move
    return jax.vmap(lambda buf, x, s: jax.lax.dynamic_update_slice_in_dim(buf, x, s, 1))(buffer, new, starts)


def cached_attention(q, keys, values, allowed):
    """q: [B, T, N, H]; keys, values: [B, K, S, H] (cache layout); allowed: [B, T, S]."""
    b, t, n, h = q.shape
    kv_heads = keys.shape[1]
    q = q.reshape(b, t, kv_heads, n // kv_heads, h)
    scores = jnp.einsum("btkgh,bksh->bkgts", q, keys.astype(q.dtype), preferred_element_type=jnp.float32) * (h**-0.5)
    scores = jnp.where(allowed[:, None, None, :, :], scores, MASKED)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum("bkgts,bksh->btkgh", weights, values.astype(q.dtype)).reshape(b, t, n, h)


def decode_attention(q, keys, values, visible):
    """One new token per row, Pallas GPU kernel: q [B, 1, N, H]; keys, values [B, K, S, H];
    row b sees its first visible[b] positions, and blocks past them are never read, so a
    step costs the tokens in use rather than the capacity (cached_attention reads all S).

    The kernel splits S into k_splits parts of whole 128-position blocks; capacities that
    are a multiple of 512 keep at least four parts (the engine allocates such)."""
    from jax.experimental.pallas.ops.gpu.decode_attention import gqa  # GPU kernel; imported only when asked for

    b, _, n, h = q.shape
    capacity = keys.shape[2]
    block = 128 if capacity % 128 == 0 else capacity
    splits = max(d for d in range(1, 17) if (capacity // block) % d == 0)
    # gqa takes [B, S, K, H] and transposes to [B, K, S, H] inside: the two swaps cancel
    out = gqa(q[:, 0], keys.swapaxes(1, 2).astype(q.dtype), values.swapaxes(1, 2).astype(q.dtype),
              kv_seq_len=visible.astype(jnp.int32), sm_scale=h**-0.5, block_k=block, k_splits=splits,
              interpret=jax.default_backend() == "cpu")
    return out.reshape(b, 1, n, h)


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

    def __call__(self, x, angles, mask, cache_kv=None, cache_starts=None):
        """x: [B, T, D]; angles: [B, T, head_dim/2].

        Without a cache, mask is the segment ids [B, T] (causal attention inside a segment).
        With one, this step's keys and values are written into the cache rows at
        `cache_starts` first, and mask is [B, T, S]: which cache slots each token sees."""
        q = rotate(self.q_norm(self.q_proj(x)), angles)
        k = rotate(self.k_norm(self.k_proj(x)), angles)
        v = self.v_proj(x)
        if cache_kv is None:
            return self.o_proj(segment_attention(q, k, v, mask, causal=True, implementation=self.implementation)), None
        k = write_rows(cache_kv[0], k, cache_starts)
        v = write_rows(cache_kv[1], v, cache_starts)
        if self.implementation == "pallas" and q.shape[1] == 1:   # a decode step: read each row's own length
            return self.o_proj(decode_attention(q, k, v, jnp.minimum(cache_starts + 1, k.shape[2]))), (k, v)
        return self.o_proj(cached_attention(q, k, v, mask)), (k, v)


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: TextConfig, compute: Compute, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.input_norm = RMSNorm(d, "embed", eps=cfg.rms_norm_eps, compute=compute)
        self.attn = Attention(cfg, compute, rngs)
        self.post_attention_norm = RMSNorm(d, "embed", eps=cfg.rms_norm_eps, compute=compute)
        self.gate_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), compute=compute, rngs=rngs)
        self.up_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), compute=compute, rngs=rngs)
        self.down_proj = Einsum("btf,fd->btd", (f, d), ("mlp", "embed"), compute=compute, rngs=rngs)

    def __call__(self, x, angles, mask, cache_kv=None, cache_starts=None):
        attended, cache_kv = self.attn(self.input_norm(x), angles, mask, cache_kv, cache_starts)
        x = x + attended
        h = self.post_attention_norm(x)
        gate = checkpoint_name(self.gate_proj(h), "mlp_gate")  # names for the "mlp" remat policy
        up = checkpoint_name(self.up_proj(h), "mlp_up")
        return x + self.down_proj(jax.nn.silu(gate) * up), cache_kv
