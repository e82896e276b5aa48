"""Sampler and learner agree at equal weights (benchmarks/logprob_gap.py, issue 25 item 4):
the log-prob the engine recorded for each sampled token against the learner's recomputed
one (Learner.response_logprobs), the tiny model in float32 on the CPU, with a screenshot;
and in bf16, a deep model's gap narrowed by a float32 residual stream (model.residual_dtype)."""

import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.logprob_gap import measure, run_config  # noqa: E402

SHAPES = dict(requests=3, prompt_tokens=40, new_tokens=12, images=1)


def gap(transform=None) -> dict:
    # sharpened so that the next-token distribution is peaked (near uniform, a wrong token
    # would cost almost nothing and the test could not fail)
    return measure(run_config("tiny", "", "float32", "float32", "xla", **SHAPES), **SHAPES, sharpen_by=30.0, transform=transform)


def shifted(rows):
    """The learner scores the next token id after each sampled one (a peaked random model
    may repeat one token, so shifting positions would score the same ids)."""
    return [dataclasses.replace(r, response_ids=(r.response_ids + 1) % 256) for r in rows]


def test_the_learner_recomputes_the_sampled_log_probs_in_float32():
    same = gap()
    assert same["tokens"] >= 3 * 4 and same["rows"] == 3
    assert same["sampled_nll"] < 3.0, same   # peaked: wrong tokens show
    assert same["mean_abs"] < 1e-4 and same["max_abs"] < 1e-3, same
    assert same["over_cap_share"] == 0.0 and same["outside_1.2_share"] == 0.0
    other = gap(shifted)
    assert other["tokens"] == same["tokens"]
    assert other["mean_abs"] > 0.5 and other["max_abs"] > 5.0 and other["outside_1.2_share"] > 0.05, other


# The 2B preset's depth (28 layers) at the small preset's width: bf16 layers compound the
# two sides' rounding apart; sharpened so that a gap shows (sampled nll ~2.3 nats). Measured
# (2-core CPU): mean |d| 1.4e-2 with a bf16 residual stream, 5.9e-3 with a float32 one.
DEEP = dict(requests=4, prompt_tokens=64, new_tokens=48, images=0)


def deep_bf16_gap(residual_dtype: str) -> dict:
    config = run_config("small", "", "bfloat16", "bfloat16", "xla", residual_dtype=residual_dtype, **DEEP)
    return measure(config, **DEEP, sharpen_by=8.0, layers=28)


def test_a_float32_residual_stream_narrows_the_bf16_gap_of_a_deep_model():
    rounded, kept = deep_bf16_gap("bfloat16"), deep_bf16_gap("float32")
    assert rounded["tokens"] >= 4 * 24 and kept["tokens"] >= 4 * 24
    assert rounded["mean_abs"] > 5e-3, rounded   # the shape shows the bf16 gap at all
    assert kept["mean_abs"] < 0.6 * rounded["mean_abs"], (kept, rounded)
    assert kept["p99_abs"] < 0.6 * rounded["p99_abs"], (kept, rounded)
    assert kept["over_cap_share"] == 0.0 and kept["outside_1.2_share"] == 0.0


def test_the_float32_reference_tells_each_sides_own_rounding():
    """`reference` rescores the rows in float32 compute: in float32 both sides sit on it; in
    bf16 each side is off it by its own rounding (which is what the gap is made of)."""
    exact = measure(run_config("tiny", "", "float32", "float32", "xla", **SHAPES), **SHAPES, sharpen_by=30.0,
                    reference=True)
    assert exact["sampler_vs_float32"] < 1e-4 and exact["learner_vs_float32"] < 1e-4, exact
    rounded = measure(run_config("tiny", "", "float32", "bfloat16", "xla", **SHAPES), **SHAPES, sharpen_by=30.0,
                      reference=True)
    assert rounded["sampler_vs_float32"] > 1e-3 and rounded["learner_vs_float32"] > 1e-3, rounded
