"""Oracle demonstrations in the model's own token format: the supervised warm start's data.

The teacher acts exactly like the oracle, but every step also records what the model
would have been shown (the prompt the model policy builds, tokenized with the same
processor, screenshots by key) and the oracle's response as token ids ending with the
end-of-turn token. Those steps become training rows like any model step; their versions
are -1 (no model weights wrote them) and their behaviour log-probs 0 (unused by the
supervised loss).
"""

from __future__ import annotations

import asyncio

from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.environment import LocalEnvironment
from asyncwebrl.rollout.page import Observation
from asyncwebrl.rollout.policies import OraclePolicy, Reply
from asyncwebrl.rollout.prompts import PromptBuilder
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks
from asyncwebrl.runtime.model_policy import encode_step
from asyncwebrl.runtime.settings import episode_settings, pool_arguments, prompt_builder
from asyncwebrl.web.server import LocalWeb


def demonstrate(config, web: LocalWeb, processor: Processor, store: ScreenshotStore, tasks: list[Task], *,
                phase: str = "train", label: str = "demonstrations") -> tuple[list[Trajectory], float]:
    """The oracle on these local tasks, through the model's prompt format: (trajectories,
    seconds). Their screenshots stay in `store` until the caller has built its rows."""
    teacher = TeacherPolicy(OraclePolicy(web.session, config.agent.response_format), processor, store,
                            prompt_builder(config))
    return asyncio.run(run_tasks(tasks, teacher, LocalEnvironment(web), episode_settings(config, phase), store=store,
                                 free_screenshots=False, label=label, **pool_arguments(config)))


class TeacherPolicy:
    def __init__(self, oracle: OraclePolicy, processor: Processor, store: ScreenshotStore, prompts: PromptBuilder):
        self.oracle, self.processor, self.store, self.prompts = oracle, processor, store, prompts

    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "TeacherAgent":
        return TeacherAgent(self, task, self.oracle.begin(task, interaction=interaction, episode_id=episode_id))


class TeacherAgent:
    def __init__(self, policy: TeacherPolicy, task: Task, oracle_agent):
        self.policy, self.task, self.oracle_agent = policy, task, oracle_agent

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        policy = self.policy
        encoded, image_keys = await asyncio.to_thread(encode_step, policy.prompts, policy.processor, policy.store,
                                                      self.task, steps, observation)
        reply = await self.oracle_agent.act(observation, steps)
        response_ids = policy.processor.encode_text(reply.text) + [policy.processor.special.eos]
        return Reply(text=reply.text, prompt_ids=encoded["input_ids"].tolist(), image_keys=list(image_keys),
                     response_ids=response_ids, logprobs=[0.0] * len(response_ids),
                     versions=[-1] * len(response_ids))
