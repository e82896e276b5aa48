"""Diagnostic: run a policy (model greedy, or oracle) through main.py's eval code path
(run_episodes, http driver) on chosen unseen tasks and dump every step: the decoded prompt
the model saw (model) or would see (oracle, rebuilt by encode_step), response, action, error.

usage: [MODEL_PATH=checkpoint] [SEED=0] [INTERACTION=labels] run_diag.py POLICY OUT.jsonl [selection]
  selection: "eval60" (the 60 tasks of eval.num_tasks=60, seed 0) or "all:TEMPLATE,TEMPLATE"
"""
import json, os, sys, time
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../.."))
sys.path.insert(0, ROOT)
os.chdir(ROOT)
from configs.default import get_config
import main as M
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.runtime.settings import prompt_builder
from asyncwebrl.runtime.model_policy import encode_step
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.rollout.observation import Observation
from asyncwebrl.model.tokenizer import Processor
from asyncwebrl.web.tasks import generate_tasks, select_balanced

policy, out, selection = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "eval60"
config = get_config()
config.model.path = os.environ.get("MODEL_PATH", config.model.path)   # another checkpoint than the shipped one
config.policy = policy
config.eval.split = "unseen"
config.eval.num_tasks = 60
config.browser.driver = "http"
config.eval.temperature = 0.0
config.seed = int(os.environ.get("SEED", "0"))   # which 60 tasks (eval60) the evaluation draws
config.agent.interaction = os.environ.get("INTERACTION", config.agent.interaction)   # e.g. labels
if selection == "eval60":
    tasks = M.evaluation_tasks(config, "unseen", None)
else:
    wanted = set(selection.split(":", 1)[1].split(","))
    tasks = [t for t in generate_tasks("unseen", config.tasks.test_sites_per_variant) if t.template in wanted]
print(f"{len(tasks)} tasks", flush=True)
processor = Processor.from_pretrained(config.model.path)
prompts = prompt_builder(config, processor)
store = ScreenshotStore.in_memory()
t0 = time.time()
with M.serving(LocalWeb(), config) as web:
    trajs, wall = M.run_episodes(config, tasks, web, phase="test")
print(f"episodes done in {wall:.1f}s", flush=True)
with open(out, "w") as f:
    for t in trajs:
        steps = []
        for i, s in enumerate(t.steps):
            if len(s.prompt_ids):
                prompt = processor.decode(s.prompt_ids, skip_special_tokens=False)
            else:   # oracle: the prompt the model would have been given on this trajectory
                obs = Observation(url=s.url, title=s.title, screenshot_key="", elements=[], scroll_y=0, page_height=0,
                                  viewport=(1280, 720), step=i, last_error=t.steps[i - 1].action_error if i else "",
                                  text=s.page_text)
                enc, _ = encode_step(prompts, processor, store, t.task, t.steps[:i], obs)
                prompt = processor.decode(enc["input_ids"], skip_special_tokens=False)
            steps.append({"i": i, "url": s.url, "title": s.title, "response": s.response, "action": s.action,
                          "error": s.action_error, "page_text": s.page_text, "prompt": prompt,
                          "prompt_tokens": int(len(processor.encode_text(prompt)))})
        row = t.summary()
        row.update(template=t.task.template, instruction=t.task.task_name, facts=t.task.facts, level=t.task.level,
                   plan=t.task.local["oracle"], step_limit=t.step_limit, steps_detail=steps)
        f.write(json.dumps(row) + "\n")
print(f"total {time.time() - t0:.1f}s; success {sum(t.success for t in trajs)}/{len(trajs)}", flush=True)
