"""The embedded default: the project's own warm start (assets/warm_start, a 6.1M-parameter
Qwen3-VL-shaped model that reads pages as text, its last stage taught by an imperfect teacher
that leaves the last fact out of 60% of its answers), local web sites, real headless Chromium, CPU.
`python main.py` evaluates it on held-out sites, trains it with asynchronous GRPO
(decoupled importance sampling, the constant 1/k step normaliser, eta 2, dynamic
sampling), and evaluates it again: RL unlearns the habit (BENCHMARKS.md "Learning you
can see").

    python main.py                                                   # the embedded default
    python main.py --config.model.path=""                           # the same from random weights
    python main.py --config=configs/default.py:bare                 # the bare system: random tiny model, screenshots
    python main.py --mode=eval --config.policy=oracle --config.eval.num_tasks=60
    python main.py --config.rl.eta=0 --config.loss.normalizer=traj  # ablations

Every key is defined in `bare()`, with the values of the bare system (a random tiny model
acting on screenshots) that configs/instruct.py and configs/miniwob.py start from;
`get_config()` changes only what the warm-started agent needs.
"""

from ml_collections import config_dict


def get_config(variant: str = "") -> config_dict.ConfigDict:
    """variant "" (the embedded default) or "bare" (`--config=configs/default.py:bare`)."""
    if variant == "bare":
        return bare()
    if variant:
        raise ValueError(f"configs/default.py: unknown variant {variant!r}; use no variant or 'bare'")
    return warm_started(bare())


def warm_started(config: config_dict.ConfigDict) -> config_dict.ConfigDict:
    """The agent of assets/warm_start as it was trained (benchmarks/warm_start.py; its README
    says why its last stage's teacher cuts 60% of its answers short of the last fact): page text
    cut at 512 tokens, a Memory line then the tool call naming an element by its label (or by
    its id where the instruction does not name it); rows of 1,024 tokens."""
    config.model.path = "assets/warm_start"
    config.model.preset = "small"              # with model.path="": random weights of this size
    config.model.tokenizer = "assets/embedded"   # ... and the fitted tokenizer
    config.agent.observation = "text"
    # by label: the link the instruction names is then a copy of its words, which the model
    # learns; by [id] it picked that link among its siblings near chance (BENCHMARKS.md
    # "Clicking by label"), 41 of 76 held-out failures
    config.agent.interaction = "labels"
    # Memory, then the tool call: half the held-out tasks need a fact read pages earlier, which
    # the tool call alone cannot carry (31 of the 60 closed-loop tasks)
    config.agent.response_format = "memory+action"
    config.agent.text_budget = 512
    config.sampler.slots = 8
    config.sampler.capacity = 1024
    # A prompt is at most 1,024 - 320 = 704 tokens (median 386 on the held-out tasks), and a
    # prefill pads it to the next bucket: four buckets waste less than (512, 1024) did
    # (greedy evaluation 0.90x the wall, the same episodes: BENCHMARKS.md "Prefill buckets")
    config.sampler.prompt_buckets = (256, 384, 512, 768)
    config.sampler.max_images = 0              # text-only prompts: no screenshots to encode
    config.sampler.max_new_tokens = 320        # the teacher's longest response is ~280 tokens
    # About half of a group's step rows are exact copies (benchmarks/merged_rows.py), and on a
    # CPU a ~700-token prompt's prefill costs ~10x its response's decode: keep the last 16
    # prompts' prefills. Per entry (6 layers x 4 KV heads x 32 dims, keys and values): 3.1 MB
    # in float32 for a 512 bucket, 4.7 MB for 768 (at most ~75 MB in all)
    config.sampler.prefill_cache = 16
    config.learner.row_length = 1024
    config.learner.rows_per_microbatch = 8
    config.learner.images_per_microbatch = 0
    # On 2 CPU cores recomputing all but the SwiGLU gate and up projections trains faster than
    # keeping every activation: 7.8 s against 9.3 s an update of 16 rows of 1,024 (writing and
    # reading the kept activations costs more; BENCHMARKS.md "Attention in the XLA path")
    config.model.remat = "mlp"
    config.browser.pages = 8
    config.sft.steps = 0                       # the checkpoint is the warm start
    config.eval.num_tasks = 60                 # 20 per level: a 95% interval of about +-10 points
    # Held-out sites of the layouts RL trains on (new names, content and tasks on sites no
    # training ever saw), as the paper's held-out split is new sites of the same web; RL on
    # training sites can move it. --config.eval.split=test: sites of a layout training never
    # shows, a harder shift the warm start does not bridge (18% there, 53% here)
    config.eval.split = "unseen"
    # Groups of 8: the warm start's outcome on a task hardly varies at temperature 1 (in groups
    # of 4, 23 of 24 had equal rewards and were dropped; BENCHMARKS.md "RL from the shipped warm start")
    config.rl.group_size = 8
    config.rl.groups_per_batch = 1
    config.rl.max_running_groups = 2           # 16 episodes queued for the 8 pages
    config.rl.dynamic_sampling = True
    # At most 8 updates of one informative group each, at a constant learning rate of 1e-4, in at
    # most 7 minutes of RL (the evaluations and start-up take ~7.5 minutes). Chosen on tuning seeds 3-9,
    # never the reported 0-2 (BENCHMARKS.md "RL's schedule, chosen on other seeds"): 8 constant
    # steps gained >= +10 on 6 of 7 (mean +16.0); the earlier 6 cosine-decayed ones on 5 of 7
    # (mean +11.0, one seed -3.3); 6 constant ones broke the tool calls in 2 of 4
    config.optimizer.final_lr_fraction = 1.0
    config.train.max_updates = 8
    config.train.max_rl_minutes = 7.0
    return config


