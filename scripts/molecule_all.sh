#!/usr/bin/env bash
# Run Molecule scenarios (the names given, else every molecule/*/molecule.yml), MOLECULE_JOBS at a
# time (default 2: a scenario spends most of its time waiting on containers and servers, so two share
# two cores well). Each scenario writes .molecule/logs/<LAB_PREFIX><name>.log; its result line (and,
# when it failed, the end of its log) is printed as it finishes. With MOLECULE_JOBS=1 the output streams.
# All scenarios run; the exit status is non-zero when one failed. Called by `make molecule`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${MOLECULE_JOBS:-2}
if (($# == 0)); then
  # the longest first, so that the pool ends together
  mapfile -t all < <(for f in molecule/*/molecule.yml; do basename "$(dirname "$f")"; done)
  set -- $(for s in fleet bench release faults; do [[ " ${all[*]} " == *" $s "* ]] && echo "$s"; done) \
    $(for s in "${all[@]}"; do [[ " fleet bench release faults " == *" $s "* ]] || echo "$s"; done)
fi
mkdir -p .molecule/logs

one() {
  local s=$1 start res log=".molecule/logs/${LAB_PREFIX:-}$1.log"
  start=$(date +%s)
  echo "== molecule test -s $s (log: $log)"
  if [ "${MOLECULE_JOBS:-2}" = 1 ]; then
    MOLECULE_EPHEMERAL_DIRECTORY="$PWD/.molecule/${LAB_PREFIX:-}$s" molecule test -s "$s" 2>&1 | tee "$log"
    res=${PIPESTATUS[0]}
  else
    MOLECULE_EPHEMERAL_DIRECTORY="$PWD/.molecule/${LAB_PREFIX:-}$s" molecule test -s "$s" >"$log" 2>&1
    res=$?
  fi
  echo "$s $([ "$res" = 0 ] && echo ok || echo FAILED)" >>"$RESULTS"
  if ((res == 0)); then
    echo "== molecule $s: ok in $(( $(date +%s) - start ))s"
  else
    [ "${MOLECULE_JOBS:-2}" = 1 ] || tail -n 120 "$log" | sed "s/^/[$s] /"
    echo "== molecule $s: FAILED in $(( $(date +%s) - start ))s"
  fi
  return $((res != 0))
}
export -f one

RESULTS=.molecule/logs/${LAB_PREFIX:-}results.txt
: >"$RESULTS"
export RESULTS
start=$(date +%s)
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {}
rc=$?
echo "== molecule: $# scenarios, $jobs at a time, in $(( $(date +%s) - start ))s"
if ((rc != 0)); then
  echo "molecule scenarios failed: $(awk '$2 != "ok" {printf "%s ", $1}' "$RESULTS")"
  exit 1
fi
