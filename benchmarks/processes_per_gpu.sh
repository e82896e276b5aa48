#!/usr/bin/env bash
# Runs a command as N processes of one jax.distributed run on this host, one GPU each
# (CUDA_VISIBLE_DEVICES=<id>, a local coordinator); logs in LOGDIR/process_<id>.log.
#
#   benchmarks/processes_per_gpu.sh 2 $OUT python3 benchmarks/end_to_end.py --setting gpu ...
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/processes.sh
count=$1 logdir=$2
shift 2
port=$(free_port)
mkdir -p "$logdir"
for ((i = 0; i < count; i++)); do
  start_process "$logdir/process_$i.log" env CUDA_VISIBLE_DEVICES=$i JAX_COORDINATOR_ADDRESS=127.0.0.1:$port \
    JAX_NUM_PROCESSES=$count JAX_PROCESS_ID=$i "$@"
done
wait_for_processes
