"""MiniWoB++ from the `miniwob` package, served by the local server: 160x210 pages,
coordinates mode, the page's own reward (success = raw reward > 0).

    python main.py --mode=eval --config=configs/miniwob.py --config.policy=random --config.eval.num_tasks=50
    python main.py --mode=eval --config=configs/miniwob.py --config.policy=scripted      # a few pages solved
    python main.py --config=configs/miniwob.py --config.train.max_updates=20             # RL, tiny model

The page list (asyncwebrl/envs/miniwob.py has all 125, grouped by how many actions a
solution takes) mixes single actions with short and long multi-step pages; pass
--config.miniwob.tasks=all or a comma-separated list to change it. Evaluation cycles over
the pages, so eval.num_tasks=50 gives each of these ten pages five seeds.
"""

from configs import default


def get_config():
    config = default.bare()
    config.policy = "random"
    config.tasks.source = "miniwob"
    config.miniwob.tasks = ",".join([
        "click-button", "click-dialog", "click-tab", "focus-text",                   # one action
        "click-button-sequence", "enter-text", "enter-password", "login-user",       # 2-4 actions
        "click-checkboxes", "email-inbox",                                            # longer
    ])
    config.eval.num_tasks = 50

    config.agent.interaction = "coordinates"  # many pages' targets are plain divs and spans
    config.agent.viewport_width = 160  # the task area of every page (the reward panel is off screen)
    config.agent.viewport_height = 210
    config.agent.train_step_limits = (5, 10, 20)  # easy / medium / hard = 1 / 2-4 / 4+ actions
    config.agent.test_step_limits = (5, 10, 20)
    # The default's 4,096-token slots: byte-token prompts reach 3.1k on some pages by step 2
    # (3,072-token slots refused 2 of 6 training episodes in a trial run).

    config.sft.steps = 0  # no demonstrations: the oracle only knows the local web
    config.rl.group_size = 4
    config.rl.dynamic_sampling = True  # one-click pages give groups of all-1 or all-0 often
    return config
