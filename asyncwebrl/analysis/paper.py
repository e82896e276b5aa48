"""The paper's published numbers (SPEC.md §5, §7, §8; docs/algorithm.md "Published results"
and "Memory drift"), defined once for the notebooks that set a measurement beside them.

The labels say what was measured; "traj" is the per-trajectory normaliser 1/|tau_i|,
"const" the constant 1/k (loss.normalizer).
"""

# §8, length-coupled memory drift: memory_drift_metrics' name -> what it is, under each normaliser
MEMORY_DRIFT = {
    "generic_key_share": {"label": "memory keys that are generic placeholders", "traj": 0.34, "const": 0.11},
    "key_persistence": {"label": "episodes whose first-step key set is unchanged at the last",
                        "traj": 0.07, "const": 0.65},
    "adjacent_unchanged": {"label": "adjacent step pairs with unchanged memory keys", "traj": 0.36, "const": 0.76},
}
# §8: longer step limits (20/40/60 instead of 10/20/30) make the drift worse, keys growing about one per step
LONGER_LIMITS_KEYS_PER_STEP = 1.0

# §5 and §8, the 1/k normaliser against 1/|tau|
RESPONSE_TOKENS_PER_STEP_TRAJ = 240      # "~240" response tokens per step under 1/|tau|
CONST_RESPONSE_TOKENS_FRACTION = 0.67    # "about 33% fewer" under 1/k
CONST_STEP_SPEEDUP = 1.8                 # 1/k alone: time per training step, 1/|tau| over 1/k
STEPS_SUCCESS, STEPS_FAILURE = 5.1, 12.5  # mean episode length by outcome (failing trajectories shorter under 1/k)

# §5: decoupling "roughly halves" the clip-trigger rate: decoupled / coupled
DECOUPLED_CLIP_FRACTION = 0.5
# §7 / docs: staleness with eta = 2
STALENESS_ETA2 = {"mean": 1.5, "max": 2.0}

# §7: out-of-distribution success on WebGym's test split (a share, as eval.json's success_rate),
# Qwen3-VL-8B-Instruct (the model the embedded web's runs stand in for): base, then each method
OOD_SUCCESS = {
    "base": {"easy": 0.325, "medium": 0.112, "hard": 0.0, "overall": 0.262},
    "WebGym (synchronous)": {"easy": 0.509, "medium": 0.241, "hard": 0.048, "overall": 0.429},
    "AsyncWebRL-RAFT++": {"easy": 0.466, "medium": 0.278, "hard": 0.055, "overall": 0.393},
    "AsyncWebRL": {"easy": 0.524, "medium": 0.343, "hard": 0.071, "overall": 0.454},
}
# which row of OOD_SUCCESS a run's loss.kind trained like
METHOD_OF_LOSS = {"grpo": "AsyncWebRL", "raft": "AsyncWebRL-RAFT++"}
