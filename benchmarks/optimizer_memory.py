"""Memory of the learner's optimiser step (`apply` in asyncwebrl/learner/train.py), compiled for
this backend without running it: parameters, moments and gradients are abstract shapes, so a
2B or 8B preset compiles on a laptop.

    python benchmarks/optimizer_memory.py --preset 2b
    python benchmarks/optimizer_memory.py --preset 8b --param-dtype bfloat16 --moment-dtype bfloat16

Prints one JSON line: the compiled step's argument, output, aliased (donated) and temporary
bytes. The temporaries are what the step needs beyond the state it updates in place; on a GPU
XLA asks for them as one allocation (the "Out of memory while trying to allocate ... jit_apply"
of issue 25), so on a device shared with the sampler they must stay small.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from asyncwebrl.learner.choices import loss_kind  # noqa: E402
from asyncwebrl.learner.train import (LossSettings, OptimizerSettings, TrainState, build_steps,  # noqa: E402
                                      learning_rate_schedule, make_optimizer)
from asyncwebrl.model import Qwen3VL, preset  # noqa: E402

GIB = 2 ** 30


def measure(name: str, param_dtype: str, moment_dtype: str, gradient_dtype: str) -> dict:
    config = preset(name)
    # parameters only: the activations' dtypes (compute, residual) do not change their memory
    model = nnx.eval_shape(lambda: Qwen3VL(config, dtype=param_dtype, param_dtype=param_dtype, residual_dtype="float32",
                                           remat="none", attention="xla", rngs=nnx.Rngs(0)))
    graphdef, params = nnx.split(model)
    optimizer = OptimizerSettings(learning_rate=5e-6, weight_decay=0.01, b1=0.9, b2=0.999, max_grad_norm=1.0,
                                  warmup_steps=0, total_steps=300, final_lr_fraction=0.1, moment_dtype=moment_dtype)
    loss = LossSettings(kind="grpo", decoupled=True, eps=0.2, eps_high=0.2, dual_clip=3.0, behave_cap=5.0,
                        temperature=1.0)
    tx = make_optimizer(optimizer)
    state = jax.eval_shape(lambda p: TrainState(params=p, opt_state=tx.init(p), step=jnp.zeros((), jnp.int32),
                                                version=jnp.zeros((), jnp.int32)), params)
    grads = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, jnp.dtype(gradient_dtype)), params)
    sums = {"tokens": jax.ShapeDtypeStruct((), jnp.float32),
            loss_kind(loss.kind).objective: jax.ShapeDtypeStruct((), jnp.float32)}
    _, _, apply = build_steps(graphdef, tx, learning_rate_schedule(optimizer), loss, optimizer.max_grad_norm)
    memory = apply.lower(state, grads, sums).compile().memory_analysis()
    count = sum(p.size for p in jax.tree.leaves(params))
    return {"preset": name, "params": count, "param_dtype": param_dtype, "moment_dtype": moment_dtype,
            "gradient_dtype": gradient_dtype, "backend": jax.default_backend(), "machine": platform.machine(),
            "argument_gib": round(memory.argument_size_in_bytes / GIB, 2),
            "output_gib": round(memory.output_size_in_bytes / GIB, 2),
            "aliased_gib": round(memory.alias_size_in_bytes / GIB, 2),
            "temporary_gib": round(memory.temp_size_in_bytes / GIB, 2),
            "float32_gradients_gib": round(count * 4 / GIB, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="2b")
    parser.add_argument("--param-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--moment-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--gradient-dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    print(json.dumps(measure(args.preset, args.param_dtype, args.moment_dtype, args.gradient_dtype)), flush=True)


if __name__ == "__main__":
    main()
