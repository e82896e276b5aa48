"""The paper's main run (docs/algorithm.md#training-hyperparameters): Qwen3-VL-8B-Instruct,
WebGym tasks, coordinates mode, asynchronous GRPO with decoupled importance sampling,
1/k (k = 10), eta = 2.

    python main.py --config=configs/instruct.py --config.model.path=/ckpt/Qwen3-VL-8B-Instruct \\
        --config.tasks.path=/data/webgym/train.jsonl --config.tasks.test_path=/data/webgym/test_ood.jsonl \\
        --config.judge.base_url=http://judge:8000/v1 --config.judge.model=JUDGE --config.judge.api_key_env=JUDGE_KEY

On one GPU (sampler and learner sharing it): `--config=configs/instruct.py:one_gpu`, the
bf16 weights and moments recipe that fits it (and loses updates below bf16's resolution).

Ablations are config arguments, e.g. --config.loss.normalizer=traj, --config.loss.decoupled=False,
--config.loss.kind=raft, --config.agent.memory=compressive,
--config.agent.train_step_limits=(20,40,60).
On several hosts: launch/gpu_hosts.sh or launch/tpu_pod.sh with the same flags (README,
"Several processes and hosts"); rl.groups_per_batch is split between the processes.
The Pallas kernels split over several devices (rows over data x fsdp, heads over tensor:
asyncwebrl/model/kernel_mesh.py); measured on one GPU only so far.
"""

from configs import default


def get_config(variant: str = ""):
    """variant "" (a host of several GPUs: float32 master weights and moments, bf16
    compute) or "one_gpu" (`--config=configs/instruct.py:one_gpu`: bf16 weights and moments)."""
    if variant not in ("", "one_gpu"):
        raise ValueError(f"configs/instruct.py: unknown variant {variant!r}; use no variant or 'one_gpu'")
    config = default.bare()
    config.model.preset = "8b"
    config.model.path = ""                      # a Hugging Face Qwen3-VL-8B-Instruct directory
    # The learner keeps float32 master weights and float32 Adam moments, sharded over its
    # devices (mesh.fsdp = all of them), and computes in bf16; the sampler decodes from a
    # bf16 copy. 8B: 32 GB of weights + 64 GB of moments + 32 GB of gradients, over the
    # learner's devices: 7 H200s hold ~18 GB each of it
    config.model.dtype = "float32"
    config.model.compute_dtype = "bfloat16"
    config.optimizer.moment_dtype = "float32"
    config.sampler.param_dtype = "bfloat16"
    if variant == "one_gpu":
        # One GPU for sampler and learner: bf16 weights and first moments are what fits an
        # 8B learner beside its sampler (BENCHMARKS.md, learner), and are unsound at the
        # paper's learning rate: a 5e-6 step is below bf16's resolution on most weights
        config.model.dtype = "bfloat16"
        config.model.compute_dtype = ""
        config.optimizer.moment_dtype = "bfloat16"
        config.sampler.param_dtype = ""
    config.model.attention = "pallas"
    # an 8B update compiles for ~45 s on one GPU (BENCHMARKS.md): later runs read it back
    config.compile_cache = "~/.cache/asyncwebrl/jax"
    config.model.remat = "full"                 # 16k-token rows of an 8B model (BENCHMARKS.md, learner)

    config.tasks.source = "webgym"
    config.tasks.path = ""                      # WebGym JSONL (task_id, task_name, website, ...)
    config.tasks.test_path = ""                 # the OOD test split
    config.judge.base_url = ""                  # OpenAI-compatible chat endpoint of the rubric judge
    config.judge.model = ""

    config.agent.interaction = "coordinates"
    config.agent.system_message = True          # the checkpoint reads its instructions
    # Memory, Progress, Intention, Action, tool call (docs/algorithm.md#response-format)
    config.agent.response_format = "memory"
    config.agent.train_step_limits = (10, 20, 30)
    config.agent.test_step_limits = (30, 50, 70)

    config.sampler.slots = 64
    config.sampler.capacity = 16384             # tokens per step sequence
    config.sampler.prompt_buckets = (2048, 4096, 8192, 16384)
    config.sampler.max_new_tokens = 4096
    config.sampler.patches_per_image = 3600     # 1280x720 -> 44 x 80 = 3,520 patches (720 rounds to 704)

    config.browser.pages = 256
    config.browser.pages_per_browser = 8

    config.train.max_updates = 300
    config.train.checkpoint_every = 5
    config.sft.steps = 0                        # the Instruct checkpoint already acts

    config.rl.eta = 2
    config.rl.group_size = 8
    config.rl.groups_per_batch = 16
    config.rl.max_running_groups = 64
    config.rl.dynamic_sampling = True
    config.rl.temperature = 1.0

    config.loss.kind = "grpo"
    config.loss.normalizer = "const"
    config.loss.k = 10.0
    config.loss.decoupled = True

    config.optimizer.learning_rate = 5e-6
    config.optimizer.weight_decay = 0.01
    config.optimizer.max_grad_norm = 1.0
    config.optimizer.warmup_steps = 30          # ~1.7% of 300 updates x 3 epochs x 2 minibatches
    config.optimizer.final_lr_fraction = 0.1

    # every device of the host; the first serves the sampler, the others the learner (one
    # device: they share it)
    config.devices.count = -1
    config.devices.sampler = 1
    config.learner.row_length = 16384
    config.learner.rows_per_microbatch = 1
    # a 16k sequence holds ~4 steps of 2-5k tokens; consecutive steps share a screenshot, so 6
    # images fit them (benchmarks/packing.py: fill 0.93, against 0.23 with 2 images)
    config.learner.images_per_microbatch = 6
    config.learner.epochs = 3
    config.learner.minibatches = 2

    config.eval.num_tasks = 1167                # the OOD test split
    config.eval.temperature = 0.6
    return config
