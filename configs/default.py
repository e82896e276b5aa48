"""The embedded default: local web sites, real headless Chromium, CPU.

Override any key on the command line, e.g.
    python main.py --mode=eval --config.policy=oracle --config.eval.num_tasks=60
"""

from ml_collections import config_dict


def get_config() -> config_dict.ConfigDict:
    config = config_dict.ConfigDict()
    config.seed = 0
    # Acting policy: model | oracle | random (oracle and random need no model). The default
    # stays oracle until the trainer (RL issue) produces a trained model.
    config.policy = "oracle"

    config.model = config_dict.ConfigDict()
    config.model.preset = "tiny"  # used when no checkpoint path is given (random weights)
    config.model.path = ""  # a Hugging Face Qwen3-VL directory (config.json + safetensors)
    config.model.dtype = "float32"  # bfloat16 on accelerators

    config.sampler = config_dict.ConfigDict()
    config.sampler.slots = 4  # requests decoded together (= eval.concurrency is enough)
    config.sampler.capacity = 8192  # cache tokens per slot: prompt + response (byte tokens: ~1 per character)
    config.sampler.prompt_buckets = (1024, 2048, 4096, 8192)  # prefill lengths compiled
    config.sampler.max_images = 2  # screenshots per prompt (history 1 -> 2)
    config.sampler.patches_per_image = 256  # embedded processor: at most 256x256 px = 256 patches
    config.sampler.max_new_tokens = 384

    config.tasks = config_dict.ConfigDict()
    config.tasks.source = "local"  # the embedded local web
    config.tasks.train_sites_per_variant = 16  # x 4 kinds x 2 train variants, ~18 tasks each
    config.tasks.test_sites_per_variant = 6  # x 4 kinds x 1 test variant

    config.agent = config_dict.ConfigDict()
    config.agent.interaction = "set_of_marks"  # coordinates | set_of_marks
    config.agent.viewport_width = 1280
    config.agent.viewport_height = 720

    config.browser = config_dict.ConfigDict()
    config.browser.executable_path = ""  # "" = find one (see asyncwebrl/rollout/browser.py)
    config.browser.pages_per_browser = 4  # about 4 saturate 2 cores (MACHINE_NOTES.md)
    config.browser.timeout_s = 15.0  # one browser operation
    config.browser.step_deadline_s = 30.0  # a whole step; a page stuck longer is abandoned (crashed)
    config.browser.recycle_after = 200  # episodes per browser before it is replaced

    config.eval = config_dict.ConfigDict()
    config.eval.split = "test"  # train | test
    config.eval.num_tasks = 60  # spread evenly over easy / medium / hard
    config.eval.concurrency = 4  # browser pages at once
    config.eval.temperature = 0.0  # model policy: greedy

    config.train = config_dict.ConfigDict()
    config.train.num_demo_tasks = 24  # oracle demonstrations for the supervised warm start
    return config