def bare() -> config_dict.ConfigDict:
    """Every key, with the values of the bare system: a random tiny model on screenshots."""
    config = config_dict.ConfigDict()
    config.seed = 0
    # Acting policy of --mode=eval: model | oracle | random | scripted (no model needed but for
    # `model`; the oracle knows the local tasks, `scripted` a few MiniWoB++ pages).
    # Training always acts with the model.
    config.policy = "oracle"
    # JAX's persistent compilation cache: programs compiled by an earlier run with the same
    # shapes and versions are read from this directory (asyncwebrl/runtime/compile_cache.py),
    # e.g. "~/.cache/asyncwebrl/jax"; "" = off; $JAX_COMPILATION_CACHE_DIR, when set, wins.
    # Off here: the embedded default's RL results were measured without it, and a run that
    # starts learning sooner trains on other groups (BENCHMARKS.md, "Compile time")
    config.compile_cache = ""

    config.model = config_dict.ConfigDict()
    config.model.preset = "tiny"  # used when no checkpoint path is given (random weights)
    config.model.path = ""  # a Hugging Face Qwen3-VL directory (config.json + safetensors)
    # Without model.path: the tokenizer of the randomly initialised preset, a directory with
    # tokenizer.json (e.g. assets/embedded, fitted to the local web); "" = the byte tokenizer
    config.model.tokenizer = ""
    # refuse a model.path whose agent.json (benchmarks/warm_start.py writes it) records other
    # agent.observation / interaction / response_format than the run's: a checkpoint that clicks
    # by label, run under set_of_marks, has every such click refused (asyncwebrl/runtime/agent_record.py)
    config.model.check_agent = True
    config.model.checkpoint = ""  # --mode=eval: a training run's W/checkpoints (latest step's weights)
    config.model.checkpoint_step = -1  # ... which of them: the update it was saved at (-1 = the latest readable)
    config.model.dtype = "float32"  # parameter storage; bfloat16 on accelerators
    config.model.compute_dtype = ""  # the matmuls' dtype ("" = model.dtype): bfloat16 over float32 parameters is mixed precision
    config.model.attention = "xla"  # xla | pallas (GPU kernels: flash attention, per-slot decode)
    # the residual stream between layers (text and vision): float32 | bfloat16. Matters under
    # bf16 compute: a bf16 stream rounds every layer's sum, and the sampler's decode and the
    # learner's forward round it apart (a 28-layer model's mean |log-prob gap| 2.8x larger:
    # BENCHMARKS.md "Sampler/learner log-prob gap"). float32 costs the learner 2 bytes more
    # per token and hidden unit in each layer's saved input (8B, a 16k-token row: +4.5 GiB)
    config.model.residual_dtype = "float32"
    # activations the learner's backward recomputes instead of keeping: none | full | dots | mlp
    # (asyncwebrl/model/qwen3_vl.py); only training is affected
    config.model.remat = "none"

    config.sampler = config_dict.ConfigDict()
    config.sampler.slots = 4  # requests decoded together (= browser.pages is enough)
    # cache tokens per slot: prompt + response. Byte tokens, ~1 per character: a set-of-marks
    # prompt is 1.8k-3.6k; longer ones are refused (the episode ends as crashed, counted)
    config.sampler.capacity = 4096
    config.sampler.prompt_buckets = (2048, 4096)  # prefill lengths compiled
    # requests whose prompts fit one bucket prefilled together, up to this many per call
    # (for GPUs: fewer calls); 1 (one at a time) on a CPU, where the work grows with the rows
    config.sampler.prefill_rows = 1
    # Prefill cache: the last this many distinct prompts (same token ids, same weights version;
    # text-only, fitting one bucket) keep their prefill's KV rows and last logits, so an exact
    # copy of one (a group's episodes often send the same step) is written into its slot and
    # only its first token is sampled afresh; a publish empties it. 0 = off. Per entry:
    # 2 x layers x kv_heads x head_dim x bucket values (the bucket's KV rows) + the vocabulary's
    # logits. Both prefill paths (prefill_rows 1 or more) use it.
    config.sampler.prefill_cache = 0
    # Decode steps per jitted call while the host has nothing to do in between (no publish
    # pending; with requests queued the call ends at the first finished slot): every call is a
    # host round trip (a few ms on a GPU, launch-bound for small models), paid once per 8 tokens
    # here. A publish waits for the call's end (at most this many steps); 1 = one step per call.
    config.sampler.decode_steps = 8
    # The sampler's copy of the weights: "" = model.dtype; "bfloat16" under float32 learner
    # master weights (configs/instruct.py) halves it and the bytes every decode step reads
    config.sampler.param_dtype = ""
    config.sampler.max_images = 2  # screenshots per prompt (history 1 -> 2)
    config.sampler.patches_per_image = 256  # embedded processor: at most 256x256 px = 256 patches
    # An "action" response: a click is 5-6 tokens (the tool call's fixed pieces are single tokens,
    # asyncwebrl/model/tokenizer.py), a typed text or an answer 4-7 + its bytes; 3.5% of the oracle's
    # responses (long name lists) run past 192. A "memory" response is 250-800.
    config.sampler.max_new_tokens = 192

    config.tasks = config_dict.ConfigDict()
    # asyncwebrl/envs SOURCES: local (the embedded web) | webgym (task files, LLM judge) | miniwob
    config.tasks.source = "local"
    config.tasks.train_sites_per_variant = 16  # x 4 kinds x 2 train variants, ~18 tasks each
    config.tasks.test_sites_per_variant = 6  # x 4 kinds x 1 test variant
    # local: the tiers RL trains on (asyncwebrl/web/tasks.py TIERS): "levels" (the three
    # difficulty levels, what every evaluation measures) and "short" (one named link among its
    # siblings, then a fact or two: "easy" by their facts); evaluations stay on the levels
    config.tasks.train_tiers = ("levels",)
    config.tasks.path = ""  # webgym: the training task file (JSONL)
    config.tasks.test_path = ""  # webgym: the test task file (e.g. the OOD split)
    config.tasks.levels = ("easy", "medium", "hard")  # webgym: difficulty levels kept

    # The LLM rubric judge of webgym tasks: an OpenAI-compatible chat-completions endpoint.
    config.judge = config_dict.ConfigDict()
    config.judge.base_url = ""  # e.g. http://judge-host:8000/v1
    config.judge.model = ""
    config.judge.api_key_env = ""  # the NAME of the environment variable holding the key
    config.judge.concurrency = 8
    config.judge.timeout_s = 60.0
    config.judge.retries = 3
    config.judge.select_screenshots = False

    # MiniWoB++ pages (tasks.source=miniwob; configs/miniwob.py). A task is a page and a seed.
    config.miniwob = config_dict.ConfigDict()
    config.miniwob.tasks = "click-button,focus-text,enter-text,login-user"  # page names, or "all"
    config.miniwob.train_tasks = 1000  # training tasks: cycling over the pages, a new seed each round
    config.miniwob.episode_seconds = 600.0  # replaces the page's own 10-30 s clock (a model thinks slower)

    config.sandbox = config_dict.ConfigDict()
    config.sandbox.allow_hosts = ""  # webgym: HOST:PORT,... reachable even if loopback/private (a mirror)

    config.agent = config_dict.ConfigDict()
    config.agent.interaction = "set_of_marks"  # coordinates | set_of_marks | labels (rollout/response.py INTERACTIONS)
    # What the agent is shown of a page: screenshot | text (the whole page in reading order,
    # elements as [id] role "label" lines: asyncwebrl/web/page_text.py) | text+screenshot.
    # Text observations name elements by id or label: interaction must be set_of_marks or labels.
    config.agent.observation = "screenshot"
    config.agent.text_budget = 1024  # tokens of page text shown per step; a longer page is cut, with a note
    config.agent.viewport_width = 1280
    config.agent.viewport_height = 720
    # step limits (easy, medium, hard), shorter than the paper's 10/20/30 (train) and 30/50/70
    # (test; docs/algorithm.md#step-limits), which would take hours on 2 cores with an
    # untrained tiny model; the horizon ablation doubles the training ones
    config.agent.train_step_limits = (6, 10, 14)
    config.agent.test_step_limits = (6, 10, 14)
    # A local task whose oracle plan needs more steps than its level's limit gets 1.5x the
    # plan's moves (at least 2 more), so no task is posed that cannot be finished in time;
    # False keeps the level limits as they are (short test runs)
    config.agent.step_limits_fit_plans = True
    config.agent.memory = "additive"  # additive | compressive (the memory-prompt ablation)
    # The system message (tool, actions, response format; ~1.1k byte tokens). Off for the tiny
    # model trained from scratch, which cannot read it: it would be a third or more of every
    # prompt to prefill and train on (BENCHMARKS.md, "Embedded default"). A pretrained
    # checkpoint needs it.
    config.agent.system_message = False
    # What a response holds: "memory" = Memory, Progress, Intention, Action, then the tool call
    # (docs/algorithm.md#response-format; the oracle's are 270-800 bytes, tool call last);
    # "action" = the tool call alone (100-150 bytes), so the tiny model's responses fit
    # sampler.max_new_tokens and end in an action. Memory-drift metrics need "memory".
    config.agent.response_format = "action"

    config.browser = config_dict.ConfigDict()
    # chromium: real headless browsers (the system of record); http: the browser-free driver of the
    # local web (asyncwebrl/rollout/http_tab.py: text observations only, no browser needed, ~100x faster)
    config.browser.driver = "chromium"
    config.browser.executable_path = ""  # "" = find one (see asyncwebrl/rollout/browser.py)
    config.browser.pages = 4  # episodes at once (browser pages), separate from sampler slots
    config.browser.pages_per_browser = 4  # about 4 saturate 2 cores (MACHINE_NOTES.md)
    config.browser.timeout_s = 15.0  # one browser operation
    config.browser.step_deadline_s = 30.0  # a whole step, an episode's opening, a launch; longer is crashed
    config.browser.recycle_after = 200  # episodes per browser before it is replaced

    # Where screenshots live while their keys travel (asyncwebrl/rollout/screenshots.py):
    # "memory", or "file" under screenshots.path (a disk, or a directory all hosts share:
    # keys are kept apart under host<i>/<phase>/)
    config.screenshots = config_dict.ConfigDict()
    config.screenshots.driver = "memory"
    config.screenshots.path = ""

    config.eval = config_dict.ConfigDict()
    config.eval.split = "test"  # train | unseen (new sites of the training layouts) | test (unseen layouts)
    config.eval.num_tasks = 6  # spread evenly over easy / medium / hard (0: no evaluation)
    config.eval.temperature = 0.0  # model policy: greedy
    # episodes per evaluated task: > 1 (at a temperature > 0) adds pass@k and the share of
    # tasks whose episodes disagree, the groups RL could learn from (eval.json "samples")
    config.eval.samples = 1
    # top-p truncation of evaluation samples (1.0: none). Below 1, pass@k asks whether the
    # policy has alternatives it is unsure between, not only tail tokens that break a copy.
    # RL always samples the whole distribution: the learner scores that one.
    config.eval.top_p = 1.0

    # -- training (python main.py) -------------------------------------------------------
    config.train = config_dict.ConfigDict()
    config.train.max_updates = 3  # RL updates (learner versions published)
    # minutes of RL after which no new update starts (the one in progress finishes), and the run
    # goes on to its evaluation with the updates done; 0: no limit. It bounds a run whose
    # groups are slow to disagree (a confident policy leaves most groups uniform)
    config.train.max_rl_minutes = 0.0
    # the split RL draws its tasks from; "eval" = the very tasks evaluated, a check that RL can
    # fit the tasks it trains on (their before -> after is then not a held-out result)
    config.train.split = "train"
    config.train.checkpoint_every = 1  # updates between checkpoints (and one on SIGTERM)
    config.train.keep_checkpoints = 2
    # True: a workdir whose metrics.jsonl records RL updates but which holds no checkpoint
    # starts again from scratch (with a warning); False: such a run refuses to start
    config.train.restart = False
    # write W/fingerprint.<process>, a hash of the final global parameters (equal on every
    # process of a multi-process run; launch/local_multiprocess.sh turns it on)
    config.train.fingerprint = False

    config.sft = config_dict.ConfigDict()  # the supervised warm start on oracle demonstrations
    config.sft.steps = 24  # 0 = start RL from the model as loaded
    config.sft.demo_tasks = 24  # training tasks the oracle demonstrates
    config.sft.rows_per_step = 2
    config.sft.learning_rate = 2e-3
    config.sft.warmup_steps = 0  # linear warm-up before the cosine decay (from random weights)

    config.rl = config_dict.ConfigDict()
    config.rl.eta = 2  # staleness bound in versions; 0 = synchronous RL
    config.rl.group_size = 3  # episodes per task group (G)
    config.rl.groups_per_batch = 1  # informative groups per update (B; split evenly over processes)
    config.rl.max_running_groups = 2  # task groups in flight at once (per process)
    # Admit no more groups than the learner takes in time (asyncwebrl/runtime/groups.py): groups
    # that finish early wait, growing a version older per update. False: only the eta gate.
    config.rl.pace_admission = True
    # Dynamic sampling drops groups whose rewards are all equal (no signal). Off here: the
    # tiny warm-started policy rarely succeeds, and waiting for informative groups would
    # stall the embedded run; instruct.py / thinking.py keep it on, as the paper does.
    config.rl.dynamic_sampling = False
    # Which task a new group runs: uniform (over levels, then tasks) | learnable (over levels,
    # then templates by the chance that a group of them has mixed outcomes: asyncwebrl/runtime/groups.py)
    config.rl.task_sampling = "uniform"
    # What the advantages are made of: success (the judge's binary reward, the paper's) | facts
    # (the share of the task's facts the episode got right, 0 for an answer breaking the judge's
    # rules: episodes failing alike differ; GRPO only). Reported success stays the binary reward
    config.rl.reward = "success"
    config.rl.temperature = 1.0  # sampling temperature in training (the learner's log-probs use it too)
    config.rl.relaunch_browsers_each_round = False  # the WebGym-style synchronous baseline

    config.loss = config_dict.ConfigDict()
    config.loss.kind = "grpo"  # grpo | raft (RAFT++: successes only, 1/T)
    config.loss.normalizer = "const"  # const (A/k) | traj (A/|tau|)
    config.loss.k = 10.0
    config.loss.decoupled = True  # False: the coupled baseline (pi_prox := pi_behave)
    config.loss.eps = 0.2
    config.loss.eps_high = 0.2
    config.loss.dual_clip = 3.0
    config.loss.behave_cap = 5.0

    config.optimizer = config_dict.ConfigDict()
    config.optimizer.learning_rate = 1e-4  # the paper's 5e-6 is for an 8B model from a good start
    config.optimizer.weight_decay = 0.01
    config.optimizer.b1 = 0.9
    config.optimizer.b2 = 0.999
    config.optimizer.max_grad_norm = 1.0
    config.optimizer.warmup_steps = 0
    config.optimizer.final_lr_fraction = 0.1
    # Adam's first moment (the second follows the parameters' dtype, model.dtype). float32
    # with float32 parameters is the sound recipe at small learning rates: 5e-6 steps on
    # weights of ~1e-2 fall below bfloat16's resolution (8 bits of mantissa), so bfloat16
    # parameters and moments (configs/instruct.py:one_gpu, to fit an 8B learner beside its
    # sampler on one GPU) lose updates
    config.optimizer.moment_dtype = "float32"

    # Devices (docs/architecture.md#devices-and-sharding), per host: the first `count`
    # (-1 = all); of those the first `sampler` serve this host's sampler and the rest the
    # learner (0 = both share every one). The learner's mesh spans the learner devices of
    # every host (asyncwebrl/distributed.py); its axes: data x fsdp x tensor, one may be -1 (fill).
    config.devices = config_dict.ConfigDict()
    config.devices.count = 1  # the embedded default: one CPU device
    config.devices.sampler = 0
    config.mesh = config_dict.ConfigDict()
    config.mesh.data = 1
    config.mesh.fsdp = -1
    config.mesh.tensor = 1

    config.learner = config_dict.ConfigDict()
    config.learner.row_length = 4096  # tokens per packed row: >= sampler.capacity (any step fits)
    config.learner.rows_per_microbatch = 1
    config.learner.images_per_microbatch = 4
    config.learner.epochs = 1
    config.learner.minibatches = 1
    # identical steps (the same prompt, response and versions; in a group of episodes of one
    # task most first moves are) trained as one row with their summed advantage: exact for
    # every loss kind, and the learner's work falls with the copies (BENCHMARKS.md)
    config.learner.merge_duplicates = True
    return config
