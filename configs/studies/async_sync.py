"""Study: asynchronous (eta 2) against synchronous (eta 0) RL from the same start: success
against updates and against wall-clock time.

    python3 -m asyncwebrl.studies run configs/studies/async_sync.py --out runs/studies/async_sync --parallel 2 --seeds 0
    python3 -m asyncwebrl.studies curve configs/studies/async_sync.py --out runs/studies/async_sync --parallel 4 --seeds 0

GRPO, 1/k, decoupled, on the adapt recipe of configs/studies/_h200.py (RL on sites of the
layout the warm start has no demonstrations of, judged on other sites of it: where RL
raises held-out success, as a study of how a policy learns needs). Two runs share one GPU,
so the wall-clock comparison is between arms of one study run, not against a run alone.
Every checkpoint is kept (one each train.checkpoint_every = 4 updates) for `curve`, which
evaluates them on the held-out tasks: success against the RL wall clock, not only at the end.
"""

from configs.studies._h200 import ADAPT

BASE = "configs/warm_start.py"
FLAGS = {**ADAPT, "loss.kind": "grpo", "loss.normalizer": "const", "loss.decoupled": True,
         "train.keep_checkpoints": 10}   # updates 0, 4, ..., 24, and those a SIGTERM adds
ARMS = {
    "async_eta2": {"rl.eta": 2},
    "sync_eta0": {"rl.eta": 0},
}
SEEDS = (0, 1, 2)
