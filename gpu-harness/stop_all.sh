# Stop the servers on the GPU machine (gpu-harness/stop_servers.py says which: the runner's units in
# /run/dflash and the servers the harness registered in /run/gpu-harness; nothing else is touched).
#
# On its own, e.g. in a call of its own after one that was cut short:
#   bash gpu-harness/stop_all.sh     stop them all; exit 1 when a process is still on the GPU afterwards
#                                    (each named), 2 when a server outlived its KILL, 0 when the GPU is free
# Sourced by gpu-harness/e2e.sh, bench_matrix.sh and fleet.sh (they define `say`):
#   stop_servers [SKIP]   stop them, but the units whose name matches the glob SKIP; the GPU is not checked
#   stop_all [ARGS]       at the end of a call (ARGS: stop_servers.py's, e.g. --grace 10): stop them all and check the GPU, so that no server holds it
#                         when the call ends; KEEP=1 leaves them for the next call of a chain (it must come
#                         within the machine's 30 s idle release: the deployed release is what that call
#                         measures), and the chain's last call stops them.
# Any python3 runs it (standard library only): no Ansible, no path that wheels.sh sets.
_stop_servers_py() {
  local py=${PY:-}
  [ -n "$py" ] && [ -x "$py" ] || py=$(command -v python3)
  "$py" "$(dirname "${BASH_SOURCE[0]}")/stop_servers.py" "$@"
}

stop_servers() {
  local line
  while IFS= read -r line; do say "$line"; done < <(_stop_servers_py --skip "${1:-}" --no-gpu-check 2>&1)
}

stop_all() {
  local f n=0 line out rc
  if [ "${KEEP:-0}" = 1 ]; then
    for f in "${DFLASH_RUN_DIR:-/run/dflash}"/*.pid "${GPU_HARNESS_RUN:-/run/gpu-harness}"/*.pid; do
      [ -e "$f" ] && n=$((n + 1))
    done
    say "KEEP=1: $n server(s) left running for the next call of the chain (it stops them unless KEEP=1 again)"
    return 0
  fi
  out=$(_stop_servers_py "$@" 2>&1); rc=$?
  while IFS= read -r line; do say "$line"; done <<<"$out"
  [ "$rc" = 0 ] || say "WARNING: the GPU is not free at the end of this call (stop_servers rc=$rc)"
  return "$rc"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  _stop_servers_py "$@"
  exit $?
fi
