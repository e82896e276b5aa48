"""Counterfactual probe: at the oracle's step where a named department (head/role/roster) or
event (event_info) must be picked from a list of sibling links, rename the entity the
instruction names to each other sibling and ask the warm start (greedy) which link it clicks.
If it reads the instruction, its click follows the name; if not, it stays put."""
import json, re, sys, time, collections, dataclasses, os
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")); sys.path.insert(0, ROOT); os.chdir(ROOT)
import numpy as np
from configs.default import get_config
import main as M
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks
from asyncwebrl.runtime.build import build_model, make_engine
from asyncwebrl.runtime.settings import prompt_builder
from asyncwebrl.runtime.model_policy import encode_step
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.rollout.observation import Observation
from asyncwebrl.rollout.response import response_action
from asyncwebrl.sampler.engine import Request

TEMPLATES = sys.argv[1].split(",")
out_path = sys.argv[2]
config = get_config(); config.browser.driver = "http"; config.policy = "oracle"
tasks = [t for t in generate_tasks("unseen", 6) if t.template in TEMPLATES]
with M.serving(LocalWeb(), config) as web:
    trajs, _ = M.run_episodes(config, tasks, web, phase="test")
model, processor = build_model(config)
engine = make_engine(config, model, processor, 0.0, 1.0)
prompts = prompt_builder(config, processor)
store = ScreenshotStore.in_memory()
LINK = re.compile(r'^\[(\d+)\] link "(.*)"$', re.M)

jobs = []
for t in trajs:
    plan = [m for m in t.task.local["oracle"] if m["op"] != "note"]
    # the first move that picks a named sibling (dept:* or event:*), and the step that makes it
    k = next(i for i, m in enumerate(plan) if m["op"] == "click" and m["oid"].split(":")[0] in ("dept", "event"))
    step = t.steps[k]
    prefix, slug = plan[k]["oid"].split(":")
    links = dict((int(i), l) for i, l in LINK.findall(step.page_text))
    # sibling labels: the site's departments / events (from the site object)
    site = web.site(t.task.local["site"])
    names = [d.name for d in site.departments] if prefix == "dept" else [e.name for e in site.events]
    target = next(n for n in names if re.sub(r"[^a-z0-9]+", "-", n.lower()).strip("-") == slug)
    obs = Observation(url=step.url, title=step.title, screenshot_key="", elements=[], scroll_y=0, page_height=0,
                      viewport=(1280, 720), step=k, last_error=t.steps[k - 1].action_error if k else "", text=step.page_text)
    for alt in names:
        if alt != target and re.search(rf"\b{re.escape(alt)}\b", t.task.task_name):
            continue   # already named elsewhere in a multi-entity task
        task = dataclasses.replace(t.task, task_name=re.sub(rf"\b{re.escape(target)}\b", alt, t.task.task_name, count=1))
        enc, _ = encode_step(prompts, processor, store, task, t.steps[:k], obs)
        jobs.append(dict(task_id=t.task.task_id, template=t.task.template, named=alt, original=alt == target,
                         n_siblings=len(names), links=links, input_ids=enc["input_ids"], instruction=task.task_name))
print(f"{len(jobs)} prompts", flush=True)
t0 = time.time()
with engine:
    futures = [engine.submit(Request(input_ids=j["input_ids"], max_new_tokens=config.sampler.max_new_tokens)) for j in jobs]
    for j, f in zip(jobs, futures):
        text = processor.decode(f.result().tokens, skip_special_tokens=True)
        _, action = response_action(text, "set_of_marks")
        j["response"] = text
        j["clicked"] = j["links"].get(action.args.get("element_id")) if action.name == "left_click" else f"<{action.name}>"
print(f"decoded in {time.time() - t0:.0f}s", flush=True)
with open(out_path, "w") as f:
    for j in jobs:
        j.pop("input_ids"); f.write(json.dumps(j) + "\n")
by = collections.defaultdict(list)
for j in jobs:
    by[j["template"]].append(j)
for tpl, js in by.items():
    hit = sum(j["clicked"] == j["named"] for j in js)
    orig = [j for j in js if j["original"]]
    per_task = collections.defaultdict(set)
    for j in js: per_task[j["task_id"]].add(j["clicked"])
    invariant = sum(len(v) == 1 for v in per_task.values())
    chance = np.mean([1 / j["n_siblings"] for j in js])
    print(f"{tpl}: clicks the named link {hit}/{len(js)} ({hit/len(js):.0%}; chance {chance:.0%}); "
          f"original instruction {sum(j['clicked']==j['named'] for j in orig)}/{len(orig)}; "
          f"same click whatever is named: {invariant}/{len(per_task)} tasks; "
          f"distinct clicks per task (mean) {np.mean([len(v) for v in per_task.values()]):.2f}")
