"""Study: what RL buys on the embedded default's 2 CPU cores given hours instead of minutes.

    python3 -m asyncwebrl.studies run configs/studies/cpu_volume.py --out runs/st/cpu_volume --seeds 0
    python3 -m asyncwebrl.studies curve configs/studies/cpu_volume.py --out runs/st/cpu_volume
    python3 -m asyncwebrl.studies report configs/studies/cpu_volume.py --out runs/st/cpu_volume

`python main.py`'s own agent, learner and update (groups of 8, one informative group per
update, one epoch, learning rate 1e-4), held constant and with no time budget, on the one
recipe where RL from this warm start moved held-out success at GPU scale: sites of the layout
it has no demonstrations of (train.split=adapt), judged on other sites of it (eval.split=test;
labels_rl.py's adapt arm, +7.5 points after ~6,000 episodes on an H200). Every 8th update is
kept for `curve`: held-out success against RL wall clock and episodes on 2 cores, beside the
GPU curve. Browser-free (http driver): the same episodes as Chromium (BENCHMARKS.md "With the
model acting"), without the renderer's ~0.4 core-seconds a step taking the learner's cores.
"""

BASE = "configs/default.py"
FLAGS = {"browser.driver": "http", "train.max_rl_minutes": 0.0, "optimizer.final_lr_fraction": 1.0,
         "train.checkpoint_every": 8, "train.keep_checkpoints": 10}
ARMS = {"adapt": {"train.split": "adapt", "eval.split": "test", "train.max_updates": 48}}
SEEDS = (0, 1, 2)
