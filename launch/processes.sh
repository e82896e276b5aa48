# Sourced by the launch scripts: run a set of background commands as one job.
#   free_port                      a free TCP port on this machine (for a local coordinator)
#   start_process LOG COMMAND...   start one (stdout and stderr to LOG)
#   wait_for_processes             wait for all; on the first failure stop the rest;
#                                  returns the first non-zero exit status (0 if none)
# SIGTERM and SIGINT sent to the script are passed on to every process (main.py then
# finishes its update and saves a checkpoint).
pids=()

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_process() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  pids+=($!)
}

forward_signal() { kill -s "$1" "${pids[@]}" 2>/dev/null || true; }
# A Ctrl-C at the terminal reaches the processes directly; they get TERM from here too
# (TERM never escalates in main.py, a second INT would: "leave now").
trap 'forward_signal TERM' TERM INT

wait_for_processes() {
  local status=0 code pid
  local -A finished=()
  while [ ${#finished[@]} -lt ${#pids[@]} ]; do
    for pid in "${pids[@]}"; do   # polled: a signal's trap runs within a second
      if [ -z "${finished[$pid]:-}" ] && ! kill -0 "$pid" 2>/dev/null; then
        finished[$pid]=1
        code=0
        wait "$pid" || code=$?
        if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
          status=$code
          echo "a process exited with $code; stopping the others" >&2
          forward_signal TERM
        fi
      fi
    done
    [ ${#finished[@]} -eq ${#pids[@]} ] || sleep 1
  done
  return "$status"
}
