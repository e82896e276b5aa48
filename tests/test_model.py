"""Qwen3-VL in Flax NNX against transformers' implementation (PyTorch CPU, float32).

Every test builds a tiny random transformers Qwen3VLForConditionalGeneration, perturbs all
its weights (so a swapped or transposed tensor cannot hide behind ones and zeros), saves it,
loads it with asyncwebrl.model.load_pretrained and compares logits on real tokens."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch  # the reference; pyproject.toml's test extra pins the CPU build
from flax import nnx
from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from asyncwebrl.model import layers
from asyncwebrl.model import inputs as model_inputs
from asyncwebrl.model.config import BYTE_VOCAB_SIZE, preset
from asyncwebrl.model.qwen3_vl import Qwen3VL
from asyncwebrl.model.tokenizer import Processor, byte_tokenizer
from asyncwebrl.model.weights import abstract_model, load_pretrained, save_pretrained
from asyncwebrl.parallel import LEARNER_RULES, SAMPLER_RULES, make_mesh
from bare_settings import model_options, pretrained_options  # tests/bare_settings.py

PAD, BOS, IMG, VID, VS, VE = 256, 257, 261, 262, 259, 260
TOLERANCE = 1e-4


def hf_config(tied: bool) -> Qwen3VLConfig:
    return Qwen3VLConfig(
        text_config=dict(vocab_size=BYTE_VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         pad_token_id=PAD, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 2]),
        image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE,
        tie_word_embeddings=tied)


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def pair(request, tmp_path_factory):
    """(transformers model, our model loaded from its saved directory, directory)."""
    torch.manual_seed(0)
    reference = Qwen3VLForConditionalGeneration(hf_config(request.param)).eval()
    reference.config._attn_implementation = "eager"
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    directory = tmp_path_factory.mktemp("hf_tiny")
    reference.save_pretrained(directory)
    PROCESSOR.save_pretrained(directory)   # its pixel normalisation (CLIP's) reaches the model config
    return reference, load_pretrained(directory, **pretrained_options()), directory


PROCESSOR = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32,
                                     max_pixels=160 * 160)


def image_batch(sizes, seed=0):
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    encoded = PROCESSOR(images=images, return_tensors="np")
    return encoded["pixel_values"], encoded["image_grid_thw"]


def with_images(text_before, grids, text_between=b" and ", text_after=b" Action:"):
    """Token ids: text, then each image as vision_start + placeholders + vision_end."""
    ids = [BOS] + list(text_before)
    for i, grid in enumerate(grids):
        if i:
            ids += list(text_between)
        ids += [VS] + [IMG] * (int(np.prod(grid)) // 4) + [VE]
    return ids + list(text_after)


def padded(rows, side="right"):
    """Token rows -> (ids [n, longest] padded with PAD, attention mask)."""
    length = max(map(len, rows))
    ids = np.full((len(rows), length), PAD)
    mask = np.zeros((len(rows), length), np.int64)
    for i, row in enumerate(rows):
        span = slice(length - len(row), length) if side == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


def reference_logits(reference, **kwargs):
    tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in kwargs.items() if v is not None}
    with torch.no_grad():
        return reference(**tensors).logits.numpy()


def compare(reference, model, mask=None, **kwargs):
    expected = reference_logits(reference, attention_mask=mask, **kwargs)
    actual = np.asarray(model(attention_mask=mask, **kwargs))
    assert actual.shape == expected.shape
    keep = np.ones(expected.shape[:2], bool) if mask is None else np.asarray(mask, bool)
    difference = np.abs(actual - expected)[keep].max()
    assert difference < TOLERANCE, difference
    return expected


def test_text_only(pair):
    reference, model, _ = pair
    ids = np.array([[BOS] + list(b"Search the catalogue for 'Dune'.")])
    compare(reference, model, input_ids=ids)


def test_one_image(pair):
    reference, model, _ = pair
    pixels, grids = image_batch([(96, 160)])
    ids = np.array([with_images(b"Screenshot: ", grids)])
    compare(reference, model, input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
            mm_token_type_ids=(ids == IMG).astype(np.int64))


def test_two_images_of_different_sizes(pair):
    reference, model, _ = pair
    pixels, grids = image_batch([(64, 128), (160, 96)], seed=1)
    assert not np.array_equal(grids[0], grids[1])
    ids = np.array([with_images(b"Before ", grids)])
    compare(reference, model, input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
            mm_token_type_ids=(ids == IMG).astype(np.int64))


def test_still_patches_normalised_on_the_device_match_transformers_pixels(pair):
    """The host sends our Processor's uint8 still patches; the model's own normalisation
    gives the logits transformers computes from its processor's float32 patches."""
    reference, model, _ = pair
    ours = Processor(byte_tokenizer(), PROCESSOR)
    ours.check_normalisation(model.config.vision)
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(96, 160), (150, 70)]]
    still, grids = ours.process_images(images)
    assert still.dtype == np.uint8
    floats = PROCESSOR(images=images, return_tensors="np")["pixel_values"]
    ids = np.array([with_images(b"Still ", grids)])
    types = (ids == IMG).astype(np.int64)
    expected = reference_logits(reference, input_ids=ids, pixel_values=floats, image_grid_thw=grids,
                                mm_token_type_ids=types)
    actual = np.asarray(model(input_ids=ids, pixel_values=still, image_grid_thw=grids, mm_token_type_ids=types))
    assert np.abs(actual - expected).max() < TOLERANCE


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch(pair, side):
    reference, model, _ = pair
    pixels, grids = image_batch([(64, 64), (96, 128)], seed=2)
    rows = [with_images(b"first ", grids[:1]), [BOS] + list(b"a text-only row"),
            with_images(b"third row, longer text ", grids[1:])]
    ids, mask = padded(rows, side)
    compare(reference, model, mask=mask, input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
            mm_token_type_ids=(ids == IMG).astype(np.int64))


