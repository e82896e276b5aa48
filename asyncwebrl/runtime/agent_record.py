"""What a warm start was trained to read and write, kept beside its weights (agent.json).

A checkpoint run under other agent settings sees prompts it never saw and writes responses
the parser reads otherwise: a model that clicks by label (`"element": "History"`) under
`agent.interaction=set_of_marks` has every such click refused as a no-op, and the run
reports a low success rate, not the mistake. So benchmarks/warm_start.py records the
settings a checkpoint was trained under, and validate_config refuses a run whose config
differs in one of them, naming the key (model.check_agent=False runs it so on purpose).
"""

from __future__ import annotations

import json
import os

FILE = "agent.json"
# the settings that change what the model is shown or how its response is read
# (agent.text_budget only cuts the page text shorter or longer: not recorded as a must)
KEYS = ("observation", "interaction", "response_format")


def write(checkpoint: str, agent) -> None:
    """checkpoint/agent.json from a config's `agent` block."""
    with open(os.path.join(checkpoint, FILE), "w") as f:
        json.dump({key: agent[key] for key in (*KEYS, "text_budget")}, f, indent=1, sort_keys=True)
        f.write("\n")


def mismatch(checkpoint: str, agent) -> str | None:
    """The first recorded setting `agent` differs in, as an error message; None when every
    recorded one agrees or the checkpoint records none (a checkpoint from elsewhere)."""
    path = os.path.join(checkpoint, FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        recorded = json.load(f)
    for key in KEYS:
        if key in recorded and recorded[key] != agent[key]:
            return (f"agent.{key}={agent[key]!r}, but {checkpoint} was trained with agent.{key}="
                    f"{recorded[key]!r} ({path}): set --config.agent.{key}={recorded[key]}, or "
                    "--config.model.check_agent=False to run it so on purpose")
    return None
