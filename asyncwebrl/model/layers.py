"""Building blocks shared by the vision tower and the text decoder.

Every parameter carries `axes`: its logical axis names (embed, mlp, heads, kv_heads,
head_dim, vocab, ...). asyncwebrl.parallel maps them onto a mesh per role (learner:
FSDP x tensor; sampler: tensor only), so the model itself never names a device axis.

Repeated layers (the text decoder's, the vision tower's blocks) are one module whose
parameters are stacked along a leading "layers" axis (`stack_layers`), run by one
jax.lax.scan (`scan_layers`): XLA compiles one layer's body whatever the depth, as
MaxText's `scan_layers` does; an unrolled 36-layer decoder took ~2 minutes to compile.

Compute: parameters are stored in `param_dtype`; matmuls run in `dtype` (bf16 on
accelerators); norms, softmax and rotary angles run in float32, as transformers does. The
residual stream (the embedding plus every layer's output, carried from layer to layer) is
held in `residual_dtype`, float32 by default, while each layer's matmuls stay in `dtype`.
Why: in a bf16 stream every layer's sum rounds to bf16, so a layer output that differs in
its last bit between two ways of computing it (the sampler's one-token decode step, the
learner's whole-row forward: other matmul shapes, other summation orders) can flip the
rounding of the stream itself, one bf16 step of the stream's size, and 28 or 36 layers
compound it; in float32 the sums keep the layer outputs' small differences small
(benchmarks/logprob_gap.py, BENCHMARKS.md "Sampler/learner log-prob gap").
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

INIT_STD = 0.02  # transformers' initializer_range for Qwen3-VL
MASKED = -1e30   # finite, so a fully masked (padding) row gives a uniform softmax, not NaN
LAYERS = "layers"  # the logical axis of stacked layer parameters: no sharding rule names it


@dataclasses.dataclass(frozen=True)
class Compute:
    """How a model computes: config.model's compute_dtype, dtype, residual_dtype and attention (Qwen3VL passes them)."""
    dtype: jnp.dtype           # compute
    param_dtype: jnp.dtype     # storage
    residual_dtype: jnp.dtype  # the residual streams between layers (text decoder, vision tower)
    attention: str             # "xla" (reference) or "pallas" (GPU kernel: asyncwebrl/model/flash.py)


def matmul_form(spec: str) -> tuple[int, int]:
    """(free, contracted) axes of a linear map's spec 'x,kernel->y' that reads as one matmul,
    x[free..., contracted...] @ kernel[contracted..., out...] -> y[free..., out...]
    (e.g. 'btd,dnh->btnh': 2 free axes, 1 contracted); any other spec is refused."""
    inputs, out = spec.split("->")
    x_axes, kernel_axes = inputs.split(",")
    contracted = sum(axis not in out for axis in kernel_axes)
    free = len(x_axes) - contracted
    if x_axes[free:] != kernel_axes[:contracted] or out != x_axes[:free] + kernel_axes[contracted:]:
        raise ValueError(f"Einsum spec {spec!r} is not x[free..., contracted...] @ kernel[contracted..., out...]")
    return free, contracted


class Einsum(nnx.Module):
    """y = einsum(spec, x, kernel) (+ bias): a linear map with named shapes.

    `spec` names every axis, e.g. 'btd,dnh->btnh'; the kernel has `shape` and logical
    `axes`; the bias (if any) has the output's trailing kernel dimensions. It runs as one
    2-D matmul, [free axes flattened, contracted flattened] @ [contracted, out]: with two
    free axes left as they are, XLA's CPU backend wrote each weight gradient's operand as
    a strided transposed copy, which took half of the embedded learner's backward
    (BENCHMARKS.md, "Attention in the XLA path")."""

    def __init__(self, spec: str, shape, axes, *, bias: bool = False, compute: Compute, rngs: nnx.Rngs):
        self.spec = spec
        self.free, self.contracted = matmul_form(spec)
        self.dtype = compute.dtype
        init = jax.random.normal(rngs.params(), shape, jnp.float32) * INIT_STD
        self.kernel = nnx.Param(init.astype(compute.param_dtype), axes=tuple(axes))
        self.bias = nnx.data(None)  # declared as data, so a Param may take its place
        if bias:
            out_axes = spec.split("->")[1]
            kernel_axes = spec.split(",")[1].split("->")[0]
            trailing = [i for i, name in enumerate(kernel_axes) if name in out_axes]
            self.bias = nnx.Param(jnp.zeros([shape[i] for i in trailing], compute.param_dtype),
                                  axes=tuple(axes[i] for i in trailing))

    def __call__(self, x):
        stored = self.kernel.get_value()
        free_shape, out_shape = x.shape[:self.free], stored.shape[self.contracted:]
        rows = x.astype(self.dtype).reshape(math.prod(free_shape), -1)
        if isinstance(stored, LayerSlice):   # a decode step on the GPU: read the layer where it lies
            # (on a mesh each device its share of the weight, as the sampler's rules placed it)
            from asyncwebrl.model.kernel_mesh import layer_matmul_on_mesh, weight_split

            weight = stored.stacked.reshape(stored.stacked.shape[0], rows.shape[1], -1)   # [L, K, N], no copy
            axes = self.kernel.axes[1:]   # past the stacked LAYERS axis
            split = weight_split(axes[:self.contracted], axes[self.contracted:], *weight.shape[1:])
            y = layer_matmul_on_mesh(rows, weight, stored.layer, split).astype(self.dtype)
        else:
            y = jnp.dot(rows, self.kernel[...].astype(self.dtype).reshape(rows.shape[1], -1))
        y = y.reshape(*free_shape, *out_shape)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class RMSNorm(nnx.Module):
    def __init__(self, size: int, axis_name: str, *, eps: float, compute: Compute):
        self.eps = eps
        self.dtype = compute.dtype
        self.scale = nnx.Param(jnp.ones((size,), compute.param_dtype), axes=(axis_name,))

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return normed.astype(self.dtype) * self.scale[...].astype(self.dtype)


