#!/bin/bash
# The sweep's variants on this 2-core VM, browser-free (greedy evaluation gives the same episodes
# as in Chromium: seed 3's start 36.7%, 8 action errors, either driver), one run at a time, from
# the answers-only stage 5 (runs/cpu_ans/checkpoint). RUNS="B:3 A:3 ..." (variant:seed). Variants as
# benchmarks/results/rl-lr/sweep_gpu.sh, and F: rl.reward=facts (partial credit), H: F at a constant lr.
cd "$(dirname "$0")/../../.."
declare -A FLAGS=(
  [A]=""
  [B]="--config.optimizer.final_lr_fraction=1.0"
  [C]="--config.optimizer.final_lr_fraction=1.0 --config.optimizer.learning_rate=2e-4"
  [E]="--config.optimizer.final_lr_fraction=1.0 --config.train.max_updates=8"
  [G]="--config.optimizer.final_lr_fraction=1.0 --config.rl.groups_per_batch=2 --config.train.max_updates=4"
  [F]="--config.rl.reward=facts"
  [H]="--config.rl.reward=facts --config.optimizer.final_lr_fraction=1.0")
OUT=benchmarks/results/rl-lr/local; mkdir -p $OUT
for R in $RUNS; do V=${R%%:*}; S=${R##*:}
  /usr/bin/time -v .venv/bin/python main.py --workdir=runs/http_${V}_s$S --config.seed=$S \
    --config.model.path=runs/cpu_ans/checkpoint --config.browser.driver=http ${FLAGS[$V]} > $OUT/http_${V}_s$S.txt 2>&1
done
