#!/usr/bin/env bash
# Runs main.py on one or several multi-GPU hosts as one multi-process run (jax.distributed
# over NCCL): every process collects with its own browsers and sampler, and the learner's
# mesh spans the GPUs of all of them.
#
#   launch/gpu_hosts.sh run  HOSTFILE WORKDIR [main.py flags ...]
#   launch/gpu_hosts.sh stop HOSTFILE WORKDIR      # SIGTERM: finish the update, save, exit
#
# HOSTFILE: one host per line (ssh names; the first one also runs the coordinator; "#"
# starts a comment). Each host needs the repository at REMOTE_DIR (default: this
# directory's path), set up with `JAX_EXTRA=cuda12 bash launch/setup.sh`, and WORKDIR on
# a filesystem that every host shares (NFS, a mounted bucket): checkpoints are written by
# all processes together. Settings (environment):
#   PROCESSES_PER_HOST  1 (default): one process sees all of its host's GPUs;
#                       the GPU count: one process per GPU (CUDA_VISIBLE_DEVICES=<rank>)
#   PORT                the coordinator's port on the first host (default 29500)
#   PYTHON              the interpreter on the hosts (default .venv/bin/python)
#   DRY_RUN=1           print the ssh commands instead of running them
# Logs: WORKDIR/host<h>_process<id>.log here. With one host and one process this is just
# `python main.py` on that host. Device split within a host: --config.devices.sampler=N.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/launch/processes.sh"
if [ $# -lt 3 ] || [[ $1 != run && $1 != stop ]]; then
  echo "usage: $0 run|stop HOSTFILE WORKDIR [main.py flags ...]" >&2
  exit 2
fi
action=$1 hostfile=$2 workdir=$3
shift 3
mapfile -t hosts < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$hostfile" | grep -v '^$')
[ ${#hosts[@]} -ge 1 ] || { echo "$hostfile lists no host" >&2; exit 2; }
per_host=${PROCESSES_PER_HOST:-1}
[[ $per_host =~ ^[1-9][0-9]*$ ]] || { echo "PROCESSES_PER_HOST must be a positive integer" >&2; exit 2; }
REMOTE_DIR=${REMOTE_DIR:-$here}
PYTHON=${PYTHON:-.venv/bin/python}
PORT=${PORT:-29500}
count=$((${#hosts[@]} * per_host))

if [ "$action" = stop ]; then
  for host in "${hosts[@]}"; do
    remote="pkill -TERM -f $(printf '%q' "main.py --workdir=$workdir") || true"
    if [ "${DRY_RUN:-0}" = 1 ]; then echo "ssh $host '$remote'"; else ssh "$host" "$remote"; fi
  done
  exit 0
fi

[ "${DRY_RUN:-0}" = 1 ] || mkdir -p "$workdir"
for ((h = 0; h < ${#hosts[@]}; h++)); do
  for ((rank = 0; rank < per_host; rank++)); do
    id=$((h * per_host + rank))
    variables="JAX_COORDINATOR_ADDRESS=${hosts[0]}:$PORT JAX_NUM_PROCESSES=$count JAX_PROCESS_ID=$id"
    [ "$per_host" -eq 1 ] || variables+=" CUDA_VISIBLE_DEVICES=$rank"
    remote="cd $(printf '%q' "$REMOTE_DIR") && env $variables $PYTHON main.py $(printf '%q ' "--workdir=$workdir" "$@")"
    if [ "${DRY_RUN:-0}" = 1 ]; then
      echo "ssh ${hosts[h]} '$remote'"
    else
      start_process "$workdir/host${h}_process$id.log" ssh "${hosts[h]}" "$remote"
    fi
  done
done
[ "${DRY_RUN:-0}" = 1 ] && exit 0
status=0
wait_for_processes || status=$?
[ "$status" -eq 0 ] && echo "all $count processes finished" || echo "failed; see $workdir/host*_process*.log" >&2
exit "$status"
