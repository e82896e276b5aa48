"""The loss choices a config names, defined once and without JAX, so that
runtime/validate.py can check a config before anything (JAX included) is loaded."""

LOSS_KINDS = ("grpo", "raft")      # loss.kind: the RL losses a config may name (learner/losses.py, LOSSES)
WARM_START_KIND = "sft"            # the warm start's supervised loss (config.sft): never a loss.kind
NORMALIZERS = ("traj", "const")    # loss.normalizer: 1/steps of the episode, or the constant 1/k (learner/losses.py)
