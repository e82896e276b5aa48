"""Choosing the next token, and its log-prob under the distribution it was drawn from.

Settings are per engine (static under jit): an RL run samples every request the same way.
- temperature 0: greedy; the reported log-prob is under the untempered softmax.
- otherwise logits / temperature, then top-k (k > 0) and top-p (p < 1) truncation,
  renormalised; the reported log-prob is under that truncated distribution (float32).
With top_k = 0 and top_p = 1 this equals the learner's log-prob of logits / temperature,
which is what the decoupled importance weights need.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    temperature: float           # eval.temperature or rl.temperature (EngineSettings.from_config)
    top_p: float                 # eval.top_p, or 1.0 for RL (the learner scores the whole distribution)
    top_k: int = 0

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"invalid sampling settings {self}")


def sample(logits, key, settings: SamplingSettings):
    """logits [S, V] -> (tokens [S] int32, log-probs [S] float32)."""
    logits = logits.astype(jnp.float32)
    if settings.temperature == 0:
        tokens = jnp.argmax(logits, axis=-1)
        return tokens.astype(jnp.int32), _picked(jax.nn.log_softmax(logits), tokens)
    scaled = logits / settings.temperature
    if settings.top_k:
        kth = jax.lax.top_k(scaled, settings.top_k)[0][:, -1:]
        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)
    if settings.top_p < 1:
        ordered = jnp.sort(scaled, axis=-1)[:, ::-1]
        cumulative = jnp.cumsum(jax.nn.softmax(ordered, axis=-1), axis=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        keep = jnp.sum(cumulative - jax.nn.softmax(ordered, axis=-1) < settings.top_p, axis=-1, keepdims=True)
        threshold = jnp.take_along_axis(ordered, keep - 1, axis=-1)
        scaled = jnp.where(scaled < threshold, -jnp.inf, scaled)
    log_probs = jax.nn.log_softmax(scaled)
    tokens = jax.random.categorical(key, log_probs, axis=-1)
    return tokens.astype(jnp.int32), _picked(log_probs, tokens)


def _picked(log_probs, tokens):
    return jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]
