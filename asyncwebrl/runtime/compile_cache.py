"""JAX's persistent compilation cache for a run (config.compile_cache): a program that an
earlier run compiled, with the same shapes, options and versions of JAX and the backend, is
read from disk instead of compiled again.

The embedded default on 2 CPU cores spends ~77 s of a 13-minute run in ~90 XLA compiles (the
learner's gradient step alone ~16 s); with the cache filled a run took 10:45-11:52 instead of
12:24-13:18 (BENCHMARKS.md, "Compile time"). The key covers everything a program depends on,
so a changed model, shape or flag compiles anew rather than reading a stale program. The
embedded default leaves it off (configs/default.py says why); configs/instruct.py turns it
on. No JAX is imported here: evaluating the oracle must not load it.
"""

from __future__ import annotations

import os
import sys

# every compile is cached (JAX's default keeps only those over 1 s): the embedded default's
# sub-second compiles add up (~90 a run)
_SETTINGS = {"jax_persistent_cache_min_compile_time_secs": 0.0}


def use_compile_cache(directory: str) -> str | None:
    """Turn the cache on in `directory` (~ expanded; created) for this process; "" leaves it
    off. A cache directory the caller already chose in $JAX_COMPILATION_CACHE_DIR wins. Returns
    the directory in use, or None."""
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.expanduser(directory)
    if not chosen:
        return None
    os.makedirs(chosen, exist_ok=True)
    settings = {"jax_compilation_cache_dir": chosen, **_SETTINGS}
    if "jax" in sys.modules:   # the options read their variables when JAX is imported
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        for name, value in settings.items():
            os.environ[name.upper()] = str(value)
    return chosen
