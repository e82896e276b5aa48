"""PromptBuilder structure, and a property-based fuzz of the response parser."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncwebrl.records import Step, Task
from asyncwebrl.rollout.observation import Element, Observation
from asyncwebrl.rollout.response import GRID, format_response, response_action
from bare_settings import prompt_builder  # tests/bare_settings.py

TASK = Task(task_id="t", task_name="Find the price of the Aurora X14 Laptop.", website="http://awr.local/shop-v1-s00/")


def step(index, key, sentence, *, changed=True, error=""):
    response = format_response({"aurora_price": "$10"}, {"find": "not finished"}, "find", sentence,
                               {"action": "left_click", "coordinate": [10, 20]}, "memory")
    return Step(index=index, url=f"http://awr.local/shop-v1-s00/{index}", title=f"Page {index}", response=response,
                action={"name": "left_click"}, action_error=error, screenshot_key=key, screenshot_changed=changed)


def observation(step_index, key="k-now", error=""):
    link = Element(mark=1, tag="a", type="", text="Laptops", value="", checked=False, x=0, y=0, width=50, height=20, oid="cat:laptops")
    hidden = Element(mark=0, tag="a", type="", text="Footer", value="", checked=False, x=0, y=900, width=50, height=20, oid="")
    return Observation(url="http://awr.local/shop-v1-s00/c", title="Laptops", screenshot_key=key,
                       elements=[link, hidden], scroll_y=0, page_height=1000, viewport=(1280, 720), step=step_index,
                       last_error=error)


STEPS = [step(0, "k0", "Search for the laptop."),
         step(1, "k1", "Click the result.", changed=False, error="no element with id 9 on screen"),
         step(2, "k2", "Open the laptop page.")]


def full_prompts(interaction: str, **changes):
    """The prompts a pretrained checkpoint reads: the system message, the memory response format."""
    return prompt_builder(**{"interaction": interaction, "system_message": True, "response_format": "memory", **changes})


def texts(message):
    content = message["content"]
    return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content)


def test_history_window_of_one_shows_the_previous_screenshot_and_response():
    prompt = full_prompts("coordinates", history=1).build(TASK, STEPS, observation(3, error="navigation failed"))
    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user"]
    assert prompt.image_keys == ["k2", "k-now"]
    first = texts(prompt.messages[1])
    assert TASK.task_name in first and TASK.website in first
    assert "Step 1 on [Page 0]: Search for the laptop. -> page changed" in first
    assert "Step 2 on [Page 1]: Click the result. -> page unchanged (error: no element with id 9 on screen)" in first
    assert "Step 3 on" not in first  # the window's step is shown in full, not summarised
    assert prompt.messages[2]["content"] == STEPS[2].response
    last = texts(prompt.messages[3])
    assert "Step 4. URL: http://awr.local/shop-v1-s00/c" in last and "navigation failed" in last
    assert "Elements" not in last  # coordinates mode lists no elements
    images = [c for m in prompt.messages[1:] for c in m["content"] if isinstance(c, dict) and c["type"] == "image"]
    assert [c["image"] for c in images] == prompt.image_keys


def test_the_system_message_can_be_left_out_and_nothing_else_changes():
    full = full_prompts("set_of_marks").build(TASK, STEPS, observation(3))
    bare = full_prompts("set_of_marks", system_message=False).build(TASK, STEPS, observation(3))
    assert bare.messages == full.messages[1:] and bare.image_keys == full.image_keys
    assert full.messages[0]["role"] == "system" and bare.messages[0]["role"] == "user"


def test_the_action_format_asks_for_the_tool_call_alone_and_reads_back_the_same_action():
    arguments = {"action": "type", "element_id": 4, "text": "Aurora X14"}
    full = format_response({"k": "v"}, {"find": "not finished"}, "find", "Type the name.", arguments, "memory")
    alone = format_response({"k": "v"}, {"find": "not finished"}, "find", "Type the name.", arguments, "action")
    assert alone.startswith("<tool_call>") and full.endswith(alone) and "Memory" not in alone
    assert response_action(alone, "set_of_marks")[1] == response_action(full, "set_of_marks")[1]
    system = full_prompts("set_of_marks", response_format="action").system
    assert "tool call alone" in system and "Memory:" not in system and "element_id" in system
    assert "Memory:" in full_prompts("set_of_marks").system
    compact = full_prompts("set_of_marks", response_format="memory+action").system
    assert "Memory:" in compact and "Progress:" not in compact and "Progress:" in full_prompts("set_of_marks").system
    with pytest.raises(ValueError, match="response format"):
        full_prompts("set_of_marks", response_format="brief")


def test_no_window_summarises_everything_and_marks_list_elements():
    prompt = full_prompts("set_of_marks", history=0).build(TASK, STEPS, observation(3))
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
    assert prompt.image_keys == ["k-now"]
    text = texts(prompt.messages[1])
    assert text.count(" -> page ") == 3
    assert '[1] link "Laptops"' in text and "Footer" not in text  # only elements on screen get marks
    assert "element_id" in prompt.messages[0]["content"]


def test_wider_window_and_first_step():
    prompt = full_prompts("coordinates", history=2).build(TASK, STEPS, observation(3))
    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert prompt.image_keys == ["k1", "k2", "k-now"]
    first = full_prompts("coordinates", history=2).build(TASK, [], observation(0))
    assert [m["role"] for m in first.messages] == ["system", "user"] and "Earlier steps" not in texts(first.messages[1])


def test_memory_modes_change_the_instructions():
    additive = full_prompts("coordinates").system
    compressive = full_prompts("coordinates", memory="compressive").system
    assert "never remove" in additive and "never remove" not in compressive and "merge or drop" in compressive
    assert f"0..{GRID} grid" in additive


@pytest.mark.parametrize("kwargs", [{"interaction": "mouse"}, {"interaction": "coordinates", "memory": "lossy"},
                                    {"interaction": "coordinates", "history": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        prompt_builder(**kwargs)


# -- the parser under a property-based fuzz --------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
arguments = st.fixed_dictionaries({"action": st.sampled_from(
    ["left_click", "type", "scroll", "wait", "go_back", "navigate", "answer", "drag", ""])},
    optional={"coordinate": st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=3)), max_size=3),
              "element_id": json_values, "text": json_values, "direction": json_values, "time": json_values, "url": json_values})


def _check(text, interaction):
    parsed, action = response_action(text, interaction)
    assert isinstance(parsed.errors, list)
    if action.invalid:
        assert action.name == "wait" and action.error
    if "coordinate" in action.args:
        assert all(0 <= v <= GRID and math.isfinite(v) for v in action.args["coordinate"])
    if "time" in action.args:
        assert 0 <= action.args["time"] <= 5


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from(["coordinates", "set_of_marks"]))
def test_parser_survives_arbitrary_text(text, interaction):
    _check(text, interaction)


@settings(max_examples=300, deadline=None)
@given(arguments, st.sampled_from(["coordinates", "set_of_marks"]), st.integers(0, 200), st.booleans())
def test_parser_survives_odd_tool_calls_and_truncation(args, interaction, cut, close):
    call = json.dumps({"name": "computer_use", "arguments": args})
    text = "Memory: {}\nProgress: {}\nIntention: x\nAction: y\n<tool_call>\n" + call[: len(call) - cut]
    _check(text + ("\n</tool_call>" if close else ""), interaction)


def response_of(memory_chars: int, answer_chars: int) -> str:
    return "Memory: {" + '"k": "' + "x" * memory_chars + '"}\n<tool_call>\n' + json.dumps(
        {"name": "computer_use", "arguments": {"action": "answer", "text": "y" * answer_chars}}) + "\n</tool_call>"


def test_parser_survives_huge_strings():
    """Up to MAX_RESPONSE_CHARS a long response is read; past it (3 MB: more than any
    sampler writes) it is a counted no-op, read by no regex (issue 26, finding 9)."""
    parsed, action = response_action(response_of(40_000, 40_000), "coordinates")
    assert action.name == "answer" and len(action.args["text"]) == 40_000
    parsed, action = response_action(response_of(2_000_000, 1_000_000), "coordinates")
    assert action.invalid and action.name == "wait" and "response too long" in action.error
    _check("<tool_call>" * 9_000, "coordinates")
