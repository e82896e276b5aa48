#!/bin/bash
# NOT RUN (2026-12-07, stop 58): no device could be started this stop.
# Stage 5 of the warm start (assets/warm_start/README.md) on one GPU: the same command as on
# 2 CPU cores, to record its cost there (and a third draw of the recipe: --first-seed 800000).
export PYTHONPATH=$PWD/.whl/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
/usr/bin/time -f "wall %e s" python3 benchmarks/warm_start.py --init assets/warm_start_labels --interaction labels \
  --teacher-cuts 0.6 --answers-only --first-seed 800000 --seed 2 --minutes 40 --steps 60 --warmup-steps 5 \
  --learning-rate 3e-4 --workers 1 --rows-per-step 16 --rows-per-microbatch 16 --row-length 1024 \
  --text-budget 512 --reuse 1 --eval-split unseen --eval-tasks 60 --probe-every 1000 --probe-rows 16 \
  --log-every 5 --save-at 30 --out runs/gpu_ans > $OUT/train.out 2>&1
tail -4 $OUT/train.out | cut -c1-400
cp runs/gpu_ans/log.jsonl $OUT/ && tar cf $OUT/ckpt.tar -C runs/gpu_ans checkpoint
