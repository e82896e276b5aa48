"""Episodes in real headless Chromium against the real local server."""

import asyncio
import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from playwright.async_api import async_playwright

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.records import Task
from asyncwebrl.rollout.browser import launch_browser
from asyncwebrl.rollout.episode import run_episode
from asyncwebrl.rollout.page import observe
from asyncwebrl.rollout.policies import OraclePolicy, RandomPolicy, Reply
from asyncwebrl.rollout.response import format_response
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks, summarize
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks, select_balanced
from bare_settings import episode_settings, pool_settings  # tests/bare_settings.py
from loopback import LoopbackService  # tests/loopback.py
from configs.default import bare

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def web():
    with LocalWeb() as server:
        yield server


def one_task_per_template_and_variant() -> list[tuple[Task, str]]:
    """Every task kind on every site variant; the interaction mode alternates."""
    tasks = generate_tasks("train", 1) + generate_tasks("test", 1)
    chosen: dict[tuple[str, str], Task] = {}
    for task in tasks:
        variant = task.local["site"].split("-")[1]
        chosen.setdefault((task.local["template"], variant), task)
    modes = ("set_of_marks", "coordinates")
    return [(task, modes[i % 2]) for i, task in enumerate(chosen.values())]


def oracle_failures(web, cases: list[tuple[Task, str]]) -> list:
    failures = []
    for mode in ("set_of_marks", "coordinates"):
        tasks = [t for t, m in cases if m == mode]
        trajectories, _ = asyncio.run(run_tasks(tasks, OraclePolicy(web.session, "memory"), LocalEnvironment(web),
                                                episode_settings("train", interaction=mode), pool=pool_settings(),
                                                progress=None))
        assert len(trajectories) == len(tasks)
        for t in trajectories:
            if not t.success or any(s.action_error for s in t.steps):
                failures.append((mode, t.task.task_id, t.outcome, t.answer, t.judge_note, t.error))
    return failures


def test_oracle_solves_every_task_kind_in_both_modes(web):
    """Every task kind once, on a variant taken in turn (so every variant is covered) and
    in both interaction modes by turns; the --slow test below takes every pair."""
    cases = one_task_per_template_and_variant()
    variants = sorted({t.local["site"].split("-")[1] for t, _ in cases})
    by_template: dict[str, list] = {}
    for case in cases:
        by_template.setdefault(case[0].local["template"], []).append(case)
    rotation = [options[i % len(options)] for i, options in enumerate(by_template.values())]
    assert len(rotation) >= 20
    assert {t.local["site"].split("-")[1] for t, _ in rotation} == set(variants)
    assert {m for _, m in rotation} == {"set_of_marks", "coordinates"}
    failures = oracle_failures(web, rotation)
    assert not failures, failures


@pytest.mark.slow
def test_oracle_solves_every_task_kind_on_every_variant_in_both_modes(web):
    cases = one_task_per_template_and_variant()
    assert len({t.local["template"] for t, _ in cases}) >= 20
    failures = oracle_failures(web, cases)
    assert not failures, failures


def test_random_policy_rarely_succeeds(web):
    tasks = select_balanced(generate_tasks("test", 1), 12, seed=1)
    trajectories, wall = asyncio.run(run_tasks(tasks, RandomPolicy(seed=0), LocalEnvironment(web),
                                               episode_settings("train", interaction="coordinates"),
                                               pool=pool_settings(), progress=None))
    summary = summarize(trajectories, wall)
    assert summary["crashed"] == 0
    assert summary["episodes"] == 12
    assert summary["success_rate"] < 0.1
    # It really acted: several steps per episode on average, some episodes to the limit.
    assert summary["total_steps"] >= 5 * len(tasks)
    assert collections.Counter(t.outcome for t in trajectories)["limit"] >= 2


