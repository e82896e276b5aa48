"""The jitted pieces of a learner update: log-probs, gradient accumulation, the optimiser step.

An update is: one proximal log-prob pass over all microbatches (current parameters, no
gradient; skipped when the update is a single optimiser step, where pi_prox is exactly the
parameters the loss is taken at, or when the loss is coupled or its kind reads no pi_prox),
then for each minibatch: sum the gradients of its microbatches, divide by the minibatch's
response-token count (exact accumulation: the result equals one big batch's token mean),
clip, AdamW. The loop that strings them together is in learner.py; the loss itself is the
kind's (choices.LOSSES names it).

All three functions are jitted once with the learner mesh's parameter shardings; the
train state is donated, so parameters and optimiser moments are updated in place.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from asyncwebrl.learner.choices import loss_kind
from asyncwebrl.learner.packing import Microbatch
from asyncwebrl.parallel import traced_on


@struct.dataclass
class TrainState:
    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array      # optimiser steps taken
    version: jax.Array   # learner updates finished (the weight version the sampler sees)


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """AdamW under a cosine schedule. The fields without a default are config keys
    (configs/default.py holds their defaults: from_config); the others no config sets."""
    learning_rate: float
    weight_decay: float
    b1: float
    b2: float
    max_grad_norm: float
    warmup_steps: int
    total_steps: int                  # cosine horizon in optimiser steps
    final_lr_fraction: float
    moment_dtype: str                 # Adam's first moment; "bfloat16" halves its memory (the one-GPU 8B recipe)
    eps: float = 1e-8

    def __post_init__(self):
        if self.moment_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"optimizer.moment_dtype must be 'float32' or 'bfloat16', got {self.moment_dtype!r}")

    @classmethod
    def from_config(cls, config) -> OptimizerSettings:
        """config.optimizer, over the optimiser steps of train.max_updates RL updates."""
        o, learner = config.optimizer, config.learner
        return cls(learning_rate=o.learning_rate, weight_decay=o.weight_decay, b1=o.b1, b2=o.b2,
                   max_grad_norm=o.max_grad_norm, warmup_steps=o.warmup_steps,
                   total_steps=max(config.train.max_updates * learner.epochs * learner.minibatches, 1),
                   final_lr_fraction=o.final_lr_fraction, moment_dtype=o.moment_dtype)


@dataclasses.dataclass(frozen=True)
class LossSettings:
    """The loss kind and its clips. The fields without a default are config keys
    (configs/default.py holds their defaults: from_config); logit_chunk no config sets."""
    kind: str                         # a key of choices.LOSSES ("grpo", "raft"), or "sft" (the warm start)
    decoupled: bool
    eps: float
    eps_high: float
    dual_clip: float
    behave_cap: float
    temperature: float                # the sampler's: log-probs are of logits / temperature
    logit_chunk: int = 512            # tokens whose logits exist at once

    @classmethod
    def from_config(cls, config) -> LossSettings:
        """config.loss, at the sampling temperature of RL (rl.temperature)."""
        loss = config.loss
        return cls(kind=loss.kind, decoupled=loss.decoupled, eps=loss.eps, eps_high=loss.eps_high,
                   dual_clip=loss.dual_clip, behave_cap=loss.behave_cap, temperature=config.rl.temperature)


def learning_rate_schedule(settings: OptimizerSettings) -> optax.Schedule:
    peak = settings.learning_rate
    if not 0 <= settings.warmup_steps < max(settings.total_steps, 1):
        raise ValueError(f"warmup_steps={settings.warmup_steps} must be at least 0 and below the schedule's "
                         f"total_steps={settings.total_steps}")
    if settings.warmup_steps == 0:
        return optax.cosine_decay_schedule(peak, max(settings.total_steps, 1), alpha=settings.final_lr_fraction)
    return optax.warmup_cosine_decay_schedule(0.0, peak, settings.warmup_steps, max(settings.total_steps, 1),
                                              end_value=peak * settings.final_lr_fraction)


def make_optimizer(settings: OptimizerSettings) -> optax.GradientTransformation:
    """AdamW. The global-norm clip (settings.max_grad_norm) is applied by build_steps' apply,
    as a scalar folded into the gradients' token mean."""
    return optax.adamw(learning_rate_schedule(settings), b1=settings.b1, b2=settings.b2, eps=settings.eps,
                       weight_decay=settings.weight_decay, mu_dtype=jnp.dtype(settings.moment_dtype))


