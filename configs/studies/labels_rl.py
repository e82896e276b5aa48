"""Study: RL from the warm start that clicks by label (assets/warm_start from stop 46 to stop 57, now assets/warm_start_labels).

    python3 -m asyncwebrl.studies run configs/studies/labels_rl.py --out runs/studies/labels_rl --parallel 2 --seeds 0

held_out: RL on the training sites, judged on new sites of the training layouts (`unseen`,
what `python main.py` evaluates); adapt: RL on sites of the held-out layout, judged on other
sites of it (`test`), the recipe where RL from the id-clicking warm start gained 7.5-8.3 points.
"""

from configs.studies._h200 import ADAPT, RECIPE

BASE = "configs/warm_start.py"
# the embedded default's warm start (stage 4: clicks by label) instead of the studies' stage 3
LABELS = {"model.path": "assets/warm_start_labels", "agent.interaction": "labels"}
FLAGS = {"loss.kind": "grpo"}
ARMS = {
    "held_out": {**RECIPE, **LABELS, "train.split": "train", "train.max_updates": 24},
    "adapt": {**ADAPT, **LABELS},
}
SEEDS = (0, 1, 2)
