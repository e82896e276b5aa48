"""Classify the model's failed episodes: first deviation from the oracle plan, facts seen or not."""
import json, re, sys, collections
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.http_page import HttpPage
from asyncwebrl.rollout.response import parse_response

web = LocalWeb()
LINE = re.compile(r'^\[(\d+)\] (\w+) "(.*)"', re.M)

def page_part(prompt):
    return prompt.rsplit("Page:\n", 1)[-1] if "Page:\n" in prompt else ""

def oid_map(url):
    p = HttpPage(web, "probe"); err = p.open(url)
    return {} if err else {e.id: (e.oid, e.label) for e in p.page.elements}

def analyse(r):
    plan = [m for m in r["plan"] if m["op"] != "note"]
    cursor, deviation = 0, None
    for s in r["steps_detail"]:
        a = s["action"]; page = page_part(s["prompt"])
        exp = plan[cursor] if cursor < len(plan) else None
        if a["name"] == "answer":
            if exp and exp["op"] != "answer" and deviation is None:
                deviation = dict(step=s["i"], kind="answered_early", expected=exp.get("oid"), url=s["url"])
            break
        if a["name"] in ("left_click", "type") and "element_id" in a:
            ids = oid_map(s["url"]) if not s["url"].endswith(("/register", "/booking")) else {}
            oid, label = ids.get(a["element_id"], ("?", "?"))
            ok = exp is not None and exp["op"] == ("click" if a["name"] == "left_click" else "type") and exp["oid"] == oid \
                and (a["name"] != "type" or a.get("text", "").strip() == exp.get("text"))
            if ok:
                cursor += 1; continue
            if deviation is None:
                # the expected element on this page, if listed, and whether its line is in the prompt
                inv = {o: (i, l) for i, (o, l) in ids.items()}
                e_id, e_label = inv.get(exp["oid"], (None, None)) if exp else (None, None)
                deviation = dict(step=s["i"], kind="wrong_" + a["name"], chose=label, chose_oid=oid,
                                 expected=exp and exp.get("oid"), expected_label=e_label,
                                 expected_in_prompt=bool(e_id and re.search(rf"^\[{e_id}\] ", page, re.M)),
                                 typed=a.get("text"), url=s["url"].split("/", 3)[-1])
        elif deviation is None:
            deviation = dict(step=s["i"], kind="other:" + a["name"], err=s["error"][:80])
    pages = [page_part(s["prompt"]) for s in r["steps_detail"]]
    seen = [any(f in p for p in pages) for f in r["facts"]]
    memory = parse_response(r["steps_detail"][-1]["response"]).memory or {} if r["steps_detail"] else {}
    invalid = sum(1 for s in r["steps_detail"] if s["error"])
    if r["outcome"] == "limit": cause = "d_limit"
    elif not all(seen): cause = "b_navigation" if deviation else "a_not_observed"
    else: cause = "c_wrong_answer"
    return dict(cause=cause, deviation=deviation, seen=seen, invalid=invalid, memory=memory)

if __name__ == "__main__":
    rows = [json.loads(l) for l in open(sys.argv[1])]
    templates = sys.argv[2].split(",")
    out = open(sys.argv[3], "w")
    counts = collections.defaultdict(collections.Counter)
    for r in rows:
        if r["template"] not in templates: continue
        c = counts[r["template"]]; c["episodes"] += 1
        if r["reward"]:
            c["success"] += 1; continue
        a = analyse(r)
        c[a["cause"]] += 1
        d = a["deviation"] or {}
        c["dev:" + d.get("kind", "none")] += 1
        if d.get("kind") == "wrong_left_click":
            c["dev_expected_in_prompt"] += d["expected_in_prompt"]
        c["eps_with_invalid"] += a["invalid"] > 0
        out.write(json.dumps(dict(task_id=r["task_id"], template=r["template"], level=r["level"], instruction=r["instruction"],
                                  facts=r["facts"], fact_results=r["fact_results"], answer=r["answer"], steps=r["steps"],
                                  limit=r["step_limit"], **a)) + "\n")
    for t, c in counts.items():
        print(t, dict(c))
