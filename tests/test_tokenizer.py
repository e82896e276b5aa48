"""Byte tokenizer, ChatML template, image processor and Processor.encode (checked
against transformers' own Qwen3VLProcessor)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

from asyncwebrl.model import preset
from asyncwebrl.model.config import BYTE_VOCAB_SIZE
from asyncwebrl.model.inputs import still_patch_pixels
from asyncwebrl.model.tokenizer import (SPECIAL_TOKENS, Processor, byte_tokenizer,
                                        load_image_processor, load_tokenizer, make_image_processor, special_ids)
from asyncwebrl.rollout.response import format_response, tool_call_pieces

TEXT_WITH_SPECIALS = "Click «OK» <|image_pad|> ✓"


def random_image(height, width, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def chat(*image_counts_per_user_turn, system="Be brief."):
    """A system message, then one user turn per count holding that many images between texts."""
    messages = [{"role": "system", "content": system}]
    for turn, n_images in enumerate(image_counts_per_user_turn):
        content = [{"type": "text", "text": f"Turn {turn}:"}]
        for i in range(n_images):
            content += [{"type": "image", "image": f"key-{turn}-{i}"}, {"type": "text", "text": f" shot {i}\n"}]
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    return messages[:-1]  # end on the user turn: the model answers next


@pytest.fixture(scope="module")
def processor():
    return Processor.embedded()


def test_byte_tokenizer_round_trips_utf8_with_special_tokens(tmp_path):
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode(TEXT_WITH_SPECIALS, add_special_tokens=False)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    plain = TEXT_WITH_SPECIALS.replace("<|image_pad|>", "")
    assert [i for i in ids if i != pad] == list(plain.encode("utf-8"))  # id == byte value
    assert ids.count(pad) == 1
    assert tokenizer.decode(ids, skip_special_tokens=False) == TEXT_WITH_SPECIALS
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(256, 263))
    assert len(tokenizer) == 263 + len(tool_call_pieces()) <= BYTE_VOCAB_SIZE and BYTE_VOCAB_SIZE % 16 == 0

    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert reloaded.encode(TEXT_WITH_SPECIALS, add_special_tokens=False) == ids
    assert special_ids(reloaded) == special_ids(tokenizer)
    assert (reloaded.eos_token, reloaded.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert reloaded.chat_template == tokenizer.chat_template


def test_special_ids_name_endoftext_as_pad_and_im_end_as_eos():
    ids = special_ids(byte_tokenizer())
    assert (ids.pad, ids.im_start, ids.eos, ids.vision_start, ids.vision_end, ids.image_pad, ids.video_pad) \
        == (256, 257, 258, 259, 260, 261, 262)


def test_chat_template_renders_qwen_chatml(processor):
    messages = [{"role": "system", "content": "You are a web agent."},
                {"role": "user", "content": [{"type": "text", "text": "Task: buy milk\n"},
                                             {"type": "image", "image": "ep0/step0"},
                                             {"type": "text", "text": "Step 1. URL: http://x/"}]}]
    expected = ("<|im_start|>system\nYou are a web agent.<|im_end|>\n"
                "<|im_start|>user\nTask: buy milk\n<|vision_start|><|image_pad|><|vision_end|>Step 1. URL: http://x/"
                "<|im_end|>\n<|im_start|>assistant\n")
    assert processor.render(messages) == expected
    assert processor.render(messages, add_generation_prompt=False) == expected.removesuffix("<|im_start|>assistant\n")


@pytest.fixture
def qwen3vl_processor_without_torchvision(processor):
    """transformers' Qwen3VLProcessor over the same tokenizer and image processor. Its class
    check wants the torchvision video processor; switching that check off is the documented
    workaround, undone after the test."""
    from transformers import Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin
    original = ProcessorMixin.__dict__["check_argument_for_proper_class"]
    ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: None
    try:
        yield Qwen3VLProcessor(image_processor=processor.image_processor, tokenizer=processor.tokenizer,
                               video_processor=None)
    finally:
        ProcessorMixin.check_argument_for_proper_class = original


def test_encode_matches_transformers_qwen3vl_processor(processor, qwen3vl_processor_without_torchvision):
    messages = chat(1, 1)
    images = [random_image(210, 160, seed=1), random_image(96, 300, seed=2)]
    ours = processor.encode(messages, images)

    # transformers expands each <|image_pad|> of the text it is given, so it gets the
    # template's text with one pad per image, exactly what encode starts from.
    theirs = qwen3vl_processor_without_torchvision(text=[processor.render(messages)], images=images,
                                                   return_tensors="np")
    np.testing.assert_array_equal(ours["input_ids"], theirs["input_ids"][0])
    np.testing.assert_array_equal(ours["mm_token_type_ids"], theirs["mm_token_type_ids"][0])
    # our still patches (uint8) become transformers' float patches on the device
    expanded = np.asarray(still_patch_pixels(ours["pixel_values"], preset("tiny").vision))
    np.testing.assert_allclose(expanded, theirs["pixel_values"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours["image_grid_thw"], theirs["image_grid_thw"])

    assert ours["input_ids"].dtype == np.int32 and ours["mm_token_type_ids"].dtype == np.int32
    assert ours["pixel_values"].dtype == np.uint8 and ours["image_grid_thw"].dtype == np.int64
    assert ours["image_grid_thw"].tolist()[0] != ours["image_grid_thw"].tolist()[1]  # two different sizes
    assert ours["pixel_values"].shape == (ours["image_grid_thw"].prod(axis=1).sum(), 3 * 16 * 16)


def test_still_patches_follow_the_checkpoint_normalisation(tmp_path):
    """A preprocessor_config.json with other mean/std reaches the model config, and a
    model that normalises differently from its processor is refused."""
    from asyncwebrl.model.config import to_hf_dict
    from asyncwebrl.model.weights import read_config

    mean, std = (0.48, 0.45, 0.40), (0.27, 0.26, 0.28)
    processor = Processor(byte_tokenizer(), make_image_processor(64 * 64, 128 * 128, image_mean=mean, image_std=std))
    processor.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(to_hf_dict(preset("tiny"))))
    vision = read_config(tmp_path).vision
    assert vision.image_mean == mean and vision.image_std == std
    processor.check_normalisation(vision)
    with pytest.raises(ValueError, match="normalises pixels"):
        processor.check_normalisation(preset("tiny").vision)
    pixels, _ = processor.process_images([random_image(64, 96)])
    reference = processor.image_processor(images=[random_image(64, 96)], return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(np.asarray(still_patch_pixels(pixels, vision)), reference, rtol=0, atol=1e-6)


def test_processor_refuses_a_pipeline_the_model_does_not_apply():
    with pytest.raises(ValueError, match="rescale by 1/255"):
        Processor(byte_tokenizer(), Qwen2VLImageProcessorPil(do_normalize=False))


def test_image_pads_are_contiguous_runs_inside_vision_brackets(processor):
    images = [random_image(210, 160), random_image(720, 1280)]
    out = processor.encode(chat(2), images)
    ids, special = out["input_ids"], processor.special
    starts, = np.nonzero(ids == special.vision_start)
    ends, = np.nonzero(ids == special.vision_end)
    runs = [int((ids[s + 1:e] == special.image_pad).sum()) for s, e in zip(starts, ends)]
    assert runs == [e - s - 1 for s, e in zip(starts, ends)]  # nothing but pads between the brackets
    assert runs == [processor.image_tokens(210, 160), processor.image_tokens(720, 1280)]
    assert out["mm_token_type_ids"].sum() == sum(runs)


@pytest.mark.parametrize("height,width", [(210, 160), (720, 1280), (96, 300), (33, 47), (1080, 1920)])
def test_image_tokens_predicts_the_count_encode_produces(processor, height, width):
    out = processor.encode(chat(1), [random_image(height, width)])
    assert processor.image_tokens(height, width) == int(out["mm_token_type_ids"].sum()) > 0


def test_embedded_defaults_keep_screenshots_small(processor):
    assert processor.image_tokens(210, 160) == 35  # a MiniWoB screenshot
    assert processor.image_tokens(720, 1280) == 60  # a 1280x720 browser screenshot
    assert processor.image_tokens(4000, 4000) <= 64 and processor.image_tokens(8, 8) >= 4


def test_encode_without_images_gives_empty_vision_arrays(processor):
    out = processor.encode([{"role": "user", "content": "hello"}], [])
    assert out["pixel_values"].shape == (0, processor.still_patch_dim) and out["pixel_values"].dtype == np.uint8
    assert out["image_grid_thw"].shape == (0, 3) and not out["mm_token_type_ids"].any()
    assert processor.decode(out["input_ids"]) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


def test_pil_and_numpy_images_encode_alike(processor):
    from PIL import Image
    image = random_image(120, 200)
    as_array = processor.encode(chat(1), [image])
    as_pil = processor.encode(chat(1), [Image.fromarray(image)])
    for key in as_array:
        np.testing.assert_array_equal(as_array[key], as_pil[key])


def test_image_count_mismatch_is_a_clear_error(processor):
    with pytest.raises(ValueError, match="2 image parts but 1 images"):
        processor.encode(chat(1, 1), [random_image(50, 50)])
    with pytest.raises(ValueError, match="1 image parts but 0 images"):
        processor.encode(chat(1), [])


def test_literal_image_pad_in_text_is_rejected(processor):
    messages = [{"role": "user", "content": [{"type": "text", "text": "<|image_pad|>"}, {"type": "image", "image": "k"}]}]
    with pytest.raises(ValueError, match="literal"):
        processor.encode(messages, [random_image(64, 64)])


def test_encode_text_and_decode_round_trip(processor):
    ids = processor.encode_text(TEXT_WITH_SPECIALS)
    assert ids[0] == ord("C") and processor.special.image_pad in ids  # nothing added in front
    assert processor.decode(np.asarray(ids, np.int32)) == TEXT_WITH_SPECIALS


def test_processor_save_and_from_pretrained_round_trip(processor, tmp_path):
    processor.save_pretrained(tmp_path)
    reloaded = Processor.from_pretrained(str(tmp_path))
    images = [random_image(210, 160, seed=3), random_image(96, 300, seed=4)]
    before, after = processor.encode(chat(1, 1), images), reloaded.encode(chat(1, 1), images)
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])
    assert reloaded.image_processor.image_mean == processor.image_processor.image_mean
    assert reloaded.image_tokens(720, 1280) == processor.image_tokens(720, 1280)


def test_load_image_processor_reads_qwen2_style_min_max_pixels(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(
        '{"min_pixels": 3136, "max_pixels": 50176, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}')
    loaded = load_image_processor(str(tmp_path))
    made = make_image_processor(3136, 50176, patch_size=14)
    assert (loaded.size["shortest_edge"], loaded.size["longest_edge"], loaded.patch_size) == (3136, 50176, 14)
    assert loaded.get_number_of_image_patches(720, 1280) == made.get_number_of_image_patches(720, 1280)


def test_missing_checkpoint_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_tokenizer(str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        load_image_processor(str(tmp_path))


def test_works_without_torch(tmp_path):
    """The JAX side has no torch: hide it (sys.modules[name] = None makes imports fail and
    transformers report it absent) and run the embedded processor end to end."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        import numpy as np
        from transformers.utils import is_torch_available
        from asyncwebrl.model.tokenizer import Processor
        assert not is_torch_available()
        p = Processor.embedded()
        messages = [{{"role": "user", "content": [{{"type": "image", "image": "k"}}, {{"type": "text", "text": "hi"}}]}}]
        out = p.encode(messages, [np.zeros((210, 160, 3), np.uint8)])
        assert out["mm_token_type_ids"].sum() == 35, out
        p.save_pretrained({str(tmp_path)!r})
        again = Processor.from_pretrained({str(tmp_path)!r}).encode(messages, [np.zeros((210, 160, 3), np.uint8)])
        assert (again["input_ids"] == out["input_ids"]).all()
        print("ok")
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_byte_tokenizer_keeps_tool_call_pieces_whole():
    """Every fixed piece of a tool call is one token, the rest stays bytes, and the text
    decodes back exactly (including the non-ASCII bytes next to a piece)."""
    tokenizer = byte_tokenizer()
    pieces = tool_call_pieces()
    piece_ids = [tokenizer.convert_tokens_to_ids(piece) for piece in pieces]
    assert piece_ids == list(range(263, 263 + len(pieces)))
    click = format_response({}, {}, "", "", {"action": "left_click", "element_id": 12}, response_format="action")
    answer = format_response({}, {}, "", "", {"action": "answer", "text": "Zoë: 12 €"}, response_format="action")
    click_ids = tokenizer.encode(click, add_special_tokens=False)
    assert click_ids == [piece_ids[0], piece_ids[pieces.index('left_click"')],
                         piece_ids[pieces.index(', "element_id": ')], ord("1"), ord("2"),
                         piece_ids[pieces.index("}}\n</tool_call>")]]
    answer_ids = tokenizer.encode(answer, add_special_tokens=False)
    assert answer_ids[-1] == piece_ids[pieces.index('"}}\n</tool_call>')]   # the longest ending wins
    assert bytes(i for i in answer_ids[3:-1]) == "Zoë: 12 €".encode()
    for text, ids in ((click, click_ids), (answer, answer_ids)):
        assert tokenizer.decode(ids) == text


def test_tiny_model_config_agrees_with_the_byte_tokenizer():
    from asyncwebrl.model.config import preset

    config = preset("tiny")
    ids = special_ids(byte_tokenizer())
    assert config.text.vocab_size == BYTE_VOCAB_SIZE
    assert (config.image_token_id, config.video_token_id) == (ids.image_pad, ids.video_pad)
    assert (config.vision_start_token_id, config.vision_end_token_id) == (ids.vision_start, ids.vision_end)


def test_response_text_can_leave_special_tokens_out(processor):
    """A model may write <|image_pad|> or <|im_end|> mid-response; the policy's text drops
    them, so a later prompt holding that text gets no placeholder without an image."""
    ids = processor.encode_text("click<|image_pad|> 3<|vision_start|><|im_end|>")
    assert processor.decode(ids) == "click<|image_pad|> 3<|vision_start|><|im_end|>"
    assert processor.decode(ids, skip_special_tokens=True) == "click 3"
