"""Where a warm start stands on the imperfect teacher's habit: at the point of each answer where
the teacher (benchmarks/warm_start.py --teacher-cuts) would end it one fact early, the model's
probability of ending there. Greedy decoding ends the answer wherever that probability is above
the continuation's, so its spread says how steady a checkpoint's greedy success can be.

    .venv/bin/python benchmarks/cut_decision.py assets/warm_start runs/wst/checkpoint-900 assets/warm_start_labels

A CHECKPOINT may also be a `main.py` workdir: its latest RL checkpoint is judged (the
model of configs/default.py with the trained parameters), to see whether RL moved the decision.

Rows: the oracle's whole answers on 32 unseen sites of the training layouts (the `unseen`
split's seeds; answers of two facts or more), teacher-forced up to the decision. Prints, per
checkpoint, the share of decisions where ending is the most likely token (what greedy does), and
quantiles of P(end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def decision_rows(config, processor) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(prompt ids, whole answer's response ids, the cut answer's response ids) of every answer
    step of two facts or more that the oracle wrote on unseen training-layout sites."""
    from asyncwebrl.rollout.screenshots import ScreenshotStore
    from asyncwebrl.runtime.demonstrations import demonstrate, without_last_fact
    from asyncwebrl.web.server import LocalWeb
    from benchmarks.warm_start import unseen_site_tasks

    trajectories, _ = demonstrate(config, LocalWeb(), processor, ScreenshotStore.in_memory(), unseen_site_tasks(),
                                  progress=None)
    rows = []
    for trajectory in trajectories:
        last = trajectory.steps[-1]
        cut = without_last_fact(last.response)
        if not trajectory.success or cut == last.response:   # (not an answer, or one fact)
            continue
        cut_ids = np.asarray(processor.encode_text(cut) + [processor.special.eos], np.int32)
        rows.append((np.asarray(last.prompt_ids, np.int32), np.asarray(last.response_ids, np.int32), cut_ids))
    return rows


def end_probabilities(path: str, rows) -> tuple[np.ndarray, np.ndarray]:
    """At the first token where the two answers part: P(the cut answer's token), and whether
    it is the most likely token (greedy ends the answer there)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from asyncwebrl.learner.packing import PackingShape, pack
    from asyncwebrl.runtime.build import build_model, make_learner, restore_trained
    from benchmarks.warm_start import step_row
    from configs.default import get_config

    config = get_config()
    if os.path.isdir(os.path.join(path, "checkpoints")):   # a main.py workdir: its latest RL weights
        config.model.checkpoint = os.path.join(path, "checkpoints")
    else:
        config.model.path = path
    model, processor = build_model(config)
    model = restore_trained(config, model)
    learner = make_learner(config, model, "sft")
    one_row = PackingShape(**{**vars(learner.settings.packing), "rows_per_microbatch": 1})

    @jax.jit
    def log_probs(params, inputs):
        model = nnx.merge(learner.graphdef, params)
        hidden, _ = model.hidden_states(inputs)
        return jax.nn.log_softmax(model.logits(hidden).astype(jnp.float32), -1)

    ends, greedy_ends = [], []
    for prompt, whole, cut in rows:
        part = int(np.argmax(whole[:len(cut)] != cut[:len(whole)]))   # the first token where they differ
        microbatch = pack([step_row(prompt, whole, processor)], one_row, learner.config)[0]
        response_log_probs = np.asarray(log_probs(learner.state.params, microbatch.inputs))[microbatch.loss_mask > 0]
        ends.append(float(np.exp(response_log_probs[part, cut[part]])))
        greedy_ends.append(int(np.argmax(response_log_probs[part])) == int(cut[part]))
    return np.asarray(ends), np.asarray(greedy_ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+")
    args = parser.parse_args()
    from asyncwebrl.model.tokenizer import Processor
    from configs.default import get_config

    config = get_config()
    config.browser.driver = "http"
    rows = decision_rows(config, Processor.from_pretrained(config.model.path))
    for path in args.checkpoints:
        ends, greedy_ends = end_probabilities(path, rows)
        print(json.dumps({"checkpoint": path, "decisions": len(ends),
                          "greedy_ends_early": round(float(np.mean(greedy_ends)), 3),
                          "p_end_quantiles_10_25_50_75_90": [round(float(q), 3) for q in
                                                             np.quantile(ends, [0.1, 0.25, 0.5, 0.75, 0.9])],
                          "p_end_mean": round(float(ends.mean()), 3)}), flush=True)


if __name__ == "__main__":
    main()
