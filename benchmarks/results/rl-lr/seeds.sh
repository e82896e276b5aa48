#!/bin/bash
# The README's command, three seeds, on the shipped tree of stop 59 (assets/warm_start = the
# answers-only stage 5; RL: 8 constant-rate updates), this VM alone, one after another, wall and
# peak RSS: BENCHMARKS.md "RL's schedule, chosen on other seeds".
OUT=benchmarks/results/rl-lr/main RUN=e_main exec bash "$(dirname "$0")/../answers-teacher/seeds.sh"
