"""Per click the oracle plan expects (up to the model's first deviation): how many sibling links of
the same kind (same data-oid prefix, e.g. dept:*, event:*, person:*) the page lists, and whether
the model clicked the right one. Also: the position of the chosen vs the target link in the list."""
import json, re, sys, collections
sys.argv += []
from analyze import oid_map, page_part
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = collections.defaultdict(lambda: [0, 0])
pos = collections.Counter(); idc = collections.Counter()
for r in rows:
    plan = [m for m in r["plan"] if m["op"] != "note"]; cur = 0
    for s in r["steps_detail"]:
        if cur >= len(plan): break
        exp, a = plan[cur], s["action"]
        if exp["op"] != "click":
            if a["name"] == "type" and exp["op"] == "type": cur += 1; continue
            break
        ids = oid_map(s["url"])
        prefix = exp["oid"].split(":")[0]
        sib = [i for i, (o, l) in ids.items() if o.split(":")[0] == prefix and ":" in exp["oid"]]
        n = max(1, len(sib))
        bucket = "1" if n == 1 else "2-4" if n <= 4 else "5+"
        ok = a["name"] == "left_click" and ids.get(a.get("element_id"), ("",))[0] == exp["oid"]
        acc[(bucket, prefix if n > 1 else "*")][0] += ok; acc[(bucket, prefix if n > 1 else "*")][1] += 1
        acc[(bucket, "ALL")][0] += ok; acc[(bucket, "ALL")][1] += 1
        if n > 1 and prefix in ("dept", "event"):
            page = page_part(s["prompt"])
            order = [int(m) for m in re.findall(r"^\[(\d+)\] link", page, re.M) if int(m) in sib]
            chosen = a.get("element_id")
            if chosen in order:
                pos[("target", order.index(ids_inv := [i for i in sib if ids[i][0] == exp["oid"]][0]))] += 1
                pos[("chosen", order.index(chosen))] += 1
                pos[("chosen-target", order.index(chosen) - order.index(ids_inv))] += 1
            idc[chosen] += 1
        if not ok: break
        cur += 1
for k, (g, n) in sorted(acc.items()):
    print(f"siblings {k[0]:>4} {k[1]:>8}: {g}/{n} = {g / n:.0%}")
print("position of chosen/target among the sibling links (dept/event):", sorted(pos.items()))
print("chosen ids:", idc.most_common(12))
