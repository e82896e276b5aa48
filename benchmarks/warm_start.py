"""The warm start the project trains itself: fresh oracle demonstrations -> the embedded
model, checked on held-out sites as it goes, written as a Hugging Face checkpoint.

    # one H200 + 16 cores (BENCHMARKS.md "Warm start on one H200", stages B-F): from scratch, then
    # each stage from the previous checkpoint on fresh seeds
    python3 benchmarks/warm_start.py --minutes 7.9 --steps 2600 --workers 14 --row-length 1024 \
        --text-budget 512 --rows-per-microbatch 64 --bf16 --out runs/ws_stage1
    python3 benchmarks/warm_start.py --init runs/ws_stage1/checkpoint --first-seed 100000 --minutes 7.4 \
        --steps 3500 --workers 14 --row-length 1024 --text-budget 512 --rows-per-microbatch 64 \
        --warmup-steps 50 --learning-rate 7e-4 --reuse 3 --bf16 --out runs/ws_stage2
    .venv/bin/python benchmarks/warm_start.py --preset tiny --minutes 30 --workers 1 --out runs/warm_start   # 2 CPU cores

Worker processes run the teacher (the oracle through the model's own prompts: text
observations, element ids, configs/warm_start.py) on the browser-free driver, each on
its own endless sequence of fresh training sites (never a test site), and send the
successful episodes' step rows to the trainer. The trainer takes `sft.rows_per_step`
rows per supervised step (masked cross-entropy on the oracle's responses, the learner in
"sft" mode) from the newest rows (a bounded buffer), taking rows_per_step / --reuse new
rows per step (each row used --reuse times on average; the log says how often), so
workers that are ahead wait on a short queue and, on a small machine, leave the cores to
the trainer. The log also says where the trainer's time goes (waiting for rows, updating).

Every `--probe-every` steps: teacher-forced greedy exact match of whole responses, by
action (left_click / type / answer), on held-out rows (test sites: a layout training never
shows), on rows of unseen sites of the training layouts (new_sites_exact), and on the step of
each short-tier task of those sites that picks the named link among its siblings
(named_choice_exact). At the end (and every
`--eval-every` steps): closed-loop success on `--eval-tasks` held-out tasks (`--eval-split`: the
model acting greedily through the sampler engine, browser-free), by level. The model
and its tokenizer go to OUT/checkpoint (save_pretrained), the log to OUT/log.jsonl.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import queue
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

# training-layout sites from this seed up are the `unseen` split's: only ever measured on
from asyncwebrl.web.tasks import UNSEEN_SEED_OFFSET  # noqa: E402

ACTIONS = ("left_click", "type", "answer")
SITES_PER_CHUNK = 8  # one seed: every kind and training variant


def make_config(args):
    from configs import warm_start

    config = warm_start.get_config()
    config.seed = args.seed
    config.sft.learning_rate, config.sft.rows_per_step, config.sft.steps = args.learning_rate, args.rows_per_step, args.steps
    config.sft.warmup_steps = args.warmup_steps
    config.model.preset, config.model.tokenizer, config.model.path = args.preset, args.tokenizer, args.init
    config.agent.text_budget = args.text_budget
    config.agent.interaction = args.interaction or config.agent.interaction
    config.learner.row_length = config.sampler.capacity = args.row_length
    config.sampler.prompt_buckets = (args.row_length // 2, args.row_length)
    config.learner.rows_per_microbatch = args.rows_per_microbatch
    if args.bf16:
        config.model.compute_dtype = "bfloat16"   # over float32 parameters and optimiser state
    config.model.attention = args.attention
    return config


# ---------------------------------------------------------------- the workers


def produce(index: int, workers: int, rows_out, stop, args) -> None:
    """Demonstrations on fresh training sites, seed index, index + workers, ... (each seed:
    every kind and training variant), until told to stop."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # the teacher needs no accelerator; the trainer has it to itself
    os.environ["RAYON_NUM_THREADS"] = "1"  # one core per worker: the tokenizer's own thread pool would oversubscribe
    from asyncwebrl.model.tokenizer import Processor
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.runtime.demonstrations import demonstrate, site_tasks, training_site_ids
    from asyncwebrl.web.server import LocalWeb

    config = make_config(args)
    source = config.model.path or config.model.tokenizer
    processor = Processor.from_pretrained(source) if source else Processor.embedded()
    store, rng = ScreenshotStore.in_memory(), random.Random(f"warm-start:{args.seed}:{index}")
    seed, parent = args.first_seed + index, os.getppid()
    while not stop.is_set() and os.getppid() == parent:   # (a trainer killed outright leaves no one to stop us)
        if seed >= UNSEEN_SEED_OFFSET:
            raise RuntimeError(f"seed {seed} reaches the unseen split's sites (seeds from {UNSEEN_SEED_OFFSET})")
        sites = training_site_ids(SITES_PER_CHUNK, seed)
        tasks = [t for site in sites for t in site_tasks(site, args.tasks_per_site, rng, args.short_per_site)]
        # a LocalWeb per chunk: it keeps every site it has served, and these are never seen again
        trajectories, _ = demonstrate(config, LocalWeb(), processor, store, tasks, progress=None,
                                      cut_share=args.teacher_cuts)
        rows_out.put((len(sites), taught_rows(trajectories, args.teacher_cuts, args.answers_only)))
        seed += workers


