"""The page as text (web/page_text.py) and the browser-free driver (web/http_page.py,
rollout/http_tab.py): exact text lines, state changes, and episodes on the local web."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.records import LEVELS, Step
from asyncwebrl.rollout.episode import plan_room
from asyncwebrl.rollout.http_tab import HttpPool
from asyncwebrl.rollout.observation import Observation
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy, Reply
from asyncwebrl.rollout.response import format_response
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks, summarize
from asyncwebrl.runtime.model_policy import encode_step
from asyncwebrl.web.http_page import HttpPage
from asyncwebrl.web.page_text import cut_lines, parse_page
from asyncwebrl.web.server import LOGICAL_ORIGIN, LocalWeb
from asyncwebrl.web.tasks import generate_tasks, select_balanced
from bare_settings import episode_settings, pool_settings, prompt_builder  # tests/bare_settings.py

TEXT = episode_settings("test", interaction="set_of_marks", observation="text", step_limits=(6, 10, 14))

PAGE = """<!doctype html><html><head><title>Shop &amp; more</title><style>p {color: red}</style>
<script>var x = "<p>not text</p>";</script></head><body>
<header><a href="/s/" data-oid="home">Home</a><form action="/s/search"><input type="search" name="q"
 placeholder="Search products" value="kettle"> <button type="submit">Go</button></form></header>
<main><h1>Kettles</h1><p>Two   kettles
 in stock.</p><table><tr><th>Name</th><th>Price</th></tr>
