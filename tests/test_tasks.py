"""The generated task set: size, splits, WebGym format, file round trip, solvability."""

import collections
import dataclasses
import json
import random
import urllib.request

import pytest

from asyncwebrl.envs.local import LocalEnvironment
from asyncwebrl.web import content
from asyncwebrl.web.server import LOGICAL_ORIGIN, LocalWeb
from asyncwebrl.web.sites import KINDS, make_site
from asyncwebrl.web.tasks import UNSEEN_SEED_OFFSET, generate_tasks, read_jsonl, select_balanced, write_jsonl
from asyncwebrl.web.walker import solve_and_judge
from configs.default import get_config

WEBGYM_FIELDS = {"task_id", "task_name", "website", "domain", "subdomain", "benchmark_name", "difficulty",
                 "evaluator_reference", "definite_answer"}


@pytest.fixture(scope="module")
def train_tasks():
    return generate_tasks("train", 16)


@pytest.fixture(scope="module")
def test_tasks():
    return generate_tasks("test", 6)


@pytest.fixture(scope="module")
def web():
    with LocalWeb() as server:
        yield server


def test_sizes_and_distinct_tasks(train_tasks, test_tasks):
    assert len({t.task_name for t in train_tasks}) >= 2000
    assert len({t.task_name for t in test_tasks}) >= 300
    assert len({t.task_id for t in train_tasks + test_tasks}) == len(train_tasks) + len(test_tasks)


def test_no_test_site_variant_or_content_in_training(train_tasks, test_tasks):
    def variants(tasks):
        return {(t.local["site"].split("-")[0], t.local["site"].split("-")[1]) for t in tasks}

    assert not variants(train_tasks) & variants(test_tasks)
    assert {t.local["split"] for t in train_tasks} == {"train"} and {t.local["split"] for t in test_tasks} == {"test"}
    train_sites, test_sites = ({t.local["site"] for t in ts} for ts in (train_tasks, test_tasks))
    assert not train_sites & test_sites
    # Every kind is in both splits.
    assert {s.split("-")[0] for s in train_sites} == {s.split("-")[0] for s in test_sites} == set(KINDS)


def test_unseen_sites_have_the_training_layouts_and_no_site_training_ever_uses(train_tasks, test_tasks):
    """The unseen split: training variants (layouts mixed from the same options), seeds from
    UNSEEN_SEED_OFFSET, so neither RL's training sites nor the warm start's fresh ones
    (benchmarks/warm_start.py stops below it) nor a test site is among them."""
    unseen = generate_tasks("unseen", 6)
    sites = {t.local["site"] for t in unseen}
    assert len(sites) == len(KINDS) * 2 * 6 and {t.local["split"] for t in unseen} == {"train"}
    assert all(int(site.rsplit("-s", 1)[1]) >= UNSEEN_SEED_OFFSET for site in sites)
    assert not sites & {t.local["site"] for t in train_tasks + test_tasks}
    assert {t.level for t in select_balanced(unseen, 60, seed=0)} == {"easy", "medium", "hard"}
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        generate_tasks("validation", 1)


def test_adapt_sites_have_the_test_layout_and_share_no_site_with_the_test_split(test_tasks):
    """The adapt split (RL's tasks when it adapts to the held-out layout): variant 3, the test
    layout, on seeds from ADAPT_SEED_OFFSET, so the evaluated test sites stay unseen by RL."""
    from asyncwebrl.web.tasks import ADAPT_SEED_OFFSET

    adapt = generate_tasks("adapt", 2)
    sites = {t.local["site"] for t in adapt}
    assert len(sites) == len(KINDS) * 2 and {t.local["split"] for t in adapt} == {"test"}
    assert {site.split("-")[1] for site in sites} == {site.split("-")[1] for t in test_tasks
                                                      for site in [t.local["site"]]} == {"v3"}
    assert all(int(site.rsplit("-s", 1)[1]) >= ADAPT_SEED_OFFSET for site in sites)
    assert not sites & {t.local["site"] for t in test_tasks}
    assert not {t.task_name for t in adapt} <= {t.task_name for t in test_tasks}


