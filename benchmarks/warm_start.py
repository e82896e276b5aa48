"""How far supervised steps on oracle demonstrations take the tiny model, on held-out sites.

    # 1. on a machine with Chromium: demonstrations -> a rows file (text only, ~5 MB)
    .venv/bin/python benchmarks/warm_start.py collect --train-tasks 200 --test-tasks 72 --rows runs/demo_rows.pkl
    # 2. anywhere (a GPU makes thousands of steps cheap): supervised steps, exact match by action
    python3 benchmarks/warm_start.py train --rows runs/demo_rows.pkl --learning-rate 3e-3 --rows-per-step 16 \
        --steps 3000 --every 250

`collect` runs the oracle through the embedded default's prompt format (configs/default.py)
on training and held-out (test) sites and keeps the solved episodes' step rows. It also
reports how many solved tasks could be answered from the text the prompts show: every
rubric fact appears somewhere in the episode's prompts (task, element lists, history).
The rows keep their text only: screenshots are dropped with their placeholder tokens,
which isolates what the model can learn from the text observation (at <= 64 image tokens
a 1280x720 page's text is not legible to it anyway), and keeps the file small enough to
carry to an accelerator without a browser.

`train` runs the warm start's supervised steps (the learner in "sft" mode) from random
weights and, every --every steps, the teacher-forced greedy exact match of whole responses
on 120 held-out and 120 training rows, by action: a row counts only if greedy decoding would
reproduce the oracle's response token for token.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from configs import default  # noqa: E402
from asyncwebrl.learner.packing import PackingShape, StepRow, pack  # noqa: E402
from asyncwebrl.runtime.build import build_model, make_learner  # noqa: E402

SPLITS = {"train": "train_sites_per_variant", "test": "test_sites_per_variant"}
PROBE_ROWS = 120
ACTIONS = ("left_click", "type", "answer")


def collect(args) -> None:
    from asyncwebrl.runtime.demonstrations import demonstrate
    from asyncwebrl.runtime.rows import step_rows
    from asyncwebrl.runtime.settings import screenshot_store
    from asyncwebrl.web.server import LocalWeb
    from asyncwebrl.web.tasks import generate_tasks

    config = default.get_config()
    _, processor = build_model(config)
    vision_ids = {processor.special.vision_start, processor.special.vision_end, processor.special.image_pad,
                  processor.special.video_pad}
    wanted = {"train": args.train_tasks, "test": args.test_tasks}
    result = {}
    with LocalWeb() as web:
        for split, sites in SPLITS.items():
            tasks = generate_tasks(split, config.tasks[sites])
            tasks = random.Random(config.seed).sample(tasks, min(wanted[split], len(tasks)))
            store = screenshot_store(config, f"demonstrations-{split}")
            episodes, seconds = demonstrate(config, web, processor, store, tasks, phase=split, label=split)
            solved = [t for t in episodes if t.success]
            rows = step_rows(solved, np.zeros(len(solved)), store, processor)
            store.free([k for t in episodes for k in t.screenshot_keys()])
            result[split] = [{"prompt": np.asarray([i for i in r.prompt_ids if i not in vision_ids], np.int32),
                              "response": r.response_ids} for r in rows]
            readable = collections.Counter(t.task.task_id.split("-")[0] for t in solved
                                           if facts_in_text(t, processor))
            print(json.dumps({"split": split, "tasks": len(tasks), "solved": len(solved), "rows": len(rows),
                              "answerable_from_text": sum(readable.values()), "by_site_kind": dict(readable),
                              "seconds": round(seconds)}), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.rows)), exist_ok=True)
    with open(args.rows, "wb") as f:
        pickle.dump(result, f)


def facts_in_text(trajectory, processor) -> bool:
    """Every rubric fact of the task appears in some prompt of the episode (as text). A
    fact without a value (a form's confirmation code, known only once the form is sent)
    counts as not shown: the code appears in the page's text, never in an element list."""
    shown = " ".join(processor.decode(step.prompt_ids, skip_special_tokens=True) for step in trajectory.steps)
    facts = [str(fact) for group in trajectory.task.evaluator_reference for fact in group["facts"]]
    return all(fact and fact in shown for fact in facts)


def train(args) -> None:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    config = default.get_config()
    with open(args.rows, "rb") as f:
        data = pickle.load(f)
    config.sampler.capacity = config.learner.row_length = args.row_length
    config.learner.rows_per_microbatch = args.rows_per_microbatch
    config.sft.learning_rate, config.sft.steps, config.sft.rows_per_step = args.learning_rate, args.steps, args.rows_per_step
    model, processor = build_model(config)
    learner = make_learner(config, model, "sft")
    train_rows, test_rows = (text_rows(data[split], processor) for split in SPLITS)
    pick = np.random.default_rng(1)
    probes = {split: [rows[i] for i in pick.choice(len(rows), min(PROBE_ROWS, len(rows)), replace=False)]
              for split, rows in (("test", test_rows), ("train", train_rows))}
    one_row = PackingShape(**{**vars(learner.settings.packing), "rows_per_microbatch": 1})
    packed = {split: [(action_of(r, processor), pack([r], one_row, learner.config)[0]) for r in rows]
              for split, rows in probes.items()}

    @jax.jit
    def greedy(params, inputs):
        model = nnx.merge(learner.graphdef, params)
        hidden, _ = model.hidden_states(inputs)
        return jnp.argmax(model.logits(hidden), -1)

    def exact_match() -> dict:
        result = {}
        for split, pairs in packed.items():
            hits = collections.defaultdict(list)
            for action, microbatch in pairs:
                predicted = np.asarray(greedy(learner.state.params, microbatch.inputs))
                mask = microbatch.loss_mask > 0
                hits[action].append(bool((predicted[mask] == microbatch.targets[mask]).all()))
            result[split] = {action: f"{sum(v)}/{len(v)}" for action, v in sorted(hits.items())}
        return result

    print(json.dumps({"train_rows": len(train_rows), "test_rows": len(test_rows), "device": str(jax.devices()[0]),
                      **{k: v for k, v in vars(args).items() if k != "func"}}), flush=True)
    rng = np.random.default_rng(config.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = [train_rows[i] for i in rng.choice(len(train_rows), args.rows_per_step, replace=False)]
        measured = learner.update(batch)
        if step % args.every == 0 or step == args.steps:
            print(json.dumps({"step": step, "nll": round(measured["nll"], 3),
                              "seconds": round(time.perf_counter() - started), **exact_match()}), flush=True)


def text_rows(rows: list[dict], processor) -> list[StepRow]:
    patch_dim = processor.still_patch_dim
    return [StepRow(prompt_ids=r["prompt"], response_ids=np.asarray(r["response"], np.int32),
                    pixel_values=np.zeros((0, patch_dim), np.uint8), image_grid_thw=np.zeros((0, 3), np.int64),
                    behave_logprobs=np.zeros(len(r["response"]), np.float32),
                    versions=np.zeros(len(r["response"]), np.int32), advantage=0.0) for r in rows]


def action_of(row: StepRow, processor) -> str:
    text = processor.decode(row.response_ids)
    return next((action for action in ACTIONS if f'{action}"' in text), "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(required=True)
    first = commands.add_parser("collect", help="oracle demonstrations -> a rows file (needs Chromium)")
    first.add_argument("--train-tasks", type=int, default=200)
    first.add_argument("--test-tasks", type=int, default=72)
    first.add_argument("--rows", default="runs/demo_rows.pkl")
    first.set_defaults(func=collect)
    second = commands.add_parser("train", help="supervised steps; held-out exact match by action")
    second.add_argument("--rows", default="runs/demo_rows.pkl")
    second.add_argument("--learning-rate", type=float, default=3e-3)
    second.add_argument("--rows-per-step", type=int, default=16)
    second.add_argument("--steps", type=int, default=3000)
    second.add_argument("--every", type=int, default=250)
    second.add_argument("--row-length", type=int, default=2560)   # text-only rows are <= 2,368 tokens
    second.add_argument("--rows-per-microbatch", type=int, default=4)
    second.set_defaults(func=train)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
