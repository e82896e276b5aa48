# Sourced by the launch scripts: run a set of background commands as one job.
#   start_process LOG COMMAND...   start one (stdout and stderr to LOG)
#   wait_for_processes             wait for all; on the first failure stop the rest;
#                                  returns the first non-zero exit status (0 if none)
# SIGTERM and SIGINT sent to the script are passed on to every process (main.py then
# finishes its update and saves a checkpoint).
pids=()

start_process() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  pids+=($!)
}

forward_signal() { kill -s "$1" "${pids[@]}" 2>/dev/null || true; }
trap 'forward_signal TERM' TERM
trap 'forward_signal INT' INT

wait_for_processes() {
  local status=0 code left
  for ((left = ${#pids[@]}; left > 0; left--)); do
    code=0
    wait -n "${pids[@]}" || code=$?
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$code
      echo "a process exited with $code; stopping the others" >&2
      forward_signal TERM
    fi
  done
  return "$status"
}
