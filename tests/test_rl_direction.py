"""RL that points the right way (the issue "Learning you can see", item 3).

A two-armed bandit taken through the path a training run takes: one prompt, two candidate
answers, a group of one-step episodes that each gave one of them, rewarded by the answer.
Behaviour log-probs and versions are recorded from the current weights, as the sampler
records them; the advantages and rows come from runtime/rows.py (as the orchestrator
makes them), the learner from the config (runtime/build.py), and each update is a real
Learner.update. After a few updates the rewarded answer must be more likely and the
other less so, and swapping the rewards must swap the direction. A sign error in the
advantage or in the importance ratio turns the movement around, so these tests fail on it.
"""

import functools

import jax
import numpy as np
import pytest
from flax import nnx

from asyncwebrl.learner.packing import StepRow, pack
from asyncwebrl.learner.train import target_logprobs
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.build import build_model, make_learner
from asyncwebrl.runtime.rows import episode_advantages, step_rows
from configs import default

PROCESSOR = Processor.embedded()
PROMPT = PROCESSOR.encode_text("<|im_start|>user\nWhich button sends the form?<|im_end|>\n<|im_start|>assistant\n")
# Two answers that share a prefix and part at one token, as two actions of one page do.
ANSWERS = {name: PROCESSOR.encode_text(text) + [PROCESSOR.special.eos]
           for name, text in (("A", "click(3)"), ("B", "click(7)"))}
OTHER = {"A": "B", "B": "A"}
PART = next(i for i, (a, b) in enumerate(zip(ANSWERS["A"], ANSWERS["B"])) if a != b)   # where the answers differ
GROUP = ("A", "B", "B", "A", "B", "A")   # the answer each episode of the group gave
UPDATES = 3
TASK = Task(task_id="bandit", task_name="Which button sends the form?", website="http://bandit.test/")


def bandit_config(kind: str, epochs: int = 1, minibatches: int = 1):
    """The bare system's config (tiny random model), with rows as short as the bandit's and no images."""
    config = default.bare()
    config.loss.kind = kind                       # normaliser const (1/k), decoupled IS: the defaults
    config.sampler.capacity = config.learner.row_length = 64
    # one row a microbatch: the group's 6 steps are 2 distinct ones (one per answer), trained as
    # 2 merged rows (packing.merge_duplicates), so 2 minibatches have whole microbatches
    config.learner.rows_per_microbatch = 1
    config.learner.images_per_microbatch = 0      # text-only rows: the vision tower is not run
    config.learner.epochs, config.learner.minibatches = epochs, minibatches
    config.train.max_updates = UPDATES            # the learning-rate schedule's horizon
    return config


@functools.partial(jax.jit, static_argnames=("graphdef", "temperature", "chunk"))
def scores(params, microbatch, *, graphdef, temperature: float, chunk: int):
    """Our own scoring pass, compiled once for the file (every learner here has one structure)."""
    return target_logprobs(nnx.merge(graphdef, params), microbatch, temperature, chunk)


def token_logprobs(learner, response: list[int]) -> np.ndarray:
    """Log-prob of each response token after PROMPT under the learner's current weights,
    at the learner's temperature (what the sampler records as behaviour log-probs)."""
    n = len(response)
    row = StepRow(prompt_ids=np.asarray(PROMPT, np.int32), response_ids=np.asarray(response, np.int32),
                  pixel_values=np.zeros((0, PROCESSOR.still_patch_dim), np.uint8),
                  image_grid_thw=np.zeros((0, 3), np.int64),
                  behave_logprobs=np.zeros(n, np.float32), versions=np.zeros(n, np.int32))
    (microbatch,) = pack([row], learner.settings.packing, learner.config)
    loss = learner.settings.loss
    logprobs = scores(learner.params, microbatch, graphdef=learner.graphdef, temperature=loss.temperature,
                      chunk=loss.logit_chunk)
    return np.asarray(logprobs)[np.asarray(microbatch.loss_mask) > 0]


def answer_logprobs(learner) -> dict[str, np.ndarray]:
    """The log-prob of each token of each answer."""
    return {name: token_logprobs(learner, ids) for name, ids in ANSWERS.items()}