<tr><td><a href="/s/p/1">Granite &quot;S26&quot; kettle</a></td><td>$19.99</td></tr></table>
<form method="post" action="/s/order"><input type="hidden" name="code" value="K1">
<label for="qty">Quantity</label><input id="qty" name="qty" value="1">
<label data-oid="terms"><input type="checkbox" name="terms"> Accept the terms</label>
<label><input type="radio" name="ship" value="fast" checked> Fast</label>
<label><input type="radio" name="ship" value="slow"> Slow</label>
<div hidden><a href="/s/secret">Secret</a></div><span style="display: none">gone</span>
<input type="submit" value="Order"></form><ul><li>Free returns</li><li>Ships in 2 days</li></ul></main></body></html>"""


def test_page_text_lines_in_reading_order():
    page = parse_page(PAGE, ordered=True)
    assert page.title == "Shop & more"
    assert page.lines == [
        '[1] link "Home"',
        '[2] textbox "Search products" value="kettle"',
        '[3] button "Go"',
        "# Kettles",
        "Two kettles in stock.",
        "Name | Price",
        '[4] link "Granite \\"S26\\" kettle"',
        "| $19.99",
        "Quantity",
        '[5] textbox "Quantity" value="1"',
        '[6] checkbox "Accept the terms" checked=false',
        '[7] radio "Fast" checked=true',
        '[8] radio "Slow" checked=false',
        '[9] button "Order"',
        "Free returns",
        "Ships in 2 days",
    ]
    assert [e.id for e in page.elements] == list(range(1, 10))
    assert page.elements[5].oid == "terms"
    # the hidden input still goes with its form; nothing hidden is listed
    assert [page.controls[i].attrs.get("name") for i in page.forms[1].fields] == ["code", "qty", "terms", "ship",
                                                                                   "ship", None]


def test_text_follows_toggles_and_typing():
    page = parse_page(PAGE, ordered=True)
    terms, slow, quantity = page.elements[5], page.elements[7], page.elements[4]
    terms.state.attrs["checked"] = ""
    quantity.state.attrs["value"] = "3"
    assert '[6] checkbox "Accept the terms" checked=true' in page.lines
    assert '[5] textbox "Quantity" value="3"' in page.lines
    assert slow.checked is False


def test_ids_are_shuffled_by_what_the_page_lists():
    ordered, shuffled = parse_page(PAGE, ordered=True), parse_page(PAGE)
    ids = [e.id for e in shuffled.elements]
    assert sorted(ids) == list(range(1, 10)) and ids != list(range(1, 10))
    assert [e.label for e in shuffled.elements] == [e.label for e in ordered.elements]  # reading order kept
    assert all(shuffled.element(e.id) is e for e in shuffled.elements) and shuffled.element(10) is None
    assert [e.id for e in parse_page(PAGE).elements] == ids  # the same page, the same ids
    typed = PAGE.replace('value="kettle"', 'value="toaster"').replace('value="1"', 'value="7"')
    assert [e.id for e in parse_page(typed).elements] == ids  # values are not what a page lists
    relabelled = [e.id for e in parse_page(PAGE.replace('value="Order"', 'value="Buy now"')).elements]
    assert sorted(relabelled) == sorted(ids) and relabelled != ids
    # over many pages of one layout, the first element's id takes many values: no position to learn
    firsts = {parse_page(PAGE.replace("Kettles", f"Kettles {n}").replace("Home", f"Home {n}")).elements[0].id
              for n in range(40)}
    assert len(firsts) >= 6


def test_cut_lines_marks_the_cut_and_says_where():
    lines = [f'[{i}] link "item {i}"' for i in range(1, 41)]
    text, note = cut_lines(lines, budget=100, count_tokens=len)
    shown = text.split("\n")
    assert shown[-1].startswith("[... page cut here: ") and "more lines not shown" in shown[-1]
    kept = len(shown) - 1
    assert sum(len(line) + 1 for line in shown[:-1]) <= 100 < sum(len(line) + 1 for line in lines[:kept + 1])
    assert note == f"The page text was cut at 100 tokens, after element [{kept}] (line {kept} of 40)."
    assert cut_lines(lines[:2], budget=100, count_tokens=len) == ("\n".join(lines[:2]), "")


def test_http_page_forms_history_and_sandbox():
    web = LocalWeb()   # in process: the server never starts
    tab = HttpPage(web, "episode-1")
    site = web.site("forms-v1-s01")
    assert tab.open(f"{LOGICAL_ORIGIN}{site.base_path}/newsletter") == ""
    assert tab.status == 200 and tab.url.endswith("/newsletter")
    assert tab.open("http://127.0.0.1:1/").startswith("navigation blocked")
    before = tab.url
    link = next(e for e in tab.page.elements if e.role == "link" and e.label)
    assert tab.click(link.control) == "" and tab.url != before
    assert tab.go_back() == "" and tab.url == before
    assert tab.go_back() == "no previous page"


def test_http_oracle_solves_every_task_of_many_sites():
    """Every test task, and a slice of training tasks, through the agent's own actions."""
    tasks = generate_tasks("test", 6) + generate_tasks("train", 2)
    web = LocalWeb()
    trajectories, _ = asyncio.run(run_tasks(tasks, OraclePolicy(web.session, "action"),
                                            LocalEnvironment(web, browser_free=True), TEXT,
                                            pool=pool_settings(driver="http", concurrency=32), progress=None))
    failed = [t.task.task_id for t in trajectories if not t.success]
    assert not failed, f"{len(failed)} of {len(tasks)} oracle episodes failed: {failed[:5]}"
    assert all(step.page_text and not step.screenshot_key for t in trajectories for step in t.steps)
    assert {t.task.level for t in trajectories} == set(LEVELS)


def test_http_random_policy_rarely_succeeds():
    tasks = select_balanced(generate_tasks("test", 6), 120, seed=3)
    web = LocalWeb()
    trajectories, _ = asyncio.run(run_tasks(tasks, RandomPolicy(seed=0), LocalEnvironment(web, browser_free=True),
                                            TEXT, pool=pool_settings(driver="http", concurrency=32),
                                            progress=None))
    summary = summarize(trajectories)
    assert summary["episodes"] == 120 and summary["success_rate"] < 0.10


