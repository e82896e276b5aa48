"""The trainer on the browser-free web of benchmarks/simulated_web.py: the tiny model,
asynchronous (eta = 2) and synchronous (eta = 0), through benchmarks/end_to_end.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.end_to_end import VARIANTS, make_config, run_variant, summarize  # noqa: E402

TINY = {"model.preset": "tiny", "model.dtype": "float32", "model.attention": "xla", "sampler.slots": 8,
        "sampler.capacity": 1024, "sampler.prompt_buckets": (1024,), "sampler.patches_per_image": 256,
        "sampler.max_new_tokens": 4, "learner.row_length": 1024, "learner.images_per_microbatch": 2,
        "browser.pages": 8, "rl.group_size": 2, "rl.groups_per_batch": 2, "rl.max_running_groups": 4,
        "agent.train_step_limits": (1, 2, 3)}
UPDATES = 3


@pytest.fixture(scope="module")
def marks():
    return {name: run_variant("gpu", make_config("gpu", UPDATES, variant, TINY)) for name, variant in VARIANTS.items()}


def test_every_update_trains_full_groups_and_versions_advance(marks):
    for name, runs in marks.items():
        assert [m["update"] for m in runs] == list(range(1, UPDATES + 1)), name
        assert all(m["trained"] == 2 * 2 for m in runs), name   # B groups of G, none dropped
        assert all(m["crashed"] == 0 for m in runs), name
        episodes = [m["episodes"] for m in runs]
        assert episodes == sorted(episodes) and episodes[-1] >= UPDATES * 4, name


def test_staleness_stays_within_eta(marks):
    assert max(m["staleness_max"] for m in marks["sync"]) == 0
    assert max(m["staleness_max"] for m in marks["async"]) <= 2
    # running ahead of the learner is what the asynchronous trainer is for
    assert max(m["staleness_max"] for m in marks["async"]) >= 1


def test_summary_measures_the_window_after_skip(marks):
    runs = marks["async"]
    summary = summarize(runs, skip=1)
    span = runs[-1]["t"] - runs[0]["t"]
    assert summary["updates_measured"] == UPDATES - 1
    assert summary["episodes_per_hour"] == pytest.approx(3600 * (runs[-1]["episodes"] - runs[0]["episodes"]) / span,
                                                         rel=1e-3)
    assert 0 < summary["learner_busy"] <= 1.0 + 1e-6
    assert summary["trained_step_rows_per_hour"] == pytest.approx(
        3600 * sum(m["rows"] for m in runs[1:]) / span, rel=1e-3)


def test_simulated_tasks_take_the_three_levels_in_turn():
    from asyncwebrl.records import LEVELS
    from benchmarks.simulated_web import synthetic_tasks

    assert [t.level for t in synthetic_tasks(6)] == list(LEVELS) * 2


def test_episode_measurements_describe_the_trained_rows(marks):
    for name, runs in marks.items():
        for m in runs:
            # every simulated step asks the sampler once, so each step is one step row
            assert m["steps_per_episode"] * m["trained"] == pytest.approx(m["rows"]), name
            assert 0 < m["episode_s"] <= m["group_s"], name
            assert m["policy_s_per_step"] > 0 and m["web_s_per_step"] > 0, name
