"""The sampler against transformers' generate and against full forward passes."""

import collections
import dataclasses
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from asyncwebrl.model.config import BYTE_VOCAB_SIZE, preset
from asyncwebrl.model.inputs import still_patch_pixels
from asyncwebrl.model.tokenizer import Processor, byte_tokenizer
from asyncwebrl.model.weights import load_pretrained
from asyncwebrl.sampler import Engine, Image, Request, SamplingSettings, generate
from asyncwebrl.sampler.generate import as_request
from asyncwebrl.sampler.sampling import sample
from bare_settings import engine_settings, pretrained_options  # tests/bare_settings.py

PAD, BOS, IMG, VID, VS, VE = 256, 257, 261, 262, 259, 260
# the runtime's kind of pixels: uint8 still patches (Qwen3-VL's normalisation, the model's default)
PROCESSOR = Processor(byte_tokenizer(), Qwen2VLImageProcessorPil(
    patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=96 * 96,
    image_mean=[0.5] * 3, image_std=[0.5] * 3))
PIXELS = preset("tiny").vision   # patch 16, temporal 2, mean = std = 0.5: how the checkpoint's model normalises


@pytest.fixture(scope="module")
def pair(checkpoint):
    """(transformers model, our model from its checkpoint)."""
    reference, directory = checkpoint
    return reference, load_pretrained(directory, **pretrained_options())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(transformers model, the directory of its checkpoint)."""
    torch.manual_seed(1)
    config = Qwen3VLConfig(
        text_config=dict(vocab_size=BYTE_VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         pad_token_id=PAD, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 1]),
        image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE,
        tie_word_embeddings=False)
    reference = Qwen3VLForConditionalGeneration(config).eval()
    reference.config._attn_implementation = "eager"
    with torch.no_grad():
        for parameter in reference.parameters():   # sharper logits than the init: fewer near-ties
            parameter.add_(torch.randn_like(parameter) * 0.2)
    directory = tmp_path_factory.mktemp("sampler_ckpt")
    reference.save_pretrained(directory)
    return reference, directory


def prompt(text: bytes, images=(), seed=0):
    """HF-style fields: text, then each image as vision_start + placeholders + vision_end."""
    rng = np.random.default_rng(seed)
    ids = [BOS] + list(text)
    fields = {}
    if images:
        arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in images]
        pixels, grids = PROCESSOR.process_images(arrays)
        for grid in grids:
            ids += [VS] + [IMG] * (int(np.prod(grid)) // 4) + [VE] + list(b" then")
        fields = {"pixel_values": pixels, "image_grid_thw": grids}
    return {"input_ids": np.array(ids + list(b" ->")), **fields}


def hf_greedy(reference, fields, new_tokens):
    ids = torch.as_tensor(fields["input_ids"])[None]
    extra = {}
    if "pixel_values" in fields:
        extra = dict(pixel_values=torch.as_tensor(np.array(still_patch_pixels(fields["pixel_values"], PIXELS))),
                     image_grid_thw=torch.as_tensor(fields["image_grid_thw"]),
                     mm_token_type_ids=(ids == IMG).long())
    with torch.no_grad():
        out = reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False, **extra)
    return out[0, ids.shape[1]:].numpy()


def full_forward_logprobs(model, fields, tokens, temperature=1.0):
    """Log-prob of each generated token by one forward pass over prompt + tokens."""
    ids = np.concatenate([fields["input_ids"], tokens])[None]
    kwargs = {}
    if "pixel_values" in fields:  # placeholders are the prompt's; generated tokens are text
        types = np.zeros_like(ids)
        types[0, :len(fields["input_ids"])] = fields["input_ids"] == IMG
        kwargs = dict(pixel_values=fields["pixel_values"], image_grid_thw=fields["image_grid_thw"],
                      mm_token_type_ids=types)
    logits = np.asarray(model(input_ids=ids, **kwargs))[0] / temperature
    p = len(fields["input_ids"])
    log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(logits[p - 1:-1])))
    return log_probs[np.arange(len(tokens)), tokens]


PROMPTS = [prompt(b"hello"), prompt(b"a longer text-only prompt, about seventy bytes long, for the sampler"),
           prompt(b"one screenshot: ", [(64, 96)], seed=1), prompt(b"two: ", [(64, 64), (96, 32)], seed=2),
           prompt(b"x", [(32, 32)], seed=3)]


def test_greedy_equals_transformers_one_request_at_a_time(pair):
    reference, model = pair
    for fields in PROMPTS[:3]:
        (ours,) = generate(model, [fields], max_new_tokens=12)
        np.testing.assert_array_equal(ours.tokens, hf_greedy(reference, fields, 12))


def test_continuous_batching_does_not_change_results(pair):
    """Five requests of different lengths (text and images) through 2 slots: slots are
    refilled as requests finish, and every output equals transformers' greedy output."""
    reference, model = pair
    lengths = [5, 16, 9, 12, 7]
    settings = engine_settings(0.0, slots=2, capacity=256, prompt_buckets=(16, 64), max_images=2, patches_per_image=64)
    with Engine(model, settings) as engine:
        futures = [engine.submit(as_request(f, n)) for f, n in zip(PROMPTS, lengths)]
        responses = [f.result(timeout=300) for f in futures]
    for fields, n, response in zip(PROMPTS, lengths, responses):
        assert response.finish_reason == "length" and len(response.tokens) == n
        np.testing.assert_array_equal(response.tokens, hf_greedy(reference, fields, n))


