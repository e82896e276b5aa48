"""Where the element id sits on a page-text line, and how fast a small model learns to
click the link the instruction names: `[8] link "Oncology"` (before, the page text's
format today, web/page_text.py) against `link "Oncology" [8]` (after); and two more
levers on the same rows: `quoted` (the instruction names the link in quotes, so the name is
the same tokens in both places) and --prompt-weight (a language-model loss on the prompt
beside the response's: the prompt states the task twice, so its second statement is a copy
the model is trained to make, with the page's repeated lines).

    .venv/bin/python benchmarks/id_position.py --steps 150 --warmup-steps 15 --probe-every 50 \
        --out runs/id_position.jsonl   # 2 CPU cores: ~6 min a format, both one after the other
    # from the shipped warm start: naming the target first (said) or clicking it by label
    .venv/bin/python benchmarks/id_position.py --init assets/warm_start --formats before,said,label,label_quoted \
        --steps 200 --warmup-steps 20 --learning-rate 3e-4 --probe-every 100 --probe-rows 128 --row-length 192

Two more formats change the response rather than the page: `said` writes the target's name
first, as the oracle's Action line does (`Action: Open the "Oncology" department.`), then
the click by id; `label` clicks by label (`"element": "Oncology"`, the `labels` interaction
of rollout/response.py), so there is no id to read, and `label_quoted` does so with the
instruction quoting the name. For these the probe also scores the label where the response
writes it (teacher-forced greedy exact match through its closing quote, and its NLL).
With --init the run starts from a checkpoint (probed once before any step) instead of
random weights.

The hypothesis: with the id after the label, the answer is "the token that follows the
matching label" (an induction-head copy), which small transformers learn quickly and
precisely; with the id before it, the model must look back one token from the label
match, and the warm start's misses are mostly the NEIGHBOURING line's id (off by one row).

Synthetic supervised rows, one agent step each, built with the project's fitted tokenizer
(assets/embedded) and the chat template the model reads: a page of 6-8 sibling links with
distinct names (departments, events, shop categories, rooms: the site generators'
vocabularies, 63 names), nav links and a few heading/paragraph lines around them, element
ids a random sample of 1..40, and an instruction naming one sibling ("Open the department
X."), given before the page and repeated after it as rollout/prompts.py lays a text step
out (no system message, like the embedded default; the URL lines left out, to spare a CPU
run ~30 tokens a row). Rows are ~123 tokens (before) and ~171 (after: the fitted tokenizer
has one token for '] link "' but spells 'link "..." [' in four); each is one packed row of
--row-length, so both formats cost the same compute per step. The response is the click in the
"action" response format (rollout/response.py format_response):
    <tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "element_id": 8}}\n</tool_call>
Both formats see the same rows (same seed: same names, ids, order); only the line layout
differs.

One run per format (one after the other, same seeds): the `small` preset from random
weights (configs/warm_start.py, model.path=""), the learner in "sft" mode (masked
cross-entropy on the response), --rows-per-step fresh rows every step (no row repeats),
--learning-rate with --warmup-steps of linear warm-up then cosine decay over --steps.
Every --probe-every steps (and the last): on --probe-rows held-out rows, the greedy element
id (argmax of the first id digit after the teacher-forced response prefix, then of the next
token: a digit or not) and the id's NLL in nats (its landmarks, each row's own, averaged:
ln 40 = 3.7 any id of 1..40; ~2.2 any element of the page; ~1.9 any sibling link; 0 the
named one), in two sets:
    seen     names of the training pool, fresh pages (new sibling sets, ids, orders)
    unseen   pages drawn only from 15 names training never shows
and, of the misses, the share that are the id of an adjacent element line (the line above
or below the named one: "off by one row"), of another sibling, or on no line of the page.
One JSON line per probe (and a header/footer) to --out; a table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks.warm_start import step_row  # noqa: E402  (a supervised step row: one definition)

# before / after: where the id sits on the line. quoted: the page as `before`, the instruction
# naming the link in quotes as the page does (`Open the department "Oncology".`): the fitted
# tokenizer spells a name after a space (" Oncology") and after a quote ("Oncology") as
# different tokens, so only in `quoted` is the named label a token-for-token copy of the
# instruction's
# said: the page as `before`, the response first names its target in words, as the oracle's
# Action line does ('Action: Open the "Oncology" department.'), then clicks its id: the id is then
# read off the line whose label the response has just written, not off the instruction.
# label: the page as `before`, the click names its target by label ('"element": "Oncology"'), no
# id: the choice becomes a copy of the instruction's name, the skill the warm start shows when it
# types a name into a search box
# label_quoted: label, with the instruction quoting the name (a token-for-token copy)
FORMATS = ("before", "after", "quoted", "said", "label", "label_quoted")
MAX_ID = 40

def name_pool() -> dict[str, list[str]]:
    """kind -> names, from web/sites (directory.py ORG_TYPES, forms.py, shop.py)."""
    from asyncwebrl.web.sites.directory import ORG_TYPES
    from asyncwebrl.web.sites.forms import EVENT_NAMES, ROOM_NAMES
    from asyncwebrl.web.sites.shop import CATEGORIES

    return {"department": [n for org in sorted(ORG_TYPES) for n in ORG_TYPES[org][0].split("|")],
            "event": list(EVENT_NAMES), "category": list(CATEGORIES), "room": list(ROOM_NAMES)}


def split_names(pool: dict[str, list[str]], unseen: int, seed: int) -> tuple[list, list]:
    """(kind, name) pairs: those training draws from, and `unseen` that only the unseen probe shows."""
    everything = [(kind, name) for kind in sorted(pool) for name in pool[kind]]
    held = set(random.Random(f"id-position-names:{seed}").sample(range(len(everything)), unseen))
    return ([x for i, x in enumerate(everything) if i not in held], [x for i, x in enumerate(everything) if i in held])


TITLES = {"department": ("Departments", "Find colleagues by department."),
          "event": ("Upcoming events", "Join us this month. Places are limited."),
          "category": ("Shop by category", "Free delivery on orders over $50."),
          "room": ("Our rooms", "Book a room for your group.")}
ORGS = ["Northfield University", "Harbor Depot", "Riverside Community Centre", "Aster Analytics",
        "Bristol General Hospital", "Meridian Supply Co.", "Westbrook Library", "Summit Outfitters"]
NAV = ["Home", "Search", "Contact", "About", "Help", "Sign in"]
INSTRUCTION = {"department": "Open the department {}.", "event": "Open the event {}.",
               "category": "Open the category {}.", "room": "Open the room {}."}


def make_case(rng: random.Random, names: list[tuple[str, str]]) -> dict:
    """One page's content, format-free: lines as (kind, text, element?) in page order, each
    element line with its id; which line the instruction names."""
    kind = rng.choice(sorted({k for k, _ in names}))
    same_kind = [n for k, n in names if k == kind]
    others = [n for k, n in names if k != kind]
    count = rng.randint(6, 8)
    # siblings mostly of the instruction's kind (as on a real page), topped up from the rest
    take = min(count, len(same_kind))
    siblings = rng.sample(same_kind, take) + rng.sample(others, count - take)
    rng.shuffle(siblings)
    target = rng.randrange(count)
    title, blurb = TITLES[kind]
    org = rng.choice(ORGS)
    nav = rng.sample(NAV, rng.randint(1, 3))
    lines = [("heading", f"# {org}", False)] + [("link", label, True) for label in nav]
    lines += [("heading", f"## {title}", False), ("text", blurb, False)]
    first_sibling = len(lines)
    lines += [("link", label, True) for label in siblings]
    if rng.random() < 0.5:
        lines += [("link", rng.choice(["Privacy", "Accessibility", "Careers"]), True)]
    elements = sum(1 for _, _, is_element in lines if is_element)
    ids = iter(rng.sample(range(1, MAX_ID + 1), elements))
    lines = [(role, text, next(ids) if is_element else None) for role, text, is_element in lines]
    return {"kind": kind, "org": org, "title": title, "lines": lines, "target_line": first_sibling + target,
            "name": siblings[target], "siblings": siblings}


def page_line(role: str, text: str, element_id: int | None, fmt: str) -> str:
    if element_id is None:
        return text
    return f'{role} "{text}" [{element_id}]' if fmt == "after" else f'[{element_id}] {role} "{text}"'


def render(case: dict, fmt: str) -> tuple[list[dict], str]:
    """The chat messages of the step (rollout/prompts.py's text layout, first step, no
    system message) and the response (format_response, "action" format)."""
    from asyncwebrl.rollout.response import format_response

    task = INSTRUCTION[case["kind"]].format(f'"{case["name"]}"' if fmt in ("quoted", "label_quoted") else case["name"])
    page = "\n".join(page_line(role, text, element_id, fmt) for role, text, element_id in case["lines"])
    intro = f"Task: {task}\n"   # (the real prompt's URLs left out: tokens a CPU run cannot spare)
    state = f"Step 1. Title: {case['org']} - {case['title']}\nPage:\n{page}\nTask: {task}"
    messages = [{"role": "user", "content": [{"type": "text", "text": intro}, {"type": "text", "text": state}]}]
    target_id = case["lines"][case["target_line"]][2]
    if fmt in ("label", "label_quoted"):
        return messages, format_response({}, {}, "", "", {"action": "left_click", "element": case["name"]}, "action")
    response = format_response({}, {}, "", "", {"action": "left_click", "element_id": target_id}, "action")
    if fmt == "said":
        response = f'Action: Open the "{case["name"]}" {case["kind"]}.\n{response}'
    return messages, response


def token_span(processor, ids: list[int], start: int, end: int) -> list[int]:
    """Indices of the tokens of `ids` that overlap characters [start, end) of their decoded text."""
    covered, span = 0, []
    for k in range(len(ids)):
        after = len(processor.decode(ids[:k + 1]))
        if after > start and covered < end:
            span.append(k)
        covered = after
    return span


class Rows:
    """Token rows of cases in one format, with where the id's digits sit in the response."""

    def __init__(self, processor):
        self.processor = processor
        self.digits = {processor.encode_text(str(d))[0]: str(d) for d in range(10)}
        for token, digit in self.digits.items():
            if processor.decode([token]) != digit:
                raise ValueError(f"the tokenizer spells digit {digit} as more than one token")

    def encode(self, case: dict, fmt: str) -> dict:
        messages, response = render(case, fmt)
        prompt = np.asarray(self.processor.encode(messages, [])["input_ids"], np.int32)
        ids = self.processor.encode_text(response)
        target_id = case["lines"][case["target_line"]][2]
        spelled, first = "", None
        if fmt not in ("label", "label_quoted"):   # the id's digit tokens: the first digit token after '"element_id":'
            head = response.index('"element_id": ') + len('"element_id": ')
            for k, token in enumerate(ids):
                if len(self.processor.decode(ids[:k + 1])) > head and first is None:
                    first = k
                if first is not None and k >= first:
                    if token not in self.digits:
                        break
                    spelled += self.digits[token]
        labels = {}   # the named label's tokens where the response writes it (said: the Action line)
        if fmt in ("said", "label", "label_quoted"):
            quoted = f'"{case["name"]}"'
            at = response.index(quoted) + 1
            labels["label"] = token_span(self.processor, ids, at, at + len(case["name"]) + 1)  # + the closing quote
        if fmt in ("label", "label_quoted"):
            return {"prompt": prompt, "response": np.asarray(ids + [self.processor.special.eos], np.int32),
                    "id_start": None, "id_digits": 0, "target_id": target_id, "case": case, "labels": labels}
        if spelled != str(target_id):
            raise ValueError(f"the response's id tokens spell {spelled!r}, not {target_id}")
        return {"prompt": prompt, "response": np.asarray(ids + [self.processor.special.eos], np.int32),
                "id_start": first, "id_digits": len(spelled), "target_id": target_id, "case": case, "labels": labels}


