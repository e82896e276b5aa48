#!/usr/bin/env bash
# A Cloud TPU VM or pod slice, from creation to a training run. Every TPU worker (host)
# runs the same main.py; jax.distributed finds the others itself (--coordinator=auto).
#
#   ZONE=us-central2-b ACCELERATOR=v4-16 launch/tpu_pod.sh create NAME
#   ZONE=... launch/tpu_pod.sh copy  NAME        # this working tree -> ~/asyncwebrl on every worker
#   ZONE=... launch/tpu_pod.sh setup NAME        # launch/setup.sh with JAX for TPU (no test extras), on every worker
#   ZONE=... launch/tpu_pod.sh run   NAME WORKDIR [main.py flags ...]
#   ZONE=... launch/tpu_pod.sh stop  NAME WORKDIR   # SIGTERM: finish the update, save, exit
#   ZONE=... launch/tpu_pod.sh delete NAME
#
# WORKDIR must be one directory that every worker sees (a Filestore NFS share or a
# gcsfuse-mounted bucket at the same path): all workers write their parts of each
# checkpoint there, and worker 0 the metrics. Settings (environment): ZONE (required),
# ACCELERATOR and RUNTIME_VERSION (create; default tpu-ubuntu2204-base), PROJECT
# (default: gcloud's), REMOTE_DIR (default asyncwebrl, under the worker's home),
# DRY_RUN=1 to print the gcloud commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: ZONE=... $0 create|copy|setup|run|stop|delete NAME [WORKDIR [main.py flags ...]]" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1 name=$2
shift 2
[ -n "${ZONE:-}" ] || { echo "set ZONE (e.g. ZONE=us-central2-b)" >&2; exit 2; }
REMOTE_DIR=${REMOTE_DIR:-asyncwebrl}
where=(--zone="$ZONE")
[ -z "${PROJECT:-}" ] || where+=(--project="$PROJECT")

gcloud_tpu() {   # gcloud compute tpus tpu-vm ARGS..., or its command line with DRY_RUN=1
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' gcloud compute tpus tpu-vm "$@"
    echo
  else
    gcloud compute tpus tpu-vm "$@"
  fi
}
on_all_workers() {   # one shell command on every worker, at once
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "gcloud compute tpus tpu-vm ssh $name ${where[*]} --worker=all --command='$1'"
  else
    gcloud compute tpus tpu-vm ssh "$name" "${where[@]}" --worker=all --command="$1"
  fi
}
need_workdir() { [ -n "${1:-}" ] || { echo "$action needs a WORKDIR shared by all workers" >&2; exit 2; }; }

case $action in
  create)
    [ -n "${ACCELERATOR:-}" ] || { echo "set ACCELERATOR (e.g. v4-16, v5litepod-16)" >&2; exit 2; }
    gcloud_tpu create "$name" "${where[@]}" --accelerator-type="$ACCELERATOR" \
      --version="${RUNTIME_VERSION:-tpu-ubuntu2204-base}" ;;
  copy)   # tracked and untracked-but-not-ignored files, as the working tree has them
    archive=$(mktemp --suffix=.tar.gz)
    [ "${DRY_RUN:-0}" = 1 ] || git ls-files -z --cached --others --exclude-standard | tar -czf "$archive" --null -T -
    gcloud_tpu scp "$archive" "$name:asyncwebrl.tar.gz" "${where[@]}" --worker=all
    on_all_workers "mkdir -p $REMOTE_DIR && tar -xzf asyncwebrl.tar.gz -C $REMOTE_DIR && rm asyncwebrl.tar.gz"
    rm -f "$archive" ;;
  setup)
    on_all_workers "cd $REMOTE_DIR && ASYNCWEBRL_EXTRAS= JAX_EXTRA=tpu bash launch/setup.sh" ;;   # training only: no torch
  run)
    need_workdir "${1:-}"
    workdir=$1
    shift
    on_all_workers "cd $REMOTE_DIR && .venv/bin/python main.py --coordinator=auto $(printf '%q ' "--workdir=$workdir" "$@")" ;;
  stop)
    need_workdir "${1:-}"
    on_all_workers "pkill -TERM -f $(printf '%q' "main.py --coordinator=auto --workdir=$1") || true" ;;
  delete)
    gcloud_tpu delete "$name" "${where[@]}" --quiet ;;
  *) usage ;;
esac