def test_prompts_prefilled_together_give_the_same_tokens(pair):
    """prefill_rows = 4: the requests admitted together are prefilled in one call per bucket
    (text and images, padded rows that write no slot), and every output is still
    transformers' greedy output; a prompt longer than the largest bucket is chunked."""
    reference, model = pair
    lengths = [5, 16, 9, 12, 7]
    settings = engine_settings(0.0, slots=4, capacity=256, prompt_buckets=(32, 128), max_images=2, patches_per_image=64,
                               prefill_rows=4)
    long_prompt = prompt(b"a prompt longer than the largest bucket of 128 tokens: " + b"words and more words " * 5)
    with Engine(model, settings) as engine:
        assert engine.prefill_widths == (1, 2, 4)
        futures = [engine.submit(as_request(f, n)) for f, n in zip(PROMPTS + [long_prompt], lengths + [6])]
        responses = [f.result(timeout=300) for f in futures]
        stats = dict(engine.stats)
    for fields, n, response in zip(PROMPTS + [long_prompt], lengths + [6], responses):
        assert response.finish_reason == "length" and len(response.tokens) == n
        np.testing.assert_array_equal(response.tokens, hf_greedy(reference, fields, n))
    assert stats["prefills"] == 6 and stats["prefill_calls"] < 5   # 5 fit a bucket, and went in fewer calls


def test_pallas_decode_reads_each_row_to_its_own_length(checkpoint):
    """The Pallas decode kernel (its interpreter on CPU), which reads each slot only up to
    its length in a cache allocated in whole 512s: same greedy tokens as transformers for
    concurrent requests of different lengths, text and images, several steps per call;
    once the shortest has finished, a block of the first 2 of the 3 slots is decoded in
    place (the kernel's rows are the inputs')."""
    reference, directory = checkpoint
    model = load_pretrained(directory, **pretrained_options(attention="pallas"))
    lengths = [6, 11, 4]
    settings = engine_settings(0.0, slots=3, capacity=200, prompt_buckets=(64,), max_images=2, patches_per_image=64,
                               decode_steps=4)
    with Engine(model, settings) as engine:
        assert engine.windows == (512,) and engine.blocks == (1, 2, 3)
        responses = [f.result(timeout=600) for f in [engine.submit(as_request(f, n))
                                                      for f, n in zip(PROMPTS[1:4], lengths)]]
        stats = collections.Counter(engine.stats)
    for fields, n, response in zip(PROMPTS[1:4], lengths, responses):
        np.testing.assert_array_equal(response.tokens, hf_greedy(reference, fields, n))
    assert stats["decode_calls"] < stats["decode_steps"] == max(lengths) - 1
    assert stats["decode_slot_rows"] < 3 * stats["decode_steps"]


