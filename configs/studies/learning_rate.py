"""Study: the RL learning rate from the shipped warm start, long enough to see a trend.

    python3 -m asyncwebrl.studies run configs/studies/learning_rate.py --out runs/studies/learning_rate --parallel 2

For one H200 and its 16 host cores (browser-free driver: the GPU host has no browser);
two runs share the GPU at a time. At ~60,000 episodes per hour per run (BENCHMARKS.md
"RL from the shipped warm start at GPU scale") 100 updates of 8 informative groups take
about 25 minutes; three seeds of two arms are three such rounds. Judged on the `unseen`
split (new sites of the training layouts), 120 tasks before and after.
"""

BASE = "configs/warm_start.py"
FLAGS = {
    "model.path": "assets/warm_start",   # the embedded default's warm start
    "sft.steps": 0,
    "eval.split": "unseen",
    "eval.num_tasks": 120,
    "train.max_updates": 100,
    "train.checkpoint_every": 10,
    "rl.group_size": 8,
    "rl.groups_per_batch": 8,
    "rl.max_running_groups": 20,
    "browser.pages": 64,
    "sampler.slots": 64,
    "model.attention": "pallas",
    "model.compute_dtype": "bfloat16",
    "learner.rows_per_microbatch": 32,
    "optimizer.final_lr_fraction": 1.0,
}
ARMS = {
    "lr_3e-5": {"optimizer.learning_rate": 3e-5},
    "lr_1e-4": {"optimizer.learning_rate": 1e-4},
}
SEEDS = (0, 1, 2)
