"""GRPO losses and advantages (docs/algorithm.md#group-advantages onwards): pure functions over arrays.

Advantages are computed per episode on the host (small arrays, numpy); the policy loss
runs inside the jitted train step (jax.numpy) and returns (loss, metrics).

GRPO, RAFT and SFT are the loss kinds, one LossKind each, registered by name in
choices.LOSSES (JAX-free, for the config check): the learner (train.py, learner.py) and the
step rows (runtime/rows.py) ask the kind for everything kind-specific, and the run logs
every metric its token loss returns. Adding a kind is its function(s) and LossKind here
and one line in choices.LOSSES.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from asyncwebrl.learner.choices import NORMALIZERS


def group_advantages(rewards, group_ids, eps: float = 1e-5) -> np.ndarray:
    """A_i = (r_i - mean_g r) / (std_g r + eps), std with the n-1 denominator.

    rewards, group_ids: [episodes]. A group of one episode (no spread to measure) and a
    group whose rewards are all equal get advantage 0."""
    rewards = np.asarray(rewards, np.float64)
    _, group = np.unique(np.asarray(group_ids), return_inverse=True)
    count = np.bincount(group).astype(np.float64)
    mean = np.bincount(group, rewards) / count
    centred = rewards - mean[group]
    variance = np.bincount(group, centred**2) / np.maximum(count - 1, 1)
    advantages = centred / (np.sqrt(variance)[group] + eps)
    return np.where(count[group] > 1, advantages, 0.0).astype(np.float32)


def step_advantages(advantages, num_steps, normalizer: str, k: float) -> np.ndarray:
    """The advantage every response token of every step of an episode gets.

    "traj": A_i / T_i (the per-trajectory 1/|tau_i| baseline); "const": A_i / k (the
    paper's constant normaliser: config.loss.k, the paper's 10 = the easy step limit)."""
    advantages = np.asarray(advantages, np.float32)
    if normalizer == "traj":
        return advantages / np.maximum(np.asarray(num_steps, np.float32), 1.0)
    if normalizer == "const":
        return advantages / np.float32(k)
    raise ValueError(f"normalizer must be one of {NORMALIZERS}, got {normalizer!r}")


def raft_advantages(rewards, num_steps) -> np.ndarray:
    """RAFT++: 1/T_i for successful episodes (reward > 0), 0 otherwise; no group statistics."""
    rewards = np.asarray(rewards, np.float32)
    steps = np.maximum(np.asarray(num_steps, np.float32), 1.0)
    return np.where(rewards > 0, 1.0 / steps, 0.0).astype(np.float32)


def policy_loss(logp, prox_logp, behave_logp, advantages, mask, *, eps: float, eps_high: float, dual_clip: float,
                behave_cap: float, decoupled: bool):
    """Decoupled-IS PPO loss, token mean over `mask`. All arrays [rows, tokens].

    mask: how many times each token counts (0 off the responses; a merged row's count,
    packing.merge_duplicates, whose advantage is already the sum of its copies'): the loss
    takes each token once, the token mean and the metrics count every copy.

    rho = exp(logp - prox_logp) is clipped to [1 - eps, 1 + eps_high]; the staleness weight
    w = exp(prox_logp - behave_logp) is detached and not clipped, but tokens with
    w > behave_cap contribute 0 (they stay in the denominator). For negative advantages
    the loss is capped at dual_clip * |a|. decoupled=False is the coupled baseline:
    prox_logp := behave_logp, so w = 1 and the clip is on pi_theta / pi_behave.
    Log-ratios are taken in float32. The clips are LossSettings' (config.loss)."""
    logp, prox_logp, behave_logp, advantages, mask = (
        jnp.asarray(x, jnp.float32) for x in (logp, prox_logp, behave_logp, advantages, mask))
    if not decoupled:
        prox_logp = behave_logp
    ratio = jnp.exp(logp - prox_logp)
    weight = jax.lax.stop_gradient(jnp.exp(prox_logp - behave_logp))
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - eps, 1.0 + eps_high)
    per_token = jnp.maximum(unclipped, clipped)
    dual_capped = (advantages < 0) & (per_token > dual_clip * jnp.abs(advantages))
    per_token = jnp.where(dual_capped, dual_clip * jnp.abs(advantages), per_token)
    over_cap = weight > behave_cap
    contribution = jnp.where(over_cap | (mask <= 0), 0.0, weight * per_token)
    tokens = jnp.maximum(mask.sum(), 1.0)
    loss = contribution.sum() / tokens

    def masked_mean(x):
        return (x * mask).sum() / tokens

    log_ratio = prox_logp - logp  # k3 estimate of KL(pi_theta || pi_prox) on the sampled tokens
    metrics = {
        "clip_ratio": masked_mean((clipped > unclipped).astype(jnp.float32)),
        "dual_clip_ratio": masked_mean(dual_capped.astype(jnp.float32)),
        "behave_cap_ratio": masked_mean(over_cap.astype(jnp.float32)),
        "importance_weight_mean": masked_mean(weight),
        "approx_kl": masked_mean(jnp.exp(log_ratio) - 1.0 - log_ratio),
        "tokens": mask.sum(),
    }
    return loss, metrics