def test_pallas_decode_on_sharded_slots_gives_the_greedy_tokens(checkpoint):
    """The Pallas kernels under shard_map on the sampler mesh fsdp=4 x tensor=2 (8 fake CPU
    devices, the interpreter): slots over fsdp, heads over tensor. Five requests fill a
    block of all 8 slots (decoded in place, split over the devices); once the fifth (the
    second in shard 0's part) finishes, a block of 4, one row per device, is decoded as a
    copy. Same greedy tokens as transformers, which the XLA engine gives too."""
    from asyncwebrl.parallel import make_mesh

    reference, directory = checkpoint
    model = load_pretrained(directory, **pretrained_options(attention="pallas"))
    lengths = [7, 5, 6, 5, 2]
    settings = engine_settings(0.0, slots=8, capacity=200, prompt_buckets=(64,), max_images=2, patches_per_image=64,
                               decode_steps=2)
    with Engine(model, settings, mesh=make_mesh({"fsdp": 4, "tensor": 2})) as engine:
        assert engine.slot_shards == 4 and engine.blocks == (4, 8)
        futures = [engine.submit(as_request(f, n)) for f, n in zip(PROMPTS, lengths)]
        responses = [f.result(timeout=900) for f in futures]
        assert len(engine._cache.keys.sharding.device_set) == 8
        stats = collections.Counter(engine.stats)
    for fields, n, response in zip(PROMPTS, lengths, responses):
        np.testing.assert_array_equal(response.tokens, hf_greedy(reference, fields, n))
    assert 4 * stats["decode_steps"] < stats["decode_slot_rows"] < 8 * stats["decode_steps"]


def test_returned_logprobs_match_a_full_forward(pair):
    """Greedy (untempered) and temperature 0.7 sampling: each token's log-prob equals the
    full forward's log-softmax(logits / T) to 1e-4 (float32; the cache path and the full
    pass sum in different orders)."""
    _, model = pair
    for temperature in (0.0, 0.7):
        responses = generate(model, PROMPTS[1:4], max_new_tokens=10, temperature=temperature, seed=3)
        for fields, response in zip(PROMPTS[1:4], responses):
            expected = full_forward_logprobs(model, fields, response.tokens, temperature or 1.0)
            np.testing.assert_allclose(response.logprobs, expected, atol=1e-4, rtol=0)


def serve_at_once(model, settings, requests, late=()):
    """`requests` queued before the engine starts, then `late` ones submitted once the first
    response is back (while the others decode): (responses in that order, stats)."""
    engine = Engine(model, settings)
    futures = [engine.submit(r) for r in requests]
    with engine:
        futures[0].result(timeout=300)
        futures += [engine.submit(r) for r in late]
        responses = [f.result(timeout=300) for f in futures]
        return responses, collections.Counter(engine.stats)


def test_several_decode_steps_per_call_give_the_one_step_tokens(pair):
    """Greedy, 3 slots, 8 steps per call against 1: requests of different lengths whose
    responses end inside a call by max_new_tokens, by a stop token and by filling the slot's
    capacity; more requests than slots (queued ones end a call at the first finish) and one
    arriving while others decode. Same tokens, finish reasons and log-probs."""
    _, model = pair
    texts = [b"hello", b"a third request", b"fourth: " + b"x" * 30, b"5th", b"six"]
    requests = [as_request(PROMPTS[1], 13)] + [as_request(prompt(t), n) for t, n in zip(texts, [5, 100, 9, 60, 23])]
    late = [as_request(prompt(b"the last one, arriving late"), 11)]
    settings = engine_settings(0.0, slots=3, capacity=96, prompt_buckets=(32, 96), max_images=0)
    # a stop token sampled mid-response by one request and by no other (found without stop tokens)
    plain, _ = serve_at_once(model, dataclasses.replace(settings, decode_steps=1), requests, late)
    elsewhere = {int(t) for r in plain[:4] + plain[5:] for t in r.tokens}
    stop = next(int(t) for t in plain[4].tokens[4:] if t not in elsewhere and t not in plain[4].tokens[:4])
    settings = dataclasses.replace(settings, stop_token_ids=(stop,))
    one, one_stats = serve_at_once(model, dataclasses.replace(settings, decode_steps=1), requests, late)
    several, several_stats = serve_at_once(model, dataclasses.replace(settings, decode_steps=8), requests, late)
    assert [r.finish_reason for r in one] == ["length", "length", "context", "length", "stop", "length", "length"]
    for a, b in zip(one, several):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
        assert a.finish_reason == b.finish_reason and (b.versions == 0).all()
    assert one_stats["decode_calls"] == one_stats["decode_steps"]
    assert several_stats["decode_calls"] < several_stats["decode_steps"] / 2
    assert several_stats["decode_slot_steps"] == one_stats["decode_slot_steps"] == sum(len(r.tokens) - 1 for r in one)


