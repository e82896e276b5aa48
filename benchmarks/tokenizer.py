"""The web tokenizer (asyncwebrl/model/web_tokenizer.py) at several vocabulary sizes,
measured on the held-out test sites (variant 3), which its corpus never sees.

    .venv/bin/python benchmarks/tokenizer.py                          # the table
    .venv/bin/python benchmarks/tokenizer.py --out assets/embedded    # + save the chosen size
    .venv/bin/python benchmarks/tokenizer.py --splits web,web-runs,qwen,gpt2 --sizes 2048,4096

Fitted on web_corpus(--train-sites): training-site page texts (crawled), task
instructions, oracle prompts and responses. Reported per size, against the byte
tokenizer (1.0 byte/token on plain text):
    page B/tok       UTF-8 bytes per token over the test sites' crawled page texts
    worst site kind  the site kind (shop, directory, reference, forms) whose pages get the
                     fewest bytes per token, and that number
    vocab used       distinct token ids in those page texts (the rest of the vocabulary is
                     never read on a held-out page)
    instr B/tok      over the test tasks' instructions
    action / memory  over the oracle's responses in either format (the tool call alone;
                     Memory/Progress/Intention/Action + tool call)
    step-0 p50/p90   tokens of the text-mode prompt (set-of-marks, no system message, page
                     never cut) at each test task's first step
    all p50/p90      the same over every step of the test tasks' oracle episodes
    fit s            seconds to fit on the corpus (corpus generation not included)
The chosen size (of the first split) is the smallest that meets both goals of the issue
(>= 3.0 bytes per token on held-out page text, median text-mode prompt <= 1,024 tokens)
with a margin: page B/tok >= --min-bytes-per-token (3.1) and >= 3.0 on every site kind,
all-steps median <= --max-median-prompt (922).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asyncwebrl.model.tokenizer import (EMBEDDED_MAX_PIXELS, EMBEDDED_MIN_PIXELS, Processor,  # noqa: E402
                                        byte_tokenizer, make_image_processor)
from asyncwebrl.model.web_tokenizer import (DEFAULT_PAGES_PER_SITE, DEFAULT_SPLIT, SPLITS,  # noqa: E402
                                            action_response, crawl_site, fit_web_tokenizer, oracle_steps,
                                            text_prompt_builder, web_corpus)

GOAL_BYTES_PER_TOKEN = 3.0
GOAL_MEDIAN_PROMPT = 1024


@dataclasses.dataclass
class HeldOut:
    pages: list[str]
    kinds: list[str]  # the site kind of each page (shop, directory, ...)
    instructions: list[str]
    action_responses: list[str]
    memory_responses: list[str]
    prompts: list[tuple[list[dict], bool]]  # (messages, is step 0)


def held_out(test_sites: int, pages_per_site: int) -> HeldOut:
    from asyncwebrl.web.server import LocalWeb
    from asyncwebrl.web.sites import make_site
    from asyncwebrl.web.tasks import site_ids, tasks_of_site

    web = LocalWeb()
    sites = [make_site(site_id) for site_id in site_ids("test", test_sites)]
    assert all(site.split == "test" for site in sites)
    pages, kinds = [], []
    for site in sites:
        texts = list(crawl_site(web, site, pages_per_site))
        pages += texts
        kinds += [site.site_id.split("-")[0]] * len(texts)
    tasks = [task for site in sites for task in tasks_of_site(site)]
    records = oracle_steps(tasks, "memory", web=web)
    builder = text_prompt_builder()
    prompts = []
    for record in records:
        steps = [dataclasses.replace(s, response=action_response(s.response)) for s in record.steps]
        prompts.append((builder.build(record.task, steps, record.observation).messages, not record.steps))
    return HeldOut(pages=pages, kinds=kinds, instructions=[t.task_name for t in tasks],
                   action_responses=[action_response(r.response) for r in records],
                   memory_responses=[r.response for r in records], prompts=prompts)


def encode_all(tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)]


def bytes_per_token(tokenizer, texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / sum(map(len, encode_all(tokenizer, texts)))


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(tokenizer, data: HeldOut, fit_seconds: float | None) -> dict:
    processor = Processor(tokenizer, make_image_processor(EMBEDDED_MIN_PIXELS, EMBEDDED_MAX_PIXELS))
    lengths = [(len(processor.encode(messages, images=[])["input_ids"]), first) for messages, first in data.prompts]
    first = [n for n, is_first in lengths if is_first]
    every = [n for n, _ in lengths]
    page_ids = encode_all(tokenizer, data.pages)
    by_kind = {}
    for kind in sorted(set(data.kinds)):
        chosen = [i for i, k in enumerate(data.kinds) if k == kind]
        by_kind[kind] = (sum(len(data.pages[i].encode("utf-8")) for i in chosen)
                         / sum(len(page_ids[i]) for i in chosen))
    return {"vocab": len(tokenizer),
            "page": sum(len(t.encode("utf-8")) for t in data.pages) / sum(map(len, page_ids)),
            "page_by_kind": by_kind,
            "worst_kind": min(by_kind, key=by_kind.get),
            "page_vocab_used": len({i for ids in page_ids for i in ids}),
            "instruction": bytes_per_token(tokenizer, data.instructions),
            "action": bytes_per_token(tokenizer, data.action_responses),
            "memory": bytes_per_token(tokenizer, data.memory_responses),
            "step0_p50": statistics.median(first), "step0_p90": percentile(first, 0.9),
            "all_p50": statistics.median(every), "all_p90": percentile(every, 0.9),
            "fit_s": fit_seconds}


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| tokenizer | vocab | page B/tok | worst site kind | vocab used on pages | instr B/tok | action B/tok "
             "| memory B/tok | step-0 prompt p50 / p90 | all-steps prompt p50 / p90 | fit s |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in rows:
        fit = "-" if m["fit_s"] is None else f"{m['fit_s']:.1f}"
        worst = f"{m['worst_kind']} {m['page_by_kind'][m['worst_kind']]:.2f}"
        lines.append(f"| {name} | {m['vocab']} | {m['page']:.2f} | {worst} | {m['page_vocab_used']} "
                     f"| {m['instruction']:.2f} | {m['action']:.2f} "
                     f"| {m['memory']:.2f} | {m['step0_p50']:.0f} / {m['step0_p90']} "
                     f"| {m['all_p50']:.0f} / {m['all_p90']} | {fit} |")
    return "\n".join(lines)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="512,1024,2048,3072,4096,8192", help="vocabulary sizes, comma separated")
    parser.add_argument("--train-sites", type=int, default=16,
                        help="training sites per variant in the corpus (configs/default.py trains on 16)")
    parser.add_argument("--test-sites", type=int, default=6, help="held-out sites (variant 3) to measure on")
    parser.add_argument("--pages-per-site", type=int, default=DEFAULT_PAGES_PER_SITE)
    parser.add_argument("--splits", default=DEFAULT_SPLIT,
                        help=f"pre-tokenizer split regexes, comma separated, from {sorted(SPLITS)}; the size is "
                             "chosen for the first")
    parser.add_argument("--min-bytes-per-token", type=float, default=3.1,
                        help=f"choose only sizes at least this on all page text (goal {GOAL_BYTES_PER_TOKEN})")
    parser.add_argument("--min-kind-bytes-per-token", type=float, default=GOAL_BYTES_PER_TOKEN,
                        help="... and at least this on the pages of every site kind")
    parser.add_argument("--max-median-prompt", type=float, default=0.9 * GOAL_MEDIAN_PROMPT,
                        help=f"choose only sizes at most this all-steps median prompt (goal {GOAL_MEDIAN_PROMPT})")
    parser.add_argument("--out", default="", help="save the chosen size's Processor here (tokenizer + image config)")
    parser.add_argument("--json", default="", help="write the measurements here as JSON")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    splits = args.splits.split(",")
    if unknown := set(splits) - set(SPLITS):
        parser.error(f"unknown split {sorted(unknown)}; choose from {sorted(SPLITS)}")

    started = time.perf_counter()
    corpus = list(web_corpus(args.train_sites, pages_per_site=args.pages_per_site))
    corpus_s = time.perf_counter() - started
    corpus_mb = sum(len(t.encode("utf-8")) for t in corpus) / 1e6
    started = time.perf_counter()
    data = held_out(args.test_sites, args.pages_per_site)
    held_s = time.perf_counter() - started
    print(f"corpus: {args.train_sites} training sites per variant, {len(corpus)} texts, {corpus_mb:.1f} MB "
          f"({corpus_s:.0f} s); held out: {args.test_sites} test sites per variant, {len(data.pages)} pages, "
          f"{len(data.instructions)} tasks, {len(data.prompts)} oracle steps ({held_s:.0f} s)",
          flush=True)

    rows = [("bytes", measure(byte_tokenizer(), data, None))]
    fitted, candidates = {}, {}
    for split in splits:
        for size in sizes:
            started = time.perf_counter()
            tokenizer = fit_web_tokenizer(corpus, size, split=split)
            fit_s = time.perf_counter() - started
            rows.append((f"{split} {size}", measure(tokenizer, data, fit_s)))
            print(f"  {rows[-1][0]}: {rows[-1][1]}", file=sys.stderr, flush=True)
            if split == splits[0]:
                fitted[size], candidates[size] = tokenizer, rows[-1][1]
    print(table(rows))

    meets = [size for size, m in candidates.items()
             if m["page"] >= args.min_bytes_per_token and m["all_p50"] <= args.max_median_prompt
             and min(m["page_by_kind"].values()) >= args.min_kind_bytes_per_token]
    chosen = min(meets) if meets else None
    print(f"\nchosen: {splits[0]} {chosen} (smallest size with page B/tok >= {args.min_bytes_per_token}, "
          f">= {args.min_kind_bytes_per_token} on every site kind's pages, all-steps median prompt "
          f"<= {args.max_median_prompt:.0f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "commit": git_commit(), "chosen": chosen,
                       "rows": {name: m for name, m in rows}}, f, indent=1)
    if args.out:
        if chosen is None:
            sys.exit("no size meets the goals: nothing saved")
        processor = Processor(fitted[chosen], make_image_processor(EMBEDDED_MIN_PIXELS, EMBEDDED_MAX_PIXELS))
        processor.save_pretrained(args.out)
        print(f"saved {splits[0]} {chosen} to {args.out}")


if __name__ == "__main__":
    main()
