"""Study: RAFT++ (train on the successes alone, each step weighted 1/T) against GRPO (the
group-relative advantage, 1/k), from the same start.

    python3 -m asyncwebrl.studies run configs/studies/raft.py --out runs/studies/raft --parallel 2 --seeds 0

Both decoupled at eta 2, on the adapt recipe of configs/studies/_h200.py (RL on sites of the
layout the warm start has no demonstrations of, judged on other sites of it: where RL raises
held-out success, as a study of how a policy learns needs). The grpo arm is the configuration
of the normaliser study's `const` and the decoupling study's `decoupled_eta2` arms (each study
runs its own, at its tree). Dynamic sampling stays on for both arms (as in rl_heldout.py's
raft arm), so RAFT++ too skips groups whose episodes all succeeded, which it could have
learned from: both arms train on groups of mixed outcomes, the same kind of batch.
"""

from configs.studies._h200 import ADAPT

BASE = "configs/warm_start.py"
FLAGS = {**ADAPT, "loss.decoupled": True, "rl.eta": 2}
ARMS = {
    "grpo": {"loss.kind": "grpo", "loss.normalizer": "const"},
    "raft": {"loss.kind": "raft"},
}
SEEDS = (0, 1, 2)