def test_light_load_decodes_only_the_occupied_block(pair):
    """8 slots: one request decodes a block of 1 row, three at once a block of 4 (slots 0-2
    and a free one); the tokens are transformers' greedy ones."""
    reference, model = pair
    settings = engine_settings(0.0, slots=8, capacity=128, prompt_buckets=(64,), max_images=0)
    (alone,), one = serve_at_once(model, settings, [as_request(PROMPTS[0], 12)])
    three, several = serve_at_once(model, settings, [as_request(PROMPTS[1], 12)] * 3)
    assert Engine(model, settings).blocks == (1, 2, 4, 8)
    assert one["decode_steps"] == 11 and one["decode_slot_rows"] == 11
    assert several["decode_steps"] == 11 and several["decode_slot_rows"] == 4 * 11
    np.testing.assert_array_equal(alone.tokens, hf_greedy(reference, PROMPTS[0], 12))
    for response in three:
        np.testing.assert_array_equal(response.tokens, hf_greedy(reference, PROMPTS[1], 12))


def test_a_decode_call_updates_the_cache_in_place(pair):
    """The KV cache is donated to every decode call and written where it lies: the call's
    temporaries (XLA's memory analysis of the compiled call) stay far below the cache, for
    the whole block and for one light request. A copy of the cache per call would be memory
    a GPU may not have beside it (an 8B 64-slot cache is 22.5 GiB) and bandwidth every call.
    (What the temporaries do hold: one layer's attention products in float32, which for this
    two-layer model is about half the cache; a copy of keys and values would be all of it.)"""
    _, model = pair
    engine = Engine(model, engine_settings(1.0, slots=8, capacity=1024, prompt_buckets=(64,), max_images=0))
    cache_bytes = engine._cache.keys.nbytes + engine._cache.values.nbytes
    for rows, window in ((engine.blocks[-1], engine.windows[-1]), (engine.blocks[0], engine.windows[0])):
        compiled = engine._decode.lower(*engine.idle_decode_arguments(rows), rows=rows, window=window).compile()
        memory = compiled.memory_analysis()
        assert memory.alias_size_in_bytes >= cache_bytes   # donated: the output cache is the input's buffer
        assert memory.temp_size_in_bytes < 0.75 * cache_bytes, (rows, window, memory.temp_size_in_bytes, cache_bytes)


def test_several_steps_per_call_sample_with_the_one_step_keys(pair):
    """Temperature 1, one request: step s of a call samples with the key a call of its own
    would have used (a distinct key per step, in order), so 8 steps per call draw the one-step
    engine's tokens; each log-prob is the full forward's log-prob of the token drawn."""
    _, model = pair
    (one,) = generate(model, [PROMPTS[1]], max_new_tokens=20, temperature=1.0, seed=5, decode_steps=1)
    (several,) = generate(model, [PROMPTS[1]], max_new_tokens=20, temperature=1.0, seed=5, decode_steps=8)
    np.testing.assert_array_equal(one.tokens, several.tokens)
    assert len(set(several.tokens.tolist())) > 5
    np.testing.assert_allclose(several.logprobs, full_forward_logprobs(model, PROMPTS[1], several.tokens),
                               atol=1e-4, rtol=0)


