"""Where greedy episodes fail, against the oracle on the same tasks (run_diag.py outputs):
a failure that never reaches a page of the oracle's path (navigation), one that reaches every
such page and answers wrong, or one that never answers.

usage: classify.py MODEL_s{seed}.jsonl ORACLE_s{seed}.jsonl SEEDS    e.g.
    classify.py diag_eval60_s{seed}.jsonl diag_oracle60_s{seed}.jsonl 0,1,2
"""
import collections
import json
import sys


def pages(row):
    return [s["url"].split("#")[0].rstrip("/") for s in row["steps_detail"]]


model_pattern, oracle_pattern, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
kinds, templates, solved = collections.Counter(), collections.defaultdict(collections.Counter), 0
for seed in seeds:
    oracle = {r["task_id"]: r for r in map(json.loads, open(oracle_pattern.format(seed=seed)))}
    for row in map(json.loads, open(model_pattern.format(seed=seed))):
        if row["reward"] == 1.0:
            solved += 1
            continue
        visited = set(pages(row))
        if row["outcome"] != "answered":
            kind = "no answer: " + row["outcome"]
        elif any(page not in visited for page in pages(oracle[row["task_id"]])):
            kind = "navigation: a page of the oracle's path never reached"
        else:
            kind = "answer wrong on the right pages"
        kinds[kind] += 1
        templates[kind][row["template"]] += 1
print(f"solved {solved}")
for kind, count in kinds.most_common():
    print(f"{count:4d}  {kind}: {dict(templates[kind].most_common())}")
