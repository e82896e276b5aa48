import json, collections
rows = [json.loads(l) for l in open("model_all.jsonl")]
fails = {r["task_id"]: r for r in map(json.loads, open("failures_all.jsonl"))}
out = collections.defaultdict(collections.Counter)
for r in rows:
    c = out[r["template"]]; c["episodes"] += 1
    if r["reward"]: c[f"success_{r['level']}"] += 1; continue
    f = fails[r["task_id"]]; d = f["deviation"] or {}
    if r["outcome"] == "limit": cause = "d_limit"
    elif d.get("kind", "").startswith("wrong_") or d.get("kind") == "answered_early": cause = "b_nav:" + d["kind"]
    elif not all(f["seen"]): cause = "a_not_observed"
    else: cause = "c_wrong_answer"
    c[cause] += 1
    c["with_invalid_action"] += f["invalid"] > 0
    if d: c["first_dev_target_in_prompt"] += bool(d.get("expected_in_prompt"))
for t, c in out.items(): print(t, dict(sorted(c.items())))
errs = collections.Counter(s["error"][:70] for r in rows for s in r["steps_detail"] if s["error"] and r["template"] in ("directory.head","directory.role","forms.event_info","directory.roster"))
print(errs)