def test_decode_steps_below_one_are_refused():
    with pytest.raises(ValueError, match="sampler.decode_steps"):
        engine_settings(0.0, decode_steps=0)


def test_chunked_prefill_of_a_long_prompt(pair):
    """A prompt longer than the largest bucket is prefilled in pieces; same tokens."""
    reference, model = pair
    fields = prompt(b"0123456789" * 9, [(64, 64)], seed=4)
    settings = engine_settings(0.0, slots=1, capacity=256, prompt_buckets=(16, 32), max_images=1, patches_per_image=16)
    with Engine(model, settings) as engine:
        response = engine.submit(as_request(fields, 8)).result(timeout=300)
    assert len(fields["input_ids"]) > 3 * 32
    np.testing.assert_array_equal(response.tokens, hf_greedy(reference, fields, 8))


def test_publish_during_generation_is_tagged_and_does_not_stall(pair):
    """A learner thread publishes version 1 mid-generation: tokens switch from version 0
    to 1 exactly once, within one iteration of the publish, with no re-prefill and no
    pause; the new weights are really used."""
    _, model = pair
    graphdef, params = nnx.split(model)
    new_params = jax.tree.map(lambda p: p * 1.5, params)
    settings = engine_settings(0.0, slots=2, capacity=256, prompt_buckets=(64,), max_images=0)
    fields = PROMPTS[1]
    with Engine(model, settings) as engine:
        observed = {}

        def learner():
            while engine.stats["decode_steps"] < 20:
                time.sleep(0.001)
            observed["before"] = engine.stats["decode_steps"]
            engine.publish(new_params, version=1)
            observed["after"] = engine.stats["decode_steps"]

        thread = threading.Thread(target=learner)
        future = engine.submit(as_request(fields, 120))
        thread.start()
        response = future.result(timeout=300)
        thread.join()
        prefills = engine.stats["prefills"]
    versions = response.versions
    switch = int(np.argmax(versions == 1))
    assert versions[0] == 0 and versions[-1] == 1 and (np.diff(versions) >= 0).all()
    decoded_before_swap = switch - 1          # token 0 comes from the prefill
    # the swap waits for the decode call in flight, at most decode_steps steps
    assert observed["before"] <= decoded_before_swap <= observed["after"] + settings.decode_steps
    assert prefills == 1
    # before the swap the log-probs are the old weights' (a full forward reproduces them);
    # after it they are not: the new weights are in use (over the cache the old ones wrote)
    old = full_forward_logprobs(model, fields, response.tokens)
    np.testing.assert_allclose(response.logprobs[:switch], old[:switch], atol=1e-4, rtol=0)
    assert np.abs(response.logprobs[switch:] - old[switch:]).mean() > 0.1


@pytest.mark.parametrize("prefill_rows, prefill_cache", [(1, 0), (3, 0), (3, 4)])
def test_steady_state_never_recompiles(pair, prefill_rows, prefill_cache):
    _, model = pair
    settings = engine_settings(1.0, slots=3, capacity=256, prompt_buckets=(16, 64), max_images=2, patches_per_image=64,
                               prefill_rows=prefill_rows, prefill_cache=prefill_cache)
    engine = Engine(model, settings)
    engine.warm_up()   # compiles every bucket (first and later chunks, rows together), decode and the encoder
    compiled = engine.compilations()
    with engine:
        warm = [engine.submit(as_request(f, 6)) for f in PROMPTS + [prompt(b"0123456789" * 9, [(64, 64)], seed=4)]]
        [f.result(timeout=300) for f in warm]
        more = [prompt(b"new text " * k, [(64, 32)] * (k % 3), seed=10 + k) for k in range(1, 7)]
        more += [prompt(b"new text " * 3)] * 2 + [prompt(b"hello")]   # copies: prefill cache hits when it is on
        futures = [engine.submit(as_request(f, 4 + k)) for k, f in enumerate(more)]
        [f.result(timeout=300) for f in futures]
        assert engine.compilations() == compiled
        assert (engine.stats["prefill_cache_hits"] > 0) == (prefill_cache > 0)
    # with prefill_rows 3: one shape per bucket and row count (1, 2, 3); with the prefill
    # cache one copy into a slot per bucket; decode: one per block of slots and window
    assert engine.blocks == (1, 2, 3) and engine.windows == (256, 320)
    assert compiled == {"prefill": 4, "prefill_rows": 0 if prefill_rows == 1 else 2 * 3,
                        "decode": 3 * 2, "encode": 1, "restore": 2 if prefill_cache else 0}