class IdProbe:
    """The element id on held-out rows, two ways from one teacher-forced pass (the response
    fed up to and through the true id):
        accuracy  greedy id: argmax of every id digit right, then argmax after it not a digit
        id_nll    -log p(true id's digits), in nats; chance among the page's elements is
                  ln(elements) (~2.4), among the siblings ln(6..8) (~1.9)
    A miss whose first digit is wrong is decoded on (a second pass, fed the predicted digit)
    to name the id it would click: an adjacent element line's, another element's, or none
    on the page."""

    def __init__(self, learner, encoded: list[dict], processor, rows_per_microbatch: int):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from asyncwebrl.learner.packing import PackingShape

        self.learner, self.encoded, self.processor = learner, encoded, processor
        self.shape = PackingShape(**{**vars(learner.settings.packing), "rows_per_microbatch": rows_per_microbatch})
        self.digits = {processor.encode_text(str(d))[0]: str(d) for d in range(10)}
        # gathered positions per forward pass: 3 per probe row at most, and a packed row holds
        # as many probe rows as fit
        per_row = self.shape.row_length // min(len(e["prompt"]) + len(e["response"]) for e in encoded)
        widest = max([3] + [len(span) for e in encoded for span in e["labels"].values()])
        self.slots = widest * rows_per_microbatch * per_row
        elements = [sum(line[2] is not None for line in e["case"]["lines"]) for e in encoded]
        siblings = [sum(line[0] == "link" and line[1] in e["case"]["siblings"] for line in e["case"]["lines"]) for e in encoded]
        self.landmarks = {"nll_any_element": round(float(np.mean(np.log(elements))), 3),
                          "nll_any_sibling": round(float(np.mean(np.log(siblings))), 3)}

        @jax.jit
        def at(params, inputs, rows, columns, targets):
            """argmax and log p(target) at (rows, columns) only: the full [R, L, vocab] logits
            would cost more than the model."""
            model = nnx.merge(learner.graphdef, params)
            hidden, _ = model.hidden_states(inputs)
            logits = model.logits(hidden[rows, columns][None])[0]
            logp = jax.nn.log_softmax(logits, -1)
            return jnp.argmax(logits, -1), jnp.take_along_axis(logp, targets[:, None], -1)[:, 0]

        self.at = at

    def _score(self, rows: list[tuple[np.ndarray, np.ndarray, list[int]]]) -> list[tuple[list[int], list[float]]]:
        """For each (prompt, response, ks): at each response index k, the argmax and log-prob
        of response[k] given prompt + response[:k]."""
        from asyncwebrl.learner.packing import _assemble, place

        steps = [step_row(p, r, self.processor) for p, r, _ in rows]
        out: list = [None] * len(rows)
        for layout in place(steps, self.shape):
            microbatch = _assemble(steps, layout.sequences, self.shape, self.learner.config, 0)
            where, owners = [], []
            for r, sequence in enumerate(layout.sequences):
                offset = 0
                for index in sequence:
                    prompt, response, ks = rows[index]
                    for k in ks:   # input position offset + p + k - 1 predicts response[k]
                        where.append((r, offset + len(prompt) + k - 1, int(response[k])))
                        if microbatch.inputs.tokens[r, where[-1][1] + 1] != response[k]:
                            raise AssertionError("the probe reads the wrong position")
                    owners.append((index, len(ks)))
                    offset += len(prompt) + len(response)
            if len(where) > self.slots:
                raise ValueError(f"{len(where)} probe positions in one microbatch; raise the slots")
            where += [(0, 0, 0)] * (self.slots - len(where))
            r_, c_, t_ = (np.asarray(x, np.int32) for x in zip(*where))
            best, logp = (np.asarray(x) for x in self.at(self.learner.state.params, microbatch.inputs, r_, c_, t_))
            start = 0
            for index, n in owners:
                out[index] = (best[start:start + n].tolist(), logp[start:start + n].tolist())
                start += n
        return out

    def label(self) -> dict:
        """The named label where the response writes it (formats said, label), teacher-forced:
        accuracy = every token's argmax right, through the closing quote; nll = -log p of
        the label's tokens (the closing quote's included)."""
        encoded = self.encoded
        scored = self._score([(e["prompt"], e["response"], e["labels"]["label"]) for e in encoded])
        hits = sum(best == [int(e["response"][k]) for k in e["labels"]["label"]] for e, (best, _) in zip(encoded, scored))
        nll = [-sum(logp) for _, logp in scored]
        return {"accuracy": round(hits / len(encoded), 4), "nll": round(float(np.mean(nll)), 3)}

    def __call__(self) -> dict:
        encoded = self.encoded
        result = {"label": self.label()} if encoded[0]["labels"] else {}
        if encoded[0]["id_start"] is None:   # (format label: no id to read)
            return result
        ks = [list(range(e["id_start"], e["id_start"] + e["id_digits"] + 1)) for e in encoded]
        scored = self._score([(e["prompt"], e["response"], k) for e, k in zip(encoded, ks)])
        hits, nll, first_wrong, predicted = 0, [], [], {}
        for i, (e, (best, logp)) in enumerate(zip(encoded, scored)):
            n = e["id_digits"]
            nll.append(-sum(logp[:n]))
            spelled = [self.digits.get(t) for t in best]
            if spelled[:n] == list(str(e["target_id"])) and spelled[n] is None:
                hits += 1
            elif spelled[0] is None:
                predicted[i] = None   # not a digit where the id goes
            elif spelled[0] == str(e["target_id"])[0]:
                # the first digit right: teacher forcing fed the model's own digit, so the next
                # argmax is what greedy decoding writes
                predicted[i] = int(spelled[0] + (spelled[1] or ""))
            else:
                first_wrong.append(i)
        if first_wrong:
            fed = []
            for i in first_wrong:
                e = encoded[i]
                response = e["response"].copy()
                response[e["id_start"]] = scored[i][0][0]
                fed.append((e["prompt"], response, [e["id_start"] + 1]))
            for i, (best, _) in zip(first_wrong, self._score(fed)):
                predicted[i] = int(self.digits[scored[i][0][0]] + self.digits.get(best[0], ""))
        adjacent = other = off_page = malformed = 0
        for i, guess in predicted.items():
            case = encoded[i]["case"]
            element_lines = [j for j, line in enumerate(case["lines"]) if line[2] is not None]
            at = element_lines.index(case["target_line"])
            neighbours = {case["lines"][element_lines[j]][2] for j in (at - 1, at + 1) if 0 <= j < len(element_lines)}
            on_page = {case["lines"][j][2] for j in element_lines}
            if guess is None:
                malformed += 1
            elif guess in neighbours:
                adjacent += 1
            elif guess in on_page:
                other += 1
            else:
                off_page += 1
        n, missed = len(encoded), len(predicted)
        share = (lambda x: round(x / missed, 3) if missed else None)
        return {**result, "accuracy": round(hits / n, 4), "id_nll": round(float(np.mean(nll)), 3), "misses": missed,
                "adjacent_of_misses": share(adjacent), "other_element_of_misses": share(other),
                "off_page_of_misses": share(off_page), "malformed_of_misses": share(malformed), **self.landmarks}


