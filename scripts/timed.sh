#!/usr/bin/env bash
# Run `make <part>` for each part, print each part's wall time, and a summary at the end.
# Every part runs even when an earlier one failed; the exit status is 1 if any part failed.
set -uo pipefail

declare -a names times results
rc=0
for part in "$@"; do
  start=$(date +%s)
  echo "::: make $part"
  if make --no-print-directory "$part"; then res=ok; else res=FAILED; rc=1; fi
  secs=$(( $(date +%s) - start ))
  printf '::: make %s: %s in %dm%02ds\n' "$part" "$res" $((secs / 60)) $((secs % 60))
  names+=("$part"); times+=("$secs"); results+=("$res")
done
echo "::: summary"
total=0
for i in "${!names[@]}"; do
  printf '  %-10s %-7s %4dm%02ds\n' "${names[$i]}" "${results[$i]}" $((times[i] / 60)) $((times[i] % 60))
  total=$((total + times[i]))
done
printf '  %-10s %-7s %4dm%02ds\n' total "$([[ $rc == 0 ]] && echo ok || echo FAILED)" $((total / 60)) $((total % 60))
exit "$rc"
