"""PromptBuilder: the agent's prompt as Qwen3-VL chat messages
(docs/algorithm.md#observations-and-prompts).

    system     how to answer: tool, actions, the memory-additive (or compressive) format
               (optional: left out for a model trained from scratch)
    user       the task and start URL; one-line summaries of (the last 10) steps older than the window;
               then, for each of the last H steps, its screenshot ...
    assistant  ... and the raw response written then
    user       the current screenshot, URL and title (and the element list in
               set-of-marks mode, and the last action's error, if any)

Text observations (agent.observation = text | text+screenshot) show the current page
as text instead of (or beside) its screenshot, cut at a token budget with a note saying
where; earlier steps show their URL and title only, and the task is repeated last.

Images appear as {"type": "image", "image": <screenshot key>}: the prompt carries keys,
never pixels; the model policy (runtime/model_policy.py) reads them from the store when
it encodes the prompt.
"""

from __future__ import annotations

import dataclasses

from asyncwebrl.records import Step, Task
from typing import Callable

from asyncwebrl.rollout.observation import Observation, check_observation
from asyncwebrl.rollout.response import (ELEMENT_INTERACTIONS, GRID, INTERACTIONS, TOOL_NAME, check_response_format,
                                        parse_response)
from asyncwebrl.web.page_text import cut_lines

MEMORY_MODES = ("additive", "compressive")
MAX_SUMMARIES = 10  # one-line summaries of earlier steps, the newest
RESPONSE_CUT = " [... response cut ...]"

_TARGET = {
    "coordinates": f'"coordinate": [x, y] on a 0..{GRID} grid over the screenshot (0,0 top left, {GRID},{GRID} bottom right)',
    "set_of_marks": '"element_id": the number of a marked element (boxes drawn on the screenshot, listed under Elements)',
    "text": '"element_id": the [number] of an element in the page text',
    "labels": ('"element": the label of an element as listed, without its quotes (the first element so '
               'labelled), or "element_id": its number when another element before it has the same label'),
}
_SEEN = {"screenshot": "a screenshot of a browser page", "text": "a browser page as text",
         "text+screenshot": "a browser page as text and as a screenshot"}

_MEMORY_RULE = {
    "additive": ("Memory: a JSON object of facts worth remembering for this task, including what you see now. "
                 "Copy every key of your previous Memory unchanged and add new keys; never remove or change a key."),
    "compressive": ("Memory: a JSON object of the facts still needed for this task, including what you see now. "
                    "Rewrite it every step: keep only what matters, merge or drop the rest."),
}


def system_prompt(interaction: str, memory: str, response_format: str, observation: str) -> str:
    target = _TARGET["labels" if interaction == "labels" else "text" if observation != "screenshot" else interaction]
    tool_call = f'<tool_call>\n{{"name": "{TOOL_NAME}", "arguments": {{...}}}}\n</tool_call>'
    if check_response_format(response_format) == "action":
        answer = ["Respond with the tool call alone:", tool_call]
    elif response_format == "memory+action":
        answer = ["Respond in exactly this order:", _MEMORY_RULE[memory], tool_call]
    else:
        answer = ["Respond in exactly this order:", _MEMORY_RULE[memory],
                  'Progress: a JSON object splitting the task into subtasks, each "finished" or "not finished".',
                  "Intention: the key of the subtask this step works on.",
                  "Action: one short sentence describing the action.", tool_call]
    return "\n".join([
        f"You are a web agent. You see {_SEEN[observation]} and act on it, one action per step, "
        "until you can answer the task.",
        "",
        f"Tool: {TOOL_NAME}. Its arguments name an action:",
        f'- {{"action": "left_click", {target}}}',
        f'- {{"action": "type", {target.split(":")[0]}: ..., "text": "..."}}: click, clear the field, type, press Enter',
        *([] if observation != "screenshot" else ['- {"action": "scroll", "direction": "up" | "down"}']),
        '- {"action": "wait", "time": seconds}',
        '- {"action": "go_back"}',
        '- {"action": "navigate", "url": "..."}',
        '- {"action": "answer", "text": "..."}: ends the task; give exactly the facts asked for, nothing else',
        "",
        *answer,
    ])


@dataclasses.dataclass
class Prompt:
    messages: list[dict]  # [{"role": ..., "content": str | [{"type": "text"|"image", ...}]}]
    image_keys: list[str]  # screenshot keys in order of appearance


def step_summary(step: Step) -> str:
    """"Step i on [title]: <action sentence> -> page changed | page unchanged (error: ...)"."""
    sentence = parse_response(step.response).action_text or f"({step.action.get('name', 'no action')})"
    outcome = "page changed" if step.screenshot_changed else "page unchanged"
    # the error's gist: a parser's detail ("Expecting ',' delimiter: line 1 column 123") costs
    # tokens on every later step of the episode and says nothing a policy can act on
    error = f" (error: {step.action_error.split(' (')[0][:80]})" if step.action_error else ""
    return f"Step {step.index + 1} on [{step.title or step.url}]: {sentence} -> {outcome}{error}"


