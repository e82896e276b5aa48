# The RL variants of the schedule study (BENCHMARKS.md "RL's schedule, chosen on other seeds"),
# main.py flags by letter, spelt out against today's default (which is E since stop 59; the study
# ran against stop 58's, which was A); sourced by sweep_gpu.sh and local_queue.sh.
#   A  stop 58's default: 6 updates, lr 1e-4 cosine to 1e-5, one informative group of 8 per update
#   B  6 updates, lr 1e-4 constant          C  6 updates, lr 2e-4 constant
#   E  8 updates, lr 1e-4 constant (the default since stop 59, there with 7 minutes of RL at most)
#   G  4 updates of 2 groups, lr 1e-4 constant (not run)
#   F  A with rl.reward=facts (partial credit)      H  B with rl.reward=facts
SIX="--config.train.max_updates=6 --config.train.max_rl_minutes=8"
declare -A FLAGS=(
  [A]="$SIX --config.optimizer.final_lr_fraction=0.1"
  [B]="$SIX --config.optimizer.final_lr_fraction=1.0"
  [C]="$SIX --config.optimizer.final_lr_fraction=1.0 --config.optimizer.learning_rate=2e-4"
  [E]="--config.optimizer.final_lr_fraction=1.0 --config.train.max_updates=8 --config.train.max_rl_minutes=8"
  [G]="--config.optimizer.final_lr_fraction=1.0 --config.rl.groups_per_batch=2 --config.train.max_updates=4 --config.train.max_rl_minutes=8"
  [F]="$SIX --config.optimizer.final_lr_fraction=0.1 --config.rl.reward=facts"
  [H]="$SIX --config.optimizer.final_lr_fraction=1.0 --config.rl.reward=facts")
