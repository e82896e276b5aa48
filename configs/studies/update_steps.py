"""Study: optimiser steps per RL update, from the shipped warm start.

    python3 -m asyncwebrl.studies run configs/studies/update_steps.py --out runs/studies/update_steps --parallel 2

The runs so far took one optimiser step per update (learner.epochs = minibatches = 1):
the PPO ratio is then exactly 1 at that step, nothing is ever clipped, and each episode
is used once (BENCHMARKS.md "RL from the shipped warm start at GPU scale": no rise in
12-26 updates, a fall at lr 3e-4). The paper takes 3 epochs x 2 minibatches per update
(configs/instruct.py): six steps on each batch, clipped against the proximal policy.
Arms: the paper's six steps at a small learning rate, against one step at 1e-4.

For one H200 and its 16 host cores (browser-free driver: the GPU host has no browser),
two runs sharing the GPU: 30 updates of 8 informative groups are ~10,000 episodes a run
(three groups in four are uniform), about 20 minutes at half of the 60,000 episodes per
hour one run reached alone. Judged on the `unseen` split (new sites of the training
layouts), 120 tasks before and after; `--seeds 0` runs one seed of each arm.
"""

from configs.studies._h200 import RECIPE

BASE = "configs/warm_start.py"
ARM_KEYS = ("learner.epochs", "learner.minibatches", "optimizer.learning_rate")   # what the arms set
FLAGS = {**{key: value for key, value in RECIPE.items() if key not in ARM_KEYS},
         "train.max_updates": 30, "train.checkpoint_every": 10,
         "rl.groups_per_batch": 8, "rl.max_running_groups": 20}
ARMS = {
    "steps6_lr3e-5": {"learner.epochs": 3, "learner.minibatches": 2, "optimizer.learning_rate": 3e-5},
    "steps1_lr1e-4": {"learner.epochs": 1, "learner.minibatches": 1, "optimizer.learning_rate": 1e-4},
}
SEEDS = (0, 1, 2)