def test_set_of_marks_draws_numbered_boxes_and_lists_elements(web):
    store = ScreenshotStore.in_memory()

    async def scenario():
        async with async_playwright() as playwright:
            browser = await launch_browser(playwright, bare().browser.executable_path)
            page = await (await browser.new_context(viewport={"width": 1280, "height": 720})).new_page()
            await page.goto(web.origin + "/shop-v1-s00/")
            shots = [await observe(page, store, interaction=mode, step=0, shown_url="u")
                     for mode in ("coordinates", "set_of_marks", "coordinates")]
            await browser.close()
            return shots

    plain, marked, again = asyncio.run(scenario())
    pink = np.array([255, 45, 122])
    count = lambda key: int((np.abs(store.get_array(key).astype(int) - pink).sum(-1) < 30).sum())  # noqa: E731
    assert count(plain.screenshot_key) == 0 and count(marked.screenshot_key) > 500
    assert again.screenshot_key == plain.screenshot_key  # the overlay is removed after the shot
    assert store.stats.entries == 2 and store.references(plain.screenshot_key) == 2
    listed = marked.element_list().splitlines()
    assert listed[0].startswith("[1] ") and len(listed) == len(marked.marked()) >= 8
    assert any('text field "Search products"' in line for line in listed)
    assert all(e.mark == 0 for e in marked.elements if e.centre[1] >= 720)


class _CrashingAgent:
    """Kills the browser from inside the episode, as a Chromium crash would."""

    def __init__(self, browser):
        self.browser = browser

    async def act(self, observation, steps):
        await self.browser.close()
        return Reply(format_response({}, {}, "x", "Click.", {"action": "left_click", "coordinate": [10, 10]}, "memory"))


class _Scripted:
    """A policy whose every episode is the given agent."""

    def __init__(self, agent):
        self.agent = agent

    def begin(self, task, *, interaction, episode_id):
        return self.agent


def _run_one(web, task, agent, store=None):
    store = store or ScreenshotStore.in_memory()
    environment = LocalEnvironment(web)

    async def scenario():
        async with async_playwright() as playwright:
            browser = await launch_browser(playwright, bare().browser.executable_path)
            try:
                policy = _Scripted(agent(browser))
                return await run_episode(browser, task, policy, site=environment.episode_site(task, "e-1"),
                                         store=store, settings=episode_settings("test", interaction="coordinates"),
                                         episode_id="e-1")
            finally:
                if browser.is_connected():
                    await browser.close()

    return asyncio.run(scenario()), environment


def test_a_browser_crash_is_recorded_as_crashed_not_as_failure(web):
    store = ScreenshotStore.in_memory()
    trajectory, _ = _run_one(web, generate_tasks("test", 1)[0], _CrashingAgent, store)
    assert trajectory.outcome == "crashed"
    assert trajectory.reward is None and trajectory.error
    assert store.stats.entries == 0  # the unrecorded observation was freed


def test_navigation_is_confined_to_the_local_web(web):
    """`navigate` outside the local server is refused and counted as an action error."""
    task = generate_tasks("test", 1)[0]
    urls = iter(["http://127.0.0.2:9/latest/meta-data/", "file:///etc/passwd", task.website])

    class Navigator:
        async def act(self, observation, steps):
            url = next(urls, None)
            arguments = {"action": "navigate", "url": url} if url else {"action": "answer", "text": "x"}
            return Reply(format_response({}, {}, "x", "Go.", arguments, "memory"))

    trajectory, environment = _run_one(web, task, lambda browser: Navigator())
    errors = [s.action_error for s in trajectory.steps]
    assert "blocked" in errors[0] and "blocked" in errors[1] and errors[2] == ""
    assert all(s.url.startswith("http://awr.local/") for s in trajectory.steps)
    assert trajectory.outcome == "answered"
    assert environment.policy.blocked["internal"] + environment.policy.blocked["offsite"] >= 1
    assert environment.policy.blocked["scheme"] == 1


