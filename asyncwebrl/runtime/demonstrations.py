"""Oracle demonstrations in the model's own token format: the supervised warm start's data.

The teacher acts exactly like the oracle, but every step also records what the model
would have been shown (the prompt the model policy builds, tokenized with the same
processor, screenshots by key) and the oracle's response as token ids ending with the
end-of-turn token. Those steps become training rows like any model step; their versions
are -1 (no model weights wrote them) and their behaviour log-probs 0 (unused by the
supervised loss).

At scale (browser.driver=http, text observations), `write_demonstration_rows` runs the
teacher on as many fresh training sites as asked (content is a pure function of kind,
variant and seed, so sites are unlimited) and streams the rows to a rows file
(`RowsFile`): token ids only, no screenshots.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import random
import sys
import time

import numpy as np

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.episode import EpisodeSettings
from asyncwebrl.rollout.observation import Observation
from asyncwebrl.rollout.policies import OraclePolicy, Reply
from asyncwebrl.rollout.pool import PoolSettings
from asyncwebrl.rollout.prompts import PromptBuilder
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks
from asyncwebrl.runtime.model_policy import encode_step
from asyncwebrl.runtime.settings import prompt_builder
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.site import TRAIN_VARIANTS, site_id_of
from asyncwebrl.web.sites import KINDS, make_site
from asyncwebrl.web.tasks import tasks_of_site


def demonstrate(config, web: LocalWeb, processor: Processor, store: ScreenshotStore, tasks: list[Task], *,
                phase: str = "train", label: str = "demonstrations", progress=sys.stderr,
                cut_share: float = 0.0) -> tuple[list[Trajectory], float]:
    """The oracle on these local tasks, through the model's prompt format: (trajectories,
    seconds). Their screenshots stay in `store` until the caller has built its rows.
    cut_share > 0: an imperfect teacher, which on that share of the tasks (`cuts_answer`)
    leaves the last fact out of its final answer, so those episodes fail."""
    held_out = [t.task_id for t in tasks if (t.local or {}).get("split") != "train" and phase == "train"]
    if held_out:   # a demonstration teaches what it shows: never a held-out site
        raise ValueError(f"{len(held_out)} demonstration tasks are not on training sites, e.g. {held_out[0]}")
    teacher = TeacherPolicy(OraclePolicy(web.session, config.agent.response_format), processor, store,
                            prompt_builder(config, processor), cut_share)
    environment = LocalEnvironment(web, browser_free=config.browser.driver == "http")
    return asyncio.run(run_tasks(tasks, teacher, environment, EpisodeSettings.from_config(config, phase),
                                 pool=PoolSettings.from_config(config), store=store, free_screenshots=False,
                                 label=label, progress=progress))


def cuts_answer(task: Task, share: float) -> bool:
    """Whether the imperfect teacher of `share` leaves the last fact out of this task's
    answer: a fixed draw per task, so whoever keeps its rows can tell which episodes failed
    on purpose."""
    return share > 0 and random.Random(f"cut-answer:{task.task_id}").random() < share


def without_last_fact(response: str) -> str:
    """The response with its answer cut at the answer's last ", " or "; " (the facts'
    separators in every generated task's answer). Any other action, and a one-fact answer,
    stay as they are."""
    head, _, rest = response.partition("<tool_call>\n")
    call = json.loads(rest.removesuffix("\n</tool_call>"))
    arguments = call["arguments"]
    cut = max(arguments["text"].rfind(", "), arguments["text"].rfind("; ")) if arguments["action"] == "answer" else -1
    if cut <= 0:
        return response
    arguments["text"] = arguments["text"][:cut]
    return f"{head}<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"


class TeacherPolicy:
    def __init__(self, oracle: OraclePolicy, processor: Processor, store: ScreenshotStore, prompts: PromptBuilder,
                 cut_share: float = 0.0):
        self.oracle, self.processor, self.store, self.prompts = oracle, processor, store, prompts
        self.cut_share = cut_share

    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "TeacherAgent":
        return TeacherAgent(self, task, self.oracle.begin(task, interaction=interaction, episode_id=episode_id))


class TeacherAgent:
    def __init__(self, policy: TeacherPolicy, task: Task, oracle_agent):
        self.policy, self.task, self.oracle_agent = policy, task, oracle_agent
        self.cuts = cuts_answer(task, policy.cut_share)

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        policy = self.policy
        encoded, image_keys = await asyncio.to_thread(encode_step, policy.prompts, policy.processor, policy.store,
                                                      self.task, steps, observation)
        reply = await self.oracle_agent.act(observation, steps)
        if self.cuts:
            reply = Reply(text=without_last_fact(reply.text))
        response_ids = np.asarray(policy.processor.encode_text(reply.text) + [policy.processor.special.eos], np.int32)
        return Reply(text=reply.text, prompt_ids=encoded["input_ids"], image_keys=list(image_keys),
                     response_ids=response_ids, logprobs=np.zeros(len(response_ids), np.float32),
                     versions=np.full(len(response_ids), -1, np.int32))


# ---------------------------------------------------------------- at scale


def training_site_ids(count: int, first_seed: int = 0) -> list[str]:
    """`count` training sites: every kind and training variant in turn, seeds from
    `first_seed` up. Test sites are variant 3, so none is ever among them."""
    combos = [(kind, variant) for kind in KINDS for variant in TRAIN_VARIANTS]
    seeds = itertools.count(first_seed)
    ids = []
    while len(ids) < count:
        seed = next(seeds)
        ids += [site_id_of(kind, variant, seed) for kind, variant in combos][:count - len(ids)]
    return ids


def site_tasks(site_id: str, per_site: int, rng: random.Random, short: int = 0) -> list[Task]:
    """Up to `per_site` tasks of one site, the levels in turn (uniform over levels), and up
    to `short` of its short tier (web/tasks.py TIERS)."""
    site = make_site(site_id)
    by_level: dict[str, list[Task]] = {}
    for task in tasks_of_site(site):
        by_level.setdefault(task.level, []).append(task)
    pools = [rng.sample(pool, len(pool)) for _, pool in sorted(by_level.items())]
    rng.shuffle(pools)
    chosen = [t for group in itertools.zip_longest(*pools) for t in group if t is not None][:per_site]
    if short:
        tier = tasks_of_site(site, "short")
        chosen += rng.sample(tier, min(short, len(tier)))
    return chosen


@dataclasses.dataclass
class RowsFile:
    """Supervised rows on disk: `PATH.npz` holds every row's prompt and response token ids
    (concatenated, with lengths), `PATH.jsonl` one line of provenance per row (task, site,
    step). Written in one go at the end (np.savez); read with `RowsFile.load`."""

    prompt_ids: list[np.ndarray] = dataclasses.field(default_factory=list)
    response_ids: list[np.ndarray] = dataclasses.field(default_factory=list)
    sources: list[dict] = dataclasses.field(default_factory=list)

    def add(self, prompt_ids, response_ids, source: dict) -> None:
        self.prompt_ids.append(np.asarray(prompt_ids, np.int32))
        self.response_ids.append(np.asarray(response_ids, np.int32))
        self.sources.append(source)

    def __len__(self) -> int:
        return len(self.sources)

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        pieces = [p for pair in zip(self.prompt_ids, self.response_ids) for p in pair]
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        dtype = np.uint16 if tokens.size == 0 or tokens.max() < 2**16 else np.int32
        np.savez(path + ".tmp.npz", tokens=tokens.astype(dtype),
                 prompt_lengths=np.array([len(p) for p in self.prompt_ids], np.int32),
                 response_lengths=np.array([len(r) for r in self.response_ids], np.int32))
        with open(path + ".jsonl.tmp", "w") as f:
            f.writelines(json.dumps(source) + "\n" for source in self.sources)
        os.replace(path + ".tmp.npz", path + ".npz")   # a crash never leaves half a rows file
        os.replace(path + ".jsonl.tmp", path + ".jsonl")

    def extend(self, other: "RowsFile") -> None:
        self.prompt_ids += other.prompt_ids
        self.response_ids += other.response_ids
        self.sources += other.sources

    @classmethod
    def load(cls, path: str) -> "RowsFile":
        data = np.load(path + ".npz")
        with open(path + ".jsonl") as f:
            sources = [json.loads(line) for line in f]
        rows, offset = cls(), 0
        tokens = data["tokens"].astype(np.int32)
        for p, r, source in zip(data["prompt_lengths"], data["response_lengths"], sources):
            rows.add(tokens[offset:offset + p], tokens[offset + p:offset + p + r], source)
            offset += p + r
        return rows


def write_demonstration_rows(config, processor: Processor, path: str, site_ids: list[str], *,
                             tasks_per_site: int = 4, chunk_sites: int = 50, progress=sys.stderr) -> dict:
    """The teacher on `tasks_per_site` tasks of each training site in `site_ids` (see
    training_site_ids), on the browser-free driver; the successful episodes' steps go to
    the rows file `path`. Returns counts and seconds."""
    if config.browser.driver != "http" or config.agent.observation != "text":
        raise ValueError("demonstrations at scale run on the browser-free driver: set --config.browser.driver=http "
                         "and --config.agent.observation=text")
    started = time.perf_counter()
    web, store, rows = LocalWeb(), ScreenshotStore.in_memory(), RowsFile()   # (text only: the store stays empty)
    ids = list(site_ids)
    rng = random.Random(f"demonstrations:{ids[0] if ids else ''}")
    episodes = solved = 0
    for start in range(0, len(ids), chunk_sites):
        chunk = [task for site_id in ids[start:start + chunk_sites] for task in site_tasks(site_id, tasks_per_site, rng)]
        trajectories, _ = demonstrate(config, web, processor, store, chunk, progress=None)
        episodes += len(trajectories)
        for trajectory in trajectories:
            if not trajectory.success:
                continue
            solved += 1
            for step in trajectory.steps:
                rows.add(step.prompt_ids, step.response_ids, {"task_id": trajectory.task.task_id,
                                                              "site": trajectory.task.local["site"], "step": step.index})
        if progress:
            print(f"[demonstrations] {min(start + chunk_sites, len(ids))}/{len(ids)} sites, {len(rows)} rows, "
                  f"{time.perf_counter() - started:.0f}s", file=progress, flush=True)
    rows.save(path)
    return {"sites": len(ids), "episodes": episodes, "solved": solved, "rows": len(rows),
            "distinct_sites": len({s["site"] for s in rows.sources}), "seconds": round(time.perf_counter() - started, 1)}