def make_config(args):
    from configs import warm_start

    config = warm_start.get_config()
    config.seed = args.seed
    config.model.path, config.model.preset, config.model.tokenizer = args.init, args.preset, args.tokenizer
    config.sft.learning_rate, config.sft.rows_per_step, config.sft.steps = args.learning_rate, args.rows_per_step, args.steps
    config.sft.warmup_steps = args.warmup_steps
    config.learner.row_length = config.sampler.capacity = args.row_length
    config.sampler.prompt_buckets = (args.row_length // 2, args.row_length)
    config.learner.rows_per_microbatch = args.rows_per_microbatch
    return config


def run(fmt: str, args, log, train_names, probes: dict[str, list[dict]]) -> list[dict]:
    """One format's training run; its probe records."""
    import jax

    from asyncwebrl.runtime.build import build_model, make_learner

    config = make_config(args)
    model, processor = build_model(config)
    learner = make_learner(config, model, "sft")
    rows = Rows(processor)
    probe_sets = {split: IdProbe(learner, [rows.encode(case, fmt) for case in cases], processor, args.probe_microbatch)
                  for split, cases in probes.items()}
    parameters = sum(x.size for x in jax.tree.leaves(learner.state.params))
    log({"event": "start", "format": fmt, "parameters": int(parameters), "vocabulary": len(processor.tokenizer)})
    records, started, updating = [], time.perf_counter(), 0.0
    rng = random.Random(f"id-position-train:{args.seed}")   # the same rows for every format
    lengths = []

    def probe(step: int, nll: float | None) -> None:
        began = time.perf_counter()
        record = {"event": "probe", "format": fmt, "step": step, "rows_seen": step * args.rows_per_step,
                  "nll": None if nll is None else round(nll, 4),
                  **{split: p() for split, p in probe_sets.items()},
                  "seconds": round(time.perf_counter() - started, 1), "probe_seconds": 0.0}
        record["probe_seconds"] = round(time.perf_counter() - began, 1)
        records.append(record)
        log(record)


    if args.init:   # where the checkpoint starts, before any row of this format
        probe(0, None)
    for step in range(1, args.steps + 1):
        encoded = [rows.encode(make_case(rng, train_names), fmt) for _ in range(args.rows_per_step)]
        lengths += [len(e["prompt"]) + len(e["response"]) for e in encoded]
        measured = learner.update([step_row(e["prompt"], e["response"], processor, args.prompt_weight)
                                   for e in encoded])
        updating += measured["seconds"]
        if step % args.log_every == 0:
            log({"event": "step", "format": fmt, "step": step, "nll": round(float(measured["nll"]), 4),
                 "seconds": round(time.perf_counter() - started, 1), "seconds_updating": round(updating, 1)})
        if step % args.probe_every == 0 or step == args.steps:
            probe(step, float(measured["nll"]))
    log({"event": "trained", "format": fmt, "steps": args.steps, "seconds": round(time.perf_counter() - started, 1),
         "seconds_updating": round(updating, 1), "row_tokens_mean": round(float(np.mean(lengths)), 1),
         "row_tokens_max": int(np.max(lengths))})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--formats", default="before,after")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--tokenizer", default="assets/embedded")
    parser.add_argument("--init", default="", help="start from this checkpoint (weights and tokenizer; e.g. "
                        "assets/warm_start) instead of --preset's random weights")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument("--rows-per-step", type=int, default=16)
    parser.add_argument("--row-length", type=int, default=256)
    parser.add_argument("--rows-per-microbatch", type=int, default=16)
    parser.add_argument("--prompt-weight", type=float, default=0.0,
                        help="the prompts' text tokens in the loss at this weight beside the response's "
                             "(StepRow.prompt_weight; the logged nll then mixes both); 0: the response alone")
    parser.add_argument("--probe-microbatch", type=int, default=64, help="rows per forward pass of the probe")
    parser.add_argument("--probe-rows", type=int, default=256, help="rows per probe set (seen, unseen)")
    parser.add_argument("--probe-every", type=int, default=50)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--unseen-names", type=int, default=15, help="names only the unseen probe shows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/id_position.jsonl")
    args = parser.parse_args()
    started = time.perf_counter()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    out = open(args.out, "a")

    def log(record: dict) -> None:
        record = {"wall_seconds": round(time.perf_counter() - started, 1), **record}
        print(json.dumps(record), flush=True)
        out.write(json.dumps(record) + "\n")
        out.flush()

    train_names, unseen_names = split_names(name_pool(), args.unseen_names, args.seed)
    probe_rng = random.Random(f"id-position-probe:{args.seed}")
    probes = {"seen": [make_case(probe_rng, train_names) for _ in range(args.probe_rows)],
              "unseen": [make_case(probe_rng, unseen_names) for _ in range(args.probe_rows)]}
    import jax

    log({"event": "config", "device": str(jax.devices()[0]), "cpus": os.cpu_count(), "machine": platform.machine(),
         "train_names": len(train_names), "unseen_names": [n for _, n in unseen_names],
         **{k: v for k, v in vars(args).items()}})
    results = {}
    for fmt in args.formats.split(","):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")
        results[fmt] = run(fmt, args, log, train_names, probes)
    log({"event": "done", "wall_seconds_total": round(time.perf_counter() - started, 1)})

    print_table(results)


