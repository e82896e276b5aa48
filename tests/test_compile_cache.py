"""config.compile_cache: a second process reads the programs the first one compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# compiles one small program after use_compile_cache(argv[1]); prints the cache's hits
PROGRAM = """
import json, sys
from asyncwebrl.runtime.compile_cache import use_compile_cache
chosen = use_compile_cache(sys.argv[1])
import jax, jax.numpy as jnp
from jax import monitoring
hits = []
monitoring.register_event_listener(lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.0)(jnp.ones((64, 64))).block_until_ready()
print(json.dumps({"chosen": chosen, "hits": len(hits)}))
"""


def run(directory: str, env: dict | None = None) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    environment.update(env or {}, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", PROGRAM, directory], env=environment, capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_reads_what_the_first_compiled(tmp_path):
    cache = str(tmp_path / "cache")
    first = run(cache)
    assert first == {"chosen": cache, "hits": 0}
    assert os.listdir(cache), "the first process wrote nothing into the cache"
    assert run(cache)["hits"] >= 1


def test_an_empty_setting_leaves_the_cache_off_and_the_environment_wins(tmp_path):
    assert run("") == {"chosen": None, "hits": 0}
    chosen = str(tmp_path / "from_env")
    assert run(str(tmp_path / "from_config"), {"JAX_COMPILATION_CACHE_DIR": chosen})["chosen"] == chosen
    assert os.listdir(chosen) and not (tmp_path / "from_config").exists()
