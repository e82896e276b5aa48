"""Eight fake CPU devices for every JAX test, so sharded code runs on CPU (DESIGN.md §5).

This must happen before anything imports jax; unsharded code still runs on device 0."""

import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
