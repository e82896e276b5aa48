"""Losses and advantages against an independent NumPy implementation and exact values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asyncwebrl.learner.choices import LOSSES, WARM_START_KIND, loss_kind
from asyncwebrl.learner.losses import LossKind, group_advantages, policy_loss, raft_advantages, step_advantages
from configs.default import bare

# the bare config's clips and normaliser constant (configs/default.py)
CLIPS = {name: bare().loss[name] for name in ("eps", "eps_high", "dual_clip", "behave_cap")}
K = bare().loss.k


def reference_loss(logp, prox, behave, adv, mask, eps, eps_high, c, cap, decoupled):
    """Token by token, as docs/algorithm.md#the-loss writes it."""
    if not decoupled:
        prox = behave
    total, clipped_tokens, capped_tokens, weights = 0.0, 0, 0, 0.0
    rows, length = logp.shape
    for i in range(rows):
        for t in range(length):
            if not mask[i, t]:
                continue
            rho = np.exp(float(logp[i, t]) - float(prox[i, t]))
            w = np.exp(float(prox[i, t]) - float(behave[i, t]))
            a = float(adv[i, t])
            plain, clipped = -a * rho, -a * min(max(rho, 1 - eps), 1 + eps_high)
            value = max(plain, clipped)
            clipped_tokens += clipped > plain
            if a < 0:
                value = min(value, c * abs(a))
            weights += w
            if w > cap:
                capped_tokens += 1
                continue
            total += w * value
    n = mask.sum()
    return total / n, clipped_tokens / n, capped_tokens / n, weights / n


