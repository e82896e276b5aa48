"""Meshes and sharding rules (docs/architecture.md#devices-and-sharding).

One mesh description (axes data, fsdp, tensor; -1 = fill with the remaining devices) and
one set of logical-axis rules per role. Parameters name their logical axes (see
asyncwebrl.model.layers); `param_shardings` turns those names into NamedShardings:
- learner: weights sharded FSDP x tensor, batch over data x fsdp;
- sampler: weights sharded over tensor only (every data replica holds a full copy).
A dimension that the mesh axes do not divide evenly stays replicated rather than fail.
Stacked layer parameters (and the KV cache) lead with the logical axis "layers"
(asyncwebrl.model.layers.LAYERS), which no rule names: every device holds its shard of
every layer, as the scan over layers reads one layer after another.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_MESH_AXES = ("data", "fsdp")   # rows (the sampler's slots) split over these
HEADS_MESH_AXIS = "tensor"           # attention heads (and the other tensor-parallel axes) over this

LEARNER_RULES = {
    "batch": BATCH_MESH_AXES,
    "embed": "fsdp", "vision_embed": "fsdp", "vision_merged": "fsdp",
    "mlp": "tensor", "vision_mlp": "tensor",
    "heads": HEADS_MESH_AXIS, "kv_heads": HEADS_MESH_AXIS, "vision_heads": HEADS_MESH_AXIS,
    "vocab": "tensor",
}
SAMPLER_RULES = {
    "batch": BATCH_MESH_AXES,
    "mlp": "tensor", "vision_mlp": "tensor",
    "heads": HEADS_MESH_AXIS, "kv_heads": HEADS_MESH_AXIS, "vision_heads": HEADS_MESH_AXIS,
    "vocab": "tensor",
}


def make_mesh(shape: dict | None = None, devices=None) -> Mesh:
    """A (data, fsdp, tensor) mesh with Auto axis types. `shape` maps axis -> size, one may be -1."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = {axis: 1 for axis in MESH_AXES}
    sizes.update({"fsdp": -1} if shape is None else dict(shape))
    unknown = set(sizes) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"unknown mesh axes {sorted(unknown)}; the axes are {MESH_AXES}")
    fill = [axis for axis, size in sizes.items() if size == -1]
    if len(fill) > 1:
        raise ValueError(f"only one mesh axis may be -1, got {fill}")
    known = math.prod(size for size in sizes.values() if size != -1)
    if fill:
        if len(devices) % known:
            raise ValueError(f"{len(devices)} devices cannot fill mesh {sizes}")
        sizes[fill[0]] = len(devices) // known
    if math.prod(sizes.values()) != len(devices):
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices, have {len(devices)}")
    grid = np.array(devices).reshape([sizes[axis] for axis in MESH_AXES])
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def logical_spec(axes, shape, mesh: Mesh, rules: dict) -> PartitionSpec:
    """PartitionSpec for one array from its logical axis names.

    A mesh axis is used at most once per array, and only where it divides the dimension."""
    used, spec = set(), []
    for name, size in zip(axes, shape):
        mesh_axes = rules.get(name) if name else None
        mesh_axes = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
        mesh_axes = tuple(a for a in mesh_axes if a not in used and mesh.shape[a] > 1)
        if not mesh_axes or size % math.prod(mesh.shape[a] for a in mesh_axes):
            spec.append(None)
            continue
        used.update(mesh_axes)
        spec.append(mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return PartitionSpec(*spec)


def param_shardings(tree, mesh: Mesh, rules: dict):
    """NamedShardings for any pytree holding nnx Variables (parameters, optimiser moments
    that mirror them, a whole train state): a Variable is sharded by its logical `axes`,
    every other leaf (step counters, scalars) is replicated."""
    def sharding(leaf):
        axes = getattr(leaf, "axes", None) if isinstance(leaf, nnx.Variable) else None
        axes = axes or (None,) * len(leaf.shape)
        return NamedSharding(mesh, logical_spec(axes, leaf.shape, mesh, rules))
    return jax.tree.map(sharding, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def traced_on(mesh: Mesh, fn):
    """fn, traced with `mesh` as the abstract mesh (wrap it before jax.jit).

    The Pallas attention kernels read it to split their work over the devices
    (asyncwebrl.model.kernel_mesh); everything else is sharded by GSPMD as before (the
    axes are Auto). Setting it inside the traced function, not around the call, keeps it
    part of every trace of fn, whoever calls it (a memory check's .lower() included)."""
    @functools.wraps(fn)
    def on_mesh(*args, **kwargs):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args, **kwargs)
    return on_mesh
