"""Study: RL adapts the warm start to a web it has no demonstrations of (one H200)

    python3 -m asyncwebrl.studies run configs/studies/rl_adapt.py --out runs/studies/rl_adapt --parallel 2 --seeds 0

The shipped warm start imitated the oracle on the training layouts (variants 1 and 2). On
new sites of those layouts RL has little to add: its failures there are whole templates it
never succeeds at, and RL on the training sites moves held-out success by -2.5..+0.9 points
(rl_heldout.py). The paper's setting is another: a model trained elsewhere, improved by
reward alone on the web it is to work on, judged on sites of that web it did not train on.
Here RL draws tasks from the `adapt` split (sites of the held-out layout, variant 3, that
no demonstration was made on) and is judged on the `test` split (other sites of variant 3,
disjoint seeds): what RL can learn there, the layout's places and words, is shared by every
site of the layout, so it can carry over to the evaluated sites.
Measured (BENCHMARKS.md "RL adapts the warm start"): grpo +7.5, +8.3, +7.5 points in three
seeds; grpo_lr1e-4 +1.7 (seed 0); raft not yet run.
"""

from configs.studies._h200 import ADAPT

BASE = "configs/warm_start.py"
ARM_KEYS = ("loss.kind", "optimizer.learning_rate")   # what the arms set
FLAGS = {key: value for key, value in ADAPT.items() if key not in ARM_KEYS}
ARMS = {
    "grpo": {"loss.kind": "grpo", "optimizer.learning_rate": 3e-5},
    "grpo_lr1e-4": {"loss.kind": "grpo", "optimizer.learning_rate": 1e-4},
    "raft": {"loss.kind": "raft", "optimizer.learning_rate": 3e-5},   # the paper's RAFT++ baseline
}
SEEDS = (0, 1, 2)