def test_vision_cache_encodes_a_screenshot_once_per_version(pair):
    _, model = pair
    fields = prompt(b"shot ", [(64, 64)], seed=5)
    request = as_request(fields, 3)
    request.images = [Image(pixel_values=im.pixel_values, grid_thw=im.grid_thw, key="ep1/step3") for im in request.images]
    settings = engine_settings(0.0, slots=1, capacity=128, prompt_buckets=(64,), max_images=1, patches_per_image=16)
    with Engine(model, settings) as engine:
        first = engine.submit(request).result(timeout=300)
        second = engine.submit(request).result(timeout=300)
        assert (engine.stats["images_encoded"], engine.stats["vision_cache_hits"]) == (1, 1)
        engine.publish(nnx.split(model)[1], version=2)
        third = engine.submit(request).result(timeout=300)
        assert engine.stats["images_encoded"] == 2
    np.testing.assert_array_equal(first.tokens, second.tokens)
    np.testing.assert_array_equal(first.tokens, third.tokens)


def cached_engine_settings(temperature, **changes):
    return engine_settings(temperature, **{"slots": 1, "capacity": 256, "prompt_buckets": (32, 128), "max_images": 0,
                                           "prefill_cache": 4, **changes})


def serve(model, settings, requests, version=0):
    """Each request in turn (each waits for the one before) on a new engine: (responses, stats)."""
    with Engine(model, settings, version=version) as engine:
        responses = [engine.submit(r).result(timeout=300) for r in requests]
        return responses, collections.Counter(engine.stats)


@pytest.mark.parametrize("prefill_rows", [1, 4])
def test_prefill_cache_hit_gives_the_uncached_response(pair, prefill_rows):
    """Greedy: a prompt's copy, served from the prefill cache (one at a time, and admitted
    together with it into free slots, on both prefill paths), gives the uncached engine's
    tokens and log-probs; another prompt is a miss."""
    _, model = pair
    a, b = as_request(PROMPTS[1], 10), as_request(PROMPTS[0], 10)
    plain, _ = serve(model, cached_engine_settings(0.0, prefill_cache=0), [a, b])
    cached, stats = serve(model, cached_engine_settings(0.0), [a, a, b])
    assert stats["prefill_cache_hits"] == 1 and stats["prefills"] == 2
    for got, expected in zip(cached, [plain[0], plain[0], plain[1]]):
        np.testing.assert_array_equal(got.tokens, expected.tokens)
        np.testing.assert_allclose(got.logprobs, expected.logprobs, atol=1e-6, rtol=0)
    # four copies and the other prompt admitted in one round: one prefill per distinct prompt
    engine = Engine(model, cached_engine_settings(0.0, slots=5, prefill_rows=prefill_rows))
    futures = [engine.submit(r) for r in [a, b, a, a, a]]   # queued before the loop's first round
    with engine:
        together = [f.result(timeout=300) for f in futures]
        stats = collections.Counter(engine.stats)
    assert stats["prefill_cache_hits"] == 3 and stats["prefills"] == 2
    for got, expected in zip(together, [plain[0], plain[1], plain[0], plain[0], plain[0]]):
        np.testing.assert_array_equal(got.tokens, expected.tokens)   # (decoding 5 slots at once sums
        np.testing.assert_allclose(got.logprobs, expected.logprobs, atol=1e-5, rtol=0)   # in another order)