@pytest.mark.parametrize("decoupled", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_loss_matches_the_reference(decoupled, seed):
    rng = np.random.default_rng(seed)
    shape = (8, 24)
    behave = rng.normal(-2.0, 1.0, shape)
    prox = behave + rng.normal(0.0, 1.0, shape)  # stale samples: some weights exceed the cap of 5
    logp = prox + rng.normal(0.0, 0.8, shape)  # ratios well outside [0.8, 1.28]: clip and dual clip fire
    adv = rng.normal(0.0, 1.0, shape) * 4
    mask = (rng.random(shape) < 0.8).astype(np.float32)
    loss, metrics = policy_loss(logp, prox, behave, adv, mask, eps=0.2, eps_high=0.28, dual_clip=3.0,
                                behave_cap=5.0, decoupled=decoupled)
    expected = reference_loss(logp, prox, behave, adv, mask, 0.2, 0.28, 3.0, 5.0, decoupled)
    np.testing.assert_allclose(float(loss), expected[0], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(float(metrics["clip_ratio"]), expected[1], atol=1e-6)
    np.testing.assert_allclose(float(metrics["behave_cap_ratio"]), expected[2], atol=1e-6)
    np.testing.assert_allclose(float(metrics["importance_weight_mean"]), expected[3], rtol=2e-5)
    assert 0 < expected[1] < 1
    if decoupled:
        assert 0 < expected[2] < 1  # the cap really was exercised
        assert float(metrics["dual_clip_ratio"]) > 0
    else:
        assert expected[2] == 0 and expected[3] == pytest.approx(1.0)


def test_decoupling_halves_clipping_under_staleness():
    """Stale behaviour, fresh proximal policy: the coupled clip fires on the staleness
    itself, the decoupled one only on the update's own step."""
    rng = np.random.default_rng(3)
    behave = rng.normal(-2.0, 1.0, (64, 64))
    prox = behave + rng.normal(0.0, 0.3, behave.shape)
    logp = prox + rng.normal(0.0, 0.05, behave.shape)
    adv = rng.normal(0.0, 1.0, behave.shape)
    mask = np.ones_like(adv)
    coupled = float(policy_loss(logp, prox, behave, adv, mask, **CLIPS, decoupled=False)[1]["clip_ratio"])
    decoupled = float(policy_loss(logp, prox, behave, adv, mask, **CLIPS, decoupled=True)[1]["clip_ratio"])
    assert decoupled < 0.5 * coupled


def test_masked_tokens_do_not_count_and_weights_carry_no_gradient():
    logp = jnp.array([[-1.0, -2.0, -3.0]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    adv = jnp.array([[1.0, -1.0, 100.0]])

    def loss_of(logp, prox):
        return policy_loss(logp, prox, prox - 0.5, adv, mask, **CLIPS, decoupled=True)[0]

    grad_logp, grad_prox = jax.grad(loss_of, argnums=(0, 1))(logp, logp)
    w = np.exp(0.5)
    # d/dlogp of -a * w * rho at rho = 1, over 2 masked tokens; the masked token gets nothing.
    np.testing.assert_allclose(np.asarray(grad_logp), [[-w / 2, w / 2, 0.0]], rtol=1e-6)
    # prox enters rho (and the detached weight): its gradient is exactly minus that of logp.
    np.testing.assert_allclose(np.asarray(grad_prox), -np.asarray(grad_logp), rtol=1e-6)


def test_group_advantages_exact_values():
    rewards = [1, 0, 0, 0, 1, 1, 0, 1, 0, 0]
    groups = ["a", "a", "a", "a", "b", "b", "b", "c", "d", "d"]
    adv = group_advantages(rewards, groups)
    np.testing.assert_allclose(adv[:4], np.array([1.5, -0.5, -0.5, -0.5]) / (1 + 1e-5 / 0.5), rtol=1e-6)
    std_b = np.std([1, 1, 0], ddof=1)
    np.testing.assert_allclose(adv[4:7], (np.array([1, 1, 0]) - 2 / 3) / (std_b + 1e-5), rtol=1e-6)
    assert adv[7] == 0 and list(adv[8:]) == [0, 0]  # a lone episode; a group with no spread


def test_step_and_raft_advantages():
    adv = np.array([2.0, -1.0])
    np.testing.assert_allclose(step_advantages(adv, [4, 10], "traj", k=K), [0.5, -0.1])
    np.testing.assert_allclose(step_advantages(adv, [4, 10], "const", k=10), [0.2, -0.1])
    with pytest.raises(ValueError):
        step_advantages(adv, [4, 10], "episode", k=K)
    np.testing.assert_allclose(raft_advantages([1, 0, 1], [5, 13, 2]), [0.2, 0.0, 0.5])


def test_every_registry_entry_resolves_to_a_loss_kind():
    """Each line of choices.LOSSES names a LossKind; a config's loss.kind learns from
    rewards, the warm start's kind does not."""
    for name in LOSSES:
        assert isinstance(loss_kind(name), LossKind), name
        assert loss_kind(name).learns_from_rewards, name
    assert isinstance(loss_kind(WARM_START_KIND), LossKind)
    assert not loss_kind(WARM_START_KIND).learns_from_rewards
    assert WARM_START_KIND not in LOSSES   # validate_config refuses loss.kind="sft"


def test_an_entry_that_names_no_loss_kind_is_refused(monkeypatch):
    monkeypatch.setitem(LOSSES, "typo", "asyncwebrl.learner.losses:policy_loss")
    with pytest.raises(TypeError, match="'typo' names asyncwebrl.learner.losses:policy_loss, a function, not a LossKind"):
        loss_kind("typo")


@pytest.mark.parametrize("kind", ["ppo", WARM_START_KIND])
def test_validate_config_refuses_a_kind_not_in_the_registry(kind):
    """Before JAX: the refusal names the key and the registry's kinds."""
    from asyncwebrl.runtime.validate import validate_config
    config = bare()
    config.loss.kind = kind
    with pytest.raises(ValueError, match=rf"loss\.kind must be one of \('grpo', 'raft'\), got '{kind}'"):
        validate_config(config)


def test_validate_config_refuses_an_unknown_reward_and_partial_credit_for_raft():
    from asyncwebrl.runtime.validate import validate_config
    config = bare()
    config.rl.reward = "dense"
    with pytest.raises(ValueError, match=r"rl\.reward must be one of \('success', 'facts'\), got 'dense'"):
        validate_config(config)
    config.rl.reward, config.loss.kind = "facts", "raft"
    with pytest.raises(ValueError, match=r"rl\.reward='facts' needs a group-relative loss"):
        validate_config(config)
    config.loss.kind = "grpo"
    validate_config(config)


@pytest.mark.parametrize("normalizer, expected", [
    ("traj", lambda a_fail, a_succ: (abs(a_fail) / 13) / (a_succ / 5)),
    ("const", lambda a_fail, a_succ: abs(a_fail) / a_succ),
])
def test_per_token_weight_of_failures_vs_successes(normalizer, expected):
    """One group of 8: one success of 5 steps, seven failures of 13 steps. The gradient on
    a failed step's token, relative to a successful one's, is set by the normaliser."""
    rewards, steps = [1] + [0] * 7, [5] + [13] * 7
    adv = group_advantages(rewards, ["g"] * 8)
    per_step = step_advantages(adv, steps, normalizer, k=K)
    tokens = jnp.zeros((8, 1))  # one token per episode, fresh samples: rho = w = 1
    grad = jax.grad(lambda logp: policy_loss(logp, tokens, tokens, per_step[:, None], jnp.ones((8, 1)), **CLIPS,
                                          decoupled=True)[0])(tokens)
    ratio = abs(float(grad[1, 0])) / abs(float(grad[0, 0]))
    assert ratio == pytest.approx(expected(adv[1], adv[0]), rel=1e-5)
    if normalizer == "traj":  # failures are under-weighted by 5/13 relative to "const"
        assert ratio == pytest.approx(abs(adv[1]) / adv[0] * 5 / 13, rel=1e-5)
