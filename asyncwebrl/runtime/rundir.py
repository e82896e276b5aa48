"""The run directory (docs/architecture.md#the-run-directory): what a training run leaves behind.

    W/config.json            the resolved config (main.py)
    W/metrics.jsonl          one JSON object per learner update ("phase": "rl") or
                             warm-start step ("phase": "sft", no "update")
    W/events/                the same scalars as TensorBoard events
    W/episodes.jsonl         every episode the learner trained on: task, outcome, Memory per
                             step, response tokens per step (asyncwebrl/analysis/memory_drift.py)
    W/trajectories/          a sample: one episode per update, its steps and screenshots, and
                             the viewer (index.html per episode and for the run)
    W/checkpoints/           orbax (asyncwebrl.learner.checkpoints)
    W/eval_before.json, W/eval.json, W/summary.json

metrics.jsonl is appended and flushed line by line, so a crash loses at most the line
being written; after a resume the file goes on from the restored update.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from asyncwebrl.analysis.viewer import episode_page, run_index
from asyncwebrl.records import Trajectory
from asyncwebrl.rollout.screenshots import ScreenshotStore


def read_metrics(path: str) -> list[dict]:
    """The records of a metrics.jsonl ([] where there is none yet). A line that does not
    parse is skipped: a crash can cut the last one short."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class RunDirectory:
    def __init__(self, path: str, *, tensorboard: bool = True):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self._metrics = open(os.path.join(path, "metrics.jsonl"), "a")
        # ensure_ascii=False lines hold the model's text as written, lone surrogates included:
        # those are written as their JSON escape ("\ud800"), which reads back as the same string.
        self._episodes = open(os.path.join(path, "episodes.jsonl"), "a", encoding="utf-8", errors="backslashreplace")
        self._events = None
        if tensorboard:
            from tensorboardX import SummaryWriter  # imported here: only training runs write events
            self._events = SummaryWriter(os.path.join(path, "events"), flush_secs=10)

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def log(self, record: dict, step: int) -> None:
        """One metrics line, and its numbers as TensorBoard scalars under record["phase"]."""
        self._metrics.write(json.dumps(record, sort_keys=True) + "\n")
        self._metrics.flush()
        if self._events is not None:
            phase = record.get("phase", "rl")
            for name, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._events.add_scalar(f"{phase}/{name}", value, step)

    def log_episodes(self, episodes: list[dict], update: int) -> None:
        for episode in episodes:
            self._episodes.write(json.dumps({"update": update, **episode}, ensure_ascii=False) + "\n")
        self._episodes.flush()

    def records(self) -> list[dict]:
        """Every metrics line written so far (this run and the runs it resumed)."""
        self._metrics.flush()
        return read_metrics(self.file("metrics.jsonl"))

    def save_trajectory(self, trajectory: Trajectory, store: ScreenshotStore, label: str) -> None:
        """The episode's steps as JSON, and each step's screenshot as PNG (read before the keys are freed)."""
        folder = self.file("trajectories", label)
        os.makedirs(folder, exist_ok=True)
        steps = []
        for step in trajectory.steps:
            record = {"index": step.index, "url": step.url, "response": step.response, "action": step.action,
                      "action_error": step.action_error, "response_tokens": len(step.response_ids),
                      "versions": np.unique(step.versions).astype(int).tolist(), "point": step.point}
            if step.page_text:
                record["page_text"] = step.page_text
            if step.screenshot_key:
                name = f"step_{step.index:02d}.png"
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(store.get(step.screenshot_key))
                record["screenshot"] = name
            steps.append(record)
        with open(os.path.join(folder, "trajectory.json"), "w") as f:
            json.dump({**trajectory.summary(), "instruction": trajectory.task.task_name, "steps": steps}, f, indent=1)
        episode_page(folder)   # the viewer: folder/index.html, and the run's list of episodes
        run_index(self.path)

    def write_json(self, name: str, value: dict) -> None:
        partial = self.file(name + ".partial")
        with open(partial, "w") as f:
            json.dump(value, f, indent=1)
        os.replace(partial, self.file(name))

    def read_json(self, name: str) -> dict | None:
        try:
            with open(self.file(name)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def close(self) -> None:
        self._metrics.close()
        self._episodes.close()
        if self._events is not None:
            self._events.close()


class FollowerDirectory(RunDirectory):
    """The run directory as the processes other than process 0 see it (asyncwebrl/
    distributed.py): the same paths (checkpoints, which every process writes its part of),
    and nothing else written; process 0 writes metrics, episodes, trajectories and results."""

    def __init__(self, path: str):
        self.path = path

    def log(self, record: dict, step: int) -> None:
        pass

    def log_episodes(self, episodes: list[dict], update: int) -> None:
        pass

    def save_trajectory(self, trajectory: Trajectory, store: ScreenshotStore, label: str) -> None:
        pass

    def write_json(self, name: str, value: dict) -> None:
        pass

    def records(self) -> list[dict]:
        raise RuntimeError("only process 0 keeps the metrics")

    def close(self) -> None:
        pass


def _rate(value) -> str:
    return "-" if value is None else f"{value:.2f}"


class Progress:
    """One status line per update: a live line on a terminal, plain lines in logs."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.interactive = stream.isatty()

    def show(self, record: dict) -> None:
        line = (f"[rl] update {record['update']}/{self.total}  v{record['version']}  "
                f"episodes {record['episodes']}  success {_rate(record.get('collected_success_rate'))} "
                f"(trained {record['success_rate']:.2f})  "
                f"{record['trajectories_per_hour']:.0f} traj/h  staleness {record['staleness_mean']:.2f}"
                f"/{record['staleness_max']:.0f}  loss {record['loss']:+.4f}  {time.strftime('%H:%M:%S')}")
        end = "" if self.interactive and record["update"] < self.total else "\n"
        print(("\r" if self.interactive else "") + line, end=end, file=self.stream, flush=True)