def test_kv_cache_decoding_reproduces_the_full_forward(pair):
    """Prefill a prompt with an image into the cache, then feed the continuation one token
    at a time: every step's logits equal the full forward's logits at that position."""
    _, model, _ = pair
    pixels, grids = image_batch([(96, 128)], seed=3)
    prompt = with_images(b"Go to ", grids)
    continuation = list(b"click(3)")
    ids = np.array([prompt + continuation])
    full = np.asarray(model(input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
                            mm_token_type_ids=(ids == IMG).astype(np.int64)))

    prompt_ids = np.array([prompt])
    inputs = model_inputs.from_hf_kwargs(model.config, prompt_ids, None, pixels, grids,
                                         (prompt_ids == IMG).astype(np.int64))
    _, next_position = model_inputs.sequence_positions((prompt_ids[0] == IMG).astype(int), grids, 2)
    cache = model.init_cache(batch=1, capacity=len(prompt) + len(continuation) + 5)
    hidden, cache = model.hidden_states(inputs, cache)
    step_logits = [np.asarray(model.logits(hidden))[0, -1]]
    for i, token in enumerate(continuation[:-1]):
        step = model_inputs.ModelInputs(tokens=np.array([[token]], np.int32),
                                        positions=np.full((3, 1, 1), next_position + i, np.int32),
                                        segment_ids=np.ones((1, 1), np.int32),
                                        vision_source=np.full((1, 1), -1, np.int32))
        hidden, cache = model.hidden_states(step, cache)
        step_logits.append(np.asarray(model.logits(hidden))[0, -1])
    expected = full[0, len(prompt) - 1:len(prompt) + len(continuation) - 1]
    assert int(cache.lengths[0]) == len(prompt) + len(continuation) - 1
    np.testing.assert_allclose(np.stack(step_logits), expected, atol=TOLERANCE, rtol=0)


def test_batched_decoding_with_ragged_prompts(pair):
    """Two prompts of different lengths prefilled together (right-padded), then one decode
    step for both: each row matches its own unbatched full forward."""
    _, model, _ = pair
    prompts = [[BOS] + list(b"short"), [BOS] + list(b"a much longer prompt")]
    nxt = [ord("!"), ord("?")]
    width = max(map(len, prompts))
    tokens = np.zeros((2, width), np.int32)
    segments = np.zeros((2, width), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)], segments[i, :len(p)] = p, 1
    positions = np.broadcast_to(np.arange(width), (3, 2, width)).astype(np.int32)
    cache = model.init_cache(batch=2, capacity=32)
    prefill = model_inputs.ModelInputs(tokens=tokens, positions=positions, segment_ids=segments,
                                       vision_source=np.full((2, width), -1, np.int32))
    _, cache = model.hidden_states(prefill, cache)
    lengths = np.array([len(p) for p in prompts], np.int32)
    step = model_inputs.ModelInputs(tokens=np.array(nxt, np.int32)[:, None],
                                    positions=np.broadcast_to(lengths[:, None], (3, 2, 1)).astype(np.int32),
                                    segment_ids=np.ones((2, 1), np.int32), vision_source=np.full((2, 1), -1, np.int32))
    hidden, cache = model.hidden_states(step, cache)
    decoded = np.asarray(model.logits(hidden))[:, 0]
    for i, p in enumerate(prompts):
        full = np.asarray(model(input_ids=np.array([p + [nxt[i]]])))[0, -1]
        np.testing.assert_allclose(decoded[i], full, atol=TOLERANCE, rtol=0)