def sampled_group(learner, rewarded: str) -> list[Trajectory]:
    """The group as the sampler would hand it over: this version's log-probs of each answer."""
    behave = {name: token_logprobs(learner, ids) for name, ids in ANSWERS.items()}
    return [Trajectory(task=TASK, outcome="answered", reward=float(answer == rewarded), group_id="bandit-0",
                       episode_id=f"bandit-0-{i}", answer=answer,
                       steps=[Step(index=0, url=TASK.website, response=PROCESSOR.decode(ANSWERS[answer]), action={},
                                   prompt_ids=list(PROMPT), response_ids=list(ANSWERS[answer]),
                                   behave_logprobs=behave[answer].tolist(),
                                   versions=[learner.version] * len(ANSWERS[answer]))])
            for i, answer in enumerate(GROUP)]


def train_on_bandit(config, rewarded: str) -> tuple[dict, dict, list[dict]]:
    """(per-token answer log-probs before, the change after UPDATES updates, each update's measurements)."""
    model, _ = build_model(config)
    learner = make_learner(config, model, "rl")
    before, measured = answer_logprobs(learner), []
    for _ in range(UPDATES):
        group = sampled_group(learner, rewarded)
        advantages = episode_advantages(group, kind=config.loss.kind, normalizer=config.loss.normalizer,
                                        k=config.loss.k)
        measured.append(learner.update(step_rows(group, advantages, ScreenshotStore.in_memory(), PROCESSOR)))
    after = answer_logprobs(learner)
    return before, {name: after[name] - before[name] for name in ANSWERS}, measured


def assert_on_policy(measured: list[dict]) -> None:
    """Every update trained on its own version's samples: no lag, importance weights 1."""
    for m in measured:
        assert m["skipped"] == 0 and m["staleness_max"] == 0
        assert m["importance_weight_mean"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("rewarded", ["A", "B"])
def test_grpo_raises_the_rewarded_answer_and_lowers_the_other(rewarded):
    """GRPO (decoupled IS, 1/k): positive advantage for the rewarded answer, negative for the other."""
    before, change, measured = train_on_bandit(bandit_config("grpo"), rewarded)
    other = OTHER[rewarded]
    gained, lost = float(change[rewarded].sum()), float(change[other].sum())
    assert gained > 0.5, f"the rewarded answer {rewarded} did not gain: {gained:+.3f} (the other {lost:+.3f})"
    assert lost < -0.5, f"the unrewarded answer {other} did not lose: {lost:+.3f} (the rewarded {gained:+.3f})"
    assert_on_policy(measured)
    assert all(m["rows"] == len(GROUP) and m["rows_trained"] == 2 for m in measured)   # copies merged


@pytest.mark.parametrize("rewarded", ["A", "B"])
def test_raft_raises_the_rewarded_answer_and_so_takes_from_the_other(rewarded):
    """RAFT++ learns from the successes alone (advantage 1/T, nothing for failures). The
    unrewarded answer is never pushed down, and it gains on the tokens it shares with the
    rewarded one; where the two part, the rewarded token's gain is the other's loss."""
    before, change, measured = train_on_bandit(bandit_config("raft"), rewarded)
    other = OTHER[rewarded]
    gained = float(change[rewarded].sum())
    assert gained > 0.5, f"the rewarded answer {rewarded} did not gain: {gained:+.3f}"
    assert change[rewarded][PART] > 0 > change[other][PART], (
        f"where the answers part, {rewarded} {change[rewarded][PART]:+.3f} and {other} {change[other][PART]:+.3f}")
    assert_on_policy(measured)


def test_the_direction_holds_with_a_proximal_pass():
    """Two epochs of two minibatches: the later optimiser steps take the loss away from
    pi_prox (the ratio moves off 1 and the clip can act), through the separate proximal pass."""
    _, change, measured = train_on_bandit(bandit_config("grpo", epochs=2, minibatches=2), "A")
    assert all(m["proximal_pass"] and m["optimizer_steps"] == 4 for m in measured)
    assert any(m["clip_ratio"] > 0 for m in measured)
    gained, lost = float(change["A"].sum()), float(change["B"].sum())
    assert gained > 0.5 and lost < -0.5, f"rewarded A {gained:+.3f}, unrewarded B {lost:+.3f}"
