"""A long training run, sampled every minute: does anything grow?

    .venv/bin/python benchmarks/soak.py --minutes 60 --out runs/soak            # the bare system, Chromium
    .venv/bin/python benchmarks/soak.py --minutes 60 --out runs/soak_http -- --config=configs/warm_start.py \
        --config.model.path=assets/warm_start                                    # browser-free, the warm start

Runs `main.py` (RL only: no warm start, no evaluation, updates without end) as a child
and, every `--every` seconds, reads from /proc the trainer's resident memory, threads and
open files, and its descendants' (the browsers') resident memory and count, and from the
run's metrics.jsonl the update, the episodes, and the screenshot store's entries and bytes.
After `--minutes` it stops the run with SIGTERM (the update in progress finishes and is
checkpointed) and writes OUT/soak.jsonl (one sample per line), OUT/soak.png and
OUT/soak_report.json: for each series over the window after `--settle` minutes, its
spread ((max - min) / mean) and its drift (the fitted line's change over the window / the
mean), which a run that leaks shows and a flat one keeps near 0. Extra arguments after `--` go to main.py.

The default is the bare system (a random tiny model on screenshots, real Chromium, groups
without dynamic sampling so updates keep coming): the configuration that holds the most
(browsers, contexts, screenshots in the store).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asyncwebrl.runtime.rundir import read_metrics  # noqa: E402
from benchmarks.browser_pool import descendants, rss_mib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BARE = ["--config=configs/default.py:bare", "--config.sft.steps=0"]
ENDLESS = ["--config.eval.num_tasks=0", "--config.train.max_updates=1000000", "--config.train.checkpoint_every=10"]
SERIES = ("trainer_rss_mib", "browsers_rss_mib", "trainer_threads", "trainer_open_files",
          "screenshots_held", "screenshot_bytes_held")


def status_field(pid: int, name: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(name + ":"))
    except (OSError, StopIteration):
        return None


def open_files(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def last_record(metrics_path: str) -> dict:
    """The newest RL line of metrics.jsonl ({} before the first update)."""
    records = [r for r in read_metrics(metrics_path) if r.get("phase") == "rl"]
    return records[-1] if records else {}


def sample(pid: int, metrics_path: str, started: float) -> dict:
    children = descendants(pid)
    record = last_record(metrics_path)
    return {
        "minute": round((time.monotonic() - started) / 60, 2),
        "trainer_rss_mib": rss_mib([pid]),
        "browsers_rss_mib": rss_mib(children),
        "processes": len(children),
        "trainer_threads": status_field(pid, "Threads"),
        "trainer_open_files": open_files(pid),
        "update": record.get("update"),
        "episodes": record.get("episodes"),
        "screenshots_held": record.get("screenshots_held"),
        "screenshot_bytes_held": record.get("screenshot_bytes_held"),
    }


def spread(samples: list[dict], key: str) -> float | None:
    """(max - min) / mean of a series (None without data; 0 for a series that stays at 0)."""
    values = [s[key] for s in samples if s.get(key) is not None]
    if not values:
        return None
    mean = sum(values) / len(values)
    return 0.0 if mean == 0 else round((max(values) - min(values)) / mean, 4)


def drift(samples: list[dict], key: str) -> float | None:
    """The least-squares line's change over the window, as a fraction of the mean: what a
    leak shows as, where (max - min) / mean also counts the ups and downs of a flat series."""
    points = [(s["minute"], s[key]) for s in samples if s.get(key) is not None]
    if len(points) < 3:
        return None
    xs, ys = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
    if ys.mean() == 0:
        return 0.0
    slope = np.polyfit(xs, ys, 1)[0]
    return round(float(slope * (xs[-1] - xs[0]) / ys.mean()), 4)


def by_thirds(samples: list[dict], key: str) -> list[dict] | None:
    """Mean and max of the series in each third of the window: a leak raises both, from
    third to third, where an update's transient buffers only make the max jump about."""
    values = [s[key] for s in samples if s.get(key) is not None]
    if len(values) < 3:
        return None
    return [{"mean": round(float(np.mean(part)), 1), "max": float(np.max(part))}
            for part in np.array_split(np.asarray(values, float), 3)]


def summarize(samples: list[dict], settle: float) -> dict:
    settled = [s for s in samples if s["minute"] >= settle]
    return {"samples": len(samples), "settle_minutes": settle,
            "first": samples[0] if samples else None, "last": samples[-1] if samples else None,
            "spread_after_settle": {key: spread(settled, key) for key in SERIES},
            "drift_after_settle": {key: drift(settled, key) for key in SERIES},
            "thirds_after_settle": {key: by_thirds(settled, key) for key in SERIES}}


def plot(samples: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(13, 6.5), constrained_layout=True)
    for axis, key in zip(axes.flat, SERIES):
        points = [(s["minute"], s[key]) for s in samples if s.get(key) is not None]
        axis.plot([m for m, _ in points], [v for _, v in points], "-o", markersize=3)
        axis.set_title(key)
        axis.set_xlabel("minute")
        axis.grid(alpha=0.3)
        axis.set_ylim(bottom=0)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=15.0, help="minutes left out of the spreads (start-up)")
    parser.add_argument("--out", required=True, help="the run's workdir; the soak's files go there too")
    parser.add_argument("--report-only", action="store_true", help="summarise OUT/soak.jsonl again, run nothing")
    parser.add_argument("main_args", nargs="*", help="after --: main.py's own flags (default: the bare system)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.report_only:
        with open(os.path.join(args.out, "soak.jsonl")) as f:
            samples = [json.loads(line) for line in f if line.strip()]
        write_report(args.out, summarize(samples, args.settle), samples)
        return
    command = [sys.executable, os.path.join(ROOT, "main.py"), f"--workdir={args.out}",
               *(args.main_args or BARE), *ENDLESS]
    log = open(os.path.join(args.out, "main.log"), "w")
    child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    started, samples = time.monotonic(), []
    path = os.path.join(args.out, "soak.jsonl")
    try:
        with open(path, "w") as out:
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(max(0.0, args.every * (len(samples) + 1) - (time.monotonic() - started)))
                if child.poll() is not None:
                    raise SystemExit(f"main.py exited early ({child.returncode}): see {args.out}/main.log")
                samples.append(sample(child.pid, os.path.join(args.out, "metrics.jsonl"), started))
                out.write(json.dumps(samples[-1]) + "\n")
                out.flush()
                print(json.dumps(samples[-1]), flush=True)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)   # the update in progress finishes and is checkpointed
            try:
                child.wait(timeout=600)
            except subprocess.TimeoutExpired:
                child.kill()
        log.close()
    write_report(args.out, {"command": command, "minutes": args.minutes, "exit_code": child.returncode,
                            **summarize(samples, args.settle)}, samples)


def write_report(out: str, report: dict, samples: list[dict]) -> None:
    plot(samples, os.path.join(out, "soak.png"))
    with open(os.path.join(out, "soak_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
