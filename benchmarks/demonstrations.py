"""Oracle demonstrations at scale on the browser-free driver: rows per second.

    .venv/bin/python benchmarks/demonstrations.py --sites 2000 --processes 2 --out runs/demos/rows \
        [--tasks-per-site 4] [--tokenizer assets/embedded] [--response-format action]

Fresh training sites (every kind and training variant in turn; never a test site), a few
tasks each, uniform over levels; the teacher (the oracle through the model's own prompt
format, tokenized) on each with text observations; every successful episode's steps
become supervised rows in one rows file (asyncwebrl/runtime/demonstrations.py,
RowsFile). The sites are split between `--processes` worker processes. Prints a JSON
report (rows, distinct sites, seconds including start-up, rows per second, prompt and
response lengths); BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_config(response_format: str):
    from configs.default import bare

    config = bare()   # the bare system's settings, as these rows were measured with
    config.browser.driver, config.agent.observation = "http", "text"
    config.agent.response_format = response_format
    config.browser.pages = 32   # episodes interleaved on the event loop (each step is ~ms of this thread)
    return config


def make_processor(tokenizer: str):
    from asyncwebrl.model.tokenizer import Processor

    return Processor.from_pretrained(tokenizer) if tokenizer else Processor.embedded()


def worker(job: tuple) -> dict:
    site_ids, path, tokenizer, tasks_per_site, response_format = job
    from asyncwebrl.runtime.demonstrations import write_demonstration_rows

    return write_demonstration_rows(make_config(response_format), make_processor(tokenizer), path, site_ids,
                                    tasks_per_site=tasks_per_site, progress=None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sites", type=int, default=2000)
    parser.add_argument("--tasks-per-site", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="", help="a tokenizer directory (default: the byte tokenizer)")
    parser.add_argument("--response-format", default="action")
    parser.add_argument("--out", default="runs/demos/rows")
    args = parser.parse_args()
    started = time.perf_counter()
    from asyncwebrl.runtime.demonstrations import RowsFile, training_site_ids
    from asyncwebrl.web.site import TEST_VARIANTS
    from asyncwebrl.web.sites import make_site

    ids = training_site_ids(args.sites, args.first_seed)
    shares = [ids[i::args.processes] for i in range(args.processes)]
    parts = [f"{args.out}.part{i}" for i in range(args.processes)]
    jobs = [(share, part, args.tokenizer, args.tasks_per_site, args.response_format)
            for share, part in zip(shares, parts)]
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        reports = pool.map(worker, jobs)
    rows = RowsFile()
    for part in parts:
        rows.extend(RowsFile.load(part))
    rows.save(args.out)
    for part in parts:
        os.remove(part + ".npz")
        os.remove(part + ".jsonl")
    seconds = time.perf_counter() - started
    prompt_lengths = sorted(len(p) for p in rows.prompt_ids)
    response_lengths = sorted(len(r) for r in rows.response_ids)
    report = {
        "machine": f"{platform.node()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
        "sites": len(ids), "processes": args.processes, "tasks_per_site": args.tasks_per_site,
        "tokenizer": args.tokenizer or "byte", "episodes": sum(r["episodes"] for r in reports),
        "solved": sum(r["solved"] for r in reports), "rows": len(rows),
        "distinct_sites": len({s["site"] for s in rows.sources}),
        "test_sites": sum(make_site(s["site"]).variant in TEST_VARIANTS for s in rows.sources),
        "seconds": round(seconds, 1), "worker_seconds": [r["seconds"] for r in reports],
        "rows_per_second": round(len(rows) / seconds, 1),
        "prompt_tokens_median": prompt_lengths[len(prompt_lengths) // 2] if rows else None,
        "prompt_tokens_p90": prompt_lengths[int(len(prompt_lengths) * 0.9)] if rows else None,
        "response_tokens_median": response_lengths[len(response_lengths) // 2] if rows else None,
        "out": args.out,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
