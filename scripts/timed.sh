#!/usr/bin/env bash
# Run `make <part>` for each argument, print each part's wall time, and a summary at the end.
# An argument of parts joined by '+' (e.g. lint+unit) runs them side by side: each writes its output to
# .molecule/logs/timed-<part>.log, printed once all of them have ended.
# Every part runs even when an earlier one failed; the exit status is 1 if any part failed.
set -uo pipefail

declare -a names times results
rc=0
record() { # part result seconds
  printf '::: make %s: %s in %dm%02ds\n' "$1" "$2" $(($3 / 60)) $(($3 % 60))
  names+=("$1"); results+=("$2"); times+=("$3")
  [[ $2 == ok ]] || rc=1
}
total_start=$(date +%s)
for group in "$@"; do
  IFS=+ read -ra parts <<<"$group"
  start=$(date +%s)
  if ((${#parts[@]} == 1)); then
    echo "::: make ${parts[0]}"
    if make --no-print-directory "${parts[0]}"; then res=ok; else res=FAILED; fi
    record "${parts[0]}" "$res" $(( $(date +%s) - start ))
    continue
  fi
  mkdir -p .molecule/logs
  declare -A pids=()
  for part in "${parts[@]}"; do
    echo "::: make $part (side by side with ${group//+/ }; log .molecule/logs/timed-$part.log)"
    ( make --no-print-directory "$part" >".molecule/logs/timed-$part.log" 2>&1
      code=$?; date +%s >".molecule/logs/timed-$part.end"; exit $code ) &
    pids[$part]=$!
  done
  for part in "${parts[@]}"; do
    if wait "${pids[$part]}"; then res=ok; else res=FAILED; fi
    echo "::: output of make $part"
    cat ".molecule/logs/timed-$part.log"
    record "$part" "$res" $(( $(cat ".molecule/logs/timed-$part.end") - start ))
  done
  unset pids
done
echo "::: summary"
for i in "${!names[@]}"; do
  printf '  %-10s %-7s %4dm%02ds\n' "${names[$i]}" "${results[$i]}" $((times[i] / 60)) $((times[i] % 60))
done
total=$(( $(date +%s) - total_start ))
printf '  %-10s %-7s %4dm%02ds  (wall; parts joined by + ran side by side)\n' total \
  "$([[ $rc == 0 ]] && echo ok || echo FAILED)" $((total / 60)) $((total % 60))
# Molecule's scenarios (scripts/molecule_all.sh) and, for a failed one, the task that failed it: last, where
# a CI log's tail shows them.
results=.molecule/logs/${LAB_PREFIX:-}results.txt causes=.molecule/logs/${LAB_PREFIX:-}causes.txt
if [[ -s $results ]]; then
  echo "  scenarios: $(awk '{printf "%s%s %s %ss", (NR > 1 ? ", " : ""), $1, $2, $3}' "$results")"
fi
[[ -s $causes ]] && { echo "::: what failed"; cat "$causes"; }
exit "$rc"