def test_http_driver_refuses_what_needs_layout():
    with pytest.raises(ValueError, match="set_of_marks"):
        episode_settings("test", interaction="coordinates", observation="text")
    with pytest.raises(ValueError, match="agent.observation must be 'text'"):
        HttpPool(LocalEnvironment(LocalWeb(), browser_free=True), store=ScreenshotStore.in_memory(),
                 settings=episode_settings("test", interaction="set_of_marks"), concurrency=pool_settings().concurrency)


def test_text_prompt_shows_the_page_and_repeats_the_task():
    task = generate_tasks("test", 1)[0]
    web = LocalWeb()
    trajectories, _ = asyncio.run(run_tasks([task], OraclePolicy(web.session, "action"),
                                            LocalEnvironment(web, browser_free=True), TEXT,
                                            pool=pool_settings(driver="http"), progress=None))
    (trajectory,) = trajectories
    builder = prompt_builder(interaction="set_of_marks", observation="text", system_message=False,
                             response_format="action", text_budget=40, count_tokens=len)
    step = trajectory.steps[1]
    observation = Observation(url=step.url, title=step.title, screenshot_key="", elements=[], scroll_y=0,
                              page_height=0, viewport=(1280, 720), step=1, text=step.page_text)
    prompt = builder.build(task, trajectory.steps[:1], observation)
    assert prompt.image_keys == []
    last = prompt.messages[-1]["content"][-1]["text"]
    assert "Page:\n" in last and "[... page cut here:" in last and "The page text was cut at 40 tokens" in last
    assert last.endswith(f"Task: {task.task_name}")
    assert prompt.messages[-2] == {"role": "assistant", "content": trajectory.steps[0].response}


def test_a_long_episode_prompt_fits_the_slot_the_page_giving_way():
    """Twenty failed steps (each summarised with its error) and a long page: the prompt
    stays within prompt_limit by cutting the page, keeping the task and the steps."""
    task = generate_tasks("test", 1)[0]
    processor = Processor.from_pretrained("assets/embedded")
    count = lambda text: len(processor.encode_text(text))  # noqa: E731
    error = "tool call is not JSON (Expecting ',' delimiter: line 1 column 123 (char 122))"
    steps = [Step(index=i, url=task.website, title="Home", screenshot_key="", response="<tool_call>\n{" + "1" * 40,
                  action={}, action_error=error) for i in range(20)]
    page = "\n".join(f'[{i}] link "Department of subject number {i}"' for i in range(1, 200))
    observation = Observation(url=task.website, title="Home", screenshot_key="", elements=[], scroll_y=0,
                              page_height=0, viewport=(1280, 720), step=20, text=page)
    builder = prompt_builder(interaction="set_of_marks", observation="text", system_message=False,
                             response_format="action", text_budget=700, count_tokens=count, prompt_limit=600)
    encoded, _ = encode_step(builder, processor, ScreenshotStore.in_memory(), task, steps, observation)
    text = processor.decode(encoded["input_ids"].tolist())
    assert len(encoded["input_ids"]) <= 600 < len(processor.encode(builder.build(task, steps, observation).messages,
                                                                     [])["input_ids"])
    # the window shows step 20 whole; of the 19 before it, the newest 10 are summarised
    assert "(steps 1-9 not shown)" in text and "Step 9 on" not in text and "Step 10 on [Home]" in text
    assert "Step 19 on [Home]" in text and "Step 20. URL" in text
    assert "(error: tool call is not JSON)" in text and "char 122" not in text  # the error's gist only
    assert "[... page cut here:" in text and "[1] link" in text and text.rstrip().endswith("assistant")
    assert f"Task: {task.task_name}" in text.split("Page:")[-1]  # the task still follows the page


