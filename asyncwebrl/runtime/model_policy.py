"""The model as a policy: prompt -> tokens -> sampler -> response text
(docs/architecture.md#one-step-of-an-episode).

For every step the agent builds the Qwen3-VL chat prompt (PromptBuilder), fetches the
screenshots it names from the store, encodes both with the Processor, and awaits the
sampler engine. The Reply carries everything the learner needs later: prompt token ids
exactly as the sampler saw them, image keys, response ids, behaviour log-probs and the
weight version of every response token. Tokenizing and image resizing run in a worker
thread, so the browser event loop never waits on them.
"""

from __future__ import annotations

import asyncio

import numpy as np

from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Step, Task
from asyncwebrl.rollout.observation import Observation
from asyncwebrl.rollout.policies import PolicyFailure, PolicyUnavailable, Reply
from asyncwebrl.rollout.prompts import PromptBuilder
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.sampler.engine import Engine, EngineFailure, Image, Request


def encode_step(prompts: PromptBuilder, processor: Processor, store: ScreenshotStore, task: Task, steps: list[Step],
                observation: Observation) -> tuple[dict, list[str]]:
    """The model inputs of the next step's prompt (Processor.encode fields) and the
    screenshot keys it shows, in order.

    A text prompt over prompts.prompt_limit is built again with its page text shorter by
    the excess: the page gives way (with its cut note), never the task or the steps so
    far, so a long episode's prompt still fits the sampler's slot. Where the page alone
    cannot make room (the previous response shown in full was itself too long: a
    degenerate one re-encodes to several times its sampled tokens), that response is cut
    next; a prompt that still does not fit is returned as it is (the sampler refuses it)."""
    text_budget, response_budget = None, None
    while True:
        prompt = prompts.build(task, steps, observation, text_budget, response_budget)
        images = [store.get_array(key) for key in prompt.image_keys]
        encoded = processor.encode(prompt.messages, images)
        excess = len(encoded["input_ids"]) - prompts.prompt_limit
        if not prompts.prompt_limit or excess <= 0 or response_budget == 1:
            return encoded, prompt.image_keys
        if prompts.shows_text and text_budget != 1:   # the page first; its budget falls by the excess each round
            if text_budget is None:
                text_budget = prompts.text_budget or prompts.count_tokens(observation.text)
            text_budget = max(1, text_budget - excess)
            continue
        if response_budget is None:   # then the responses shown in full, from the longest's length
            response_budget = max([prompts.count_tokens(step.response) for step in prompts.shown_in_full(steps)],
                                  default=1)
        response_budget = max(1, response_budget - excess)


class ModelPolicy:
    def __init__(self, engine: Engine, processor: Processor, store: ScreenshotStore, prompts: PromptBuilder, *,
                 max_new_tokens: int):
        self.engine = engine
        self.processor = processor
        self.store = store
        self.prompts = prompts
        self.max_new_tokens = max_new_tokens

    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "ModelAgent":
        if interaction != self.prompts.interaction:
            raise ValueError(f"the prompts are for {self.prompts.interaction!r}, the episode uses {interaction!r}")
        return ModelAgent(self, task)


class ModelAgent:
    def __init__(self, policy: ModelPolicy, task: Task):
        self.policy = policy
        self.task = task

    def request(self, observation: Observation, steps: list[Step]) -> tuple[Request, list[str]]:
        """The sampler request for this step, and the screenshot keys it shows."""
        policy = self.policy
        encoded, image_keys = encode_step(policy.prompts, policy.processor, policy.store, self.task, steps, observation)
        bounds = np.concatenate([[0], np.cumsum(encoded["image_grid_thw"].prod(axis=1))])
        pictures = [Image(pixel_values=encoded["pixel_values"][a:b], grid_thw=tuple(int(x) for x in grid), key=key)
                    for key, grid, a, b in zip(image_keys, encoded["image_grid_thw"], bounds[:-1], bounds[1:])]
        request = Request(input_ids=encoded["input_ids"], images=pictures, max_new_tokens=policy.max_new_tokens)
        return request, image_keys

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        request, image_keys = await asyncio.to_thread(self.request, observation, steps)
        try:
            response = await asyncio.wrap_future(self.policy.engine.submit(request))
        except EngineFailure as failure:  # the engine broke: the run stops (runtime/orchestrator.py)
            raise PolicyFailure(str(failure)) from failure
        except (ValueError, RuntimeError) as refused:  # too long for a slot, or the engine stopped
            raise PolicyUnavailable(str(refused)) from refused
        # The text leaves special tokens out: it goes back into later prompts, where an
        # <|image_pad|> the model wrote would become an image placeholder without an image.
        # the sampler's arrays as they are: a prompt is thousands of ids, which no step turns into a list
        return Reply(text=self.policy.processor.decode(response.tokens, skip_special_tokens=True),
                     prompt_ids=request.input_ids, image_keys=list(image_keys), response_ids=response.tokens,
                     logprobs=response.logprobs, versions=response.versions)