class LayerNorm(nnx.Module):
    def __init__(self, size: int, axis_name: str, *, eps: float = 1e-6, compute: Compute):
        self.eps = eps
        self.dtype = compute.dtype
        self.scale = nnx.Param(jnp.ones((size,), compute.param_dtype), axes=(axis_name,))
        self.bias = nnx.Param(jnp.zeros((size,), compute.param_dtype), axes=(axis_name,))

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        normed = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return (normed * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)).astype(self.dtype)


def stack_layers(layers: list[nnx.Module]) -> nnx.Module:
    """One module with the layers' structure whose every parameter holds theirs stacked
    along a new leading axis (logical name LAYERS, prepended to its `axes`).

    The layers are built one by one first, drawing their initial weights in the order an
    unrolled model would: a seed gives the same weights either way."""
    graphdef, first = nnx.split(layers[0])
    states = [first] + [nnx.state(layer) for layer in layers[1:]]

    def stack(*variables: nnx.Variable) -> nnx.Variable:
        leading = variables[0]
        return leading.copy(jnp.stack([v.get_value() for v in variables]), axes=(LAYERS, *leading.axes))

    stacked = jax.tree.map(stack, *states, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.merge(graphdef, stacked)


class LayerSlice:
    """One layer of a stacked parameter, not yet read: `stacked` [L, ...] and the layer's
    index (a traced int32). Read with `[...]` it is the layer's slice (which XLA copies out);
    layers.Einsum instead hands the whole stacked weight and the index to a kernel that
    reads the layer's tiles where they lie (layer_matmul.py). A parameter's value inside
    scan_layers(..., weights_in_place=True)."""

    def __init__(self, stacked, layer):
        self.stacked, self.layer = stacked, layer

    def __getitem__(self, key):
        return jax.lax.dynamic_index_in_dim(self.stacked, self.layer, keepdims=False)[key]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.stacked.shape[1:]

    @property
    def dtype(self):
        return self.stacked.dtype


def scan_layers(stacked: nnx.Module, step, carry, xs=None, *, remat_policy=None, weights_in_place: bool = False):
    """carry = step(layer, carry, x) for each layer of `stacked` (stack_layers) in order,
    with x the matching slice of `xs` (None, or arrays with a leading layers axis).

    One jax.lax.scan over the stacked parameters: the body is traced and compiled once.
    remat_policy (a jax.checkpoint policy; None = keep every activation) is applied once,
    to the body, so the backward pass saves per layer what the policy keeps and the carry;
    prevent_cse is off as jax.checkpoint advises inside a scan (the loop already keeps XLA
    from merging the recomputation into the forward).

    weights_in_place: the layer's parameters are LayerSlices of the stacked ones rather than
    the scan's slices of them, so its linear maps read the weights in place (a GPU decode
    step: XLA would copy every slice before its matmul, layer_matmul.py says why)."""
    graphdef, params = nnx.split(stacked)

    def body(carry, scanned):
        layer, x = scanned   # the layer's slice of the parameters, or (in place) its index
        if weights_in_place:
            layer = jax.tree.map(lambda p: LayerSlice(p, layer), params)
        return step(nnx.merge(graphdef, layer), carry, x), None

    if remat_policy is not None:
        body = jax.checkpoint(body, policy=remat_policy, prevent_cse=False)
    depth = jax.tree.leaves(params)[0].shape[0]
    layers = jnp.arange(depth, dtype=jnp.int32) if weights_in_place else params
    carry, _ = jax.lax.scan(body, carry, (layers, xs))
    return carry


def inverse_frequencies(rotary_dim: int, theta: float) -> np.ndarray:
    """theta^(-2i/rotary_dim) for i < rotary_dim/2: the classic RoPE frequencies."""
    return 1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))