def test_prefill_cache_is_emptied_by_a_publish(pair):
    """After new weights (version 1) the same prompt is a miss: its response is the new
    weights' (an uncached engine's with them), tagged version 1."""
    _, model = pair
    graphdef, params = nnx.split(model)
    new_params = jax.tree.map(lambda p: p * 1.5, params)
    request = as_request(PROMPTS[1], 8)
    with Engine(model, cached_engine_settings(0.0)) as engine:
        before = engine.submit(request).result(timeout=300)
        engine.publish(new_params, version=1)
        after = engine.submit(request).result(timeout=300)
        again = engine.submit(request).result(timeout=300)
        stats = collections.Counter(engine.stats)
    (expected,), _ = serve(nnx.merge(graphdef, new_params), cached_engine_settings(0.0, prefill_cache=0), [request])
    assert stats["prefill_cache_hits"] == 1 and stats["prefills"] == 2   # `again` is the new version's hit
    assert not np.array_equal(before.tokens, expected.tokens)            # the weights' change shows
    for got in (after, again):
        np.testing.assert_array_equal(got.tokens, expected.tokens)
        np.testing.assert_allclose(got.logprobs, expected.logprobs, atol=1e-6, rtol=0)
        assert (got.versions == 1).all()


def test_prefill_cache_hit_samples_its_first_token_afresh(pair):
    """Temperature 1: every hit draws its first token from the cached distribution with a
    fresh key (not the miss's token): the first tokens vary, and each one's log-prob is
    that token's under the prompt's distribution (a full forward pass's)."""
    _, model = pair
    fields = PROMPTS[1]
    requests = [as_request(fields, 1)] * 40
    responses, stats = serve(model, cached_engine_settings(1.0), requests, version=3)
    assert stats["prefill_cache_hits"] == 39 and stats["prefills"] == 1
    tokens = np.array([r.tokens[0] for r in responses])
    assert len(set(tokens[1:].tolist())) > 3
    logits = np.asarray(model(input_ids=fields["input_ids"][None]))[0, -1]   # the prompt's distribution
    log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(logits)))
    np.testing.assert_allclose([r.logprobs[0] for r in responses], log_probs[tokens], atol=1e-4, rtol=0)
    assert all(r.versions[0] == 3 for r in responses)


def test_prefill_cache_evicts_the_least_recently_used(pair):
    """prefill_cache = 2: A B C A misses every time; A B A C A B hits A twice, and B (the
    least recently used when C came) is gone."""
    _, model = pair
    a, b, c = (as_request(prompt(text), 2) for text in (b"first", b"second", b"third"))
    settings = cached_engine_settings(0.0, prefill_cache=2)
    _, stats = serve(model, settings, [a, b, c, a])
    assert stats["prefill_cache_hits"] == 0 and stats["prefills"] == 4
    _, stats = serve(model, settings, [a, b, a, c, a, b])
    assert stats["prefill_cache_hits"] == 2 and stats["prefills"] == 4


def test_prefill_cache_skips_images_and_long_prompts(pair):
    """Prompts with images, and prompts longer than the largest bucket (chunked), are never
    cached: their copies are prefilled again."""
    _, model = pair
    shot, long = as_request(PROMPTS[2], 3), as_request(prompt(b"0123456789" * 15), 3)
    settings = cached_engine_settings(0.0, capacity=256, max_images=1, patches_per_image=64)
    _, stats = serve(model, settings, [shot, shot, long, long])
    assert stats["prefill_cache_hits"] == 0 and stats["prefills"] == 4


def test_requests_that_cannot_fit_fail_clearly(pair):
    _, model = pair
    settings = engine_settings(1.0, slots=1, capacity=32, prompt_buckets=(16,), max_images=0)
    with Engine(model, settings) as engine:
        with pytest.raises(ValueError, match="does not fit"):
            engine.submit(Request(input_ids=np.arange(40), max_new_tokens=2)).result(timeout=60)
        response = engine.submit(Request(input_ids=np.arange(28), max_new_tokens=50)).result(timeout=300)
    # a full slot: prompt + response fill the capacity exactly, so the step row (prompt +
    # response) fits a learner row of that length (one token more stopped a GPU run)
    assert response.finish_reason == "context" and 28 + len(response.tokens) == 32


