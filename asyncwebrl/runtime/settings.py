"""Config -> the browser side's screenshot store, prompts and environment (episodes and the
pool have their settings' from_config). No JAX here: evaluating the oracle or the random
policy must not load it."""

from __future__ import annotations

from asyncwebrl.envs import Environment, environment_class
from asyncwebrl.rollout.prompts import PromptBuilder
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.server import LocalWeb


def screenshot_store(config, purpose: str, host: int = 0) -> ScreenshotStore:
    """config.screenshots' store for one phase (demonstrations, eval, rl) on one host
    (process). Reference counts live in each store object, so in a file store, which other
    phases and hosts may share, each one's keys stay under host<i>/<purpose>/: no store
    frees another's screenshots."""
    namespace = f"host{host}/{purpose}/" if config.screenshots.driver == "file" else ""
    return ScreenshotStore(config.screenshots.driver, config.screenshots.path, namespace=namespace)


def prompt_builder(config, processor) -> PromptBuilder:
    """The prompts of the model (and of the teacher that writes its demonstrations);
    page texts are cut at agent.text_budget tokens of the model's own tokenizer, and
    shorter where the whole prompt would leave the response no room in a sampler slot."""
    return PromptBuilder(config.agent.interaction, memory=config.agent.memory,
                         system_message=config.agent.system_message, response_format=config.agent.response_format,
                         observation=config.agent.observation, text_budget=config.agent.text_budget,
                         count_tokens=lambda text: len(processor.encode_text(text)),
                         prompt_limit=config.sampler.capacity - config.sampler.max_new_tokens)


def make_environment(config, web: LocalWeb, store: ScreenshotStore) -> Environment:
    """Where config.tasks.source's tasks run and how they are judged."""
    source = environment_class(config.tasks.source)
    if config.browser.driver == "http" and not source.runs_browser_free:
        raise ValueError(f"browser.driver=http runs the local web only; tasks.source={config.tasks.source!r} "
                         "needs browser.driver=chromium")
    return source.from_config(config, web, store)