def print_table(results: dict[str, list[dict]]) -> None:
    """Per probe step and format: greedy id accuracy (seen / unseen names), the id's NLL on
    seen names, and the share of seen-name misses that are an adjacent line's id."""
    formats = list(results)
    columns = [("acc seen", lambda r: r["seen"].get("accuracy"), ".3f"), ("acc unseen", lambda r: r["unseen"].get("accuracy"), ".3f"),
               ("id nll", lambda r: r["seen"].get("id_nll"), ".2f"), ("adj/miss", lambda r: r["seen"].get("adjacent_of_misses"), ".2f"),
               ("label seen", lambda r: r["seen"].get("label", {}).get("accuracy"), ".3f"),
               ("label unseen", lambda r: r["unseen"].get("label", {}).get("accuracy"), ".3f")]
    print(f"{'step':>6} " + " ".join(f"{f + ' ' + name:>18}" for name, _, _ in columns for f in formats))
    for step in sorted({r["step"] for records in results.values() for r in records}):
        cells = []
        for _, value, spec in columns:
            for f in formats:
                record = next((r for r in results[f] if r["step"] == step), None)
                v = value(record) if record else None
                cells.append(f"{v:>18{spec}}" if v is not None else f"{'-':>18}")
        print(f"{step:>6} " + " ".join(cells))

if __name__ == "__main__":
    main()
