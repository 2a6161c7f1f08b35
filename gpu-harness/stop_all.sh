# Sourced by gpu-harness/e2e.sh, bench_matrix.sh and fleet.sh on the GPU machine (needs say and PY).
# stop_servers [SKIP]: stop every server the runner backend started on this machine (its pidfiles in
#   /run/dflash: deployed instances of every prefix, benchmark servers, routers), but those whose unit
#   matches the glob SKIP.
# stop_all: at the end of a call, stop_servers, so that no server holds the GPU when the call ends;
#   KEEP=1 leaves them for the next call of a chain (it must come within the machine's 30 s idle release:
#   the deployed release is what that call measures), and the chain's last call stops them.
stop_servers() {
  local f u skip=${1:-}
  for f in /run/dflash/*.pid; do
    [ -e "$f" ] || continue
    u=$(basename "$f" .pid)
    # shellcheck disable=SC2254  # SKIP is a glob on purpose
    if [ -n "$skip" ]; then case $u in $skip) continue ;; esac; fi
    say "stopping $u: $("$PY" -m ansible.cli.adhoc localhost -m dflash_runner -a "name=$u state=stopped" 2>&1 \
      | grep -oE '"?changed"?: [a-z]+' | head -1)"
  done
}

stop_all() {
  local f n=0
  if [ "${KEEP:-0}" = 1 ]; then
    for f in /run/dflash/*.pid; do [ -e "$f" ] && n=$((n + 1)); done
    say "KEEP=1: $n server(s) left running for the next call of the chain (it stops them unless KEEP=1 again)"
    return 0
  fi
  stop_servers
  n=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)
  say "processes on the GPU now: $n"
}
