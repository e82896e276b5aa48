"""Policies that need no model: the scripted oracle and a random baseline.

A policy starts one agent per episode (`begin`); the agent turns each observation (and
the episode's steps so far) into a response text in the memory-additive format (the
oracle can also answer with the tool call alone), exactly as a model would. The model
policy (asyncwebrl.runtime.model_policy) implements the same two methods and fills the
token fields.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any, Callable, Protocol

import numpy as np

from asyncwebrl.records import Step, Task, no_tokens
from asyncwebrl.rollout.observation import Element, Observation, pixels_to_grid
from asyncwebrl.rollout.response import ELEMENT_INTERACTIONS, GRID, check_response_format, format_response
from asyncwebrl.web.walker import fill_placeholders


@dataclasses.dataclass(eq=False)   # identity: its token fields are arrays, whose == is elementwise
class Reply:
    """What a policy answers a step with; the token fields (numpy arrays, as Step's) are a
    model's only."""
    text: str
    prompt_ids: np.ndarray = no_tokens(np.int32)
    image_keys: list[str] = dataclasses.field(default_factory=list)
    response_ids: np.ndarray = no_tokens(np.int32)
    logprobs: np.ndarray = no_tokens(np.float32)
    versions: np.ndarray = no_tokens(np.int32)


class PolicyUnavailable(Exception):
    """The policy cannot act on this step for a reason that is not the model's choice (the
    prompt outgrew the sampler's context, the sampler stopped). The episode ends as
    crashed: excluded from success rates and from training, never scored 0."""


class PolicyFailure(Exception):
    """The policy is broken, not this step (its sampler's device failed): every episode
    would fail the same way, so the episode loop does not catch it and the run stops with
    it. Never a browser failure."""


class Agent(Protocol):
    async def act(self, observation: Observation, steps: list[Step]) -> Reply: ...


class Policy(Protocol):
    def begin(self, task: Task, *, interaction: str, episode_id: str) -> Agent: ...


# -- oracle ---------------------------------------------------------------------------
class OraclePolicy:
    """Solves generated local tasks by following their plans through the action interface.

    `session_of(episode_id, site_id)` gives the oracle the episode's server state, which
    it reads only to quote a confirmation code that is on screen anyway."""

    def __init__(self, session_of: Callable[[str, str], dict[str, Any]], response_format: str):
        self.session_of = session_of
        self.response_format = check_response_format(response_format)

    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "OracleAgent":
        if not task.local or "oracle" not in task.local:
            raise ValueError(f"task {task.task_id} has no oracle plan (only generated local tasks do)")
        session = lambda: self.session_of(episode_id, task.local["site"])  # noqa: E731
        return OracleAgent(task.local["oracle"], interaction, session, self.response_format, task.task_name)


class OracleAgent:
    def __init__(self, plan: list[dict], interaction: str, session: Callable[[], dict], response_format: str,
                 instruction: str):
        self.plan = plan
        self.instruction = instruction
        self.response_format = response_format
        self.interaction = interaction
        self.session = session
        self.cursor = 0
        self.memory: dict[str, str] = {}
        self.last_move = {m["subtask"]: i for i, m in enumerate(plan)}  # subtask -> its last move
        self.misses = 0

    def _progress(self) -> dict[str, str]:
        return {s: "finished" if self.cursor > last else "not finished" for s, last in self.last_move.items()}

    def _reply(self, intention: str, sentence: str, arguments: dict) -> Reply:
        return Reply(format_response(dict(self.memory), self._progress(), intention, sentence, arguments,
                                     self.response_format))

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        while self.plan[self.cursor]["op"] == "note":  # facts on this screen go to Memory first
            session = self.session()
            self.memory.update({k: fill_placeholders(v, session) for k, v in self.plan[self.cursor]["memory"].items()})
            self.cursor += 1
        move = self.plan[self.cursor]
        if move["op"] == "answer":
            self.cursor += 1
            text = fill_placeholders(move["text"], self.session())
            return self._reply(move["subtask"], move["say"], {"action": "answer", "text": text})
        element = _find(observation.elements, move["oid"])
        if element is None:
            # The page may still be settling; wait once, then give up visibly.
            self.misses += 1
            if self.misses > 1:
                self.cursor = len(self.plan) - 1
                return self._reply(move["subtask"], "Give up.", {"action": "answer", "text": f"oracle lost: no {move['oid']}"})
            return self._reply(move["subtask"], "Wait for the page.", {"action": "wait", "time": 1})
        self.misses = 0
        _, centre_y = element.centre
        if not element.mark:  # off screen: scroll towards it first
            direction = "down" if centre_y >= observation.viewport[1] else "up"
            return self._reply(move["subtask"], f"Scroll {direction} to find the target.", {"action": "scroll", "direction": direction})
        if self.interaction == "labels" and self._named(element, observation):
            target = {"element": element.label}
        elif self.interaction in ELEMENT_INTERACTIONS:
            target = {"element_id": element.mark}
        else:
            target = {"coordinate": pixels_to_grid(*element.centre, observation.viewport)}
        self.cursor += 1
        if move["op"] == "type":
            return self._reply(move["subtask"], move["say"], {"action": "type", **target, "text": move["text"]})
        return self._reply(move["subtask"], move["say"], {"action": "left_click", **target})

    def _named(self, element: Element, observation: Observation) -> bool:
        """labels: the oracle names an element by label where the instruction names it (a
        department, an event, a person: the choice among siblings becomes a copy of the
        instruction's words) and no element before it has that label; by number otherwise,
        as under set_of_marks (menus, fields, buttons: what a warm start trained on numbers
        already does). Not the link home: its label is the site's name, which every
        instruction mentions."""
        label = element.label
        in_instruction = re.search(rf"(?<!\w){re.escape(label)}(?!\w)", self.instruction) is not None
        return bool(label) and element.oid != "home" and in_instruction and observation.labelled(label) is element


def _find(elements: list[Element], oid: str) -> Element | None:
    matches = [e for e in elements if e.oid == oid]
    visible = [e for e in matches if e.mark]
    return (visible or matches or [None])[0]


# -- random ---------------------------------------------------------------------------
_WORDS = ["laptop", "price", "search", "room", "email", "2026", "done", "yes", "book", "blue"]


class RandomPolicy:
    """Uniformly random actions; answers a few random words now and then."""

    def __init__(self, seed: int, answer_probability: float = 0.05):
        self.seed = seed
        self.answer_probability = answer_probability

    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "RandomAgent":
        return RandomAgent(random.Random(f"{self.seed}:{episode_id}"), interaction, self.answer_probability)


class RandomAgent:
    def __init__(self, rng: random.Random, interaction: str, answer_probability: float):
        self.rng, self.interaction, self.answer_probability = rng, interaction, answer_probability

    def _target(self, observation: Observation) -> dict:
        marked = observation.marked()
        if self.interaction in ELEMENT_INTERACTIONS and marked:
            return {"element_id": self.rng.choice(marked).mark}
        if self.interaction in ELEMENT_INTERACTIONS:
            return {"element_id": self.rng.randint(1, 20)}
        return {"coordinate": [self.rng.randint(0, GRID), self.rng.randint(0, GRID)]}

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        rng = self.rng
        if rng.random() < self.answer_probability:
            arguments = {"action": "answer", "text": " ".join(rng.sample(_WORDS, 2))}
        else:
            # (a text observation shows the whole page: scrolling it does nothing)
            moves = ["left_click", "left_click", "left_click", "type", "go_back", "wait"]
            name = rng.choice(moves if observation.text else moves + ["scroll"])
            arguments = {"action": name}
            if name in ("left_click", "type"):
                arguments.update(self._target(observation))
            if name == "type":
                arguments["text"] = rng.choice(_WORDS)
            elif name == "scroll":
                arguments["direction"] = rng.choice(["up", "down"])
            elif name == "wait":
                arguments["time"] = 0.1
        # the full format, whose Action sentence step summaries and the viewer show
        return Reply(format_response({}, {}, "explore", f"Random {arguments['action']}.", arguments, "memory"))
