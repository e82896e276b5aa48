"""A browser-free web for the end-to-end benchmark on an accelerator host.

The pool, the screenshots, the sampler and the learner are the real ones; only the web is
modelled. Each episode's fate is drawn up front from an EnvironmentModel whose numbers
come from the local browsers (BENCHMARKS.md: "Browser steps", "Browser pool"): a fresh
context per episode, a lognormal browser time per step, and failures that run longer
than successes (most of them to the step limit, docs/algorithm.md#the-problem). Every step still renders a
1280x720 screenshot into the ScreenshotStore, processes it for the model on the host,
and asks the sampler for a response to a prompt of agent-step shape (task text, the last
two screenshots, a growing action history); the response's content does not steer the
episode.

    pool = SimulatedPool(EnvironmentModel(), store=store, pages=32, seed=0)
    policy = SyntheticPolicy(engine, processor, store, model_config, text_tokens=300,
                             max_new_tokens=64)
    async with pool:
        trajectory = await pool.run(task, policy, episode_id="e1", group_id="g1")
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import math
import random
import time

import numpy as np
from PIL import Image as PILImage

from asyncwebrl.records import LEVELS, Step, Task, Trajectory
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.sampler.engine import Engine, Image, Request
from benchmarks.workload import ordinary_token_limit


@dataclasses.dataclass(frozen=True)
class EnvironmentModel:
    episode_setup_s: float = 0.32            # fresh context + page + load + close (measured: 321 ms)
    step_median_s: float = 0.16              # observe + execute, one page on its own (measured: 160 ms)
    step_sigma: float = 0.5                  # lognormal spread of a step's browser time
    step_limits: tuple[int, int, int] = (6, 10, 14)     # easy, medium, hard (the embedded default's)
    success_rate: tuple[float, float, float] = (0.6, 0.4, 0.2)   # a policy part way through training
    success_length: float = 0.4              # a success answers after ~this share of the limit
    failure_at_limit: float = 0.7            # the rest of the failures answer wrongly, early

    def episode(self, level: str, rng: random.Random) -> tuple[int, bool]:
        """(steps, success) of one episode of a task at `level`."""
        index = LEVELS.index(level)
        limit = self.step_limits[index]
        success = rng.random() < self.success_rate[index]

        def early() -> int:
            return 1 + sum(rng.random() < self.success_length for _ in range(limit - 1))

        if success:
            return early(), True
        return (limit if rng.random() < self.failure_at_limit else early()), False

    def step_seconds(self, rng: random.Random) -> float:
        return self.step_median_s * math.exp(rng.gauss(0.0, self.step_sigma))


# one difficulty (number of rubric facts) inside each level's range: easy, medium, hard
LEVEL_DIFFICULTY = {"easy": 2, "medium": 5, "hard": 8}


def synthetic_tasks(count: int) -> list[Task]:
    """`count` tasks taking the three levels in turn (only the level matters here)."""
    return [Task(task_id=f"sim-{i}", task_name=f"simulated task {i}", website="about:blank",
                 difficulty=LEVEL_DIFFICULTY[LEVELS[i % len(LEVELS)]]) for i in range(count)]


def _screenshot_png(rng: np.random.Generator, size=(720, 1280)) -> bytes:
    """A page-like picture (flat regions, some blocks, a unique corner) as PNG."""
    picture = np.full(size + (3,), 245, np.uint8)
    for _ in range(12):
        top, left = rng.integers(0, size[0] - 60), rng.integers(0, size[1] - 200)
        picture[top:top + rng.integers(20, 60), left:left + rng.integers(60, 200)] = rng.integers(0, 255, 3)
    picture[:16, :16] = rng.integers(0, 255, (16, 16, 3))   # every step a new key
    out = io.BytesIO()
    PILImage.fromarray(picture).save(out, format="PNG", compress_level=1)
    return out.getvalue()


class SyntheticPolicy:
    """Prompts of agent-step shape for the real sampler: `text_tokens` of task text, the
    last two screenshots (image placeholders expanded as the processor does) and ~24
    tokens of action history per earlier step."""

    history_tokens_per_step = 24

    def __init__(self, engine: Engine, processor, store: ScreenshotStore, model_config, *, text_tokens: int = 300,
                 max_new_tokens: int = 64, seed: int = 0):
        self.engine, self.processor, self.store, self.config = engine, processor, store, model_config
        self.text_tokens, self.max_new_tokens = text_tokens, max_new_tokens
        self.rng = np.random.default_rng(seed)
        self.capacity = engine.settings.capacity
        self.ordinary = ordinary_token_limit(model_config)   # random text ids stay below the special tokens

    def task_text(self) -> list[int]:
        return self.rng.integers(0, self.ordinary, self.text_tokens).tolist()

    def _image(self, key: str) -> tuple[Image, list[int]]:
        pixels, grid = self.processor.process_images([self.store.get_array(key)])
        grid = tuple(int(g) for g in grid[0])
        c = self.config
        ids = [c.vision_start_token_id] + [c.image_token_id] * (math.prod(grid) // c.vision.merge_unit) + [
            c.vision_end_token_id]
        return Image(pixel_values=pixels, grid_thw=grid, key=key), ids

    def request(self, task_text: list[int], image_keys: list[str], step: int) -> Request:
        pictures, ids = [], list(task_text)
        for key in image_keys:
            picture, placeholders = self._image(key)
            pictures.append(picture)
            ids += placeholders
        history = self.history_tokens_per_step * step
        room = self.capacity - self.max_new_tokens - len(ids) - 1
        ids += self.rng.integers(0, self.ordinary, max(0, min(history, room))).tolist()
        return Request(input_ids=np.asarray(ids, np.int32), images=pictures, max_new_tokens=self.max_new_tokens)


class SimulatedPool:
    """BrowserPool's interface (async context manager, `run`) over an EnvironmentModel."""

    def __init__(self, model: EnvironmentModel, *, store: ScreenshotStore, pages: int, seed: int = 0):
        self.model, self.store = model, store
        self.pages = asyncio.Semaphore(pages)
        self.rng = random.Random(seed)
        self.pictures = np.random.default_rng(seed)

    async def __aenter__(self) -> "SimulatedPool":
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def run(self, task: Task, policy: SyntheticPolicy, *, episode_id: str = "", group_id: str = "") -> Trajectory:
        async with self.pages:
            return await self._episode(task, policy, episode_id, group_id)

    async def _episode(self, task: Task, policy: SyntheticPolicy, episode_id: str, group_id: str) -> Trajectory:
        started = time.perf_counter()
        length, success = self.model.episode(task.level, self.rng)
        limit = self.model.step_limits[LEVELS.index(task.level)]
        task_text = policy.task_text()
        await asyncio.sleep(self.model.episode_setup_s)
        steps: list[Step] = []
        held: list[str] = []   # this episode's store references, handed to the trajectory at the end
        try:
            for index in range(length):
                browser_started = time.perf_counter()
                await asyncio.sleep(self.model.step_seconds(self.rng))
                png = await asyncio.to_thread(_screenshot_png, self.pictures)
                key = await self.store.aput(png)
                held.append(key)
                shown = ([steps[-1].screenshot_key] if steps else []) + [key]
                policy_started = time.perf_counter()
                request = await asyncio.to_thread(policy.request, task_text, shown, index)
                response = await asyncio.wrap_future(policy.engine.submit(request))
                steps.append(Step(
                    index=index, url=task.website, response="", action={"name": "simulated"}, screenshot_key=key,
                    prompt_ids=request.input_ids.tolist(), image_keys=shown, response_ids=response.tokens.tolist(),
                    behave_logprobs=response.logprobs.tolist(), versions=response.versions.tolist(),
                    seconds_policy=time.perf_counter() - policy_started,
                    seconds_browser=policy_started - browser_started))
        except BaseException:   # cancelled (the trainer stopped) or the sampler failed
            self.store.free(held)
            raise
        answered = success or length < limit
        return Trajectory(task=task, steps=steps, outcome="answered" if answered else "limit",
                          reward=1.0 if success else 0.0, episode_id=episode_id, group_id=group_id, step_limit=limit,
                          seconds=time.perf_counter() - started)