def test_main_eval_writes_the_documented_eval_json(tmp_path):
    workdir = tmp_path / "run"
    command = [sys.executable, "main.py", "--config=configs/default.py:bare", "--mode=eval", f"--workdir={workdir}",
               "--config.policy=oracle",
               "--config.eval.num_tasks=3", "--config.tasks.test_sites_per_variant=1",
               "--config.agent.interaction=coordinates"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((workdir / "eval.json").read_text())
    assert {"episodes", "success_rate", "by_difficulty", "crashed", "blocked", "unknown_reward", "mean_steps_success",
            "mean_steps_failure", "mean_response_tokens_per_step"} <= set(result)
    assert set(result["by_difficulty"]) == {"easy", "medium", "hard"}
    assert result["episodes"] == 3 and result["success_rate"] == 1.0
    assert "overall" in done.stdout


def test_main_rejects_unknown_policy(tmp_path):
    command = [sys.executable, "main.py", "--mode=eval", f"--workdir={tmp_path}", "--config.policy=telepathy"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "unknown policy" in done.stderr


def test_requests_leaving_the_local_web_are_aborted(web):
    """Defence in depth under `navigate`: whatever a page requests elsewhere never leaves."""
    environment = LocalEnvironment(web)

    probe = "url => fetch(url).then(r => r.status, e => 'blocked')"
    urls = (web.origin + "/shop-v1-s00/cart", "http://127.0.0.1:9/", "http://localhost:9/")
    assert _on_a_sandboxed_page(web, environment, "e-2", [(probe, url) for url in urls]) == [200, "blocked", "blocked"]
    assert environment.policy.blocked["internal"] == 2


WEBSOCKET_PROBES = {  # each resolves to the first message, or to how the socket ended
    "page": """url => new Promise(done => {
        const socket = new WebSocket(url);
        socket.onmessage = (event) => done(event.data);
        socket.onerror = () => done("error");
        socket.onclose = () => done("closed");
    })""",
    # Playwright routes WebSockets with a script in the page; its internals connect directly
    "past the routing": """url => new Promise(done => {
        const socket = new WebSocket(url);
        socket.onmessage = (event) => done(event.data);
        socket.onerror = () => done("error");
        if (socket._apiPassThrough) { socket._apiPassThrough(); }
        setTimeout(() => done("no answer"), 3000);
    })""",
    # workers get no init scripts, so no routing either
    "worker": """url => new Promise(done => {
        const source = `const socket = new WebSocket(${JSON.stringify(url)});
            socket.onmessage = (event) => postMessage(event.data); socket.onerror = () => postMessage("error");`;
        new Worker(URL.createObjectURL(new Blob([source]))).onmessage = (event) => done(event.data);
    })""",
}


def _on_a_sandboxed_page(web, environment, episode_id: str, probes) -> list:
    """Each (JS function of one argument, argument) of `probes` evaluated, in turn, on a page
    of the local web whose context has the episode's sandbox installed."""
    async def scenario():
        async with async_playwright() as playwright:
            browser = await launch_browser(playwright, bare().browser.executable_path)
            context = await browser.new_context()
            await environment.episode_site(generate_tasks("test", 1)[0], episode_id).sandbox.install(context)
            page = await context.new_page()
            await page.goto(web.origin + "/shop-v1-s00/")
            results = [await page.evaluate(probe, arg) for probe, arg in probes]
            await browser.close()
            return results

    return asyncio.run(scenario())


def _open_websockets(web, environment, url: str) -> dict[str, str]:
    """Each of WEBSOCKET_PROBES from a sandboxed page of the local web, to `url`."""
    results = _on_a_sandboxed_page(web, environment, "e-3", [(probe, url) for probe in WEBSOCKET_PROBES.values()])
    return dict(zip(WEBSOCKET_PROBES, results))


def test_finding_5_websockets_from_a_local_page_reach_nothing_but_the_local_server(web):
    """The hostile review's finding 5 in local mode: a page's WebSocket to another loopback
    port is refused and counted (docs/architecture.md#a-hostile-review-finding-by-finding);
    one from a worker, or past Playwright's routing, is stopped by the local web's
    Content-Security-Policy (WebSockets to itself only)."""
    environment = LocalEnvironment(web)
    service = LoopbackService()
    try:
        results = _open_websockets(web, environment, f"ws://127.0.0.1:{service.port}/")
    finally:
        service.close()
    assert results == {"page": "closed", "past the routing": "error", "worker": "error"}
    assert service.requests == []
    assert environment.policy.blocked["websocket"] == 2  # the page's, and the one opened past the routing
