"""The WebGym task-file loader: every released shape of a row, and clear errors."""

import json

import pytest

from asyncwebrl.envs.webgym import load_webgym
from configs.default import bare

LEVELS = tuple(bare().tasks.levels)   # the config's: every level

GROUPS = [{"id": "f1", "description": "price", "facts": ["costs $12.99", "in stock"]},
          {"id": "f2", "description": "seller", "facts": ["sold by Acme"]}]


def write(tmp_path, rows) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def row(**fields):
    return {"task_id": "t1", "task_name": "Find the price", "website": "shop.example.com",
            "evaluator_reference": "the price is shown", **fields}


def test_fact_groups_strings_and_one_string_all_become_fact_groups(tmp_path):
    path = write(tmp_path, [row(task_id="a", evaluator_reference=GROUPS, difficulty=3),
                            row(task_id="b", evaluator_reference=["fact one", "fact two"]),
                            row(task_id="c", evaluator_reference="the only fact", definite_answer=None)])
    (a, b, c), report = load_webgym(path, levels=LEVELS)
    assert a.facts == ["costs $12.99", "in stock", "sold by Acme"] and a.evaluator_reference[1]["id"] == "f2"
    assert b.facts == ["fact one", "fact two"] and b.difficulty == 2   # no difficulty: the number of facts
    assert c.facts == ["the only fact"] and c.definite_answer == ""
    assert a.website == "https://shop.example.com" and a.level == "easy"
    assert report.kept == 3 and report.rows == 3


def test_existing_schemes_are_kept_and_other_schemes_refused(tmp_path):
    (task,), _ = load_webgym(write(tmp_path, [row(website="http://intranet.local/app")]), levels=LEVELS)
    assert task.website == "http://intranet.local/app"
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: website 'ftp://x' is not an http\(s\) URL"):
        load_webgym(write(tmp_path, [row(website="ftp://x")]), levels=LEVELS)


def test_levels_select_and_everything_left_out_is_counted(tmp_path):
    rows = [row(task_id=str(i), difficulty=d) for i, d in enumerate([1, 2, 5, 8, 9])] + ["", "  "]
    tasks, report = load_webgym(write(tmp_path, rows), levels=("easy", "hard"))
    assert [t.difficulty for t in tasks] == [1, 2, 8, 9]
    assert (report.rows, report.kept, report.outside_levels, report.blank_lines) == (5, 4, 1, 2)
    assert report.by_level == {"easy": 2, "medium": 0, "hard": 2}
    assert "outside the levels" in str(report)


@pytest.mark.parametrize("bad, message", [
    ("{not json", "tasks.jsonl:2: Expecting property name"),
    (json.dumps(["a", "list"]), "tasks.jsonl:2: a row must be a JSON object"),
    (json.dumps(row(task_id="x", task_name="")), "tasks.jsonl:2: missing or empty task_name"),
    (json.dumps(row(task_id="x", difficulty="hard")), "tasks.jsonl:2: difficulty 'hard' is not an integer"),
    (json.dumps(row(task_id="x", difficulty=0)), "tasks.jsonl:2: difficulty 0"),
    (json.dumps(row(task_id="x", evaluator_reference=[{"id": 1}])), "tasks.jsonl:2: evaluator_reference item 1"),
    (json.dumps(row(task_id="x", evaluator_reference=7)), "tasks.jsonl:2: evaluator_reference must be"),
    (json.dumps(row()), "tasks.jsonl:2: task_id 't1' already on line 1"),
])
def test_a_bad_row_names_its_line(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        load_webgym(write(tmp_path, [row(), bad]), levels=LEVELS)


def test_unknown_levels_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown difficulty levels"):
        load_webgym(write(tmp_path, [row()]), levels=("easy", "expert"))


# issue 26, finding 12: every row checked, the file and line named

@pytest.mark.parametrize("bad, message", [
    (json.dumps(row(task_id="x", evaluator_reference=None, difficulty=2)), "tasks.jsonl:2: no rubric facts"),
    (json.dumps({k: v for k, v in row(task_id="x", difficulty=2).items() if k != "evaluator_reference"}),
     "tasks.jsonl:2: no rubric facts"),
    (json.dumps(row(task_id="x", evaluator_reference=" ", difficulty=1)), "tasks.jsonl:2: no rubric facts"),
    (json.dumps(row(task_id="x", evaluator_reference=[{"id": "g", "facts": []}], difficulty=1)),
     "tasks.jsonl:2: no rubric facts"),
    (json.dumps(row(task_id="x", evaluator_reference=["", " "])), "tasks.jsonl:2: evaluator_reference item 1 is an empty"),
    (json.dumps(row(task_id="x", evaluator_reference=["a fact", " "])), "tasks.jsonl:2: evaluator_reference item 2"),
    ('{"task_id": "x", "task_name": "Find it", "website": "a.example", "evaluator_reference": "f", "difficulty": 1e400}',
     r"tasks.jsonl:2: difficulty inf is not an integer"),
    (json.dumps(row(task_id={"id": "x"})), "tasks.jsonl:2: task_id must be a string or an integer, not dict"),
    (json.dumps(row(task_id="x", website=12345)), "tasks.jsonl:2: website must be a string, not int"),
    (json.dumps(row(task_id="x", task_name=["Find", "it"])), "tasks.jsonl:2: task_name must be a string, not list"),
    ('{"task_id": "x", "evaluator_reference": ' + "[" * 100_000, "tasks.jsonl:2: maximum recursion depth"),
])
def test_a_row_of_the_wrong_shape_names_its_line(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        load_webgym(write(tmp_path, [row(), bad]), levels=LEVELS)


def test_bad_utf8_names_its_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(json.dumps(row()).encode() + b"\n" + json.dumps(row(task_id="x")).encode()[:-2] + b"\xff\xfe\"}\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: not UTF-8"):
        load_webgym(str(path), levels=LEVELS)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_task_file_names_the_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"empty.jsonl: no task rows"):
        load_webgym(str(path), levels=LEVELS)


def test_integer_task_ids_are_still_read(tmp_path):
    (task,), _ = load_webgym(write(tmp_path, [row(task_id=17)]), levels=LEVELS)
    assert task.task_id == "17"
