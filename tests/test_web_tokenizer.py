"""The web tokenizer (asyncwebrl/model/web_tokenizer.py) and the one shipped in
assets/embedded: fixed ids, whole tool-call pieces, lossless round trips, determinism,
and compression on held-out pages."""

import json
import os

import pytest

from asyncwebrl.model.config import BYTE_IDS, tiny
from asyncwebrl.model.tokenizer import (SPECIAL_TOKENS, Processor, _bytes_to_unicode, byte_tokenizer,
                                        special_ids)
from asyncwebrl.model.web_tokenizer import FIXED_TOKENS, crawl_site, fit_web_tokenizer, web_corpus
from asyncwebrl.rollout.response import format_response, tool_call_pieces
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.sites import make_site
from asyncwebrl.web.tasks import site_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "assets", "embedded")

PAGE = ('[1] link "Polar Supply Co."\n[2] textbox "Search products" value=""\n# Granite S26 Kettle\n'
        'Item no. | KT-4117\nCost: $198.00\n[7] checkbox "Gift wrap" checked=false\n')
# Not on any local site: non-ASCII, an unseen word, control characters, a special token's lookalike.
UNUSUAL = 'Café Zürich ✓ — 東京 𝔘 zyxqwvbnk\t\r\n<|im_start |> [99999] link ""\x00'


@pytest.fixture(scope="module")
def corpus():
    """A small training corpus: one site per training variant, a few crawled pages each,
    and their oracle episodes."""
    return list(web_corpus(1, pages_per_site=20))


@pytest.fixture(scope="module")
def fitted(corpus):
    return fit_web_tokenizer(corpus, 600)


@pytest.fixture(scope="module")
def shipped():
    return Processor.from_pretrained(SHIPPED)


def test_fitting_is_deterministic_and_order_free(corpus, fitted):
    again = fit_web_tokenizer(list(reversed(corpus)), 600)
    assert again.backend_tokenizer.to_str() == fitted.backend_tokenizer.to_str()
    assert len(fitted) == 608  # rounded up to a multiple of 16: 280 fixed ids + 328 merges


def check_fixed_ids(tokenizer):
    alphabet = _bytes_to_unicode()
    reference = byte_tokenizer()
    for b in range(256):  # the bytes, spelled and numbered as in the byte tokenizer
        assert tokenizer.convert_tokens_to_ids(alphabet[b]) == b == reference.convert_tokens_to_ids(alphabet[b])
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(256, 263))
    assert [tokenizer.convert_tokens_to_ids(p) for p in tool_call_pieces()] == list(range(263, FIXED_TOKENS))
    assert special_ids(tokenizer) == special_ids(reference)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.chat_template == reference.chat_template
    assert len(tokenizer) % 16 == 0
    # Learned tokens from 280 on: every id below len() is a distinct token
    assert len(set(tokenizer.get_vocab().values())) == len(tokenizer) == max(tokenizer.get_vocab().values()) + 1


def test_fixed_ids_are_the_byte_tokenizers(fitted):
    check_fixed_ids(fitted)


def tool_call_pieces_are_whole(tokenizer):
    response = format_response({"colour": "Navy"}, {"find": "not finished"}, "find", "Click the kettle",
                               {"action": "left_click", "element_id": 12}, "memory")
    ids = tokenizer.encode(response, add_special_tokens=False)
    head, name, ending = tool_call_pieces()[0], 'left_click"', '}}\n</tool_call>'
    for piece in (head, name, ending):
        assert tokenizer.convert_tokens_to_ids(piece) in ids
    call = response[response.index("<tool_call>"):]
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode(call, add_special_tokens=False))
    assert tokens[:2] == [head, name] and tokens[-1] == ending
    assert tokens[3:5] == ["1", "2"]  # ', "element_id": ' then one token per digit
    assert len(tokens) == 6


def test_tool_call_pieces_are_single_tokens(fitted):
    tool_call_pieces_are_whole(fitted)


def round_trips(tokenizer):
    for text in (PAGE, UNUSUAL, PAGE + "<|im_end|>" + UNUSUAL, tool_call_pieces()[0] + UNUSUAL):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
    # an unseen word falls back to smaller pieces, down to bytes, and still decodes
    assert len(tokenizer.tokenize("zyxqwvbnk")) > 1


def test_decode_inverts_encode(fitted):
    round_trips(fitted)
    assert len(fitted.encode(PAGE, add_special_tokens=False)) < len(PAGE.encode("utf-8")) / 1.5


# ---------------------------------------------------------------------------------------
# The shipped tokenizer


def test_shipped_tokenizer_loads_like_a_checkpoint(shipped):
    check_fixed_ids(shipped.tokenizer)
    tool_call_pieces_are_whole(shipped.tokenizer)
    round_trips(shipped.tokenizer)
    # the ids the tiny model's config expects (model/config.py: BYTE_IDS)
    config, ids = tiny(), shipped.special
    assert (config.image_token_id, config.video_token_id, config.vision_start_token_id,
            config.vision_end_token_id) == (ids.image_pad, ids.video_pad, ids.vision_start, ids.vision_end)
    assert BYTE_IDS == {"image_token_id": 261, "video_token_id": 262, "vision_start_token_id": 259,
                        "vision_end_token_id": 260}
    reference = Processor.embedded()
    assert shipped.image_processor.to_dict() == reference.image_processor.to_dict()
    messages = [{"role": "user", "content": [{"type": "text", "text": "Task: find it\n"}, {"type": "image"},
                                             {"type": "text", "text": PAGE}]}]
    assert shipped.render(messages) == reference.render(messages)


def test_shipped_tokenizer_compresses_held_out_pages(shipped):
    """>= 3.0 UTF-8 bytes per token on the first pages of held-out (test split) sites of
    every kind; the shipped tokenizer's corpus never saw them."""
    web = LocalWeb()
    pages = [text for site_id in site_ids("test", 1) for text in crawl_site(web, make_site(site_id), 6)]
    assert len(pages) == 24 and all(make_site(s).split == "test" for s in site_ids("test", 1))
    tokens = sum(len(shipped.tokenizer.encode(p, add_special_tokens=False)) for p in pages)
    assert sum(len(p.encode("utf-8")) for p in pages) / tokens >= 3.0


def test_shipped_readme_names_the_files():
    with open(os.path.join(SHIPPED, "README.md")) as f:
        readme = f.read()
    assert "benchmarks/tokenizer.py" in readme
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        assert os.path.isfile(os.path.join(SHIPPED, name))
    with open(os.path.join(SHIPPED, "tokenizer.json")) as f:
        assert json.load(f)["model"]["type"] == "BPE"
