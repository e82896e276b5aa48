"""The browser pool on the local web: scaling with workers, everlasting vs relaunching
browsers, the screenshot store's share of a step, memory per worker, and a soak.

    .venv/bin/python benchmarks/browser_pool.py [--tasks 24] [--soak 1000]

Workers are concurrent episode slots (pages), four to a browser as in the default config.
The oracle policy acts, so only browsers, pages, the server and the store are measured.
Prints one JSON object; BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asyncwebrl.envs.local import LocalEnvironment  # noqa: E402
from asyncwebrl.rollout.episode import EpisodeSettings  # noqa: E402
from asyncwebrl.rollout.policies import OraclePolicy, Reply  # noqa: E402
from asyncwebrl.rollout.pool import BrowserPool  # noqa: E402
from asyncwebrl.rollout.response import format_response  # noqa: E402
from asyncwebrl.rollout.screenshots import ScreenshotStore  # noqa: E402
from asyncwebrl.web.server import LocalWeb  # noqa: E402
from asyncwebrl.web.tasks import generate_tasks, select_balanced  # noqa: E402
from configs.default import bare  # noqa: E402

# coordinates, the tasks' own step limits; the bare config's viewport and deadlines
SETTINGS = dataclasses.replace(EpisodeSettings.from_config(bare(), "test"), interaction="coordinates", step_limits=None)
BROWSERS = {"recycle_after": bare().browser.recycle_after, "executable_path": bare().browser.executable_path}


def rss_mib(pids) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            pass
    return round(total / 1024, 1)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                pass
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


class TimedStore(ScreenshotStore):
    """Counts the time spent in the store: puts by the episodes, gets as a sampler would."""

    seconds = 0.0

    async def aput(self, png: bytes) -> str:
        started = time.perf_counter()
        key = await super().aput(png)
        self.seconds += time.perf_counter() - started
        return key

    def get(self, key: str) -> bytes:
        started = time.perf_counter()
        value = super().get(key)
        self.seconds += time.perf_counter() - started
        return value


async def run(web, tasks, *, workers: int, pages: int, relaunch: bool = False) -> dict:
    store = TimedStore()
    settings = SETTINGS
    async with BrowserPool(LocalEnvironment(web), store=store, settings=settings, workers=workers,
                           pages_per_browser=pages, relaunch_every_episode=relaunch, **BROWSERS) as pool:
        started = time.perf_counter()

        async def one(task):
            trajectory = await pool.run(task, OraclePolicy(web.session, "memory"))
            for key in trajectory.screenshot_keys():
                store.get(key)  # what the sampler does with every step's screenshot
            store.free(trajectory.screenshot_keys())
            return trajectory

        trajectories = await asyncio.gather(*(one(t) for t in tasks))
        wall = time.perf_counter() - started
        memory = rss_mib(descendants(os.getpid()))  # Playwright driver + browsers, while alive
    steps = sum(len(t.steps) for t in trajectories)
    return {"workers": workers * pages, "browsers": workers, "relaunch_every_episode": relaunch,
            "success": sum(t.success for t in trajectories) / len(trajectories), "steps": steps,
            "wall_s": round(wall, 2), "steps_per_s": round(steps / wall, 2), "launches": pool.stats.launches,
            "store_share_of_step_time": round(store.seconds / sum(s.seconds_browser for t in trajectories for s in t.steps), 4),
            "store_ms_per_step": round(store.seconds / steps * 1000, 3), "child_rss_mib": memory}


async def soak(web, episodes: int) -> dict:
    """Many short episodes on one worker of four pages; memory before and after."""
    store = ScreenshotStore.in_memory()
    task = generate_tasks("test", 1)[0]

    class Click:
        def begin(self, task, *, interaction, episode_id):
            class Agent:
                clicked = False

                async def act(self, observation, steps):
                    move = {"action": "answer", "text": "x"} if self.clicked else {"action": "left_click", "coordinate": [30, 100]}
                    self.clicked = True
                    return Reply(format_response({}, {}, "x", "Soak.", move, "memory"))
            return Agent()

    async with BrowserPool(LocalEnvironment(web), store=store, settings=SETTINGS, workers=1,
                           pages_per_browser=4, **BROWSERS) as pool:
        async def one():
            trajectory = await pool.run(task, Click())
            store.free(trajectory.screenshot_keys())

        samples = []
        started = time.perf_counter()
        for block in range(episodes // 100):
            await asyncio.gather(*(one() for _ in range(100)))
            samples.append({"episodes": (block + 1) * 100, "python_rss_mib": rss_mib([os.getpid()]),
                            "children_rss_mib": rss_mib(descendants(os.getpid())), "open_contexts": pool.open_contexts(),
                            "live_browsers": pool.live_browsers(), "store_entries": store.stats.entries})
            print(json.dumps(samples[-1]), file=sys.stderr)
        return {"episodes": episodes, "wall_s": round(time.perf_counter() - started, 1), "launches": pool.stats.launches,
                "crashed": pool.stats.crashed, "retired": pool.stats.retired, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--soak", type=int, default=0, help="episodes for the soak run (multiple of 100; 0 = skip)")
    parser.add_argument("--soak-only", action="store_true", help="skip the scaling and relaunch runs")
    args = parser.parse_args()
    tasks = select_balanced(generate_tasks("test", 6), args.tasks, seed=0)
    report = {"machine": f"{platform.node()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "tasks": len(tasks), "scaling": [], "everlasting_vs_relaunch": []}
    with LocalWeb() as web:
        for count in () if args.soak_only else (1, 2, 4, 8):
            report["scaling"].append(asyncio.run(run(web, tasks, workers=-(-count // 4), pages=min(count, 4))))
            print(json.dumps(report["scaling"][-1]), file=sys.stderr)
        for count in () if args.soak_only else (1, 4):  # one page per browser: "relaunch" = a fresh browser per episode
            everlasting = asyncio.run(run(web, tasks, workers=count, pages=1))
            relaunch = asyncio.run(run(web, tasks, workers=count, pages=1, relaunch=True))
            report["everlasting_vs_relaunch"].append({
                "workers": count, "everlasting_steps_per_s": everlasting["steps_per_s"],
                "relaunch_steps_per_s": relaunch["steps_per_s"], "relaunch_launches": relaunch["launches"],
                "ratio": round(everlasting["steps_per_s"] / relaunch["steps_per_s"], 2)})
            print(json.dumps(report["everlasting_vs_relaunch"][-1]), file=sys.stderr)
        if args.soak:
            report["soak"] = asyncio.run(soak(web, args.soak))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
