"""Study: the constant 1/k step normaliser against 1/|tau| (SPEC claim: 1/k shortens failing
trajectories and responses at matched or better success), with the horizon control.

    python3 -m asyncwebrl.studies run configs/studies/normalizer.py --out runs/studies/normalizer --parallel 2 --seeds 0

GRPO, decoupled, eta 2, on the adapt recipe of configs/studies/_h200.py (RL on sites of the
layout the warm start has no demonstrations of, judged on other sites of it: where RL
raises held-out success, as a study of how a policy learns needs). The report's second
table carries steps per success and per failure, response tokens per step and the Memory-
drift metrics (docs/algorithm.md). Arms `*_2x` double the training step limits: does
1/|tau|'s drift follow the horizon?
"""

from configs.studies._h200 import ADAPT

BASE = "configs/warm_start.py"
FLAGS = {**ADAPT, "loss.kind": "grpo", "loss.decoupled": True, "rl.eta": 2}
DOUBLED = (12, 20, 28)   # the default's (6, 10, 14), twice
ARMS = {
    "const": {"loss.normalizer": "const"},
    "traj": {"loss.normalizer": "traj"},
    "const_2x": {"loss.normalizer": "const", "agent.train_step_limits": DOUBLED},
    "traj_2x": {"loss.normalizer": "traj", "agent.train_step_limits": DOUBLED},
}
SEEDS = (0, 1, 2)
