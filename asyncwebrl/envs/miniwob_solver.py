"""A scripted MiniWoB++ policy for a few pages: a check that the pages, the episode hooks
and the action interface work together, and an upper reference beside the random
baseline. It reads the instruction the page posed and acts through the same interface
as a model (coordinates or element ids), finding its targets in the observation's
element list, never in the page's internals.

Solved pages: SOLVED_PAGES. On any other page, or when a target is missing, it answers
"cannot solve", which scores 0.
"""

from __future__ import annotations

import re

from asyncwebrl.records import Step, Task
from asyncwebrl.rollout.observation import Element, Observation, pixels_to_grid
from asyncwebrl.rollout.policies import Reply
from asyncwebrl.rollout.response import ELEMENT_INTERACTIONS, format_response

# A move: ("click", element text) or ("type", field position among the text fields, text).
_PLANS = {
    "click-button": (r'Click on the "(.+)" button\.', lambda m: [("click", m[1])]),
    "click-tab": (r"Click on Tab #(\d+)\.", lambda m: [("click", f"Tab #{m[1]}")]),
    "click-checkboxes": (r"Select (.*) and click Submit\.",
                         lambda m: [("click", name) for name in _listed(m[1])] + [("click", "Submit")]),
    "click-button-sequence": (r"Click button (\w+), then click button (\w+)\.",
                              lambda m: [("click", m[1]), ("click", m[2])]),
    "focus-text": (r"Focus into the textbox\.", lambda m: [("type", 0, "")]),
    "enter-text": (r'Enter "(.*)" into the text field and press Submit\.',
                   lambda m: [("type", 0, m[1]), ("click", "Submit")]),
    "enter-password": (r'Enter the password "(.*)" into both text fields and press submit\.',
                       lambda m: [("type", 0, m[1]), ("type", 1, m[1]), ("click", "Submit")]),
    "login-user": (r'Enter the username "(.*)" and the password "(.*)" into the text fields and press login\.',
                   lambda m: [("type", 0, m[1]), ("type", 1, m[2]), ("click", "Login")]),
}
SOLVED_PAGES = tuple(_PLANS)


def _listed(names: str) -> list[str]:
    return [] if names == "nothing" else names.split(", ")


class MiniWobScriptedPolicy:
    def begin(self, task: Task, *, interaction: str, episode_id: str) -> "MiniWobScriptedAgent":
        page = (task.local or {}).get("miniwob", {}).get("name", "")
        plan = []
        if page in _PLANS:
            pattern, moves = _PLANS[page]
            match = re.fullmatch(pattern, task.task_name)
            plan = moves(match) if match else []
        return MiniWobScriptedAgent(plan, interaction)


class MiniWobScriptedAgent:
    def __init__(self, plan: list[tuple], interaction: str):
        self.plan, self.interaction = list(plan), interaction

    def _target(self, element: Element, observation: Observation) -> dict:
        if self.interaction in ELEMENT_INTERACTIONS:
            return {"element_id": element.mark}
        return {"coordinate": pixels_to_grid(*element.centre, observation.viewport)}

    async def act(self, observation: Observation, steps: list[Step]) -> Reply:
        element = _find(self.plan[0], observation) if self.plan else None
        if element is None:
            arguments, sentence = {"action": "answer", "text": "cannot solve"}, "Give up."
        elif self.plan[0][0] == "click":
            arguments, sentence = {"action": "left_click", **self._target(element, observation)}, "Click it."
            self.plan.pop(0)
        else:
            arguments = {"action": "type", **self._target(element, observation), "text": self.plan.pop(0)[2]}
            sentence = "Type into the field."
        # the full format, whose Action sentence step summaries and the viewer show
        return Reply(format_response({}, {}, "solve", sentence, arguments, "memory"))


def _find(move: tuple, observation: Observation) -> Element | None:
    visible = observation.marked()
    if move[0] == "click":
        return next((e for e in visible if e.text.lower() == move[1].lower()), None)
    fields = [e for e in visible if e.tag in ("input", "textarea") and e.type in ("", "text", "password")]
    return fields[move[1]] if move[1] < len(fields) else None