def test_cancelled_requests_never_stop_the_engine(pair):
    """An episode that gives up cancels its request's future: queued, the request is dropped;
    in flight, it can no longer be cancelled and finishes. Either way the engine serves on
    (a cancelled future once made the engine's thread die on set_result)."""
    _, model = pair
    settings = engine_settings(1.0, slots=1, capacity=64, prompt_buckets=(16,), max_images=0)
    with Engine(model, settings) as engine:
        running = engine.submit(Request(input_ids=np.arange(1, 9), max_new_tokens=40))
        queued = engine.submit(Request(input_ids=np.arange(1, 9), max_new_tokens=40))
        assert queued.cancel()                      # still waiting for the one slot
        deadline = time.monotonic() + 60
        while not (running.running() or running.done()) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not running.cancel()                 # admitted: no longer cancellable
        assert len(running.result(timeout=60).tokens) == 40
        after = engine.submit(Request(input_ids=np.arange(1, 9), max_new_tokens=3)).result(timeout=60)
    assert len(after.tokens) == 3 and engine.stats["cancelled"] == 1


def test_sampling_rules():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    key = jax.random.key(0)
    token, logprob = sample(logits, key, SamplingSettings(temperature=0.0, top_p=1.0))
    assert int(token[0]) == 0 and float(logprob[0]) == pytest.approx(np.log(0.5), abs=1e-6)
    token, logprob = sample(logits, key, SamplingSettings(temperature=1.0, top_p=1.0, top_k=1))
    assert int(token[0]) == 0 and float(logprob[0]) == pytest.approx(0.0, abs=1e-6)
    # top_p = 0.7 keeps {0.5, 0.3}: renormalised to 0.625 / 0.375
    draws = jax.vmap(lambda k: sample(logits, k, SamplingSettings(temperature=1.0, top_p=0.7)))(jax.random.split(key, 4000))
    tokens, logprobs = np.asarray(draws[0])[:, 0], np.asarray(draws[1])[:, 0]
    assert set(tokens) == {0, 1}
    assert abs((tokens == 0).mean() - 0.625) < 0.03
    np.testing.assert_allclose(logprobs[tokens == 1], np.log(0.375), atol=1e-6)
    # temperature 2 flattens: p ~ sqrt(p) renormalised
    draws = jax.vmap(lambda k: sample(logits, k, SamplingSettings(temperature=2.0, top_p=1.0)))(jax.random.split(key, 8000))
    expected = np.sqrt([0.5, 0.3, 0.15, 0.05])
    expected /= expected.sum()
    frequencies = np.bincount(np.asarray(draws[0])[:, 0], minlength=4) / 8000
    np.testing.assert_allclose(frequencies, expected, atol=0.02)


def test_tensor_parallel_engine_matches_one_device(pair):
    """The sampler mesh (fsdp=4 x tensor=2 over 8 fake CPU devices): weights split over
    tensor, cache slots over the batch axes (2 of the 8 slots per fsdp device); same
    greedy tokens as on one device. The decode block respects the split: 4 requests fill
    the first slot of each device's part and decode as a block of 4 rows, one per device."""
    from asyncwebrl.parallel import make_mesh

    _, model = pair
    settings = engine_settings(0.0, slots=8, capacity=128, prompt_buckets=(64,), max_images=2, patches_per_image=64)
    requests = [as_request(f, 6) for f in PROMPTS[:4]]
    with Engine(model, settings) as engine:
        single = [engine.submit(r).result(timeout=300) for r in requests]
    with Engine(model, settings, mesh=make_mesh({"fsdp": 4, "tensor": 2})) as engine:
        assert engine.slot_shards == 4 and engine.blocks == (4, 8)
        futures = [engine.submit(r) for r in requests]
        sharded = [f.result(timeout=300) for f in futures]
        assert len(engine._cache.keys.sharding.device_set) == 8
        stats = collections.Counter(engine.stats)
    assert stats["decode_slot_rows"] == 4 * stats["decode_steps"]
    for a, b in zip(single, sharded):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
