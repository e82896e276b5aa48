"""The Pallas kernels on a mesh: each device runs the kernel on its own rows and heads
(attention) or its own rows and share of a weight (the decode step's linear maps), inside
jax.shard_map.

Why: a pallas_call is opaque to GSPMD. Left alone on sharded operands, XLA would gather
them to every device and run the whole kernel there. Attention needs nothing from other
rows or other kv heads' groups, so splitting the batch (rows, or the sampler's slots)
over the batch mesh axes and the heads over `tensor` makes each device's share a whole
kernel call of its own, with no communication. Sequence and head_dim stay whole.

The mesh is the abstract mesh the caller traces under (asyncwebrl.parallel.traced_on:
the learner's and the engine's jitted steps set theirs). With none set, or a one-device
mesh, the kernel is called as is.
"""

from __future__ import annotations

import math

import jax
from jax.sharding import PartitionSpec

from asyncwebrl.model.decode import decode_attention
from asyncwebrl.model.flash import flash_segment_attention
from asyncwebrl.model.layer_matmul import layer_matmul, tileable
from asyncwebrl.parallel import BATCH_MESH_AXES, HEADS_MESH_AXIS, SAMPLER_RULES

BATCH, HEADS = "batch", "heads"   # the axis names of a kernel operand's layout


def kernel_mesh():
    """The abstract mesh being traced under, or None when there is none or one device."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or mesh.size == 1 else mesh


def tensor_size(mesh) -> int:
    """Devices of the tensor axis of a kernel mesh (1 without one)."""
    return 1 if mesh is None else mesh.shape.get(HEADS_MESH_AXIS, 1)


def batch_axes(mesh, lengths: set[int]) -> tuple[str, ...]:
    """The batch mesh axes a kernel's rows go over: none (the rows whole on every device) when
    the operands' row counts differ or the axes do not divide them."""
    axes = tuple(axis for axis in BATCH_MESH_AXES if mesh.shape.get(axis, 1) > 1)
    if len(lengths) != 1 or next(iter(lengths)) % math.prod(mesh.shape[axis] for axis in axes):
        return ()
    return axes


def sharded_kernel_call(kernel, operands, layouts, out_layout, *, kv_heads: int):
    """kernel(*operands), each device on its share: axes named BATCH in `layouts` (one
    tuple per operand, one entry per axis) go over the batch mesh axes, those named HEADS
    over `tensor`, None stays whole; the output's axes as `out_layout` says.

    The batch stays whole on every device (the work repeated, never wrong) when the batch
    mesh axes do not divide it (as asyncwebrl.parallel.logical_spec leaves such an axis
    replicated) or when the operands' BATCH axes differ in length: the decode kernel may
    read the first rows of a larger cache, and split evenly those would be other rows.
    The heads must split into
    whole GQA groups: kv_heads divisible by the tensor axis, else a ValueError."""
    mesh = kernel_mesh()
    if mesh is None:
        return kernel(*operands)
    tensor = tensor_size(mesh)
    if kv_heads % tensor:
        raise ValueError(
            f"model.attention = 'pallas' splits the kv heads over the mesh's tensor axis, but {kv_heads} kv heads "
            f"do not split over tensor = {tensor} (each device must hold whole GQA groups): choose a tensor size "
            f"that divides {kv_heads} (mesh.tensor for the learner; the sampler's device count, devices.sampler, "
            "for the sampler) or model.attention = 'xla'")
    lengths = {operand.shape[layout.index(BATCH)] for operand, layout in zip(operands, layouts) if BATCH in layout}
    mesh_axes = {BATCH: batch_axes(mesh, lengths) or None, HEADS: HEADS_MESH_AXIS if tensor > 1 else None, None: None}

    def spec(layout):
        return PartitionSpec(*(mesh_axes[name] for name in layout))

    # check_vma=False: a pallas_call's outputs carry no varying-axes types to check
    return jax.shard_map(kernel, mesh=mesh, in_specs=tuple(spec(layout) for layout in layouts),
                         out_specs=spec(out_layout), check_vma=False)(*operands)


def flash_attention_on_mesh(q, k, v, segment_ids, *, causal: bool):
    """flash_segment_attention (q [B, T, N, H]; k, v [B, T, K, H]; segment_ids [B, T]),
    each device on its rows and heads."""
    heads = (BATCH, None, HEADS, None)
    return sharded_kernel_call(lambda q, k, v, ids: flash_segment_attention(q, k, v, ids, causal=causal),
                               (q, k, v, segment_ids), (heads, heads, heads, (BATCH, None)), heads,
                               kv_heads=k.shape[2])


def decode_attention_on_mesh(q, keys, values, layer, visible):
    """decode_attention (q [B, 1, N, H]; keys, values [L, B, K, S, H], the stacked cache;
    visible [B]), each device on its slots and kv heads of the cache."""
    stacked = (None, BATCH, HEADS, None, None)
    return sharded_kernel_call(decode_attention, (q, keys, values, layer, visible),
                               ((BATCH, None, HEADS, None), stacked, stacked, (), (BATCH,)),
                               (BATCH, None, HEADS, None), kv_heads=keys.shape[2])


# the logical axes the sampler splits over `tensor` (heads, kv heads, the MLP's, the vocabulary)
OVER_TENSOR = frozenset(name for name, axes in SAMPLER_RULES.items() if axes == HEADS_MESH_AXIS)


def weight_split(contracted_axes, out_axes, k: int, n: int) -> str | None:
    """How the sampler's tensor axis splits a map's weight [K, N] (logical axes: those of K,
    then those of N): "out" (N, each device its columns), "in" (K, each device its part of
    the sum), or None (whole: no tensor axis, or none of the map's axes goes over it).
    A split whose local share the kernel cannot tile is a ValueError: the caller checks
    `splits_tile` first."""
    tensor = tensor_size(kernel_mesh())
    for split, axes, size in (("out", out_axes, n), ("in", contracted_axes, k)):
        if tensor > 1 and OVER_TENSOR.intersection(axes):
            if size % tensor or not tileable(size // tensor):
                raise ValueError(f"a decode map of {size} {split}put features does not split into tileable shares "
                                 f"over tensor = {tensor}")
            return split
    return None


def splits_tile(*sizes: int) -> bool:
    """Whether maps with these tensor-split dimensions give every device a tileable share."""
    tensor = tensor_size(kernel_mesh())
    return all(size % tensor == 0 and tileable(size // tensor) for size in sizes)


def layer_matmul_on_mesh(rows, stacked, layer, split: str | None):
    """layer_matmul (rows [M, K] @ stacked[layer], stacked [L, K, N]) with each device on its
    rows (the slots over the batch axes, when they divide M) and its share of the weight:
    split "out" gives it N / tensor columns, "in" K / tensor of the sum, added up over
    `tensor` (one psum of the [M, N] output: what XLA's own tensor-parallel matmul does).
    The shares are where the sampler's rules placed the weight, so nothing moves but x."""
    mesh = kernel_mesh()
    if mesh is None:
        return layer_matmul(rows, stacked, layer)
    batch = batch_axes(mesh, {rows.shape[0]}) or None
    k_axis = HEADS_MESH_AXIS if split == "in" else None
    n_axis = HEADS_MESH_AXIS if split == "out" else None

    def local(x, w, index):
        y = layer_matmul(x, w, index)
        return jax.lax.psum(y, HEADS_MESH_AXIS) if split == "in" else y

    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(batch, k_axis), PartitionSpec(None, k_axis, n_axis),
                                                     PartitionSpec()),
                         out_specs=PartitionSpec(batch, n_axis), check_vma=False)(rows, stacked, layer)
