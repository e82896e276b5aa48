"""Browser steps per second on the local web, and where a step's time goes.

    .venv/bin/python benchmarks/browser_steps.py [--tasks 24] [--concurrency 1,4]

Runs the oracle (no model: the browser and the server are all that is measured) on a
balanced set of test tasks, for each interaction mode and page concurrency, then times
the parts of one step on a single page. Prints a JSON object; BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from playwright.async_api import async_playwright  # noqa: E402

from asyncwebrl.envs.local import LocalEnvironment  # noqa: E402
from asyncwebrl.rollout.browser import launch_browser  # noqa: E402
from asyncwebrl.rollout.episode import EpisodeSettings  # noqa: E402
from asyncwebrl.rollout.page import _SCAN_JS  # noqa: E402
from asyncwebrl.rollout.policies import OraclePolicy  # noqa: E402
from asyncwebrl.rollout.pool import PoolSettings  # noqa: E402
from asyncwebrl.runtime.evaluate import run_tasks, summarize  # noqa: E402
from asyncwebrl.web.server import LocalWeb  # noqa: E402
from asyncwebrl.web.tasks import generate_tasks, select_balanced  # noqa: E402
from configs.default import bare  # noqa: E402

# the bare config's viewport and deadlines, the tasks' own step limits
TEST = dataclasses.replace(EpisodeSettings.from_config(bare(), "test"), step_limits=None)
POOL = PoolSettings.from_config(bare())


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


async def time_step_parts(web: LocalWeb, repeats: int = 30) -> dict:
    """Each part of a step, alone, on a product page (1280x720)."""
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, bare().browser.executable_path)
        context = await browser.new_context(viewport={"width": 1280, "height": 720})
        page = await context.new_page()
        cdp = await context.new_cdp_session(page)
        site = web.site("shop-v3-s1000")
        url = web.origin + site.href(f"/p/{site.products[0].code}")
        parts = {
            "goto_product_page": lambda: page.goto(url, wait_until="load"),
            "scan_elements": lambda: page.evaluate(_SCAN_JS, False),
            "scan_and_draw_marks": lambda: page.evaluate(_SCAN_JS, True),
            "screenshot_png": lambda: page.screenshot(type="png"),
            "screenshot_cdp_png_fast": lambda: cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}),
            "mouse_click_no_navigation": lambda: page.mouse.click(5, 700),
        }
        results = {}
        for name, part in parts.items():
            samples = []
            for _ in range(repeats):
                started = time.perf_counter()
                await part()
                samples.append(time.perf_counter() - started)
            results[name] = median_ms(samples)
        started = time.perf_counter()
        for _ in range(10):
            fresh = await browser.new_context(viewport={"width": 1280, "height": 720})
            await (await fresh.new_page()).goto(url, wait_until="load")
            await fresh.close()
        results["new_context_goto_close"] = round((time.perf_counter() - started) * 100, 1)
        await browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--concurrency", default="1,4")
    args = parser.parse_args()
    tasks = select_balanced(generate_tasks("test", 6), args.tasks, seed=0)
    report = {"machine": f"{platform.node()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "tasks": len(tasks), "runs": []}
    with LocalWeb() as web:
        for interaction in ("coordinates", "set_of_marks"):
            for concurrency in map(int, args.concurrency.split(",")):
                trajectories, wall = asyncio.run(run_tasks(
                    tasks, OraclePolicy(web.session, "memory"), LocalEnvironment(web),
                    dataclasses.replace(TEST, interaction=interaction),
                    pool=dataclasses.replace(POOL, concurrency=concurrency), progress=None))
                summary = summarize(trajectories, wall)
                steps = [s for t in trajectories for s in t.steps]
                report["runs"].append({
                    "interaction": interaction, "concurrency": concurrency,
                    "success_rate": summary["success_rate"], "steps": summary["total_steps"],
                    "wall_s": summary["wall_seconds"], "steps_per_s": summary["steps_per_second"],
                    "episodes_per_s": round(len(trajectories) / wall, 3),
                    "median_step_browser_ms": median_ms([s.seconds_browser for s in steps]),
                })
                print(json.dumps(report["runs"][-1]), file=sys.stderr)
        report["step_parts_ms"] = asyncio.run(time_step_parts(web))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
