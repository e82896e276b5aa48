"""Study: the decoupled staleness weight against the coupled clip (SPEC claim: decoupling
roughly halves the clip-trigger rate), at eta 2 and eta 4.

    python3 -m asyncwebrl.studies run configs/studies/decoupling.py --out runs/studies/decoupling --parallel 2 --seeds 0

GRPO, 1/k, on the adapt recipe of configs/studies/_h200.py (RL on sites of the layout the
warm start has no demonstrations of, judged on other sites of it: where RL raises held-out
success, as a study of how a policy learns needs). The report's second table carries the
share of clipped tokens, of tokens whose behaviour weight was capped, and the staleness the
runs saw.
"""

from configs.studies._h200 import ADAPT

BASE = "configs/warm_start.py"
FLAGS = {**ADAPT, "loss.kind": "grpo", "loss.normalizer": "const"}
ARMS = {
    "decoupled_eta2": {"loss.decoupled": True, "rl.eta": 2},
    "coupled_eta2": {"loss.decoupled": False, "rl.eta": 2},
    "decoupled_eta4": {"loss.decoupled": True, "rl.eta": 4},
    "coupled_eta4": {"loss.decoupled": False, "rl.eta": 4},
    # The staleness control: paced admission keeps groups from waiting on the learner, so
    # staleness stayed 0.3-0.4 versions at eta 2 and eta 4 alike (BENCHMARKS.md); unpaced, every
    # one of the 16 running groups is admitted at once and a group spans more published versions
    "decoupled_eta4_unpaced": {"loss.decoupled": True, "rl.eta": 4, "rl.pace_admission": False},
    "coupled_eta4_unpaced": {"loss.decoupled": False, "rl.eta": 4, "rl.pace_admission": False},
}
SEEDS = (0, 1, 2)