def test_save_pretrained_loads_in_transformers_with_identical_logits(tmp_path):
    config = preset("tiny")
    model = Qwen3VL(config, **model_options(), rngs=nnx.Rngs(7))
    save_pretrained(model, tmp_path)
    reference = Qwen3VLForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    pixels, grids = image_batch([(64, 96)], seed=4)
    ids = np.array([with_images(b"Check ", grids)])
    compare(reference, model, input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
            mm_token_type_ids=(ids == IMG).astype(np.int64))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "qwen3_vl"


def test_bfloat16_round_trip_keeps_every_parameter(pair, tmp_path):
    _, model, _ = pair
    save_pretrained(model, tmp_path, dtype=jnp.bfloat16)
    reloaded = load_pretrained(tmp_path, **pretrained_options(dtype=jnp.bfloat16, compute_dtype=jnp.bfloat16))
    ours = jax.tree.leaves(nnx_params(model))
    theirs = jax.tree.leaves(nnx_params(reloaded))
    assert all(b.dtype == jnp.bfloat16 for b in theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a.astype(jnp.bfloat16)), np.asarray(b))


def nnx_params(model):
    return nnx.state(model, nnx.Param)


@pytest.mark.parametrize("rules", [LEARNER_RULES, SAMPLER_RULES], ids=["learner", "sampler"])
def test_sharded_forward_equals_single_device(pair, rules):
    """fsdp=4 x tensor=2 over 8 fake CPU devices: parameters are really split, and the
    logits equal the single-device forward."""
    reference, _, directory = pair
    assert jax.device_count() == 8, "tests/conftest.py sets 8 fake CPU devices"
    mesh = make_mesh({"data": 1, "fsdp": 4, "tensor": 2})
    sharded = load_pretrained(directory, **pretrained_options(), mesh=mesh, rules=rules)
    single = load_pretrained(directory, **pretrained_options())
    kernel = sharded.layers.gate_proj.kernel[...]   # [layers, embed, mlp]: the layers axis is never split
    assert len(kernel.sharding.device_set) == 8
    expected_shard = (kernel.shape[0], 64 // 4 if rules is LEARNER_RULES else 64, 96 // 2)
    assert kernel.addressable_shards[0].data.shape == expected_shard

    pixels, grids = image_batch([(96, 96), (64, 128)], seed=5)
    rows = [with_images(b"a ", grids[:1]), with_images(b"bb ", grids[1:])]
    ids, mask = padded(rows)
    inputs = model_inputs.from_hf_kwargs(single.config, ids, mask, pixels, grids, (ids == IMG).astype(np.int64))

    forward = nnx.jit(lambda m, x: m.forward(x))
    expected = np.asarray(forward(single, inputs))
    actual = forward(sharded, inputs)
    np.testing.assert_allclose(np.asarray(actual)[mask.astype(bool)], expected[mask.astype(bool)], atol=1e-5, rtol=0)


def test_load_pretrained_rejects_a_mismatched_checkpoint(pair, tmp_path):
    _, _, directory = pair
    config = json.loads((directory / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(directory / "model.safetensors")
    with pytest.raises(KeyError, match="lacks"):
        load_pretrained(tmp_path, **pretrained_options())
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path / "nowhere", **pretrained_options())


def test_published_presets_have_the_published_sizes():
    """Qwen3-VL-8B has 8.77B parameters, 8.19B of them in the text stack
    (docs/architecture.md#model-presets)."""
    def count(module):
        return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(module, nnx.Param)))

    model = abstract_model(preset("qwen3-vl-8b-thinking"), **model_options())
    assert round(count(model) / 1e9, 2) == 8.77
    assert round((count(model) - count(model.visual)) / 1e9, 2) == 8.19
    assert round(count(abstract_model(preset("2b"), **model_options())) / 1e9, 1) == 2.1
    assert round(count(abstract_model(preset("4b"), **model_options())) / 1e9, 1) == 4.4
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("70b")


def test_the_program_holds_one_layer_whatever_the_depth():
    """Decoder layers and vision blocks run as scans over stacked parameters: the lowered
    forward (with an image, rematerialised) holds one layer's and one block's body however
    deep the model is; unrolled, 24 layers and 12 blocks made it several times longer."""
    pixels, grids = image_batch([(64, 64)])
    ids = np.array([with_images(b"deep ", grids)])

    def program_length(layers, blocks):
        base = preset("tiny")
        config = dataclasses.replace(base, text=dataclasses.replace(base.text, num_layers=layers),
                                     vision=dataclasses.replace(base.vision, depth=blocks))
        graphdef, params = nnx.split(abstract_model(config, **model_options(remat="full")))
        inputs = model_inputs.from_hf_kwargs(config, ids, None, pixels, grids, (ids == IMG).astype(np.int64))
        return len(jax.jit(lambda p, x: nnx.merge(graphdef, p).forward(x)).lower(params, inputs).as_text())

    assert program_length(24, 12) < 1.05 * program_length(3, 3)


