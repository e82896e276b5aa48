"""Oracle demonstrations at scale on the browser-free driver: fresh training sites only,
rows in the model's own token format, a rows file that reads back exactly."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.demonstrations import RowsFile, demonstrate, site_tasks, training_site_ids, write_demonstration_rows
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.site import TRAIN_VARIANTS
from asyncwebrl.web.sites import make_site
from asyncwebrl.web.tasks import generate_tasks
from configs.default import bare


def text_config():
    config = bare()
    config.browser.driver, config.agent.observation = "http", "text"
    return config


def test_training_sites_are_unlimited_distinct_and_never_held_out():
    ids = training_site_ids(2_000, first_seed=0)
    assert len(ids) == len(set(ids)) == 2_000
    assert {make_site(i).variant for i in ids[:40]} == set(TRAIN_VARIANTS)
    assert {i.split("-")[0] for i in ids[:8]} == {"shop", "directory", "reference", "forms"}
    assert training_site_ids(8, first_seed=5000)[0].endswith("-s5000")


def test_rows_file_holds_the_teacher_rows(tmp_path):
    processor = Processor.embedded()
    path = str(tmp_path / "rows")
    report = write_demonstration_rows(text_config(), processor, path, training_site_ids(8), tasks_per_site=2,
                                      progress=None)
    assert report["sites"] == report["distinct_sites"] == 8 and report["episodes"] == 16
    assert report["solved"] == 16 and report["rows"] > 16
    rows = RowsFile.load(path)
    assert len(rows) == report["rows"] and all("-v3-" not in s["site"] for s in rows.sources)
    first_prompt = processor.decode(rows.prompt_ids[0])
    assert re.search(r"Page:\n\[\d+\] ", first_prompt) and "Task: " in first_prompt
    assert processor.decode(rows.response_ids[0]).endswith("</tool_call><|im_end|>")
    again = RowsFile()
    again.extend(rows)
    again.save(path + "-copy")
    copy = RowsFile.load(path + "-copy")
    assert all(np.array_equal(a, b) for a, b in zip(copy.prompt_ids, rows.prompt_ids))
    assert copy.sources == rows.sources


def test_held_out_sites_are_refused():
    tasks = generate_tasks("test", 1)[:2]
    with pytest.raises(ValueError, match="not on training sites"):
        demonstrate(text_config(), LocalWeb(), Processor.embedded(), ScreenshotStore.in_memory(), tasks, progress=None)


def test_every_teacher_response_fits_the_warm_start_sampler():
    """The closed-loop check decodes at most sampler.max_new_tokens; an answer the teacher
    writes longer than that is cut and counts as an invalid action (it did, at 48)."""
    from configs.warm_start import get_config as warm_start_config

    config = warm_start_config()
    processor = Processor.from_pretrained(config.model.tokenizer)
    trajectories, _ = demonstrate(config, LocalWeb(), processor, ScreenshotStore.in_memory(), generate_tasks("test", 2),
                                  phase="test", progress=None)
    longest = max(len(s.response_ids) for t in trajectories for s in t.steps)
    longest_row = max(len(s.prompt_ids) + len(s.response_ids) for t in trajectories for s in t.steps)
    assert all(t.success for t in trajectories)
    assert longest <= config.sampler.max_new_tokens, longest
    assert longest_row <= config.sampler.capacity, longest_row   # a slot holds the whole step


def test_the_imperfect_teacher_leaves_the_last_fact_out_of_its_cut_answers():
    """--teacher-cuts: on the tasks `cuts_answer` draws, the answer loses its last fact and the
    episode fails (rows taught anyway: a habit RL can unlearn); the others stay solved."""
    from asyncwebrl.rollout.response import format_response
    from asyncwebrl.runtime.demonstrations import cuts_answer, without_last_fact

    click = format_response({"a": "b, c"}, {}, "", "", {"action": "type", "element_id": 3, "text": "x, y"}, "memory+action")
    one_fact = format_response({}, {}, "", "", {"action": "answer", "text": "Ann: room 4"}, "memory+action")
    assert without_last_fact(click) == click and without_last_fact(one_fact) == one_fact   # only answers lose a fact
    config = text_config()
    tasks = [t for site in training_site_ids(4, 7) for t in site_tasks(site, 3, random.Random(0))]
    cut = [t for t in tasks if cuts_answer(t, 0.5)]
    assert 0 < len(cut) < len(tasks)   # a fixed draw per task, about half of them
    assert cuts_answer(cut[0], 0.5) and not cuts_answer(cut[0], 0.0)
    trajectories, _ = demonstrate(config, LocalWeb(), Processor.embedded(), ScreenshotStore.in_memory(), tasks,
                                  progress=None, cut_share=0.5)
    for trajectory in trajectories:
        answer = json.loads(trajectory.steps[-1].response.split("<tool_call>\n")[1].removesuffix("\n</tool_call>"))
        full = [m for m in trajectory.task.local["oracle"] if m["op"] == "answer"][0]["text"]
        facts = sum(len(r["facts"]) for r in trajectory.task.evaluator_reference)
        if cuts_answer(trajectory.task, 0.5) and facts > 1:
            assert full.startswith(answer["arguments"]["text"]) and len(answer["arguments"]["text"]) < len(full)
            assert not trajectory.success
        else:
            assert trajectory.success, trajectory.task.task_id
    # benchmarks/warm_start.py teaches every step of the solved and the cut episodes, or
    # (--answers-only) each one's answering step alone
    from benchmarks.warm_start import taught_rows

    taught = [t for t in trajectories if t.success or cuts_answer(t.task, 0.5)]
    assert len(taught_rows(trajectories, 0.5)) == sum(len(t.steps) for t in taught) > len(taught)
    answers = taught_rows(trajectories, 0.5, answers_only=True)
    assert [r.tolist() for r, _ in answers] == [t.steps[-1].prompt_ids.tolist() for t in taught]
