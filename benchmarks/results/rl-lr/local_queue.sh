#!/bin/bash
# The sweep's variants on this 2-core VM, browser-free (greedy evaluation gives the same episodes
# as in Chromium: seed 3's start 36.7%, 8 action errors, either driver), one run at a time, from
# the answers-only stage 5 (runs/cpu_ans/checkpoint). RUNS="B:3 A:3 ..." (variant:seed). Variants:
# variants.sh.
cd "$(dirname "$0")/../../.."
source benchmarks/results/rl-lr/variants.sh   # FLAGS[variant]: its main.py flags
OUT=benchmarks/results/rl-lr/local; mkdir -p $OUT
for R in $RUNS; do V=${R%%:*}; S=${R##*:}
  /usr/bin/time -v .venv/bin/python main.py --workdir=runs/http_${V}_s$S --config.seed=$S \
    --config.model.path=runs/cpu_ans/checkpoint --config.browser.driver=http ${FLAGS[$V]} > $OUT/http_${V}_s$S.txt 2>&1
done
