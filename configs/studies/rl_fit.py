"""Study: can RL raise success on the very tasks it trains on? (a fit check, not a held-out result)

    python3 -m asyncwebrl.studies run configs/studies/rl_fit.py --out runs/studies/rl_fit --parallel 2 --seeds 0

RL from the shipped warm start has not yet lifted held-out success (BENCHMARKS.md "RL from
the shipped warm start at GPU scale"). Before asking it to carry over to new sites, ask
whether it fits at all: RL draws its tasks from the 120 evaluated ones (train.split=eval),
so their before -> after measures fitting. If GRPO cannot raise greedy success there, no
amount of held-out evaluation will show it; if it can, the held-out gap is transfer.
Arms: GRPO and RAFT++ (successes only), each with the paper's 3 epochs x 2 minibatches
per update at a small learning rate.

For one H200 and its 16 host cores (browser-free driver), two runs sharing the GPU:
12 updates of 4 informative groups of 8 are ~1,500 episodes a run (three groups in four
are uniform), about 4 minutes at half of the ~55,000 episodes per hour one run reaches alone.
"""

BASE = "configs/warm_start.py"
FLAGS = {
    "model.path": "assets/warm_start",   # the embedded default's warm start
    "sft.steps": 0,
    "eval.split": "unseen",
    "eval.num_tasks": 120,
    "train.split": "eval",               # RL trains on the evaluated tasks
    "train.max_updates": 12,
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
ARMS = {
    "grpo": {"loss.kind": "grpo"},
    "raft": {"loss.kind": "raft"},
}
SEEDS = (0, 1, 2)
