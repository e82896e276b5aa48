"""The response parser: valid responses round-trip; malformed ones become counted no-ops."""

import json
import random

import pytest

from asyncwebrl.rollout.response import NOOP_SECONDS, format_response, parse_response, response_action, to_action


def call(**arguments):
    return {"name": "computer_use", "arguments": arguments}


def test_round_trip_of_the_memory_additive_format():
    text = format_response({"laptop_price": "$1,299.00"}, {"find_price": "finished"}, "find_price",
                           'Click the "Aurora" link.', {"action": "left_click", "coordinate": [120, 480]}, "memory")
    parsed = parse_response(text)
    assert parsed.memory == {"laptop_price": "$1,299.00"}
    assert parsed.progress == {"find_price": "finished"}
    assert parsed.intention == "find_price"
    assert parsed.action_text == 'Click the "Aurora" link.'
    assert parsed.tool_call == call(action="left_click", coordinate=[120, 480])
    assert parsed.errors == []
    _, action = response_action(text, "coordinates")
    assert (action.name, action.args, action.error) == ("left_click", {"coordinate": [120.0, 480.0]}, "")


@pytest.mark.parametrize("tool_call, interaction, expected", [
    (call(action="left_click", coordinate=[1200, -5]), "coordinates", ("left_click", {"coordinate": [1000.0, 0.0]})),
    (call(action="left_click", element_id=7), "set_of_marks", ("left_click", {"element_id": 7})),
    (call(action="type", coordinate=[5, 5], text="blue"), "coordinates", ("type", {"coordinate": [5.0, 5.0], "text": "blue"})),
    (call(action="scroll", direction="down"), "coordinates", ("scroll", {"direction": "down"})),
    (call(action="wait", time=99), "coordinates", ("wait", {"time": 5.0})),
    (call(action="go_back"), "set_of_marks", ("go_back", {})),
    (call(action="left_click", element="Chemistry"), "labels", ("left_click", {"element": "Chemistry"})),
    (call(action="type", element="Find a colleague", text="Ada"), "labels", ("type", {"element": "Find a colleague", "text": "Ada"})),
    (call(action="left_click", element_id=7), "labels", ("left_click", {"element_id": 7})),
    (call(action="navigate", url="http://awr.local/shop-v1-s00/"), "coordinates", ("navigate", {"url": "http://awr.local/shop-v1-s00/"})),
    (call(action="answer", text="LP-4821"), "coordinates", ("answer", {"text": "LP-4821"})),
])
def test_valid_actions(tool_call, interaction, expected):
    action = to_action(tool_call, interaction)
    assert (action.name, action.args) == expected and not action.invalid


@pytest.mark.parametrize("tool_call, interaction, reason", [
    (None, "coordinates", "no tool call"),
    ({"name": "browser", "arguments": {}}, "coordinates", "unknown tool"),
    (call(action="double_click", coordinate=[1, 1]), "coordinates", "unknown action"),
    (call(action="left_click", element_id=3), "coordinates", "coordinate"),
    (call(action="left_click", coordinate=[1, 1]), "set_of_marks", "element_id"),
    (call(action="left_click", element_id=True), "set_of_marks", "element_id"),
    (call(action="left_click", element="Chemistry"), "set_of_marks", "element_id"),   # labels only where asked for
    (call(action="left_click", element=7), "labels", "label"),
    (call(action="left_click", element="  "), "labels", "label"),
    (call(action="left_click"), "labels", "or give element"),
    (call(action="left_click", coordinate=[1, "a"]), "coordinates", "numbers"),
    (call(action="left_click", coordinate=[float("nan"), 1]), "coordinates", "numbers"),
    (call(action="type", coordinate=[1, 1]), "coordinates", "text"),
    (call(action="scroll", direction="left"), "coordinates", "direction"),
    (call(action="answer"), "coordinates", "text"),
    ({"name": "computer_use", "arguments": "left_click"}, "coordinates", "object"),
])
def test_invalid_actions_become_counted_noops(tool_call, interaction, reason):
    action = to_action(tool_call, interaction)
    assert action.invalid and reason in action.error
    assert (action.name, action.args) == ("wait", {"time": NOOP_SECONDS})


@pytest.mark.parametrize("text", [
    "",
    "I will click the button.",
    "Memory: {broken\n<tool_call>\n{not json}\n</tool_call>",
    "<tool_call>" + json.dumps(call(action="answer", text="a")) + "</tool_call><tool_call>{}</tool_call>",
    "Memory: []\nProgress: 5\nAction: x\n<tool_call>\n" + json.dumps(call(action="go_back")),  # no closing tag
    None,
    12345,
    "<tool_call>\n[1, 2, 3]\n</tool_call>",
])
def test_malformed_text_never_raises(text):
    parsed, action = response_action(text, "coordinates")
    assert isinstance(parsed.errors, list)
    assert action.name in ("wait", "go_back")


def test_missing_closing_tag_still_reads_the_call_and_reports_bad_sections():
    text = "Memory: []\nProgress: 5\nAction: x\n<tool_call>\n" + json.dumps(call(action="go_back"))
    parsed, action = response_action(text, "coordinates")
    assert action.name == "go_back" and not action.invalid
    assert any(e.startswith("Memory is not") for e in parsed.errors)
    assert any("Progress" in e for e in parsed.errors)


def test_random_garbage_never_raises():
    rng = random.Random(0)
    alphabet = 'Memory:Progress:Intention:Action:<tool_call></tool_call>{}[]":,0123456789 \nabc'
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        for interaction in ("coordinates", "set_of_marks"):
            response_action(text, interaction)


def test_unknown_interaction_is_a_configuration_error():
    with pytest.raises(ValueError):
        to_action(call(action="go_back"), "telepathy")


def test_a_label_names_the_first_element_listed_with_it_and_a_missing_label_is_a_counted_noop():
    from asyncwebrl.rollout.observation import Element, Observation, resolve_label

    def element(mark, text):
        return Element(mark=mark, tag="a", type="", text=text, value="", checked=False, x=0, y=0, width=0, height=0, oid="")

    page = Observation(url="u", title="t", screenshot_key="", elements=[element(5, "Sara  Novak"), element(0, "Biology"),
                       element(2, "Biology"), element(9, "Sara Novak")], scroll_y=0, page_height=0, viewport=(1280, 720), step=0)
    clicked = resolve_label(to_action(call(action="left_click", element="Sara Novak"), "labels"), page)
    assert clicked.args == {"element": "Sara Novak", "element_id": 5} and not clicked.invalid   # the first, spaces squashed
    assert resolve_label(to_action(call(action="left_click", element="Biology"), "labels"), page).args["element_id"] == 2
    missing = resolve_label(to_action(call(action="type", element="Oncology", text="x"), "labels"), page)
    assert missing.invalid and "no element labelled 'Oncology'" in missing.error
    by_id = to_action(call(action="left_click", element_id=9), "labels")
    assert resolve_label(by_id, page) is by_id
