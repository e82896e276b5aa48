"""The embedded model's warm start (benchmarks/warm_start.py): the small preset with the
tokenizer fitted to the local web, text observations, element ids, the browser-free driver
for demonstrations and held-out checks. The keys are configs/default.py's.
"""

from configs import default


def get_config():
    config = default.get_config()
    config.model.preset = "small"
    config.model.tokenizer = "assets/embedded"
    config.agent.observation = "text"
    config.agent.interaction = "set_of_marks"
    # Memory, then the tool call: half the held-out tasks need a fact read pages earlier, which
    # the tool call alone cannot carry (31 of the 60 closed-loop tasks)
    config.agent.response_format = "memory+action"
    config.agent.text_budget = 768
    config.browser.driver = "http"
    config.browser.pages = 32  # episodes interleaved on the browser-free driver
    # text-only prompts: no screenshots to encode
    config.sampler.max_images = 0
    config.sampler.capacity = 1536
    config.sampler.prompt_buckets = (512, 1536)
    config.sampler.max_new_tokens = 320  # the teacher's longest response is ~280 tokens (tests/test_demonstrations.py)
    config.sampler.slots = 32
    config.learner.row_length = 1536
    config.learner.rows_per_microbatch = 16
    config.learner.images_per_microbatch = 0
    config.sft.learning_rate = 1e-3
    config.sft.rows_per_step = 128
    config.sft.steps = 4000
    return config
