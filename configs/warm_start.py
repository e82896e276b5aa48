"""The embedded model's warm start (benchmarks/warm_start.py): the embedded default's agent
(configs/default.py: page text, element ids, the Memory line then the tool call) trained
from random weights of the small preset with the fitted tokenizer, on the browser-free
driver for demonstrations and held-out checks.
"""

from configs import default


def get_config():
    config = default.get_config()
    config.model.path = ""                     # from scratch (benchmarks/warm_start.py --init: a checkpoint)
    config.browser.driver = "http"
    config.browser.pages = 32                  # episodes interleaved on the browser-free driver
    config.sampler.slots = 32
    config.sft.learning_rate = 1e-3
    config.sft.rows_per_step = 128
    config.sft.steps = 4000
    config.learner.rows_per_microbatch = 16
    # the studies built on this file compare arms at equal updates, not equal minutes
    config.train.max_rl_minutes = 0.0
    return config
