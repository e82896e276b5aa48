"""The agent's response format (docs/algorithm.md#response-format): writing it and reading it back.

    Memory: {"json": "object of facts, append-only"}
    Progress: {"subtask_key": "finished" | "not finished", ...}
    Intention: subtask_key
    Action: one short sentence
    <tool_call>
    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [x, y]}}
    </tool_call>

Reading never raises: anything the model writes becomes either a valid action or a
counted no-op (a short wait) carrying the reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

TOOL_NAME = "computer_use"
GRID = 1000  # coordinates are on a 0..1000 grid in both axes
# coordinates: a point on the screenshot's grid; set_of_marks: a listed element by its number
# ("element_id"); labels: a listed element by its label ("element": the first element listed
# with exactly that label), or by its number where the label does not single it out. Naming
# by label makes the choice of a link the instruction names a copy of the instruction's
# words (BENCHMARKS.md "Clicking by label"), where a number must be looked up on the line
INTERACTIONS = ("coordinates", "set_of_marks", "labels")
ELEMENT_INTERACTIONS = ("set_of_marks", "labels")   # those whose elements are listed and numbered
ACTIONS = ("left_click", "type", "scroll", "wait", "go_back", "navigate", "answer")
ARGUMENT_KEYS = ("element_id", "coordinate", "text", "direction", "time", "url")
# "memory": the sections above, then the tool call (docs/algorithm.md#response-format);
# "memory+action": the Memory line and the tool call (what a small model can write and
# still carry facts from page to page: with the tool call alone, a fact read three pages
# ago is gone); "action": the tool call alone
RESPONSE_FORMATS = ("memory", "memory+action", "action")
NOOP_SECONDS = 0.2
MAX_WAIT_SECONDS = 5.0

# Linear time: the indent before a label is whitespace of its own line only. `^\s*` under
# re.M let every line start scan all the blank lines after it (32k newlines: 15 s).
_SECTION = re.compile(r"^[^\S\n]*(Memory|Progress|Intention|Action)\s*:", re.M)
# Far above any response the sampler writes (configs/instruct.py: 4,096 tokens); a longer
# text is not parsed at all, so no regex or JSON decoder ever sees an unbounded string.
MAX_RESPONSE_CHARS = 100_000
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


@dataclasses.dataclass
class Action:
    name: str
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""  # non-empty: the response was invalid and this is the no-op standing in

    @property
    def invalid(self) -> bool:
        return bool(self.error)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.args}


def noop(reason: str) -> Action:
    return Action("wait", {"time": NOOP_SECONDS}, error=reason)


@dataclasses.dataclass
class ParsedResponse:
    memory: dict | None
    progress: dict | None
    intention: str
    action_text: str
    tool_call: dict | None
    errors: list[str]


def check_response_format(response_format: str) -> str:
    if response_format not in RESPONSE_FORMATS:
        raise ValueError(f"response format must be one of {RESPONSE_FORMATS}, got {response_format!r}")
    return response_format


def format_response(memory: dict, progress: dict, intention: str, action_text: str, arguments: dict,
                    response_format: str) -> str:
    call = json.dumps({"name": TOOL_NAME, "arguments": arguments}, ensure_ascii=False)
    tool_call = f"<tool_call>\n{call}\n</tool_call>"
    if check_response_format(response_format) == "action":
        return tool_call
    if response_format == "memory+action":
        return f"Memory: {json.dumps(memory, ensure_ascii=False)}\n{tool_call}"
    return (
        f"Memory: {json.dumps(memory, ensure_ascii=False)}\n"
        f"Progress: {json.dumps(progress, ensure_ascii=False)}\n"
        f"Intention: {intention}\n"
        f"Action: {action_text}\n"
        f"{tool_call}"
    )


def tool_call_pieces() -> tuple[str, ...]:
    """The substrings every tool call repeats verbatim as format_response writes it (with
    json.dumps' ", " and ": " separators): the frame before the action name, each action
    name with its closing quote, each argument key with the opening of its value, and the
    frame's three possible endings. The embedded tokenizer keeps each one whole."""
    head = f'<tool_call>\n{{"name": "{TOOL_NAME}", "arguments": {{"action": "'
    opening = {"coordinate": "[", "text": '"', "direction": '"', "url": '"'}
    keys = tuple(f', "{key}": ' + opening.get(key, "") for key in ARGUMENT_KEYS)
    endings = ('}}\n</tool_call>', '"}}\n</tool_call>', ']}}\n</tool_call>')
    return (head, *(f'{name}"' for name in ACTIONS), *keys, *endings)


def _first_json_object(text: str) -> Any:
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except RecursionError:   # ~1000 nested brackets exhaust the decoder's stack: not JSON we can use
        raise ValueError("nested too deeply") from None
    return value


def parse_response(text: Any) -> ParsedResponse:
    text = text if isinstance(text, str) else ""
    if len(text) > MAX_RESPONSE_CHARS:
        return ParsedResponse(None, None, "", "", None,
                              [f"response too long ({len(text):,} chars, limit {MAX_RESPONSE_CHARS:,}): no tool call read"])
    errors: list[str] = []
    sections: dict[str, str] = {}
    head = text.split("<tool_call>", 1)[0]
    matches = list(_SECTION.finditer(head))
    for match, following in zip(matches, matches[1:] + [None]):
        end = following.start() if following else len(head)
        sections.setdefault(match.group(1), head[match.end():end].strip())

    def json_section(name: str) -> dict | None:
        if name not in sections:
            errors.append(f"no {name} section")
            return None
        try:
            value = _first_json_object(sections[name])
        except ValueError as error:
            errors.append(f"{name} is not JSON ({error})")
            return None
        if not isinstance(value, dict):
            errors.append(f"{name} is not a JSON object")
            return None
        return value

    memory, progress = json_section("Memory"), json_section("Progress")
    calls = _TOOL_CALL.findall(text)
    tool_call = None
    if len(calls) != 1:
        errors.append(f"expected exactly one <tool_call>, found {len(calls)}")
    else:
        try:
            tool_call = _first_json_object(calls[0])
        except ValueError as error:
            errors.append(f"tool call is not JSON ({error})")
    return ParsedResponse(
        memory, progress, sections.get("Intention", "").split("\n")[0].strip(),
        sections.get("Action", "").split("\n")[0].strip(), tool_call, errors,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _target(args: dict, interaction: str) -> tuple[dict, str]:
    """The click target in the mode's own terms: a clamped grid point, an element id, or
    (labels) an element's label, which the episode resolves on the page it was written for
    (Observation.labelled)."""
    if interaction == "labels" and "element" in args:
        label = args["element"]
        if not isinstance(label, str) or not label.strip():
            return {}, "element must be an element's label (a non-empty string)"
        return {"element": label}, ""
    if interaction in ELEMENT_INTERACTIONS:
        element = args.get("element_id")
        if isinstance(element, bool) or not isinstance(element, int):
            return {}, "element_id must be an integer" + (" (or give element: a label)" if interaction == "labels" else "")
        return {"element_id": element}, ""
    point = args.get("coordinate")
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        return {}, "coordinate must be [x, y]"
    x, y = (_number(v) for v in point)
    if x is None or y is None:
        return {}, "coordinate values must be numbers"
    return {"coordinate": [min(max(x, 0.0), GRID), min(max(y, 0.0), GRID)]}, ""


def to_action(tool_call: Any, interaction: str) -> Action:
    """Validate a tool call into an Action; anything invalid becomes a counted no-op."""
    if interaction not in INTERACTIONS:
        raise ValueError(f"interaction must be one of {INTERACTIONS}, got {interaction!r}")
    if not isinstance(tool_call, dict):
        return noop("no tool call")
    if tool_call.get("name") != TOOL_NAME:
        return noop(f"unknown tool {tool_call.get('name')!r}")
    args = tool_call.get("arguments")
    if not isinstance(args, dict):
        return noop("arguments must be an object")
    name = args.get("action")
    if name not in ACTIONS:
        return noop(f"unknown action {name!r}")
    if name in ("left_click", "type"):
        target, error = _target(args, interaction)
        if error:
            return noop(f"{name}: {error}")
        if name == "type":
            if not isinstance(args.get("text"), str):
                return noop("type: text must be a string")
            target["text"] = args["text"]
        return Action(name, target)
    if name == "scroll":
        direction = args.get("direction")
        if direction not in ("up", "down"):
            return noop("scroll: direction must be up or down")
        return Action(name, {"direction": direction})
    if name == "wait":
        seconds = _number(args.get("time", 1.0))
        if seconds is None:
            return noop("wait: time must be a number")
        return Action(name, {"time": min(max(seconds, 0.0), MAX_WAIT_SECONDS)})
    if name == "go_back":
        return Action(name)
    key = "url" if name == "navigate" else "text"
    if not isinstance(args.get(key), str):
        return noop(f"{name}: {key} must be a string")
    return Action(name, {key: args[key]})


def response_action(text: Any, interaction: str) -> tuple[ParsedResponse, Action]:
    parsed = parse_response(text)
    if parsed.tool_call is None:
        return parsed, noop("; ".join(e for e in parsed.errors if "tool_call" in e or "tool call" in e) or "no tool call")
    return parsed, to_action(parsed.tool_call, interaction)
