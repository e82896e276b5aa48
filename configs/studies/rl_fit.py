"""Study: can RL raise success on the very tasks it trains on? (a fit check, not a held-out result)

    python3 -m asyncwebrl.studies run configs/studies/rl_fit.py --out runs/studies/rl_fit --parallel 2 --seeds 0

RL from the shipped warm start has not yet lifted held-out success (BENCHMARKS.md "RL from
the shipped warm start at GPU scale"). Before asking it to carry over to new sites, ask
whether it fits at all: RL draws its tasks from the 120 evaluated ones (train.split=eval),
so their before -> after measures fitting. If GRPO cannot raise greedy success there, no
amount of held-out evaluation will show it; if it can, the held-out gap is transfer.
Arms: GRPO and RAFT++ (successes only), each with the paper's 3 epochs x 2 minibatches
per update at a small learning rate.

The recipe (configs/studies/_h200.py): 12 updates of 4 informative groups of 8, ~1,500-2,400
episodes a run, ~4-5 minutes for both arms at once on one H200.
"""

from configs.studies._h200 import FITTING

BASE = "configs/warm_start.py"
FLAGS = dict(FITTING)
ARMS = {
    "grpo": {"loss.kind": "grpo"},
    "raft": {"loss.kind": "raft"},
}
SEEDS = (0, 1, 2)
