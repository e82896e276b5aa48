"""A training run at a glance: training.png in the run directory, written with summary.json.

    top left      training success per update (the groups the update trained on), and its
                  running mean over 5 updates
    top right     held-out success before and after RL, by level, with 95% Wilson intervals
    bottom left   steps per episode against update
    bottom right  response tokens per step against update

The records are metrics.jsonl's RL records; before and after are eval.json-shaped
summaries (None where that evaluation did not run). A value that is null in the records
(no data) is left out of its line, never drawn as 0.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only: no display on the machines this runs on

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from asyncwebrl.records import LEVELS  # noqa: E402

RUNNING_MEAN = 5


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["update"], r[key]) for r in records if r.get(key) is not None]
    return [u for u, _ in points], [v for _, v in points]


def _running_mean(values: list[float], width: int) -> list[float]:
    return [float(np.mean(values[max(0, i + 1 - width): i + 1])) for i in range(len(values))]


def _held_out(axis, before: dict | None, after: dict | None) -> None:
    groups = [("all", lambda s: s)] + [(level, lambda s, level=level: s["by_difficulty"][level]) for level in LEVELS]
    width = 0.38
    for offset, (name, summary, colour) in zip((-width / 2, width / 2),
                                                (("before RL", before, "#9aa5b1"), ("after RL", after, "#2f6fb0"))):
        for i, (_, pick) in enumerate(groups):
            row = pick(summary) if summary else None
            if not row or row.get("success_rate") is None:
                axis.text(i + offset, 0.02, "no data", rotation=90, ha="center", va="bottom", fontsize=7)
                continue
            rate, interval = row["success_rate"], row.get("interval_95")
            error = [[rate - interval[0]], [interval[1] - rate]] if interval else None
            axis.bar(i + offset, rate, width, color=colour, yerr=error, capsize=3,
                     label=name if i == 0 else None)
            above = interval[1] if interval else rate
            axis.text(i + offset, above + 0.01, f"{rate:.0%}\nn={row['episodes']}", ha="center", va="bottom", fontsize=7)
    axis.set_xticks(range(len(groups)), [name for name, _ in groups])
    axis.set_ylim(0, 1)
    axis.set_ylabel("held-out success")
    axis.set_title("Held-out success (95% Wilson intervals)")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper right", fontsize=8)


def plot_training(records: list[dict], before: dict | None, after: dict | None, path: str) -> str:
    """Draw the four panels to `path` (PNG); returns the path."""
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5), constrained_layout=True)
    (success, held_out), (steps, tokens) = axes

    # all episodes collected (the policy's success), and the groups trained on (near 0.5 under
    # dynamic sampling, which keeps only groups with mixed outcomes)
    for key, colour, name in (("collected_success_rate", "#2f6fb0", "all episodes"),
                              ("success_rate", "#9aa5b1", "trained groups")):
        updates, rates = _series(records, key)
        if rates:
            success.plot(updates, rates, "o", color=colour, alpha=0.35, markersize=4)
            success.plot(updates, _running_mean(rates, RUNNING_MEAN), color=colour,
                         label=f"{name} (running mean of {RUNNING_MEAN})")
    if success.get_legend_handles_labels()[0]:
        success.legend(loc="upper left", fontsize=8)
    else:
        success.text(0.5, 0.5, "no updates", transform=success.transAxes, ha="center")
    success.set_ylim(-0.02, 1.02)
    success.set_title("Training success at the sampling temperature")
    success.set_ylabel("success rate")

    _held_out(held_out, before, after)

    for axis, key, title, colour in ((steps, "steps_per_episode", "Steps per episode", "#4c8c4a"),
                                     (tokens, "response_tokens_per_step", "Response tokens per step", "#b0602f")):
        xs, ys = _series(records, key)
        axis.plot(xs, ys, "-o", color=colour, markersize=3)
        axis.set_title(title)
        if not ys:
            axis.text(0.5, 0.5, "no updates", transform=axis.transAxes, ha="center")
    for axis in (success, steps, tokens):
        axis.set_xlabel("update")
        axis.grid(alpha=0.3)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
