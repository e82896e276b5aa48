"""Does the compiled gradient step fit in the device's free memory? Asked before it first runs.

Without this check a gradient step too big for the device fails inside XLA with
`RESOURCE_EXHAUSTED: Out of memory while trying to allocate 81.22GiB ... jit_apply`: dispatch
is asynchronous, so the error names whichever program the host was dispatching when the
allocation failed (there the optimiser step, which needs no temporaries at all), and no
config key. The gradient step's temporaries are the activations its backward pass keeps,
which the config keys below shrink.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

GIB = 2**30

# the config keys that shrink the gradient step's temporaries, each with how
SHRINKING_KEYS = {
    "model.remat": "'full' recomputes each layer's activations in the backward pass instead of keeping them",
    "learner.rows_per_microbatch": "fewer rows per microbatch",
    "learner.images_per_microbatch": "fewer screenshots encoded per microbatch",
    "learner.row_length": "shorter rows",
}


class GradientStepDoesNotFit(MemoryError):
    """The compiled gradient step needs more device memory than is free."""


def check_gradient_step_fits(temp_bytes: int, unaliased_output_bytes: int, free_bytes: int,
                             current: Mapping[str, object]) -> int:
    """The bytes the gradient step allocates when it runs: its temporaries plus the outputs
    not written into donated arguments (its arguments are already on the device, counted as
    in use). Raises GradientStepDoesNotFit when they exceed free_bytes; the message names
    the keys of SHRINKING_KEYS with their values in `current`."""
    needed = temp_bytes + unaliased_output_bytes
    if needed <= free_bytes:
        return needed
    keys = "; ".join(f"{key} (now {current[key]!r}): {how}" for key, how in SHRINKING_KEYS.items())
    raise GradientStepDoesNotFit(
        f"the learner's gradient step (accumulate) needs {needed / GIB:.2f} GiB of device memory when it runs "
        f"({temp_bytes / GIB:.2f} GiB temporaries, mostly the activations its backward pass keeps, + "
        f"{unaliased_output_bytes / GIB:.2f} GiB outputs), but {free_bytes / GIB:.2f} GiB are free "
        f"(bytes_limit - bytes_in_use). Shrink it with {keys}")


def free_device_bytes(devices: Iterable) -> int | None:
    """The least free memory among these devices (bytes_limit - bytes_in_use of the
    allocator). None when a device keeps no allocator statistics: memory_stats() is None
    on CPU, whose buffers are host memory with no fixed arena to overflow."""
    free = []
    for device in devices:
        stats = device.memory_stats()
        if stats is None:
            return None
        free.append(stats["bytes_limit"] - stats["bytes_in_use"])
    return min(free)
