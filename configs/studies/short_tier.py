"""Study: does RL on the short tier (one named link among its siblings, then a fact or
two) raise held-out success on new sites of the training layouts? (one H200)

    python3 -m asyncwebrl.studies run configs/studies/short_tier.py --out runs/studies/short_tier --parallel 2 --seeds 0

The shipped warm start picks the link a task names among its siblings at chance on new
sites (BENCHMARKS.md "Why the warm start fails"), and the failures of the `unseen` split
are mostly that choice. A warm start continued on demonstrations weighted toward it
(benchmarks/warm_start.py --short-per-site 4: 10% -> 64% of those choices teacher-forced)
makes it often enough that a group of 8 has mixed outcomes. Both arms start from that
checkpoint (WARM_START below) and train on the `train` split's sites; `levels` on its three
difficulty levels (rl_heldout.py's setting), `short` on the short tier alone, `both` on
the two together (the short tasks join the easy level). Judged on the `unseen` split.
WARM_START is not shipped: make it with the stage-4 command of BENCHMARKS.md "The short tier"
(`--out runs/ws4`) and carry it to the machine that runs the study.
Measured (seed 0, BENCHMARKS.md "The short tier"): levels -3.3 points, short -1.7.
"""

from configs.studies._h200 import RECIPE

BASE = "configs/warm_start.py"
WARM_START = "runs/ws4/checkpoint"   # benchmarks/warm_start.py stage 4 (BENCHMARKS.md "The short tier")
FLAGS = {**RECIPE, "model.path": WARM_START, "train.split": "train", "train.max_updates": 24,
         "loss.decoupled": True, "rl.eta": 2}
ARMS = {
    "levels": {"tasks.train_tiers": ("levels",)},
    "short": {"tasks.train_tiers": ("short",)},
    "both": {"tasks.train_tiers": ("levels", "short")},
}
SEEDS = (0, 1, 2)
