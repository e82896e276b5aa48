"""Trajectories -> learner step rows (docs/architecture.md#from-episodes-to-an-update).

Each model step becomes one row: the prompt exactly as the sampler saw it (token ids,
image placeholders expanded), the response ids, the behaviour log-probs and versions,
and the pixels of the screenshots the prompt named, re-read from the store by key and
processed the way the policy processed them. A screenshot shown in two prompts is
processed once per call, and its key travels with the rows so that the learner encodes
it once per microbatch.
"""

from __future__ import annotations

import numpy as np

from asyncwebrl.learner.choices import loss_kind
from asyncwebrl.learner.packing import StepRow
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Trajectory, trained_reward
from asyncwebrl.rollout.screenshots import ScreenshotStore


def episode_advantages(trajectories: list[Trajectory], *, kind: str, normalizer: str, k: float,
                       reward: str = "success") -> np.ndarray:
    """The per-step advantage of each episode (the same for all its response tokens), as
    the loss kind makes it from the trained reward (rl.reward)."""
    advantages = loss_kind(kind).advantages
    if advantages is None:
        raise ValueError(f"loss kind {kind!r} learns from demonstrations: it makes no advantages from rewards")
    return advantages([trained_reward(t, reward) for t in trajectories], [t.group_id for t in trajectories],
                      [len(t.steps) for t in trajectories], normalizer=normalizer, k=k)


def step_rows(trajectories: list[Trajectory], advantages, store: ScreenshotStore, processor: Processor) -> list[StepRow]:
    """One row per step that carries tokens; advantages[i] is episode i's per-step advantage."""
    pixels: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def image(key: str):
        if key not in pixels:
            pixels[key] = processor.process_images([store.get_array(key)])
        return pixels[key]

    rows = []
    for trajectory, advantage in zip(trajectories, advantages):
        for step in trajectory.steps:
            if len(step.response_ids) == 0:   # a step no model wrote
                continue
            images = [image(key) for key in step.image_keys]
            rows.append(StepRow(
                prompt_ids=np.asarray(step.prompt_ids, np.int32),
                response_ids=np.asarray(step.response_ids, np.int32),
                pixel_values=(np.concatenate([p for p, _ in images]) if images
                              else np.zeros((0, processor.still_patch_dim), np.uint8)),
                image_grid_thw=np.concatenate([g for _, g in images]) if images else np.zeros((0, 3), np.int64),
                behave_logprobs=np.asarray(step.behave_logprobs, np.float32),
                versions=np.asarray(step.versions, np.int32),
                advantage=float(advantage),
                image_keys=tuple(step.image_keys)))
    return rows
