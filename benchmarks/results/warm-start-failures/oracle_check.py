"""For each oracle trajectory (rendered as the model's prompts by encode_step): (1) every element
the oracle clicks/types is listed in that step's prompt; (2) every value the oracle notes into Memory
at step k appears in step k's prompt page text (after the text-budget and prompt-limit cuts);
(3) the prompt is not cut at all. Prints per template."""
import json, re, sys, collections
from asyncwebrl.rollout.response import parse_response
rows = [json.loads(l) for l in open(sys.argv[1])]
stats = collections.defaultdict(collections.Counter)
for r in rows:
    T = r["template"]; st = stats[T]; st["episodes"] += 1; st["success"] += bool(r["reward"])
    prev = {}
    for s in r["steps_detail"]:
        p = s["prompt"]
        page = p.rsplit("Page:\n", 1)[-1]   # the current page part (last user message)
        st["steps"] += 1
        st["max_prompt_tokens"] = max(st["max_prompt_tokens"], s["prompt_tokens"])
        if "page cut here" in page: st["steps_cut"] += 1
        a = s["action"]
        if "element_id" in a:
            st["targets"] += 1
            if re.search(rf"^\[{a['element_id']}\] ", page, re.M): st["target_shown"] += 1
            else: print("TARGET MISSING", r["task_id"], s["i"], a)
        mem = parse_response(s["response"]).memory or {}
        for k, v in mem.items():
            if k in prev: continue
            st["noted"] += 1
            if str(v) in page: st["noted_shown"] += 1
            else:
                parts = [x.strip() for x in str(v).split(";")]
                ok = all(x in page for x in parts)
                st["noted_shown" if ok else "noted_missing"] += 1 if ok else 1
                if not ok: print("NOTE MISSING", r["task_id"], s["i"], k, v[:80], "| cut" if "page cut here" in page else "")
        prev = mem
for T, st in sorted(stats.items()):
    print(T, dict(st))