def taught_rows(trajectories, cut_share: float = 0.0, answers_only: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """(prompt ids, response ids) of every step of the episodes the teacher solved, and of
    those an imperfect teacher (--teacher-cuts) failed on purpose by cutting its answer;
    with `answers_only`, of their answering steps alone."""
    from asyncwebrl.runtime.demonstrations import cuts_answer

    return [(np.asarray(s.prompt_ids, np.int32), np.asarray(s.response_ids, np.int32))
            for t in trajectories if t.success or cuts_answer(t.task, cut_share) for s in t.steps
            if not answers_only or s.action.get("name") == "answer"]


def fits(row: tuple[np.ndarray, np.ndarray], row_length: int) -> bool:
    """Whether a (prompt, response) row fits one packed learner row."""
    return len(row[0]) + len(row[1]) <= row_length


def unseen_sites() -> list[str]:
    """32 sites of the training layouts from the `unseen` split's seeds, beyond any worker's
    reach: where the probes (and benchmarks/cut_decision.py) measure what carries to new sites."""
    from asyncwebrl.runtime.demonstrations import training_site_ids

    return training_site_ids(32, UNSEEN_SEED_OFFSET)


def unseen_site_tasks() -> list:
    """Four tasks of each of `unseen_sites`, the levels in turn (a fixed draw)."""
    from asyncwebrl.runtime.demonstrations import site_tasks

    rng = random.Random(0)
    return [t for site in unseen_sites() for t in site_tasks(site, 4, rng)]


def probe_rows(config, processor, count: int, layouts: str):
    """Step rows of the oracle for measuring, never for training: on held-out (test) sites
    (layouts="test": variant 3, a layout training never shows), or on unseen sites of the
    training layouts (layouts="train": the `unseen` split's seeds, beyond any worker's reach).
    The gap between the two is what the model learned of the layouts rather than the task."""
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.runtime.demonstrations import demonstrate
    from asyncwebrl.web.server import LocalWeb
    from asyncwebrl.web.tasks import generate_tasks

    if layouts == "test":
        tasks, phase = random.Random(0).sample(generate_tasks("test", 6), 120), "test"
    else:
        tasks, phase = unseen_site_tasks(), "train"
    trajectories, _ = demonstrate(config, LocalWeb(), processor, ScreenshotStore.in_memory(), tasks, phase=phase,
                                  progress=None)
    rows = [r for r in taught_rows(trajectories) if fits(r, config.learner.row_length)]
    return random.Random(1).sample(rows, min(count, len(rows)))


def named_choice_rows(config, processor):
    """The step of each short-tier task (web/tasks.py TIERS) on 32 unseen sites of the
    training layouts that picks the link the instruction names among its siblings: the
    oracle's last click, the step before its answer. The choice the warm start made at
    chance on new sites (BENCHMARKS.md "Why the warm start fails")."""
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.runtime.demonstrations import demonstrate
    from asyncwebrl.web.server import LocalWeb
    from asyncwebrl.web.sites import make_site
    from asyncwebrl.web.tasks import tasks_of_site

    tasks = [t for site in unseen_sites() for t in tasks_of_site(make_site(site), "short")]
    trajectories, _ = demonstrate(config, LocalWeb(), processor, ScreenshotStore.in_memory(), tasks, phase="train",
                                  progress=None)
    rows = [(np.asarray(t.steps[-2].prompt_ids, np.int32), np.asarray(t.steps[-2].response_ids, np.int32))
            for t in trajectories if t.success]
    return [r for r in rows if fits(r, config.learner.row_length)]


# ---------------------------------------------------------------- the trainer


def step_row(prompt, response, processor, prompt_weight: float = 0.0):
    """A supervised step row (text only); prompt_weight: StepRow.prompt_weight."""
    from asyncwebrl.learner.packing import StepRow

    return StepRow(prompt_ids=prompt, response_ids=response,
                   pixel_values=np.zeros((0, processor.still_patch_dim), np.uint8),
                   image_grid_thw=np.zeros((0, 3), np.int64), behave_logprobs=np.zeros(len(response), np.float32),
                   versions=np.zeros(len(response), np.int32), advantage=0.0, prompt_weight=prompt_weight)


def action_of(response, processor) -> str:
    text = processor.decode(response)
    return next((action for action in ACTIONS if f'{action}"' in text), "other")


class Probe:
    """Teacher-forced greedy exact match on held-out rows, by action."""

    def __init__(self, learner, rows, processor):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from asyncwebrl.learner.packing import PackingShape, pack

        self.learner = learner
        one_row = PackingShape(**{**vars(learner.settings.packing), "rows_per_microbatch": 1})
        self.packed = [(action_of(r, processor), pack([step_row(p, r, processor)], one_row, learner.config)[0])
                       for p, r in rows]

        @jax.jit
        def greedy(params, inputs):
            model = nnx.merge(learner.graphdef, params)
            hidden, _ = model.hidden_states(inputs)
            return jnp.argmax(model.logits(hidden), -1)

        self.greedy = greedy

    def __call__(self) -> dict:
        hits = collections.defaultdict(list)
        for action, microbatch in self.packed:
            predicted = np.asarray(self.greedy(self.learner.state.params, microbatch.inputs))
            mask = microbatch.loss_mask > 0
            hits[action].append(bool((predicted[mask] == microbatch.targets[mask]).all()))
        return {action: round(float(np.mean(v)), 3) for action, v in sorted(hits.items())} | \
            {"all": round(float(np.mean([h for v in hits.values() for h in v])), 3)}


def closed_loop(config, engine, processor, tasks) -> dict:
    """The model acting greedily on held-out tasks (browser-free): success by level."""
    import asyncio

    from asyncwebrl.envs.local import LocalEnvironment
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.runtime.build import make_model_policy
    from asyncwebrl.runtime.evaluate import run_tasks, summarize
    from asyncwebrl.rollout.episode import EpisodeSettings
    from asyncwebrl.rollout.pool import PoolSettings
    from asyncwebrl.web.server import LocalWeb

    store, web = ScreenshotStore.in_memory(), LocalWeb()
    policy = make_model_policy(config, engine, processor, store)
    trajectories, wall = asyncio.run(run_tasks(tasks, policy, LocalEnvironment(web, browser_free=True),
                                               EpisodeSettings.from_config(config, "test"),
                                               pool=PoolSettings.from_config(config), store=store, progress=None))
    summary = summarize(trajectories, wall)
    return {"success": summary["success_rate"], "episodes": summary["episodes"],
            "by_level": {level: row["success_rate"] for level, row in summary["by_difficulty"].items()},
            "action_errors": summary["action_errors"], "steps": summary["total_steps"],
            "eval_seconds": summary["wall_seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=8.0, help="training time (the run stops at --steps or this)")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--init", default="", help="start from this checkpoint (its weights and tokenizer; a "
                        "fresh optimiser and schedule) instead of random weights of --preset")
    parser.add_argument("--tokenizer", default="assets/embedded")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--rows-per-step", type=int, default=128)
    parser.add_argument("--tasks-per-site", type=int, default=4)
    parser.add_argument("--short-per-site", type=int, default=0, help="short-tier tasks per site besides "
                        "(web/tasks.py TIERS: one named link among its siblings, then a fact or two)")
    parser.add_argument("--interaction", default="", choices=["", "set_of_marks", "labels"],
                        help="how the teacher's clicks name elements: by [number], or by label (rollout/response.py "
                        "INTERACTIONS; the checkpoint then needs the same agent.interaction); default: the "
                        "embedded default's (configs/default.py)")
    parser.add_argument("--teacher-cuts", type=float, default=0.0, help="an imperfect teacher: on this share of "
                        "the tasks its final answer leaves out the last fact asked for (runtime/demonstrations.py "
                        "cuts_answer), and those rows are taught too; a start RL can visibly improve on")
    parser.add_argument("--answers-only", action="store_true", help="teach only the episodes' answering steps "
                        "(a stage that changes how answers end, cheaply: one row in ~6)")
    parser.add_argument("--text-budget", type=int, default=512, help="page text tokens shown per step")
    parser.add_argument("--row-length", type=int, default=1024)
    parser.add_argument("--rows-per-microbatch", type=int, default=16)
    parser.add_argument("--prompt-weight", type=float, default=0.0, help="the prompts' text tokens in the loss at "
                        "this weight beside the response's (StepRow.prompt_weight; 0: the response alone)")
    parser.add_argument("--buffer", type=int, default=20_000, help="newest rows kept to sample from")
    parser.add_argument("--reuse", type=float, default=1.0, help="rows used per row produced, on average: the "
                        "trainer takes rows_per_step / reuse new rows per step (above 1 when it outpaces the workers)")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--probe-every", type=int, default=250)
    parser.add_argument("--probe-rows", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=0, help="closed-loop checks during training (0: at the end)")
    parser.add_argument("--eval-tasks", type=int, default=60)
    parser.add_argument("--eval-split", default="test", choices=["test", "unseen"],
                        help="closed loop on sites of the held-out layout, or on unseen sites of the training layouts "
                        "(what configs/default.py evaluates; its seed-0 tasks)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 matmuls over float32 parameters (default: float32 throughout)")
    parser.add_argument("--attention", default="xla", choices=["xla", "pallas"],
                        help="pallas: the flash-attention kernels (GPU), for the trainer and the closed-loop sampler")
    parser.add_argument("--save-dtype", default="bfloat16", help="the checkpoint's parameter dtype (it ships)")
    parser.add_argument("--save-at", default="", help="comma-separated steps at which to save OUT/checkpoint-STEP "
                        "too (a warm start less trained than the last: how much RL has to sharpen depends on it)")
    parser.add_argument("--out", default="runs/warm_start")
    args = parser.parse_args()
    save_at = {int(step) for step in args.save_at.split(",") if step.strip()}
    started = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    log_file = open(os.path.join(args.out, "log.jsonl"), "a")

    def log(record: dict) -> None:
        record = {"seconds": round(time.perf_counter() - started, 1), **record}
        print(json.dumps(record), flush=True)
        log_file.write(json.dumps(record) + "\n")
        log_file.flush()

    context = multiprocessing.get_context("spawn")
    rows_in, stop = context.Queue(maxsize=2 * args.workers), context.Event()
    workers = [context.Process(target=produce, args=(i, args.workers, rows_in, stop, args), daemon=True)
               for i in range(args.workers)]
    for worker in workers:
        worker.start()

    import jax

    from asyncwebrl.model import save_pretrained
    from asyncwebrl.runtime import agent_record
    from asyncwebrl.runtime.build import build_model, make_engine, make_learner
    from asyncwebrl.web.tasks import generate_tasks, select_balanced

    config = make_config(args)
    model, processor = build_model(config)
    learner = make_learner(config, model, "sft")
    parameters = sum(x.size for x in jax.tree.leaves(learner.state.params))
    probe = Probe(learner, probe_rows(config, processor, args.probe_rows, "test"), processor)
    probe_new_sites = Probe(learner, probe_rows(config, processor, args.probe_rows, "train"), processor)
    probe_named = Probe(learner, named_choice_rows(config, processor), processor)
    eval_tasks = select_balanced(generate_tasks(args.eval_split, config.tasks.test_sites_per_variant), args.eval_tasks, seed=0)
    engine = make_engine(config, learner.model(), processor, temperature=0.0, top_p=1.0)
    log({"event": "start", "device": str(jax.devices()[0]), "parameters": int(parameters),
         "vocabulary": len(processor.tokenizer), "probe_rows": len(probe.packed), "probe_rows_new_sites": len(probe_new_sites.packed), "named_choice_rows": len(probe_named.packed), "eval_tasks": len(eval_tasks),
         **{k: v for k, v in vars(args).items()}})

    buffer: collections.deque = collections.deque(maxlen=args.buffer)
    produced = sites = used = too_long = 0
    seconds_waiting = seconds_updating = seconds_packing = 0.0   # where the trainer's time goes: rows from the workers, or updates
    rng = np.random.default_rng(args.seed)

    def drain(wanted: int) -> None:
        """At least `wanted` new rows from the workers, waiting for them if need be; rows
        stay in the (short) queue otherwise, so workers that are ahead wait."""
        nonlocal produced, sites, too_long
        fresh, last_rows = 0, time.perf_counter()
        while fresh < wanted:
            dead = [(i, w.exitcode) for i, w in enumerate(workers) if w.exitcode is not None]
            if dead:   # its traceback is above; training on with fewer workers would hide it
                raise RuntimeError(f"demonstration workers stopped (index, exit code): {dead}")
            try:
                n_sites, rows = rows_in.get(timeout=5)
            except queue.Empty:
                if time.perf_counter() - last_rows > 120:
                    raise RuntimeError("the demonstration workers sent nothing for 120 s") from None
                continue
            last_rows = time.perf_counter()
            fitting = [r for r in rows if fits(r, config.learner.row_length)]
            sites, produced, too_long = sites + n_sites, produced + len(fitting), too_long + len(rows) - len(fitting)
            buffer.extend(fitting)
            fresh += len(fitting)

    def save(checkpoint: str, step: int) -> None:
        save_pretrained(learner.model(), checkpoint, dtype=jax.numpy.dtype(args.save_dtype))
        processor.save_pretrained(checkpoint)
        agent_record.write(checkpoint, config.agent)
        log({"event": "saved", "step": step, "path": checkpoint})

    def evaluate(step: int) -> None:
        engine.publish(learner.params, step)
        log({"event": "eval", "step": step, **closed_loop(config, engine, processor, eval_tasks)})

    with engine:
        step, deadline = 0, started + args.minutes * 60
        while step < args.steps and time.perf_counter() < deadline:
            waited = time.perf_counter()
            drain(max(0, min(args.rows_per_step, round(args.rows_per_step * (step + 1) / args.reuse) - produced)))
            seconds_waiting += time.perf_counter() - waited
            picked = rng.choice(len(buffer), min(args.rows_per_step, len(buffer)), replace=False)
            batch = [step_row(*buffer[i], processor, args.prompt_weight) for i in picked]
            used += len(batch)
            measured = learner.update(batch)
            seconds_updating += measured["seconds"]
            seconds_packing += measured["pack_seconds"]
            step += 1
            if step % args.log_every == 0:
                log({"event": "step", "step": step, "nll": round(float(measured["nll"]), 4),
                     "rows_produced": produced, "rows_used": used, "seconds_waiting_for_rows": round(seconds_waiting, 1),
                     "seconds_updating": round(seconds_updating, 1), "of_which_packing": round(seconds_packing, 1)})
            if step == 1 or step % args.probe_every == 0:
                log({"event": "probe", "step": step, "nll": round(float(measured["nll"]), 4),
                     "rows_produced": produced, "rows_too_long": too_long, "sites": sites, "rows_used": used,
                     "reuse": round(used / max(produced, 1), 2), "held_out_exact": probe(),
                     "new_sites_exact": probe_new_sites(), "named_choice_exact": probe_named()["all"]})
            if step in save_at:
                save(os.path.join(args.out, f"checkpoint-{step}"), step)
            if args.eval_every and step % args.eval_every == 0:
                evaluate(step)
        stop.set()
        log({"event": "trained", "step": step, "held_out_exact": probe(), "new_sites_exact": probe_new_sites(),
             "named_choice_exact": probe_named()["all"],
             "rows_produced": produced, "sites": sites,
             "rows_used": used, "reuse": round(used / max(produced, 1), 2)})
        # saved before the closed loop, so a failing evaluation loses no training
        save(os.path.join(args.out, "checkpoint"), step)
        evaluate(step)
    for worker in workers:
        worker.terminate()


if __name__ == "__main__":
    main()
