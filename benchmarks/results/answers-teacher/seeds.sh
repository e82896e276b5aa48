#!/bin/bash
# The README's command, three seeds, one after another on this VM alone (2 CPU cores, real
# Chromium): python main.py --config.seed=S, wall and peak RSS. Run (2026-12-07) with the answers-only
# stage 5's weights (runs/cpu_ans/checkpoint) copied over assets/warm_start/model.safetensors, then
# restored (BENCHMARKS.md "A stage 5 that reproduces").
cd "$(dirname "$0")/../../.."
OUT=benchmarks/results/answers-teacher/main; mkdir -p $OUT
for S in ${SEEDS:-0 1 2}; do
  /usr/bin/time -v .venv/bin/python main.py --workdir=runs/ans_main_s$S --config.seed=$S > $OUT/seed$S.txt 2>&1
  cp runs/ans_main_s$S/summary.json $OUT/summary_seed$S.json
  cp runs/ans_main_s$S/metrics.jsonl $OUT/metrics_seed$S.jsonl
  cp runs/ans_main_s$S/training.png $OUT/training_seed$S.png
done
