"""benchmarks/trace_summary.py on a small Perfetto trace shaped like jax.profiler's GPU traces."""

from __future__ import annotations

import gzip
import json

from benchmarks.trace_summary import summarise


def meta(kind, pid, name, tid=0):
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def span(pid, tid, name, ts_ms, dur_ms):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts_ms * 1000, "dur": dur_ms * 1000}


def test_kernels_on_two_streams_are_counted_once_and_xla_ops_apart(tmp_path):
    events = [meta("process_name", 1, "/device:GPU:0"), meta("thread_name", 1, "Stream #13(compute)", 13),
              meta("thread_name", 1, "Stream #14(memcpy)", 14), meta("thread_name", 1, "XLA Ops", 2),
              meta("process_name", 9, "/host:CPU"),
              span(1, 13, "sm90_xmma_gemm_bf16bf16_f32", 0, 100),     # overlaps the copy by 30 ms
              span(1, 14, "MemcpyD2D", 70, 50),
              span(1, 13, "loop_multiply_fusion", 200, 20),
              span(1, 2, "fusion.12", 0, 120),                        # the same time, as XLA's op
              span(9, 5, "PjitFunction(update)", 0, 400)]
    path = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    summary = summarise(str(path), top=5)
    assert summary["kernel_busy_ms"] == 140.0           # [0, 120) and [200, 220), not 100 + 50 + 20
    assert summary["kernel_ms_by_kind"] == {"matmul": 100.0, "copy": 50.0, "fusion": 20.0}
    assert [row["name"] for row in summary["tables"]["device: XLA Ops"]] == ["fusion.12"]
    assert summary["tables"]["host: all threads"][0] == {"ms": 400.0, "count": 1, "name": "PjitFunction(update)"}
    assert summary["span_ms"] == 400.0
