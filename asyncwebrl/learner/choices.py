"""The loss kinds a config names, and the normalisers: one registry, without JAX, so that
runtime/validate.py can check a config before anything (JAX included) is loaded.

    kind = loss_kind(config.loss.kind)   # the LossKind (learner/losses.py): imports JAX

A loss kind is its function(s) and its LossKind in a module (learner/losses.py holds
today's) and one line of LOSSES naming that LossKind as "module:attribute", the way
envs.SOURCES names the task sources (docs/architecture.md#a-loss-kind). The learner
(train.py, learner.py), the step rows (runtime/rows.py) and the run's metrics ask the
resolved LossKind for everything kind-specific; nothing else branches on the kind.
"""

from __future__ import annotations

import importlib

# loss.kind -> "module:attribute" of its LossKind; imported on first use
LOSSES = {
    "grpo": "asyncwebrl.learner.losses:GRPO",
    "raft": "asyncwebrl.learner.losses:RAFT",
}
# the warm start's supervised loss (config.sft): the learner's own, never a loss.kind
WARM_START_KIND = "sft"
WARM_START = "asyncwebrl.learner.losses:SFT"

NORMALIZERS = ("traj", "const")    # loss.normalizer: 1/steps of the episode, or the constant 1/k (learner/losses.py)


def loss_kind(name: str):
    """The LossKind registered as `name` (a key of LOSSES, or WARM_START_KIND)."""
    entry = WARM_START if name == WARM_START_KIND else LOSSES.get(name)
    if entry is None:
        raise ValueError(f"loss kind must be one of {tuple(LOSSES)}, got {name!r}")
    module, attribute = entry.split(":")
    kind = getattr(importlib.import_module(module), attribute)
    from asyncwebrl.learner.losses import LossKind   # JAX: only once a kind is used
    if not isinstance(kind, LossKind):
        raise TypeError(f"loss kind {name!r} names {entry}, a {type(kind).__name__}, not a LossKind")
    return kind