def cut_response(response: str, budget: int, count_tokens: Callable[[str], int]) -> str:
    """An earlier response shown in at most about `budget` tokens: its longest prefix that
    fits, then a marker. A response that degenerated into repeats can re-encode to several
    times the tokens it was sampled as (320 sampled, 953 re-encoded, seen), more than a slot."""
    if count_tokens(response) <= budget:
        return response
    low, high = 0, len(response)   # the longest prefix (in characters) within the budget
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(response[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return response[:low] + RESPONSE_CUT


class PromptBuilder:
    def __init__(self, interaction: str, *, memory: str, system_message: bool, response_format: str, observation: str,
                 text_budget: int, prompt_limit: int, count_tokens: Callable[[str], int] | None = None,
                 history: int = 1):
        """All but count_tokens and history come from the config (runtime/settings.py:
        prompt_builder). history: the last steps shown in full (screenshot and response);
        older ones are summarised.

        system_message=False leaves the constant instructions out: a model trained from
        scratch (the embedded default) cannot read them, and they would be ~1.1k tokens of
        every prompt to prefill and train on.

        Text observations: the page text is cut at `text_budget` tokens as `count_tokens`
        counts them (the policy's tokenizer); 0 = never cut. `prompt_limit` is the most
        tokens a whole prompt may take (the sampler's slot less the response; 0 = no
        limit): a prompt over it has its page text cut shorter (encode_step does it, as
        only the encoded prompt knows its length)."""
        if interaction not in INTERACTIONS:
            raise ValueError(f"interaction must be one of {INTERACTIONS}, got {interaction!r}")
        if memory not in MEMORY_MODES:
            raise ValueError(f"memory must be one of {MEMORY_MODES}, got {memory!r}")
        if history < 0:
            raise ValueError("history must be >= 0")
        self.observation = check_observation(observation)
        if (text_budget or prompt_limit) and count_tokens is None:
            raise ValueError("a text budget or a prompt limit needs the tokenizer's count_tokens")
        if prompt_limit < 0:
            raise ValueError("prompt_limit must be >= 0")
        self.interaction, self.history, self.memory = interaction, history, memory
        self.system = system_prompt(interaction, memory, response_format, observation)
        self.system_message = system_message
        self.text_budget, self.count_tokens, self.prompt_limit = text_budget, count_tokens, prompt_limit

    @property
    def shows_screenshots(self) -> bool:
        return self.observation != "text"

    @property
    def shows_text(self) -> bool:
        return self.observation != "screenshot"

    def page_text(self, observation: Observation, text_budget: int | None = None) -> tuple[str, str]:
        """The page text as shown (cut to the budget, by default agent.text_budget) and the
        note on the cut ("" if none)."""
        lines = observation.text.split("\n") if observation.text else []
        budget = self.text_budget if text_budget is None else text_budget
        if not budget:
            return "\n".join(lines), ""
        return cut_lines(lines, budget, self.count_tokens)

    def _state(self, task: Task, observation: Observation, text_budget: int | None) -> str:
        lines = [f"Step {observation.step + 1}. URL: {observation.url}", f"Title: {observation.title}"]
        if self.shows_text:
            text, cut = self.page_text(observation, text_budget)
            lines += ["Page:", text or "(empty page)"] + ([cut] if cut else [])
        elif self.interaction in ELEMENT_INTERACTIONS:
            lines += ["Elements:", observation.element_list() or "(none on screen)"]
        if observation.last_error:
            lines.append(f"The last action did not work: {observation.last_error}")
        if self.shows_text:  # a long page pushes the task far back; small models read it best last
            lines.append(f"Task: {task.task_name}")
        return "\n".join(lines)

    def shown_in_full(self, steps: list[Step]) -> list[Step]:
        """The last `history` steps, which a prompt shows whole (screenshot and response)."""
        return steps[len(steps) - self.history:] if self.history else []

    def build(self, task: Task, steps: list[Step], observation: Observation, text_budget: int | None = None,
              response_budget: int | None = None) -> Prompt:
        """The prompt for the next step, given the steps taken so far in this episode
        (text_budget: the page text's, when not agent.text_budget's; response_budget: the
        most tokens of each earlier response shown in full, None = no cut)."""
        window = self.shown_in_full(steps)
        older = steps[: len(steps) - len(window)]
        intro = f"Task: {task.task_name}\nStart URL: {task.website}"
        if older:
            shown = older[-MAX_SUMMARIES:]  # a long episode's prompt must still fit a sampler slot
            skipped = [f"(steps 1-{len(older) - len(shown)} not shown)"] if len(shown) < len(older) else []
            intro += "\nEarlier steps:\n" + "\n".join(skipped + [step_summary(s) for s in shown])
        intro += "\n"  # the chat template joins a message's text parts as they are
        messages: list[dict] = [{"role": "system", "content": self.system}] if self.system_message else []
        image_keys: list[str] = []
        pending_text = [intro]  # goes at the head of the next user message
        for step in window:
            content = [{"type": "text", "text": t} for t in pending_text]
            if self.shows_screenshots:
                content.append({"type": "image", "image": step.screenshot_key})
                image_keys.append(step.screenshot_key)
            content.append({"type": "text", "text": f"Step {step.index + 1}. URL: {step.url}\nTitle: {step.title}"})
            response = step.response if response_budget is None else cut_response(step.response, response_budget,
                                                                                    self.count_tokens)
            messages += [{"role": "user", "content": content}, {"role": "assistant", "content": response}]
            pending_text = []
        content = [{"type": "text", "text": t} for t in pending_text]
        if self.shows_screenshots:
            content.append({"type": "image", "image": observation.screenshot_key})
            image_keys.append(observation.screenshot_key)
        content.append({"type": "text", "text": self._state(task, observation, text_budget)})
        messages.append({"role": "user", "content": content})
        return Prompt(messages, image_keys)