# ---------------------------------------------------------------- the loss kinds

def grpo_episode_advantages(rewards, group_ids, num_steps, *, normalizer: str, k: float) -> np.ndarray:
    """GRPO: the group-relative advantage, spread over the episode's steps by the normaliser."""
    return step_advantages(group_advantages(rewards, group_ids), num_steps, normalizer, k)


def raft_episode_advantages(rewards, group_ids, num_steps, *, normalizer: str, k: float) -> np.ndarray:
    """RAFT++ (raft_advantages): no group statistics and its own 1/T, so the normaliser is unused."""
    return raft_advantages(rewards, num_steps)


def clipped_policy_loss(logp, prox_logp, microbatch, settings):
    """policy_loss with settings' clips, as sums over the microbatch's response tokens."""
    mask = microbatch.loss_mask
    tokens = mask.sum()
    mean, metrics = policy_loss(logp, prox_logp, microbatch.behave_logprobs, microbatch.advantages, mask,
                                eps=settings.eps, eps_high=settings.eps_high, dual_clip=settings.dual_clip,
                                behave_cap=settings.behave_cap, decoupled=settings.decoupled)
    # policy_loss returns token means; sums make accumulation over microbatches exact
    summed = {name: value * tokens for name, value in metrics.items() if name != "tokens"}
    return mean * tokens, {**summed, "loss": mean * tokens}


def cross_entropy(logp, prox_logp, microbatch, settings):
    """Supervised: the summed negative log-likelihood of the response tokens."""
    total = -(logp * microbatch.loss_mask).sum()
    return total, {"nll": total}


@dataclasses.dataclass(frozen=True)
class LossKind:
    """What the learner and the step rows need of a loss kind.

    token_loss(logp, prox_logp, microbatch, settings) -> (loss, metrics), run inside the
        jitted step: logp [R, L] the log-probs being trained, prox_logp pi_prox's (the
        stop-gradient of logp when the update skips the proximal pass), settings the
        LossSettings. The loss and every metric are sums over the response tokens; the
        learner reports each metric as its token mean over the update, under its own name.
        microbatch.loss_mask counts each token's copies (packing.merge_duplicates trains
        identical steps as one row whose advantage is their sum): weigh the loss by the
        advantages where loss_mask > 0, and counts and means by loss_mask. That is exact for
        a loss positively homogeneous in the advantage of each sign, as PPO's clip is; a
        kind that is not must run with learner.merge_duplicates=False.
    objective: the metric that is the loss itself; a step where it is not finite is skipped.
    advantages(rewards, group_ids, num_steps, *, normalizer, k) -> each episode's per-step
        advantage, made on the host from the episodes' rewards. None for a kind that learns
        from demonstrations: it gets no rewards, and its updates publish no policy version.
    uses_prox: whether token_loss reads pi_prox, so that an update of several optimiser
        steps runs the proximal pass first (with loss.decoupled)."""
    token_loss: Callable
    objective: str
    advantages: Callable | None = None
    uses_prox: bool = False

    @property
    def learns_from_rewards(self) -> bool:
        return self.advantages is not None


GRPO = LossKind(clipped_policy_loss, "loss", advantages=grpo_episode_advantages, uses_prox=True)
RAFT = LossKind(clipped_policy_loss, "loss", advantages=raft_episode_advantages, uses_prox=True)
SFT = LossKind(cross_entropy, "nll")   # the warm start's (choices.WARM_START)
