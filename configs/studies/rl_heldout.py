"""Study: does RL that fits its training tasks carry over to new sites? (rl_fit.py's runs, on held-out tasks)

    python3 -m asyncwebrl.studies run configs/studies/rl_heldout.py --out runs/studies/rl_heldout --parallel 2 --seeds 0

configs/studies/rl_fit.py showed that 12 updates of this recipe raise success on the
tasks trained on by 11-12 points. Here RL draws from the training sites (train.split=train)
and is judged on the 120 tasks of the `unseen` split (new sites of the training layouts),
with the same updates (arms grpo, raft), and with more than three times as many (grpo_40:
does volume bring transfer?), and with tasks drawn where groups disagree (grpo_learnable,
rl.task_sampling=learnable: the warm start's failures on new sites are whole templates,
e.g. 0 of 48 episodes of directory.head, BENCHMARKS.md).

For one H200 and its 16 host cores (browser-free driver): grpo and raft together take ~4
minutes; grpo_40 alone ~8 (`--arms grpo_40`).
"""

from configs.studies._h200 import RECIPE

BASE = "configs/warm_start.py"
FLAGS = {**RECIPE, "train.split": "train"}   # RL trains on the training sites
ARMS = {
    "grpo": {"loss.kind": "grpo", "train.max_updates": 12},
    "raft": {"loss.kind": "raft", "train.max_updates": 12},
    "grpo_40": {"loss.kind": "grpo", "train.max_updates": 40},
    # tasks drawn by template where groups are likely to disagree (rl.task_sampling=learnable)
    "grpo_learnable": {"loss.kind": "grpo", "train.max_updates": 12, "rl.task_sampling": "learnable"},
    "grpo_learnable_24": {"loss.kind": "grpo", "train.max_updates": 24, "rl.task_sampling": "learnable"},
}
SEEDS = (0, 1, 2)
