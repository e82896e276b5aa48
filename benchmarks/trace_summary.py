"""Where a profiled run's time went: a jax.profiler trace summed by kernel, device and host apart.

    python benchmarks/trace_summary.py runs/trace            # the newest perfetto_trace.json.gz under it
    python benchmarks/trace_summary.py runs/trace --top 60 --json

Reads the Perfetto JSON that `jax.profiler.trace(dir, create_perfetto_trace=True)` writes
(benchmarks/learner.py --trace DIR makes one). Each complete event ("ph": "X") belongs to a
process and a thread. On the GPU's process ("/device:GPU:0") the "Stream #n" threads hold
the CUDA kernels, while other threads ("XLA Modules", "XLA Ops") repeat the same time as
XLA's programs and HLO ops, so each thread kind is summed on its own. For the kernels it
prints the busy time (the union of their intervals: concurrent streams are not counted
twice), the time by kind of kernel (KINDS: matrix products, Triton kernels from Pallas,
copies, the rest of XLA's fusions) and the kernels that took longest; for every other thread
kind (the host's included), the longest events by name. Names are XLA's and the CUDA
libraries' own, so a kind is a guess from the name: the `other` row says how much nothing
matched.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re

# kind of a device kernel, by its name (first match wins)
KINDS = (
    ("copy", re.compile(r"memcpy|memset", re.I)),
    ("matmul", re.compile(r"gemm|cublas|cutlass|xmma|nvjet|sm\d+_.*(?:tensorop|mma)|triton_gemm|gemm_fusion", re.I)),
    ("pallas/triton", re.compile(r"flash|attention|segment|decode|layer_matmul|pallas|mosaic", re.I)),
    ("collective", re.compile(r"nccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter", re.I)),
    ("fusion", re.compile(r"fusion|loop_|input_|reduce|transpose|convert|broadcast|scatter|gather|slice", re.I)),
)


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def newest_trace(path: str) -> str:
    if os.path.isfile(path):
        return path
    found = glob.glob(os.path.join(path, "**", "perfetto_trace.json.gz"), recursive=True)
    if not found:
        raise SystemExit(f"no perfetto_trace.json.gz under {path}: profile with jax.profiler.trace(..., "
                         "create_perfetto_trace=True)")
    return max(found, key=os.path.getmtime)


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def summarise(path: str, top: int) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    process_names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
                     if e.get("ph") == "M" and e.get("name") == "process_name"}
    thread_names = {(e["pid"], e["tid"]): e.get("args", {}).get("name", "") for e in events
                    if e.get("ph") == "M" and e.get("name") == "thread_name"}
    # (where, thread kind) -> name -> [microseconds, count]; where is "device" or "host"
    tables = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    kernels, first, last = [], float("inf"), float("-inf")
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        start, dur = float(e["ts"]), float(e["dur"])
        first, last = min(first, start), max(last, start + dur)
        where = "device" if "device:gpu" in process_names.get(e["pid"], "").lower() else "host"
        thread = re.sub(r"[#\d(),:]+.*$", "", thread_names.get((e["pid"], e["tid"]), "")).strip() or "?"
        if where == "host":
            thread = "all threads"
        entry = tables[(where, thread)][e["name"]]
        entry[0] += dur
        entry[1] += 1
        if where == "device" and thread == "Stream":
            kernels.append((start, start + dur))
    kinds = collections.defaultdict(float)
    for name, (us, _) in tables.get(("device", "Stream"), {}).items():
        kinds[kind_of(name)] += us

    def ranked(table):
        return [{"ms": round(us / 1e3, 1), "count": n, "name": name[:160]}
                for name, (us, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:top]]

    return {"trace": path, "span_ms": round((last - first) / 1e3, 1) if last > first else None,
            "kernel_busy_ms": round(busy_us(kernels) / 1e3, 1) if kernels else None,
            "kernel_ms_by_kind": {k: round(v / 1e3, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "tables": {f"{where}: {thread}": ranked(table) for (where, thread), table in sorted(tables.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a perfetto_trace.json.gz, or a directory to search for the newest one")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = parser.parse_args()
    summary = summarise(newest_trace(args.path), args.top)
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{summary['trace']}\nspan {summary['span_ms']} ms, GPU kernels busy {summary['kernel_busy_ms']} ms")
    for kind, ms in summary["kernel_ms_by_kind"].items():
        print(f"  {kind:14s} {ms:10.1f} ms")
    for title, rows in summary["tables"].items():
        print(title)
        for row in rows:
            print(f"  {row['ms']:10.1f} ms {row['count']:7d}  {row['name']}")


if __name__ == "__main__":
    main()
