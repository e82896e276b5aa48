"""Study: does RL transfer from a warm start with more left to learn? (held out, one H200)

    python3 benchmarks/warm_start.py --minutes 4.0 --steps 2000 --workers 14 --row-length 1024 \
        --text-budget 512 --rows-per-microbatch 64 --bf16 --attention pallas --reuse 2 \
        --save-at 500,900,1400 --eval-tasks 6 --out runs/wsh        # 4 minutes of SFT from scratch
    python3 -m asyncwebrl.studies run configs/studies/rl_headroom.py --out runs/studies/rl_headroom --parallel 2 --seeds 0

The shipped warm start succeeds on 53% of the `unseen` tasks, and its outcome is all but
fixed per task (18% of tasks mixed at temperature 1), so RL on the training sites has
little to sharpen (rl_heldout.py: -2.5 to +0.9 points). This warm start is the same recipe
stopped after 4 minutes (1,723 steps): 29.2% greedy on the same 120 tasks, 23% of tasks
mixed; RL then draws 38-41% informative groups of 8 instead of 21-29%. The arms give RL
the volume rl_heldout.py's did (30 updates = 120 informative groups) and twice that.
Measured (BENCHMARKS.md "RL from a less-trained warm start"): +0.8 and -2.5 points.
"""

from configs.studies._h200 import RECIPE

BASE = "configs/warm_start.py"
FLAGS = {**RECIPE, "model.path": "runs/wsh/checkpoint", "train.split": "train", "loss.kind": "grpo"}
ARMS = {
    "grpo_30": {"train.max_updates": 30},
    "grpo_60": {"train.max_updates": 60},
}
SEEDS = (0, 1, 2)
