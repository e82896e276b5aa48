"""The paper's numbers that the notebooks set beside a study's (asyncwebrl/analysis/paper.py)
are the ones docs/algorithm.md quotes from the paper (SPEC.md §7, §8)."""

import os
import re

import pytest

from asyncwebrl.analysis import paper

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "algorithm.md")


def table_rows(pattern: str) -> list[tuple]:
    return re.findall(pattern, open(DOCS).read(), flags=re.MULTILINE)


def test_the_memory_drift_numbers_are_the_docs_table():
    rows = {key: (int(traj) / 100, int(const) / 100)
            for traj, const, key in table_rows(r"^\| [^|]+ \| (\d+)% \| (\d+)% \| `(\w+)` \|$")}
    assert rows == {key: (row["traj"], row["const"]) for key, row in paper.MEMORY_DRIFT.items()}


def test_the_out_of_distribution_success_is_the_docs_table_for_the_instruct_model():
    rows = {method: [float(v) / 100 for v in values] for method, *values in table_rows(
        r"^\| Qwen3-VL-8B-Instruct \| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")}
    assert rows.keys() == paper.OOD_SUCCESS.keys()
    for method, values in rows.items():
        assert [paper.OOD_SUCCESS[method][level] for level in ("easy", "medium", "hard", "overall")] == \
            pytest.approx(values)
    assert set(paper.METHOD_OF_LOSS.values()) <= set(paper.OOD_SUCCESS)