def target_logprobs(model, microbatch: Microbatch, temperature: float, chunk: int):
    """[R, L] log-prob of each position's target under logits / temperature.

    The vocabulary-wide logits exist for `chunk` positions at a time (and are recomputed
    in the backward pass), so memory stays O(R * chunk * vocab) instead of O(R * L * vocab)."""
    hidden, _ = model.hidden_states(microbatch.inputs)
    rows, length, width = hidden.shape
    chunk = min(chunk, length)
    if length % chunk:
        raise ValueError(f"row_length {length} must be a multiple of logit_chunk {chunk}")
    hidden = hidden.reshape(rows, length // chunk, chunk, width).swapaxes(0, 1)
    targets = microbatch.targets.reshape(rows, length // chunk, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one_chunk(h, t):
        logits = model.logits(h) / temperature
        picked = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
        return picked - jax.nn.logsumexp(logits, axis=-1)

    logprobs = jax.lax.map(lambda ht: one_chunk(*ht), (hidden, targets))
    return logprobs.swapaxes(0, 1).reshape(rows, length)


def microbatch_loss(model, microbatch: Microbatch, prox_logprobs, settings: LossSettings):
    """The loss kind's (sum of per-token losses over the microbatch's response tokens,
    metric sums), with "tokens": the response-token count that turns sums into means."""
    logp = target_logprobs(model, microbatch, settings.temperature, settings.logit_chunk)
    if prox_logprobs is None:   # the update ran no proximal pass: pi_prox is these very parameters
        prox_logprobs = jax.lax.stop_gradient(logp)
    total, metrics = loss_kind(settings.kind).token_loss(logp, prox_logprobs, microbatch, settings)
    return total, {**metrics, "tokens": microbatch.loss_mask.sum()}


def build_steps(graphdef, tx: optax.GradientTransformation, schedule: optax.Schedule, settings: LossSettings,
                max_grad_norm: float, state_shardings=None, mesh=None):
    """(logprobs, accumulate, apply) jitted for this model structure and loss.

    logprobs(params, microbatch) -> [R, L]
    accumulate(params, grads, microbatch, prox) -> (grads + this microbatch's, its metric sums)  (grads donated;
                                                  prox None: pi_prox = stop_gradient of this forward's log-probs)
    apply(state, grads, metric sums) -> (state, measurements)                     (state and grads donated)

    The model's passes are traced on `mesh` (the learner's), which the Pallas attention
    kernels split their rows and heads over."""
    param_shardings = None if state_shardings is None else state_shardings.params

    def logprobs(params, microbatch):
        model = nnx.merge(graphdef, params)
        return target_logprobs(model, microbatch, settings.temperature, settings.logit_chunk)

    def accumulate(params, grads, microbatch, prox):
        def loss(p):
            return microbatch_loss(nnx.merge(graphdef, p), microbatch, prox, settings)
        (_, metrics), new_grads = jax.value_and_grad(loss, has_aux=True)(params)
        return jax.tree.map(lambda a, g: a + g.astype(a.dtype), grads, new_grads), metrics

    def apply(state: TrainState, grads, metrics):
        tokens = jnp.maximum(metrics["tokens"], 1.0)
        measurements = {name: value / tokens for name, value in metrics.items() if name != "tokens"}
        # the token mean and the global-norm clip as one scalar on the summed gradients: the
        # tree is read once by the norm and once by the fused Adam step, and no scaled or
        # clipped copy of it is ever written (for 2B parameters each copy is 8 GiB)
        grad_norm = optax.tree.norm(grads) / tokens
        scale = jnp.minimum(1.0, max_grad_norm / jnp.maximum(grad_norm, 1e-30)) / tokens
        finite = jnp.isfinite(measurements[loss_kind(settings.kind).objective]) & jnp.isfinite(grad_norm)

        def step(state):
            # the update's own norm is not measured: reducing the update tree keeps all of it
            # alive next to the new parameters (another f32 copy of the model)
            updates, opt_state = tx.update(jax.tree.map(lambda g: g * scale, grads), state.opt_state, state.params)
            return TrainState(params=optax.apply_updates(state.params, updates), opt_state=opt_state,
                              step=state.step + 1, version=state.version)

        # NaN guard: a non-finite loss or gradient leaves parameters and moments untouched. A
        # branch, not a select of old or new per element: a select keeps both states alive
        new_state = jax.lax.cond(finite, step, lambda state: state, state)
        measurements.update(tokens=metrics["tokens"], grad_norm=grad_norm, skipped=1.0 - finite.astype(jnp.float32),
                            param_norm=optax.tree.norm(new_state.params), learning_rate=schedule(state.step))
        return new_state, measurements

    if mesh is not None:
        logprobs, accumulate = traced_on(mesh, logprobs), traced_on(mesh, accumulate)
    return (jax.jit(logprobs, in_shardings=(param_shardings, None)),
            jax.jit(accumulate, donate_argnums=(1,)),
            jax.jit(apply, donate_argnums=(0,), out_shardings=(state_shardings, None)))


def zeros_like_params(params, dtype="float32"):
    """Gradient accumulator: zeros of `dtype` with the parameters' shapes and shardings."""
    return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.dtype(dtype), device=getattr(p, "sharding", None)), params)