@pytest.mark.parametrize("policy", ["full", "mlp", "dots", "mlp_up_offload_gate"])
def test_remat_changes_memory_not_gradients(pair, policy):
    """Rematerialised decoder layers and vision blocks give the gradients of stored activations."""
    _, model, directory = pair
    if not model.config.tie_word_embeddings and policy != "full":
        pytest.skip("remat does not touch the embeddings: the untied model checks one policy (saves a minute)")
    rematted = load_pretrained(directory, **pretrained_options(remat=policy))
    pixels, grids = image_batch([(64, 64)], seed=9)
    ids = np.array([with_images(b"remat me ", grids)])
    inputs = model_inputs.from_hf_kwargs(model.config, ids, None, pixels, grids, (ids == IMG).astype(np.int64))

    def gradients(m):
        graphdef, params = nnx.split(m)
        loss = lambda p: jax.nn.log_softmax(nnx.merge(graphdef, p).forward(inputs))[..., 65].sum()  # noqa: E731
        return jax.tree.leaves(jax.jit(jax.grad(loss))(params))

    for plain, remat in zip(gradients(model), gradients(rematted)):
        np.testing.assert_allclose(np.asarray(plain), np.asarray(remat), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("param_dtype", [jnp.float32, jnp.bfloat16], ids=["f32-params", "bf16-params"])
def test_bfloat16_compute_tracks_float32(pair, param_dtype):
    """bf16 matmuls (norms, softmax and rotary stay float32) stay close to the float32 model
    and pick the same next token almost everywhere."""
    reference, model, directory = pair
    low = load_pretrained(directory, **pretrained_options(dtype=param_dtype, compute_dtype=jnp.bfloat16))
    assert low.layers.gate_proj.kernel[...].dtype == param_dtype
    pixels, grids = image_batch([(96, 128)], seed=6)
    ids = np.array([with_images(b"Precision ", grids)])
    kwargs = dict(input_ids=ids, pixel_values=pixels, image_grid_thw=grids, mm_token_type_ids=(ids == IMG).astype(int))
    exact, approximate = np.asarray(model(**kwargs)), np.asarray(low(**kwargs))
    assert approximate.dtype == np.float32
    scale = np.abs(exact).max()
    assert np.abs(approximate - exact).max() < 0.05 * scale
    assert (approximate.argmax(-1) == exact.argmax(-1)).mean() > 0.9


def test_pallas_attention_matches_xla(pair):
    """The fused flash-attention kernel (run by the Pallas interpreter on CPU) gives the
    XLA path's logits and gradients on a padded multimodal batch: same segments, same
    causal structure, same padding behaviour."""
    _, model, directory = pair
    fused = load_pretrained(directory, **pretrained_options(attention="pallas"))
    pixels, grids = image_batch([(64, 64), (64, 96)], seed=8)
    rows = [with_images(b"x ", grids[:1]), with_images(b"yy ", grids[1:])]
    ids, mask = padded(rows)
    inputs = model_inputs.from_hf_kwargs(model.config, ids, mask, pixels, grids, (ids == IMG).astype(np.int64))
    keep = mask.astype(bool)

    def logits_and_grads(m):
        graphdef, params = nnx.split(m)
        loss = lambda p: (nnx.merge(graphdef, p).forward(inputs)[keep][:, 70]).sum()  # noqa: E731
        logits = nnx.merge(graphdef, params).forward(inputs)
        return np.asarray(logits)[keep], jax.tree.leaves(jax.grad(loss)(params))

    expected, expected_grads = logits_and_grads(model)
    actual, actual_grads = logits_and_grads(fused)
    np.testing.assert_allclose(actual, expected, atol=TOLERANCE, rtol=0)
    for a, b in zip(actual_grads, expected_grads):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-3)


def test_load_pretrained_reads_a_sharded_checkpoint(pair, tmp_path):
    """transformers splits big checkpoints into several files plus an index; the loader
    follows the index and gives the same model."""
    reference, model, _ = pair
    reference.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    sharded = load_pretrained(tmp_path, **pretrained_options())
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(sharded))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("causal", [True, False])
def test_query_blocks_do_not_change_xla_attention(monkeypatch, causal):
    """Long rows attend in query blocks (causal ones read keys only up to the block's
    end): same result as one block over the whole row, packed segments and padding included."""
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(2, 40, 4, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(2, 40, 2, 8)), jnp.float32) for _ in range(2))
    segments = jnp.asarray([[1] * 13 + [2] * 20 + [0] * 7, [1] * 40], jnp.int32)
    whole = layers.segment_attention(q, k, v, segments, causal=causal)
    monkeypatch.setattr(layers, "XLA_MIN_BLOCK", 8)   # 40 tokens: blocks of 8
    blocked = layers.segment_attention(q, k, v, segments, causal=causal)
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(whole), atol=1e-5)
