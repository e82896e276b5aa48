"""A subword tokenizer fitted to the local web, for the small embedded model.

The byte tokenizer (tokenizer.byte_tokenizer) spends one token per byte: a text-mode
prompt on the local web is ~900-1,300 tokens of it at the median (benchmarks/tokenizer.py),
much of it the page text's syntax. This module fits a byte-level BPE vocabulary on text
from the TRAINING sites only (variants 1 and 2; never the held-out variant 3) and keeps
the byte tokenizer's fixed ids, so code and tests written against those ids keep working:

    0..255    the bytes, in GPT-2's byte -> unicode alphabet, id == byte value
    256..262  Qwen's special tokens, in tokenizer.SPECIAL_TOKENS order
    263..279  the tool call's fixed pieces (rollout.response.tool_call_pieces), matched
              whole before pre-tokenization, as in the byte tokenizer
    280..     learned merges, in the order BPE learned them

Any string stays encodable (every byte has an id) and decodes back to itself.

Pre-tokenization (the "web" split below) keeps Qwen's words and puts every digit in a
token of its own: prices, record ids, phone numbers and element ids are copied from the
page into answers and actions, and several tasks compare numbers (cheapest, earliest,
smallest room that fits); one token per digit makes a number the same digit tokens
wherever it appears, seen or not. Against runs of digits ("web-runs") that costs 7-10% in
page length at the same vocabulary size. The page text's own syntax is what the web split
adds: '] link "' and '"\n[' may become one token each, worth ~0.5 bytes per token on
page text (~2.65 -> ~3.15 at 3-4k tokens).

    fit_web_tokenizer(texts, vocab_size)   the tokenizer, deterministic for a corpus
    web_corpus(train_sites_per_variant)    text from the training sites to fit it on
    oracle_steps(tasks, ...)               (task, steps, observation) per oracle step,
                                           the source of the corpus' prompts and the
                                           benchmark's prompt lengths

The shipped tokenizer (assets/embedded, see its README.md) is made by
`benchmarks/tokenizer.py --out assets/embedded`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from asyncwebrl.model.tokenizer import (CHAT_TEMPLATE, ENDOFTEXT, IM_END, NUM_BYTES, SPECIAL_TOKENS,
                                        _bytes_to_unicode)
from asyncwebrl.rollout.response import tool_call_pieces

# Split regexes (pre-tokenization: BPE never merges across the pieces they cut).
#   qwen      Qwen2/Qwen3's: contractions, words (with one leading non-letter such as a
#             space or a quote), single digits, punctuation runs (with the line breaks
#             after them), line breaks, other whitespace.
#   gpt2      GPT-2's: as qwen, but runs of digits stay together and line breaks alone.
#   web       qwen's words and single digits, plus the page text's own syntax
#             (web/page_text.py) as whole pieces that merges may fill: an element line's
#             head '] link "' (the role is one lowercase word), a line break with the
#             punctuation around it ('"\n[', '=""\n['); and a punctuation run keeps
#             one space after it when a digit follows (table cells: ' | ' then '4').
#   web-runs  web with runs of digits kept together (' ?\p{N}+'), for comparison.
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+"
_PAGE_SYNTAX = r'\] [a-z]+ "|[^\s\p{L}\p{N}]*(?:\r?\n)+[^\s\p{L}\p{N}]*'
QWEN_SPLIT = _WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
WEB_SPLIT = _PAGE_SYNTAX + "|" + _WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+(?: (?=\p{N}))?|\s+(?!\S)|\s+"
WEB_RUNS_SPLIT = _PAGE_SYNTAX + "|" + _WORDS + r"| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
SPLITS = {"web": WEB_SPLIT, "web-runs": WEB_RUNS_SPLIT, "qwen": QWEN_SPLIT, "gpt2": GPT2_SPLIT}
DEFAULT_SPLIT = "web"

# Bytes, special tokens, tool-call pieces: the ids every embedded tokenizer shares.
FIXED_TOKENS = NUM_BYTES + len(SPECIAL_TOKENS) + len(tool_call_pieces())  # 280
VOCAB_MULTIPLE = 16  # the tiny model's embedding table tiles evenly (model/config.py)

DEFAULT_PAGES_PER_SITE = 200


def _pre_tokenizer(split: str):
    """The split regex, then the byte -> alphabet map (the byte tokenizer's, with no regex)."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLITS[split]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def _fixed_pattern() -> re.Pattern:
    """Special tokens and tool-call pieces, longest first (the added vocabulary matches
    leftmost-longest): text is cut at them before BPE ever sees it."""
    fixed = sorted((*SPECIAL_TOKENS, *tool_call_pieces()), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in fixed))


