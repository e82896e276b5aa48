"""Study: does the short tier speed up RL's adaptation to a layout the warm start has no
demonstrations of? (one H200)

    python3 -m asyncwebrl.studies run configs/studies/short_adapt.py --out runs/studies/short_adapt --parallel 2 --seeds 0

rl_adapt.py's setting (RL on `adapt` sites of the held-out layout, judged on `test` sites of
it), from the warm start continued on the short tier (short_tier.py's WARM_START). `levels`
trains on the adapt sites' three levels, as rl_adapt.py does; `both` adds their short tier,
where the held-out layout's way to a named department, event, category or subject is the
whole task.
Measured (seed 0, BENCHMARKS.md "The short tier"): levels +5.0 points, both +5.9.
"""

from configs.studies._h200 import ADAPT
from configs.studies.short_tier import WARM_START

BASE = "configs/warm_start.py"
FLAGS = {**ADAPT, "model.path": WARM_START, "loss.decoupled": True, "rl.eta": 2}
ARMS = {
    "levels": {"tasks.train_tiers": ("levels",)},
    "both": {"tasks.train_tiers": ("levels", "short")},
}
SEEDS = (0, 1, 2)
