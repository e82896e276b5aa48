"""Settings for tests that build one part without running main.py: the bare config's
(configs/default.py:bare, where every default lives), changed where a test says so.

    from bare_settings import episode_settings   # tests/bare_settings.py
"""

import dataclasses

from asyncwebrl.envs.judge import JudgeSettings
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.pool import PoolSettings
from asyncwebrl.rollout.prompts import PromptBuilder
from configs.default import bare


def episode_settings(phase: str, **changes) -> EpisodeSettings:
    """The bare config's episodes of `phase`, but with the tasks' own step limits
    (records.STEP_LIMITS, the phase's) unless `changes` name some."""
    return dataclasses.replace(EpisodeSettings.from_config(bare(), phase), **{"step_limits": None, **changes})


def pool_settings(**changes) -> PoolSettings:
    """The bare config's episode pool (browser.*: 4 pages on one Chromium)."""
    return dataclasses.replace(PoolSettings.from_config(bare()), **changes)


def prompt_builder(**changes) -> PromptBuilder:
    """The bare config's prompts (agent.*), but with the page text never cut and no limit on
    a prompt (no tokenizer counts them) unless `changes` say."""
    agent = bare().agent
    return PromptBuilder(**{"interaction": agent.interaction, "memory": agent.memory,
                            "system_message": agent.system_message, "response_format": agent.response_format,
                            "observation": agent.observation, "text_budget": 0, "prompt_limit": 0, **changes})


def engine_settings(temperature: float, **changes):
    """The bare config's sampler engine at `temperature`, with no stop tokens unless `changes` name some."""
    from asyncwebrl.sampler import EngineSettings   # JAX: only for the tests that sample

    return dataclasses.replace(EngineSettings.from_config(bare(), temperature=temperature, top_p=1.0, stop_token_ids=()),
                               **changes)


def judge_settings(**changes) -> JudgeSettings:
    """The bare config's judge (which names no endpoint: `changes` do)."""
    return dataclasses.replace(JudgeSettings.from_config(bare()), **changes)


def loss_settings(**changes):
    """The bare config's RL loss."""
    from asyncwebrl.learner.train import LossSettings   # JAX: only for the tests that train

    return dataclasses.replace(LossSettings.from_config(bare()), **changes)


def optimizer_settings(**changes):
    """The bare config's optimiser (its schedule over the bare run's updates unless `changes` say)."""
    from asyncwebrl.learner.train import OptimizerSettings

    return dataclasses.replace(OptimizerSettings.from_config(bare()), **changes)


def model_options(**changes) -> dict:
    """The bare config's model.* as Qwen3VL's keyword arguments (float32 parameters and
    matmuls, XLA attention, no remat)."""
    model = bare().model
    return {"dtype": model.compute_dtype or model.dtype, "param_dtype": model.dtype, "remat": model.remat,
            "attention": model.attention, "residual_dtype": model.residual_dtype, **changes}


def pretrained_options(**changes) -> dict:
    """The bare config's model.* as load_pretrained's keyword arguments."""
    model = bare().model
    return {"dtype": model.dtype, "compute_dtype": model.compute_dtype or model.dtype, "remat": model.remat,
            "attention": model.attention, "residual_dtype": model.residual_dtype, **changes}