def _segments(texts: Iterable[str]) -> Iterator[str]:
    """The texts with special tokens and tool-call pieces cut out: exactly the stretches
    that BPE encodes at encode time, so no merge is spent on a piece that is already whole."""
    pattern = _fixed_pattern()
    for text in texts:
        for segment in pattern.split(text):
            if segment:
                yield segment


def rounded_vocab_size(vocab_size: int) -> int:
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def fit_web_tokenizer(texts: Iterable[str], vocab_size: int, *, split: str = DEFAULT_SPLIT,
                      min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer fitted on `texts`, with the byte tokenizer's fixed ids
    (module docstring) and vocab_size - 280 learned merges (vocab_size is rounded up to a
    multiple of 16; fewer merges when the corpus offers no more pairs seen min_frequency
    times). Same ChatML template, eos <|im_end|>, pad <|endoftext|>.

    Deterministic: the same texts (in any order) give the same tokenizer.json."""
    vocab_size = rounded_vocab_size(vocab_size)
    if vocab_size < FIXED_TOKENS:
        raise ValueError(f"vocab_size must be at least {FIXED_TOKENS} (bytes, special tokens, tool-call pieces)")
    alphabet = _bytes_to_unicode()
    # 1. Learn the merges. The trainer numbers its vocabulary its own way (alphabet sorted
    # by code point, then merges); only the ordered merge list is kept from it.
    trainer_core = Tokenizer(models.BPE())
    trainer_core.pre_tokenizer = _pre_tokenizer(split)
    trainer = trainers.BpeTrainer(vocab_size=NUM_BYTES + vocab_size - FIXED_TOKENS, min_frequency=min_frequency,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=[alphabet[b] for b in range(NUM_BYTES)])
    trainer_core.train_from_iterator(_segments(texts), trainer=trainer)
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
              for m in json.loads(trainer_core.to_str())["model"]["merges"]]
    # 2. Number the vocabulary: bytes as the byte tokenizer does, the fixed tokens, merges.
    vocab = {alphabet[b]: b for b in range(NUM_BYTES)}
    for token in (*SPECIAL_TOKENS, *tool_call_pieces()):
        vocab[token] = len(vocab)  # present in the model's table so the added tokens keep these ids
    for left, right in merges:
        merged = left + right
        if merged in vocab:
            raise ValueError(f"merge {left!r} + {right!r} repeats the token {merged!r}")
        vocab[merged] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = _pre_tokenizer(split)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    core.add_tokens([AddedToken(piece, normalized=False, special=False) for piece in tool_call_pieces()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=ENDOFTEXT,
                                        chat_template=CHAT_TEMPLATE)
    check_fixed_ids(tokenizer)
    return tokenizer


def check_fixed_ids(tokenizer) -> None:
    """Raises unless bytes, special tokens and tool-call pieces have the byte tokenizer's ids."""
    alphabet = _bytes_to_unicode()
    fixed = [alphabet[b] for b in range(NUM_BYTES)] + list(SPECIAL_TOKENS) + list(tool_call_pieces())
    wrong = [(i, t) for i, t in enumerate(fixed) if tokenizer.convert_tokens_to_ids(t) != i]
    if wrong:
        raise ValueError(f"{len(wrong)} fixed tokens have the wrong id, first {wrong[0]}")


# ---------------------------------------------------------------------------------------
# Corpus


def crawl_site(web, site, max_pages: int = DEFAULT_PAGES_PER_SITE) -> Iterator[str]:
    """Page texts of one site, breadth first from its home page along its links (GET only:
    forms are left to the oracle episodes), at most max_pages pages, in a stable order."""
    from asyncwebrl.web.http_page import HttpPage
    from asyncwebrl.web.server import LOGICAL_ORIGIN

    home = f"{LOGICAL_ORIGIN}{site.base_path}/"
    page = HttpPage(web, f"crawl-{site.site_id}")
    queue, seen, served = collections.deque([home]), {home}, 0
    try:
        while queue and served < max_pages:
            url = queue.popleft()
            if page.open(url) or page.status != 200:
                continue
            served += 1
            yield page.page.text
            for element in page.page.elements:
                href = element.control.attrs.get("href", "") if element.control.tag == "a" else ""
                if not href or href.startswith("#"):
                    continue
                target = urllib.parse.urljoin(page.url, href).split("#")[0]
                if target.startswith(home) and target not in seen:
                    seen.add(target)
                    queue.append(target)
    finally:
        web.forget(page.episode_id)


@dataclasses.dataclass
class OracleStep:
    task: object             # the Task as the episode posed it
    steps: list              # the episode's steps before this one (records.Step)
    observation: object      # what the oracle saw (rollout.observation.Observation, text mode)
    response: str            # what it wrote


class _Recording:
    """Wraps a policy; keeps (task, earlier steps, observation, response) of every step."""

    def __init__(self, policy):
        self.policy, self.records = policy, collections.defaultdict(list)

    def begin(self, task, *, interaction: str, episode_id: str):
        agent = self.policy.begin(task, interaction=interaction, episode_id=episode_id)
        records = self.records[task.task_id]

        class Agent:
            async def act(self, observation, steps):
                reply = await agent.act(observation, steps)
                records.append(OracleStep(task, list(steps), observation, reply.text))
                return reply

        return Agent()


def oracle_steps(tasks: Sequence, response_format: str, *, web=None) -> list[OracleStep]:
    """Every step of one browser-free, text-mode, set-of-marks oracle episode per task, in
    task order. Runs its own event loop (call it from synchronous code)."""
    from asyncwebrl.envs.local import LocalEnvironment
    from asyncwebrl.rollout.episode import EpisodeSettings
    from asyncwebrl.rollout.policies import OraclePolicy
    from asyncwebrl.rollout.pool import PoolSettings
    from asyncwebrl.runtime.evaluate import run_tasks
    from asyncwebrl.web.server import LocalWeb

    web = web if web is not None else LocalWeb()
    policy = _Recording(OraclePolicy(web.session, response_format))
    # the corpus's own episodes, apart from any config: the training tasks' step limits, the
    # viewport and deadlines the tokenizer was fitted under, on the browser-free local web
    # (its pages are the same whatever the concurrency; the Chromium fields go unused)
    settings = EpisodeSettings(interaction="set_of_marks", phase="train", viewport=(1280, 720), timeout_s=15.0,
                               step_deadline_s=30.0, step_limits=None, observation="text", fit_plans=True)
    pool = PoolSettings(concurrency=4, pages_per_browser=4, recycle_after=200, executable_path="", driver="http")
    asyncio.run(run_tasks(list(tasks), policy, LocalEnvironment(web, browser_free=True), settings, pool=pool,
                          progress=None))
    return [step for task in tasks for step in policy.records[task.task_id]]


def text_prompt_builder():
    """The text-mode prompt the embedded model reads (set-of-marks, no system message,
    tool call alone, the page never cut)."""
    from asyncwebrl.rollout.prompts import PromptBuilder

    return PromptBuilder("set_of_marks", memory="additive", system_message=False, response_format="action",
                         observation="text", text_budget=0, prompt_limit=0)


def web_corpus(train_sites_per_variant: int, *, pages_per_site: int = DEFAULT_PAGES_PER_SITE,
               episodes: bool = True) -> Iterator[str]:
    """Text from the TRAINING sites only (variants 1-2; test sites are never opened):
        - each site's pages, crawled along its links (crawl_site, at most pages_per_site);
        - with episodes: each task's instruction, and for every step of an oracle episode
          per task (oracle_steps) the chat the embedded model trains on, as the ChatML
          template renders it: the text-mode prompt (text_prompt_builder: the page as the
          oracle reached it, forms and results included, framed by URL, title, task and the
          previous step) and the oracle's response in the "action" format (the tool call
          alone); and the same response in the "memory" format (Memory / Progress /
          Intention / Action, then the tool call) as an assistant turn of its own. The
          oracle's actions do not depend on the format, so one episode gives both.
    Deterministic: the sites and their tasks are seeded."""
    from asyncwebrl.model.tokenizer import Processor
    from asyncwebrl.web.server import LocalWeb
    from asyncwebrl.web.sites import make_site
    from asyncwebrl.web.tasks import site_ids, tasks_of_site

    web = LocalWeb()
    sites = [make_site(site_id) for site_id in site_ids("train", train_sites_per_variant)]
    if any(site.split != "train" for site in sites):
        raise AssertionError("the tokenizer corpus may only hold training sites")
    for site in sites:
        yield from crawl_site(web, site, pages_per_site)
    if not episodes:
        return
    builder, chat = text_prompt_builder(), Processor.embedded()  # the embedded chat template
    for site in sites:
        tasks = tasks_of_site(site)
        yield from (task.task_name for task in tasks)
        for record in oracle_steps(tasks, "memory", web=web):
            steps = [dataclasses.replace(s, response=action_response(s.response)) for s in record.steps]
            messages = builder.build(record.task, steps, record.observation).messages
            yield chat.render([*messages, {"role": "assistant", "content": action_response(record.response)}],
                              add_generation_prompt=False)
            yield chat.render([{"role": "assistant", "content": record.response}], add_generation_prompt=False)


def action_response(memory_response: str) -> str:
    """The "action" format of a "memory"-format response: its tool call alone."""
    return memory_response[memory_response.index("<tool_call>"):]
