"""Study: partial credit (rl.reward=facts, the share of a task's facts an episode got right)
against the paper's binary success, as what GRPO's advantages are made of.

    python3 -m asyncwebrl.studies run configs/studies/reward.py --out runs/studies/reward --parallel 2 --seeds 0 --arms success,facts
    python3 -m asyncwebrl.studies run configs/studies/reward.py --out runs/studies/reward --parallel 2 --seeds 0 --arms adapt_success,adapt_facts

The shipped warm start fails a held-out task the same way in most of its samples (a wrong
id or name copied), so under binary success few groups differ and RL from training sites
moved held-out success by -2.5..+0.9 points (BENCHMARKS.md "RL fits the tasks it trains
on"). Partial credit tells apart answers that miss one fact from answers that miss all:
three times the informative groups on the warm start's own samples (docs/algorithm.md
"Partial credit"). Does that signal carry over? `success`/`facts`: RL on the training
sites, judged on the 120 `unseen` tasks (the embedded default's question, 24 updates);
`adapt_*`: the adapt recipe (RL on sites of the layout without demonstrations, judged on
other sites of it), where binary GRPO gains +7.5 points. GRPO, 1/k, decoupled, eta 2.
"""

from configs.studies._h200 import ADAPT, RECIPE

BASE = "configs/warm_start.py"
FLAGS = {**{key: value for key, value in RECIPE.items() if key != "eval.split"},   # the arms choose it
         "loss.kind": "grpo", "loss.normalizer": "const", "loss.decoupled": True, "rl.eta": 2, "train.max_updates": 24}
HELD_OUT = {"train.split": "train", "eval.split": "unseen"}   # RL on training sites, judged on new ones
ADAPTING = {"train.split": ADAPT["train.split"], "eval.split": ADAPT["eval.split"]}
ARMS = {
    "success": {**HELD_OUT, "rl.reward": "success"},
    "facts": {**HELD_OUT, "rl.reward": "facts"},
    "adapt_success": {**ADAPTING, "rl.reward": "success"},
    "adapt_facts": {**ADAPTING, "rl.reward": "facts"},
}
SEEDS = (0, 1, 2)