def test_difficulty_is_the_number_of_facts_and_all_levels_exist(train_tasks, test_tasks):
    for tasks in (train_tasks, test_tasks):
        for task in tasks:
            assert task.difficulty == len(task.facts) == len(task.local["checks"])
        levels = collections.Counter(t.level for t in tasks)
        assert min(levels[level] for level in ("easy", "medium", "hard")) >= 60, levels


def test_every_site_mixes_levels_and_plans_fit_the_training_step_limits(train_tasks, test_tasks):
    """Oracle plans use at most 70% of the training step limit (room for scrolling), so
    demonstrations fit the limits the model trains under; every site has each level."""
    by_site = collections.defaultdict(collections.Counter)
    for task in train_tasks + test_tasks:
        by_site[task.local["site"]][task.level] += 1
        actions = sum(move["op"] != "note" for move in task.local["oracle"])
        assert actions <= 0.7 * task.step_limit("train"), (task.task_id, actions)
    assert all(min(levels[level] for level in ("easy", "medium", "hard")) >= 4 for levels in by_site.values())


def test_a_named_item_is_found_by_search_in_every_plan(train_tasks, test_tasks):
    """One way per move: a product, person or book the task names is always searched for,
    never reached by a route chosen at random (category, department, title index), since
    a small model imitating a teacher that picks at random blends the ways. (The forms
    sites have no search box.)"""
    for task in train_tasks + test_tasks:
        if task.local["site"].startswith("forms-"):
            continue
        first_moves = {}
        for move in task.local["oracle"]:
            if move["op"] != "note":
                first_moves.setdefault(move["subtask"], move)
        for subtask, move in first_moves.items():
            if subtask.startswith("find_"):
                assert (move["op"], move["oid"]) == ("type", "search"), (task.task_id, subtask, move)