def test_a_degenerate_response_shown_in_full_is_cut_when_the_page_cannot_make_room():
    """The warm start once repeated a word for its whole 320-token response; shown in full
    in the next prompt it re-encoded to 953 tokens, over the slot with the page cut to
    nothing, and the episode crashed (PolicyUnavailable). The shown response gives way next."""
    task = generate_tasks("test", 1)[0]
    processor = Processor.from_pretrained("assets/embedded")
    count = lambda text: len(processor.encode_text(text))  # noqa: E731
    response = 'Memory: {"' + "radio" * 300
    limit = 600
    assert count(response) > limit   # no page cut alone could make this prompt fit
    steps = [Step(index=0, url=task.website, title="Home", screenshot_key="", response=response, action={},
                  action_error="expected exactly one <tool_call>, found 0")]
    page = "\n".join(f'[{i}] link "Department of subject number {i}"' for i in range(1, 40))
    observation = Observation(url=task.website, title="Home", screenshot_key="", elements=[], scroll_y=0,
                              page_height=0, viewport=(1280, 720), step=1, text=page)
    builder = prompt_builder(interaction="labels", observation="text", system_message=False,
                             response_format="memory+action", text_budget=512, count_tokens=count, prompt_limit=limit)
    encoded, _ = encode_step(builder, processor, ScreenshotStore.in_memory(), task, steps, observation)
    text = processor.decode(encoded["input_ids"].tolist())
    assert limit - 40 <= len(encoded["input_ids"]) <= limit   # cut to fit, not to nothing
    assert 'Memory: {"radioradio' in text and "[... response cut ...]" in text
    assert "[... page cut here:" in text   # the page gave way first
    assert f"Task: {task.task_name}" in text and text.rstrip().endswith("assistant")


def parity_sample() -> list:
    """Held-out tasks covering the four site kinds and the three levels."""
    chosen: dict = {}
    for task in generate_tasks("test", 2):
        chosen.setdefault((task.local["site"].split("-")[0], task.level), task)
    return [chosen[key] for key in sorted(chosen)][::2]   # 6 of the 12 pairs, every kind and level


def test_chromium_and_http_show_the_same_text_and_agree_on_outcomes():
    tasks = parity_sample()
    assert {t.local["site"].split("-")[0] for t in tasks} == {"shop", "directory", "reference", "forms"}
    assert {t.level for t in tasks} == set(LEVELS)
    runs = {}
    with LocalWeb() as web:
        for driver, interaction in itertools.product(("chromium", "http"), ("set_of_marks", "labels")):
            settings = episode_settings("test", interaction=interaction, observation="text",
                                       step_limits=(6, 10, 14))
            runs[driver, interaction], _ = asyncio.run(run_tasks(
                tasks, OraclePolicy(web.session, "action"), LocalEnvironment(web, browser_free=driver == "http"),
                settings, pool=pool_settings(driver=driver), progress=None))
        shot, _ = asyncio.run(run_tasks(  # text+screenshot: the same text, and screenshots with the same ids
            tasks[:1], OraclePolicy(web.session, "action"), LocalEnvironment(web),
            episode_settings("test", interaction="set_of_marks", observation="text+screenshot"),
            pool=pool_settings(), free_screenshots=True, progress=None))
    for interaction in ("set_of_marks", "labels"):
        for chromium, http in zip(runs["chromium", interaction], runs["http", interaction]):
            assert (chromium.outcome, chromium.reward) == (http.outcome, http.reward) == ("answered", 1.0), \
                (chromium.task.task_id, interaction)
            assert [s.page_text for s in chromium.steps] == [s.page_text for s in http.steps], chromium.task.task_id
            assert [s.action for s in chromium.steps] == [s.action for s in http.steps]
    # labels: the oracle names by label the elements its instruction names (resolved to the same element
    # ids as set_of_marks clicks), and menus, fields and buttons by number
    named = [(s.action, t.task.task_name) for t in runs["http", "labels"] for s in t.steps if "element" in s.action]
    numbered = [s.action for t in runs["http", "labels"] for s in t.steps
                if "element_id" in s.action and "element" not in s.action]
    assert len(named) >= 6 and len(numbered) >= len(named)
    assert all(action["element"] in instruction and isinstance(action["element_id"], int) for action, instruction in named)
    assert [[s.action.get("element_id") for s in t.steps] for t in runs["http", "labels"]] == \
        [[s.action.get("element_id") for s in t.steps] for t in runs["http", "set_of_marks"]]
    assert shot[0].success and [s.page_text for s in shot[0].steps] == \
        [s.page_text for s in runs["http", "set_of_marks"][0].steps]
    assert all(s.screenshot_key for s in shot[0].steps)


