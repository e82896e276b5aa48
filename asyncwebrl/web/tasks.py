"""The local task set: generated from the local sites, written as WebGym-format JSONL.

Three splits (SPLITS): `train` on site variants 1 and 2 (the sites RL trains on);
`unseen` on the same variants' layouts but sites never seen in training (seeds from
UNSEEN_SEED_OFFSET, beyond any warm start's reach), the analogue of the paper's held-out
split, whose sites are new but drawn from the same web; and `test` on variant 3, whose
layouts training never shows at all (seeds from TEST_SEED_OFFSET): a harder shift; and
`adapt`, more sites of that held-out layout (seeds from ADAPT_SEED_OFFSET, disjoint from
`test`'s) for RL to adapt on where no demonstration was ever made: RL on `adapt` judged on
`test` is the paper's setting, a policy trained elsewhere improved by reward alone on a web
it had not seen, and measured on sites of that web it did not train on.

Two tiers of tasks per site (TIERS): `levels`, the three difficulty levels every split
is measured on, and `short`, tasks whose plan is one choice, the link the instruction
names among its siblings, then a fact or two (Site.short_tasks; "easy" by their facts).
Only training draws on the short tier (`tasks.train_tiers`, the warm start's
`--short-per-site`); evaluations stay on the levels.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import defaultdict
from typing import Iterable

from asyncwebrl.records import LEVELS, Task
from asyncwebrl.web.server import LOGICAL_ORIGIN
from asyncwebrl.web.site import TEST_VARIANTS, TRAIN_VARIANTS, Site, TaskDraft
from asyncwebrl.web.sites import KINDS, site_class

BENCHMARK_NAME = "asyncwebrl-local"
TEST_SEED_OFFSET = 1000  # test sites use seeds 1000.. so they never share content with train sites
# unseen sites: training variants, seeds from here up; the warm start's fresh sites stay below
UNSEEN_SEED_OFFSET = 1_000_000
ADAPT_SEED_OFFSET = 2_000_000  # adapt sites: the test layout, seeds no test site uses
TIERS = ("levels", "short")
SPLITS = {"train": (TRAIN_VARIANTS, 0), "unseen": (TRAIN_VARIANTS, UNSEEN_SEED_OFFSET),
          "test": (TEST_VARIANTS, TEST_SEED_OFFSET),
          "adapt": (TEST_VARIANTS, ADAPT_SEED_OFFSET)}   # split -> (site variants, first seed)


def site_ids(split: str, sites_per_variant: int) -> list[str]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the local web has {sorted(SPLITS)}")
    variants, offset = SPLITS[split]
    return [
        site_class(kind)(variant, offset + i).site_id
        for kind in KINDS
        for variant in variants
        for i in range(sites_per_variant)
    ]


def draft_to_task(site: Site, draft: TaskDraft, index: int, tier: str = "levels") -> Task:
    groups, checks = [], []
    for group_index, group in enumerate(draft.groups):
        groups.append({"id": f"g{group_index}", "description": group.description, "facts": [f.value for f in group.facts]})
        checks += [{"type": f.type, "source": f.source, "key": f.key, "vocab": f.vocab} for f in group.facts]
    return Task(
        task_id=f"{site.site_id}-{'' if tier == 'levels' else tier + '-'}{index:03d}",
        task_name=draft.instruction,
        website=f"{LOGICAL_ORIGIN}{site.base_path}{draft.start_path}",
        domain=site.domain,
        subdomain=site.subdomain,
        benchmark_name=BENCHMARK_NAME,
        difficulty=len(checks),
        evaluator_reference=groups,
        definite_answer=draft.definite_answer,
        local={"site": site.site_id, "split": site.split, "template": draft.template, "checks": checks, "oracle": draft.plan},
    )


def tasks_of_site(site: Site, tier: str = "levels") -> list[Task]:
    if tier == "levels":
        drafts = site.draft_tasks(random.Random(f"tasks:{site.site_id}"))
    elif tier == "short":   # a stream of its own: the levels' tasks stay as they were
        drafts = site.short_tasks(random.Random(f"short-tasks:{site.site_id}"))
    else:
        raise ValueError(f"unknown task tier {tier!r}; the local web has {TIERS}")
    tasks, seen = [], set()
    for draft in drafts:
        if draft.instruction in seen:  # a site may propose the same task twice; keep tasks distinct
            continue
        seen.add(draft.instruction)
        tasks.append(draft_to_task(site, draft, len(tasks), tier))
    return tasks


def generate_tasks(split: str, sites_per_variant: int, tiers: tuple[str, ...] = ("levels",)) -> list[Task]:
    from asyncwebrl.web.sites import make_site

    sites = [make_site(site_id) for site_id in site_ids(split, sites_per_variant)]
    return [task for tier in tiers for site in sites for task in tasks_of_site(site, tier)]


def select_balanced(tasks: list[Task], count: int, seed: int) -> list[Task]:
    """`count` tasks spread evenly over difficulty levels, and within a level over
    templates (uniform sampling over difficulties works best, docs/algorithm.md#task-sampling).

    Deterministic for a seed. Raises if a level has too few tasks for its share."""
    by_level: dict[str, dict[str, list[Task]]] = defaultdict(lambda: defaultdict(list))
    for task in tasks:
        by_level[task.level][task.template].append(task)
    rng = random.Random(seed)
    levels = [level for level in LEVELS if by_level[level]]
    if not levels:
        raise ValueError("no tasks to select from")
    chosen = []
    for position, level in enumerate(levels):
        share = count // len(levels) + (1 if position < count % len(levels) else 0)
        pools = [rng.sample(pool, len(pool)) for _, pool in sorted(by_level[level].items())]
        interleaved = [t for group in itertools.zip_longest(*pools) for t in group if t is not None]
        if len(interleaved) < share:
            raise ValueError(f"asked for {share} {level} tasks, only {len(interleaved)} exist")
        chosen += interleaved[:share]
    return chosen


def write_jsonl(tasks: Iterable[Task], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for task in tasks:
            f.write(task.to_json() + "\n")
    os.replace(tmp, path)  # a crash never leaves half a task file


def read_jsonl(path: str) -> list[Task]:
    tasks = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                tasks.append(Task.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as error:
                raise ValueError(f"{path}:{line_number}: not a task row ({error})") from error
    return tasks
