"""What the studies run on one H200 share (not a study: the runner and tests skip `_` files).

The warm start every study so far was measured from (stage 3 of assets/warm_start/README.md,
clicking by id; kept as assets/warm_start_ids so that their arms stay comparable and can be
re-run), the browser-free driver on the host's 16 cores (the GPU host has
no browser), two runs sharing the GPU, the paper's update (3 epochs x 2 minibatches: six
clipped steps per batch) at a constant 3e-5, groups of 8, 4 informative groups per update,
greedy evaluation on 120 tasks of the `unseen` split. 12 updates of this take ~2.5 minutes
of RL per run (BENCHMARKS.md "RL fits the tasks it trains on").
"""

RECIPE = {
    "model.path": "assets/warm_start_ids",   # the embedded default's warm start until stop 46
    "agent.interaction": "set_of_marks",      # ... which clicks by element id
    "sft.steps": 0,
    "eval.split": "unseen",
    "eval.num_tasks": 120,
    "train.checkpoint_every": 4,
    "rl.group_size": 8,
    "rl.groups_per_batch": 4,
    "rl.max_running_groups": 16,
    "browser.pages": 64,
    "sampler.slots": 64,
    "sampler.prefill_rows": 16,
    "model.attention": "pallas",
    "model.compute_dtype": "bfloat16",
    "learner.rows_per_microbatch": 32,
    "learner.epochs": 3,
    "learner.minibatches": 2,
    "optimizer.learning_rate": 3e-5,
    "optimizer.final_lr_fraction": 1.0,
}
# RL on the evaluated tasks (train.split=eval): where 12 updates raise success by 11-12
# points (a fitting result, not a held-out one)
FITTING = {**RECIPE, "train.split": "eval", "train.max_updates": 12}
# RL on sites of the layout the warm start has no demonstrations of (train.split=adapt),
# judged on other sites of it (eval.split=test): where 24 updates raise held-out success by
# 7.5-8.3 points in each of three seeds (BENCHMARKS.md "RL adapts the warm start"), so the
# studies compare policies that learn something that carries over, as the paper's do.
# ~5 minutes of RL a run, two runs sharing the GPU.
ADAPT = {**RECIPE, "train.split": "adapt", "eval.split": "test", "train.max_updates": 24}
