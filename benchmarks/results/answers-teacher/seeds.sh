#!/bin/bash
# The README's command, three seeds, one after another on this VM alone (2 CPU cores, real
# Chromium): python main.py --config.seed=S, wall and peak RSS. Run (2026-12-07) with the answers-only
# stage 5's weights (runs/cpu_ans/checkpoint) copied over assets/warm_start/model.safetensors, then
# restored (BENCHMARKS.md "A stage 5 that reproduces"). OUT and RUN (the workdirs' prefix) name where
# another set of seeds goes (benchmarks/results/rl-lr/seeds.sh).
cd "$(dirname "$0")/../../.."
OUT=${OUT:-benchmarks/results/answers-teacher/main}; RUN=${RUN:-ans_main}; mkdir -p $OUT
for S in ${SEEDS:-0 1 2}; do
  /usr/bin/time -v .venv/bin/python main.py --workdir=runs/${RUN}_s$S --config.seed=$S > $OUT/seed$S.txt 2>&1
  cp runs/${RUN}_s$S/summary.json $OUT/summary_seed$S.json
  cp runs/${RUN}_s$S/metrics.jsonl $OUT/metrics_seed$S.jsonl
  cp runs/${RUN}_s$S/training.png $OUT/training_seed$S.png
done
