"""The trajectory viewer: pages written by RunDirectory.save_trajectory, opened in real
Chromium from the disk, checked for what a user must see."""

import asyncio
import io

import numpy as np
from PIL import Image
from playwright.async_api import async_playwright

from asyncwebrl.analysis.viewer import write_viewer
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout.browser import launch_browser
from asyncwebrl.rollout.response import format_response
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.rundir import RunDirectory
from configs.default import bare


def png(colour, size=(400, 300)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def tokens(count: int) -> np.ndarray:
    """Response ids as a model's step carries them: an array, which the writer makes JSON of."""
    return np.ones(count, np.int32)


def saved_run(tmp_path) -> str:
    store = ScreenshotStore.in_memory()
    task = Task(task_id="shop-1/find-price", task_name="Find the price of the blue laptop", website="http://x")
    steps = [
        Step(index=0, url="http://awr.local/shop", action={"name": "left_click", "coordinate": [250, 500]},
             response=format_response({"laptop_price": ""}, {"find": "not finished"}, "find", "Open the laptop.",
                                      {"action": "left_click", "coordinate": [250, 500]}, "memory"),
             screenshot_key=store.put(png("white")), response_ids=tokens(40), versions=np.array([3, 3, 4], np.int32),
             point=[100.0, 150.0]),
        Step(index=1, url="http://awr.local/shop/laptop", action={"name": "wait", "time": 0.2},
             response="Memory: {broken", action_error="no tool call", screenshot_key=store.put(png("lightblue")),
             response_ids=tokens(7), versions=np.array([4], np.int32)),
        Step(index=2, url="http://awr.local/shop/laptop", action={"name": "answer", "text": "$899 <b>"},
             response=format_response({"laptop_price": "$899"}, {"find": "finished"}, "find", "Answer.",
                                      {"action": "answer", "text": "$899 <b>"}, "memory"),
             screenshot_key=store.put(png("lightblue")), response_ids=tokens(30),
             versions=np.array([4], np.int32)),
    ]
    trajectory = Trajectory(task=task, steps=steps, outcome="answered", reward=1.0, answer="$899 <b>",
                            episode_id="g1-0", judge_note="all facts hold", seconds=12.5)
    run = RunDirectory(str(tmp_path / "run"), tensorboard=False)
    run.save_trajectory(trajectory, store, "update_000001")
    run.close()
    return str(tmp_path / "run")


def test_the_viewer_shows_steps_clicks_memory_errors_and_versions_in_chromium(tmp_path):
    run_dir = saved_run(tmp_path)
    index = write_viewer(run_dir)    # rewriting is idempotent

    async def look():
        async with async_playwright() as playwright:
            browser = await launch_browser(playwright, bare().browser.executable_path)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto("file://" + index)
                listing = await page.inner_text("table")
                await page.click("text=update_000001")
                await page.wait_for_load_state("load")
                seen = {
                    "url": page.url,
                    "heading": await page.inner_text("h1"),
                    "summary": await page.inner_text(".summary"),
                    "steps": await page.locator("section.step").count(),
                    "images_loaded": await page.evaluate(
                        "[...document.images].map(i => i.complete && i.naturalWidth)"),
                    "marks": await page.locator("mark").all_inner_texts(),
                    "errors": await page.locator("section .error").all_inner_texts(),
                    "meta": await page.locator(".meta").all_inner_texts(),
                    "click": await page.locator(".click").bounding_box(),
                    "image": await page.locator("#step-0 img").bounding_box(),
                    "clicks": await page.locator(".click").count(),
                    "step2": await page.inner_text("#step-2 h3"),
                }
                await page.screenshot(path=str(tmp_path / "viewer.png"), full_page=True)
                return listing, seen
            finally:
                await browser.close()

    listing, seen = asyncio.run(look())
    assert "Find the price of the blue laptop\tanswered\t1.0\t3" in listing
    assert seen["url"].endswith("update_000001/index.html")
    assert seen["heading"] == "Find the price of the blue laptop"
    assert "reward 1.0 (success), 3 steps, 12.5 s" in seen["summary"]
    assert "answer: $899 <b>" in seen["summary"]   # escaped: shown as text, not markup
    assert seen["steps"] == 3 and seen["images_loaded"] == [400, 400, 400]
    assert seen["marks"][0].startswith('Memory: {"laptop_price": ""}') and len(seen["marks"]) == 3
    assert seen["errors"] == ["action error: no tool call"]
    assert "policy versions: 3, 4" in seen["meta"][0] and "40 response tokens" in seen["meta"][0]
    assert seen["clicks"] == 1   # only the click step has a marker
    click, image = seen["click"], seen["image"]
    centre = ((click["x"] + click["width"] / 2 - image["x"]) / image["width"],
              (click["y"] + click["height"] / 2 - image["y"]) / image["height"])
    assert abs(centre[0] - 100 / 400) < 0.02 and abs(centre[1] - 150 / 300) < 0.02   # where the click landed
    assert seen["step2"].startswith('Step 2: answer(text="$899 <b>")')