def rotate(x, angles):
    """Apply rotary embedding in the half-split layout (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).

    x: [..., heads, head_dim]; angles: [..., head_dim / 2] (broadcast over heads). Runs in float32."""
    cos = jnp.cos(angles)[..., None, :]
    sin = jnp.sin(angles)[..., None, :]
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention(q, k, v, allowed):
    """Grouped-query dot-product attention.

    q: [B, T, N, H]; k, v: [B, S, K, H] with N a multiple of K; allowed: [B, T, S] bool.
    Returns [B, T, N, H]. Scores and softmax in float32."""
    return heads_first_attention(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), allowed)


def heads_first_attention(q, keys, values, allowed):
    """attention() with keys and values [B, K, S, H], kv heads first (the KV cache's layout).

    Both products run as plain batched matmuls over (row, kv head) on contiguous operands:
    each kv head's query heads are stacked with its queries into one [G * T, H] block. With
    the heads between T and H instead, XLA's CPU backend took 3x longer for the scores and 9x
    for weights x values (BENCHMARKS.md, "Attention in the XLA path")."""
    b, t, n, h = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    groups = n // kv_heads
    stacked = q.reshape(b, t, kv_heads, groups, h).transpose(0, 2, 3, 1, 4).reshape(b, kv_heads, groups * t, h)
    scores = jnp.einsum("bkmh,bksh->bkms", stacked, keys, preferred_element_type=jnp.float32) * (h**-0.5)
    scores = jnp.where(allowed[:, None, None], scores.reshape(b, kv_heads, groups, t, length), MASKED)
    weights = jax.nn.softmax(scores, axis=-1).astype(values.dtype).reshape(b, kv_heads, groups * t, length)
    out = jnp.einsum("bkms,bksh->bkmh", weights, values)
    return out.reshape(b, kv_heads, groups, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)


ATTENTION_IMPLEMENTATIONS = ("xla", "pallas")
XLA_BLOCKS = 8        # query blocks per row in the XLA attention path (at most) ...
XLA_MIN_BLOCK = 128   # ... of at least this many queries


def xla_query_block(length: int) -> int:
    """The XLA path's query block for a row of `length` tokens: 8 blocks, 128 tokens or more
    each. A causal block reads the keys up to its end only, so 8 blocks compute 56% of the
    square where one would compute all of it (the triangle is 50%); more blocks than 8 would
    save little and unroll more. On 2 CPU cores a 1,024-token row's attention forward took
    426 ms per layer (small preset, 8 rows) in blocks of 512 and 127 ms in blocks of 128 once
    the heads come first (BENCHMARKS.md, "Attention in the XLA path")."""
    return max(XLA_MIN_BLOCK, -(-length // XLA_BLOCKS))


def segment_attention(q, k, v, segment_ids, *, causal: bool, implementation: str = "xla"):
    """Self-attention where position t sees position s iff they share a segment id (and
    s <= t when causal). q: [B, T, N, H]; k, v: [B, T, K, H]; segment_ids: [B, T] int32.

    Padding (segment 0) attends to padding only: its outputs are finite and unused."""
    if implementation == "xla":
        # Long rows go in query blocks: a causal block reads only the keys up to its end
        # (about half the work), and no [T, T] score matrix exists at once. On CPU a
        # 4,096-token row trained ~4x slower without blocks (tiny model, 2 cores).
        length = q.shape[1]
        block = xla_query_block(length)
        outputs = []
        for start in range(0, length, block):
            end = min(start + block, length)
            keys_end = end if causal else length
            same = segment_ids[:, start:end, None] == segment_ids[:, None, :keys_end]
            if causal:
                same = same & (jnp.arange(keys_end)[None, None, :] <= jnp.arange(start, end)[None, :, None])
            outputs.append(attention(q[:, start:end], k[:, :keys_end], v[:, :keys_end], same))
        return outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=1)
    if implementation == "pallas":
        # our flash kernel (asyncwebrl/model/flash.py): it skips the tiles where no query
        # and key share a segment, not only those above the diagonal; on a mesh each device
        # runs it on its rows and heads (kernel_mesh.py); imported when asked for
        from asyncwebrl.model.kernel_mesh import flash_attention_on_mesh

        return flash_attention_on_mesh(q, k, v, segment_ids, causal=causal)
    raise ValueError(f"attention implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got {implementation!r}")


def gelu_tanh(x):
    return jax.nn.gelu(x, approximate=True)


def gelu_exact(x):
    return jax.nn.gelu(x, approximate=False)
