#!/usr/bin/env bash
# Runs N processes of main.py on this machine as one multi-process run (jax.distributed
# with a local coordinator; on CPU the collectives are Gloo's). Each process has its own
# browsers and sampler; the learner spans all of them. The same code path as several hosts.
#
#   launch/local_multiprocess.sh N WORKDIR [main.py flags ...]
#
# Defaults (the flags you pass come later and win): one task group per process per update
# (rl.groups_per_batch = N) and a fingerprint of the final parameters from every process
# in WORKDIR/fingerprint.<process id>. Logs: WORKDIR/process_<id>.log. Exits 0 when every
# process did; when one fails the others are stopped. Ctrl-C / SIGTERM reach every process
# (together they save a checkpoint). PORT picks the coordinator's port, PYTHON the
# interpreter; DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/processes.sh
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N WORKDIR [main.py flags ...]   (N >= 1 processes)" >&2
  exit 2
fi
count=$1 workdir=$2
shift 2
# absl reads --config=FILE before any --config.key override: move a passed one to the front
config_file=() overrides=()
for flag in "$@"; do
  if [[ $flag == --config=* ]]; then config_file=("$flag"); else overrides+=("$flag"); fi
done
PYTHON=${PYTHON:-.venv/bin/python}
PORT=${PORT:-$(free_port)}

[ "${DRY_RUN:-0}" = 1 ] || mkdir -p "$workdir"
for ((i = 0; i < count; i++)); do
  command=(env "JAX_COORDINATOR_ADDRESS=127.0.0.1:$PORT" "JAX_NUM_PROCESSES=$count" "JAX_PROCESS_ID=$i"
           "$PYTHON" main.py "--workdir=$workdir" "${config_file[@]}" "--config.rl.groups_per_batch=$count"
           "--config.train.fingerprint=True" "${overrides[@]}")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${command[@]}"
    echo
  else
    start_process "$workdir/process_$i.log" "${command[@]}"
  fi
done
[ "${DRY_RUN:-0}" = 1 ] && exit 0
status=0
wait_for_processes || status=$?
if [ "$status" -eq 0 ]; then
  echo "all $count processes finished; fingerprints in $workdir/fingerprint.*"
else
  echo "failed; see $workdir/process_*.log" >&2
fi
exit "$status"
