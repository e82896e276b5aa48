"""The paper's Thinking run: configs/instruct.py with Qwen3-VL-8B-Thinking (same dimensions;
point --config.model.path at the Thinking checkpoint)."""

from configs import instruct


def get_config():
    config = instruct.get_config()
    config.model.preset = "8b-thinking"
    return config