def test_webgym_format_and_file_round_trip(tmp_path, test_tasks):
    path = tmp_path / "test.jsonl"
    write_jsonl(test_tasks, str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        assert WEBGYM_FIELDS <= set(row)
        assert row["website"].startswith(LOGICAL_ORIGIN + "/")
        for group in row["evaluator_reference"]:
            assert set(group) == {"id", "description", "facts"} and isinstance(group["facts"], list)
    assert read_jsonl(str(path)) == test_tasks


def test_malformed_task_file_names_the_line(tmp_path, test_tasks):
    path = tmp_path / "bad.jsonl"
    path.write_text(test_tasks[0].to_json() + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_jsonl(str(path))


def test_balanced_selection_is_even_and_deterministic(test_tasks):
    chosen = select_balanced(test_tasks, 60, seed=3)
    assert collections.Counter(t.level for t in chosen) == {"easy": 20, "medium": 20, "hard": 20}
    assert [t.task_id for t in chosen] == [t.task_id for t in select_balanced(test_tasks, 60, seed=3)]
    assert len({t.local["site"].split("-")[0] for t in chosen}) == len(KINDS)


def test_generation_is_deterministic():
    a, b = generate_tasks("test", 1), generate_tasks("test", 1)
    assert [t.to_json() for t in a] == [t.to_json() for t in b]


def _unsolved(web, tasks):
    return [(t.task_id, j.note) for t in tasks if (j := solve_and_judge(web, t)[1]).reward != 1.0]


def test_every_test_task_is_solvable_over_http(web, test_tasks):
    assert not _unsolved(web, test_tasks)


def test_train_tasks_are_solvable_over_http(web, train_tasks):
    """All tasks of the first three sites of every kind and variant, and a random sample."""
    first_sites = [t for t in train_tasks if int(t.local["site"].rsplit("-s", 1)[1]) < 3]
    assert len(first_sites) > 300
    assert not _unsolved(web, first_sites + random.Random(0).sample(train_tasks, 300))


def test_the_walker_checks_what_the_plan_claims(web, test_tasks):
    """A plan that notes a value not on screen, or names a missing element, is caught."""
    task = next(t for t in test_tasks if any(m["op"] == "note" for m in t.local["oracle"]))
    plan = [dict(m) for m in task.local["oracle"]]
    note = next(m for m in plan if m["op"] == "note")
    note["memory"] = {"made_up": "Zanzibar Quartet 99"}
    with pytest.raises(AssertionError, match="not on"):
        solve_and_judge(web, dataclasses.replace(task, local={**task.local, "oracle": plan}))
    plan = [{"op": "click", "oid": "no-such-element", "say": "", "subtask": "x"}] + task.local["oracle"]
    with pytest.raises(AssertionError, match="0 elements"):
        solve_and_judge(web, dataclasses.replace(task, local={**task.local, "oracle": plan}))


def test_server_keeps_episode_state_apart_and_maps_urls(web):
    site_id = "shop-v1-s00"
    code = make_site(site_id).products[0].code

    def add(episode):
        request = urllib.request.Request(f"{web.origin}/{site_id}/cart/add", data=f"code={code}&qty=2".encode(),
                                         headers={"Cookie": f"awr_episode={episode}"}, method="POST")
        urllib.request.urlopen(request).read()

    add("e1")
    add("e1")
    add("e2")
    assert web.session("e1", site_id)["cart"] == {code: 4}
    assert web.session("e2", site_id)["cart"] == {code: 2}
    web.forget("e1")
    assert web.session("e1", site_id) == {}
    assert web.logical_url(web.browser_url(f"{LOGICAL_ORIGIN}/{site_id}/p/{code}")) == f"{LOGICAL_ORIGIN}/{site_id}/p/{code}"
    for bad in ("/nosuchsite/", "/shop-v1-s3/", f"/{site_id}/p/NOPE-1"):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(web.origin + bad)
        assert error.value.code == 404


def test_servers_pick_free_ports_and_stop():
    with LocalWeb() as a, LocalWeb() as b:
        assert a.origin != b.origin
        origin = a.origin
        assert urllib.request.urlopen(origin + "/shop-v1-s00/").status == 200
    with pytest.raises(OSError):
        urllib.request.urlopen(origin + "/shop-v1-s00/", timeout=2)


def test_the_short_tier_opens_the_link_the_task_names_on_every_kind(web):
    """Site.short_tasks: every kind proposes them, all easy, with ids of their own; each
    plan's last click opens the link whose label the instruction names, and the oracle's
    plan scores in full. Asking for the tier leaves the levels' tasks as they were."""
    levels, short = generate_tasks("train", 2), generate_tasks("train", 2, ("short",))
    assert {t.local["site"].split("-")[0] for t in short} == set(KINDS) and len(short) == 4 * len(KINDS) * 2 * 2
    assert {t.level for t in short} == {"easy"} and all(".short_" in t.template for t in short)
    assert not {t.task_id for t in short} & {t.task_id for t in levels}
    for task in short:
        last_click = [m for m in task.local["oracle"] if m["op"] == "click"][-1]
        named = last_click["oid"].split(":", 1)[1]
        assert named in content.slug(task.task_name), (task.task_id, last_click["oid"])
    assert not _unsolved(web, short)
    both = generate_tasks("train", 2, ("levels", "short"))
    assert [t.to_json() for t in both] == [t.to_json() for t in levels + short]


def test_only_training_splits_draw_on_the_short_tier():
    config = get_config("bare")
    config.tasks.train_sites_per_variant, config.tasks.test_sites_per_variant = 1, 1
    config.tasks.train_tiers = ("levels", "short")
    trained = LocalEnvironment.tasks(config, "train", None)
    evaluated = LocalEnvironment.tasks(config, "unseen", None)
    assert any(".short_" in t.template for t in trained)
    assert not any(".short_" in t.template for t in evaluated)
    config.tasks.train_tiers = ("levels", "shorter")
    with pytest.raises(ValueError, match="tasks.train_tiers"):
        LocalEnvironment.tasks(config, "train", None)
