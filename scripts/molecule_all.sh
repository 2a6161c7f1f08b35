#!/usr/bin/env bash
# Run Molecule scenarios (the names given, else every molecule/*/molecule.yml), MOLECULE_JOBS at a
# time (default 3: on two cores, two scenarios at a time left a fifth of the CPU idle, vmstat over a whole
# make test: the scenarios wait on containers, servers and load tests part of the time). Each scenario writes .molecule/logs/<LAB_PREFIX><name>.log; its result line (and,
# when it failed, the end of its log) is printed as it finishes. With MOLECULE_JOBS=1 the output streams.
# All scenarios run; the exit status is non-zero when one failed. Called by `make molecule`.
# Each result (name, ok/FAILED, seconds) goes to .molecule/logs/<LAB_PREFIX>results.txt and, for a failed
# scenario, the failing task (its origin, name and message) to <LAB_PREFIX>causes.txt: scripts/timed.sh
# prints both last, where a CI log's tail shows them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${MOLECULE_JOBS:-3}
if (($# == 0)); then
  # the longest first (their times in CI, longest to shortest), so that the pool ends together; a new scenario last
  mapfile -t all < <(for f in molecule/*/molecule.yml; do basename "$(dirname "$f")"; done)
  order="fleet faults default tune versions release layers bench"
  set -- $(for s in $order; do [[ " ${all[*]} " == *" $s "* ]] && echo "$s"; done) \
    $(for s in "${all[@]}"; do [[ " $order " == *" $s "* ]] || echo "$s"; done)
fi
mkdir -p .molecule/logs

# The task that failed a scenario: the last "Origin:" of its log (colours and Molecule's frame taken off),
# the task's name and the first 12 lines of the failure after it.
cause() { # scenario log
  sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^ *│ \{0,1\}//' "$2" | awk -v s="$1" '
    /^Origin: / { o = NR } { l[NR] = $0 }
    END {
      if (!o) { print s ": no task failure in its log (see it whole)"; exit }
      n = 0
      for (i = o; i <= NR && n < 12; i++) {
        if (l[i] ~ /^(fatal|failed): \[/) f = 1
        if (i == o || l[i] ~ /^[0-9]+ +- name: / || f) { print s ": " substr(l[i], 1, 200); if (f) n++ }
      }
    }'
}
export -f cause

one() {
  local s=$1 start res log=".molecule/logs/${LAB_PREFIX:-}$1.log"
  start=$(date +%s)
  echo "== molecule test -s $s (log: $log)"
  if [ "${MOLECULE_JOBS:-3}" = 1 ]; then
    MOLECULE_EPHEMERAL_DIRECTORY="$PWD/.molecule/${LAB_PREFIX:-}$s" molecule test -s "$s" 2>&1 | tee "$log"
    res=${PIPESTATUS[0]}
  else
    MOLECULE_EPHEMERAL_DIRECTORY="$PWD/.molecule/${LAB_PREFIX:-}$s" molecule test -s "$s" >"$log" 2>&1
    res=$?
  fi
  echo "$s $([ "$res" = 0 ] && echo ok || echo FAILED) $(( $(date +%s) - start ))" >>"$RESULTS"
  ((res == 0)) || cause "$s" "$log" >>"$CAUSES"
  if ((res == 0)); then
    echo "== molecule $s: ok in $(( $(date +%s) - start ))s"
  else
    [ "${MOLECULE_JOBS:-3}" = 1 ] || tail -n 120 "$log" | sed "s/^/[$s] /"
    echo "== molecule $s: FAILED in $(( $(date +%s) - start ))s"
  fi
  return $((res != 0))
}
export -f one

RESULTS=.molecule/logs/${LAB_PREFIX:-}results.txt
CAUSES=.molecule/logs/${LAB_PREFIX:-}causes.txt
: >"$RESULTS"
: >"$CAUSES"
export RESULTS CAUSES
start=$(date +%s)
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {}
rc=$?
echo "== molecule: $# scenarios, $jobs at a time, in $(( $(date +%s) - start ))s"
if ((rc != 0)); then
  echo "molecule scenarios failed: $(awk '$2 != "ok" {printf "%s ", $1}' "$RESULTS")"
  exit 1
fi
