"""The model as the acting policy: real Chromium, the local web, the tiny model behind
the sampler engine. An untrained model fails the task; what is checked is that every step
carries what the learner needs, consistent with what the sampler saw."""

import asyncio

import numpy as np
import pytest
from flax import nnx

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.model import Qwen3VL, preset
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks
from asyncwebrl.runtime.model_policy import ModelPolicy
from asyncwebrl.sampler import Engine
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks
from bare_settings import (engine_settings, episode_settings, model_options, pool_settings,  # tests/bare_settings.py
                           prompt_builder)

TRAIN = episode_settings("train", interaction="set_of_marks")
# the prompts of a pretrained checkpoint: the system message, the memory response format
FULL_PROMPTS = {"interaction": "set_of_marks", "system_message": True, "response_format": "memory"}


@pytest.fixture(scope="module")
def web():
    with LocalWeb() as server:
        yield server


def test_model_policy_episode_records_tokens_logprobs_and_versions(web):
    processor = Processor.embedded()
    model = Qwen3VL(preset("tiny"), **model_options(), rngs=nnx.Rngs(0))
    settings = engine_settings(1.0, slots=2, capacity=4096, prompt_buckets=(512, 2048), max_images=2,
                               patches_per_image=256, stop_token_ids=(processor.special.eos,))
    store = ScreenshotStore.in_memory()
    engine = Engine(model, settings, version=7)
    policy = ModelPolicy(engine, processor, store, prompt_builder(**FULL_PROMPTS), max_new_tokens=24)
    task = next(t for t in generate_tasks("train", 1) if t.difficulty <= 3)  # easy: 10 steps at most
    with engine:
        (trajectory,), _ = asyncio.run(run_tasks([task], policy, LocalEnvironment(web), TRAIN, store=store,
                                                 pool=pool_settings(concurrency=1), progress=None))
    assert trajectory.outcome in ("answered", "limit") and trajectory.reward is not None
    assert len(trajectory.steps) >= 1
    pad = processor.special.image_pad
    for step in trajectory.steps:
        assert 0 < len(step.response_ids) == len(step.behave_logprobs) == len(step.versions) <= 24
        assert set(step.versions) == {7}
        # the sampler's own arrays, never lists of Python numbers (a prompt is thousands of ids)
        assert [step.prompt_ids.dtype, step.response_ids.dtype, step.versions.dtype] == [np.int32] * 3
        assert step.behave_logprobs.dtype == np.float32
        assert all(np.isfinite(step.behave_logprobs)) and max(step.behave_logprobs) <= 0
        assert len(step.image_keys) == min(step.index + 1, 2)       # history 1: previous + current screenshot
        assert step.image_keys[-1] == step.screenshot_key
        runs = np.diff(np.concatenate([[0], np.asarray(step.prompt_ids) == pad, [0]]).astype(int))
        assert (runs == 1).sum() == len(step.image_keys)              # one placeholder run per screenshot
        assert processor.decode(step.prompt_ids).startswith("<|im_start|>system\n")
        assert step.response == processor.decode(step.response_ids, skip_special_tokens=True)
    assert store.stats.entries == 0  # screenshots freed after the episode was judged
    assert engine.stats["vision_cache_hits"] >= len(trajectory.steps) - 1  # each screenshot is shown twice


def test_teacher_demonstrations_become_training_rows_in_the_model_format(web):
    """The oracle acting through the teacher: each step holds the prompt the model policy
    would build and the oracle's text as tokens + end-of-turn; step_rows turns them into
    learner rows with the pixels of exactly the screenshots the prompt shows."""
    from asyncwebrl.rollout.policies import OraclePolicy
    from asyncwebrl.runtime.demonstrations import TeacherPolicy
    from asyncwebrl.runtime.rows import step_rows

    processor, store = Processor.embedded(), ScreenshotStore.in_memory()
    teacher = TeacherPolicy(OraclePolicy(web.session, "memory"), processor, store, prompt_builder(**FULL_PROMPTS))
    task = next(t for t in generate_tasks("train", 1) if t.difficulty <= 3)
    (trajectory,), _ = asyncio.run(run_tasks([task], teacher, LocalEnvironment(web), TRAIN, store=store,
                                             pool=pool_settings(concurrency=1), progress=None, free_screenshots=False))
    assert trajectory.success and len(trajectory.steps) >= 2
    rows = step_rows([trajectory], [0.5], store, processor)
    assert len(rows) == len(trajectory.steps)
    for step, row in zip(trajectory.steps, rows):
        assert step.response_ids[-1] == processor.special.eos and set(step.versions) == {-1}
        assert processor.decode(step.response_ids[:-1]) == step.response
        assert processor.decode(step.prompt_ids).startswith("<|im_start|>system\n")
        placeholders = int((row.prompt_ids == processor.special.image_pad).sum())
        assert len(row.image_grid_thw) == len(step.image_keys)
        assert placeholders == int(row.image_grid_thw.prod(axis=1).sum()) // 4 == len(row.pixel_values) // 4
        assert row.advantage == 0.5
        for field in ("prompt_ids", "response_ids", "behave_logprobs", "versions"):   # taken as they are, no copy
            assert np.shares_memory(getattr(row, field), getattr(step, field)), field
    store.free(trajectory.screenshot_keys())
    assert store.stats.entries == 0


def test_the_oracle_answering_in_shorter_formats_takes_the_same_actions(web):
    """response_format="action" (the embedded default): the oracle's responses are the tool
    call alone, short enough for the default's 192 new tokens; "memory+action": the Memory
    line (the same Memory, growing as facts are read) and the tool call; the actions are
    those of the full memory-additive format."""
    from asyncwebrl.rollout.policies import OraclePolicy
    from asyncwebrl.rollout.response import parse_response

    task = next(t for t in generate_tasks("train", 1) if t.difficulty >= 2 and t.local["template"] == "shop.lookup")
    actions, responses = {}, {}
    for response_format in ("memory", "memory+action", "action"):
        (trajectory,), _ = asyncio.run(run_tasks(
            [task], OraclePolicy(web.session, response_format), LocalEnvironment(web),
            TRAIN, pool=pool_settings(concurrency=1), progress=None))
        assert trajectory.success
        actions[response_format] = [step.action for step in trajectory.steps]
        responses[response_format] = [step.response for step in trajectory.steps]
    assert actions["action"] == actions["memory+action"] == actions["memory"]
    memories = [parse_response(r).memory for r in responses["memory+action"]]
    assert memories == [parse_response(r).memory for r in responses["memory"]] and memories[-1] and not memories[0]
    assert all(r.startswith("Memory: {") and r.count("\n") == 3 for r in responses["memory+action"])
    assert all(r.startswith("<tool_call>") and r.endswith("</tool_call>") and len(r.encode()) < 192
               for r in responses["action"])
    assert all(r.startswith("Memory: ") for r in responses["memory"])
    with pytest.raises(ValueError, match="response format"):
        OraclePolicy(web.session, "terse")
