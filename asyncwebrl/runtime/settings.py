"""Config -> the settings of the browser side (episodes, pool, prompts). No JAX here:
evaluating the oracle or the random policy must not load it."""

from __future__ import annotations

from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.prompts import PromptBuilder


def episode_settings(config, phase: str) -> EpisodeSettings:
    return EpisodeSettings(
        interaction=config.agent.interaction,
        phase=phase,
        viewport=(config.agent.viewport_width, config.agent.viewport_height),
        timeout_s=config.browser.timeout_s,
        step_deadline_s=config.browser.step_deadline_s,
        step_limits=tuple(config.agent.train_step_limits if phase == "train" else config.agent.test_step_limits),
    )


def pool_arguments(config) -> dict:
    """run_tasks' browser-pool keywords."""
    return dict(concurrency=config.browser.pages, pages_per_browser=config.browser.pages_per_browser,
                recycle_after=config.browser.recycle_after, executable_path=config.browser.executable_path)


def prompt_builder(config) -> PromptBuilder:
    return PromptBuilder(config.agent.interaction, memory=config.agent.memory)