def test_step_limits_fit_the_oracle_plan_unless_told_not_to():
    task = max(generate_tasks("test", 1), key=lambda t: len(t.local["oracle"]))
    moves = sum(m["op"] != "note" for m in task.local["oracle"])
    assert plan_room(task) == moves + max(2, moves // 2) > 2
    assert episode_settings("test", step_limits=(2, 2, 2)).step_limit(task) == plan_room(task)
    assert episode_settings("test", step_limits=(2, 2, 2), fit_plans=False).step_limit(task) == 2
    assert episode_settings("test", step_limits=(99, 99, 99)).step_limit(task) == 99


class ScriptedPolicy:
    """The same fixed moves in every episode (to walk off the oracle's path). A move's
    element_id k names the page's k-th listed element (in reading order; the ids the page
    shows are shuffled)."""

    def __init__(self, moves: list[dict]):
        self.moves = moves

    def begin(self, task, *, interaction, episode_id):
        moves = list(self.moves)

        class Agent:
            async def act(self, observation, steps):
                arguments = dict(moves.pop(0)) if moves else {"action": "answer", "text": "done"}
                if "element_id" in arguments:
                    arguments["element_id"] = observation.elements[arguments["element_id"] - 1].mark
                return Reply(format_response({}, {}, "", "", arguments, "action"))

        return Agent()


OFF_PATH = {  # site -> moves: going back after typing and toggling, typing where nothing takes text
    "shop-v1-s00": [{"action": "type", "element_id": 2, "text": "kettle"}, {"action": "go_back"},
                    {"action": "type", "element_id": 1, "text": "x"}, {"action": "type", "element_id": 2, "text": ""},
                    {"action": "go_back"}, {"action": "left_click", "element_id": 5}, {"action": "go_back"}],
    "forms-v1-s00": [{"action": "left_click", "element_id": 5}, {"action": "left_click", "element_id": 12},
                     {"action": "type", "element_id": 10, "text": "ada@example.org"}, {"action": "go_back"},
                     {"action": "left_click", "element_id": 11}, {"action": "left_click", "element_id": 2},
                     {"action": "go_back"}, {"action": "scroll", "direction": "down"}],
}


def test_drivers_agree_off_the_oracle_path():
    tasks = {t.local["site"]: t for t in generate_tasks("train", 1) if t.local["site"] in OFF_PATH}
    settings = episode_settings("test", interaction="set_of_marks", observation="text", step_limits=(9, 9, 9),
                                fit_plans=False)
    with LocalWeb() as web:
        for site, moves in OFF_PATH.items():
            runs = {driver: asyncio.run(run_tasks([tasks[site]], ScriptedPolicy(moves),
                                                  LocalEnvironment(web, browser_free=driver == "http"), settings,
                                                  pool=pool_settings(driver=driver), progress=None))[0][0]
                    for driver in ("chromium", "http")}
            chromium, http = runs["chromium"], runs["http"]
            assert len(chromium.steps) == len(http.steps) == len(moves) + 1
            for a, b in zip(chromium.steps, http.steps):
                assert (a.page_text, a.action_error) == (b.page_text, b.action_error), (site, a.index, a.action)
            assert "cannot type into a link element" in [s.action_error for s in http.steps] or site != "shop-v1-s00"
