# The archives the harness needs on the GPU machine (.gpu/*.tar.xz, built on the controller: the overlay's
# wheelhouse, the controller side's, the router's, the sglang site bundle) travel in carry calls of their own,
# each within one call's 64 MiB with the tree, as `python3 gpu-harness/split_carry.py plan ...` prints them
# (gpu-harness/README.md, "Carrying the archives"). What a call carries is gone in the next call; this keeps it.
#
#   bash gpu-harness/carry.sh            a carry call: keep each whole archive this call carried in $WH
#                                        ($HOME/wh), keep each part in $WH/parts and join the parts of an
#                                        archive into $WH once all have come (gpu-harness/join_parts.sh)
#   . gpu-harness/carry.sh; carried NAME   (sourced by the harness's scripts) keep what this call carried, then
#                                        print the path of archive NAME on this machine; fail when it is not here
WH=${WH:-$HOME/wh}
. "$(dirname "${BASH_SOURCE[0]}")/join_parts.sh"

keep_carried() {
  local a name
  mkdir -p "$WH"
  for a in .gpu/*.tar.xz; do
    [ -f "$a" ] || continue
    name=$(basename "$a")
    if ! cmp -s "$a" "$WH/$name"; then
      cp "$a" "$WH/$name.tmp" && mv "$WH/$name.tmp" "$WH/$name" && echo "[carry] kept $name ($(du -h "$a" | cut -f1))"
    fi
  done
  join_parts "$WH/parts" "$WH"
  return 0
}

carried() {
  keep_carried >&2
  [ -f "$WH/$1" ] || { echo "[carry] $1 is not on this machine: carry it first (gpu-harness/README.md)" >&2; return 1; }
  echo "$WH/$1"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cd "$(dirname "$0")/.." || exit 2
  keep_carried
  echo "[carry] on this machine: $(cd "$WH" && ls -- *.tar.xz 2>/dev/null | tr '\n' ' ')"
  [ -d "$WH/parts" ] && echo "[carry] parts kept: $(ls "$WH/parts" | tr '\n' ' ')"
  exit 0
fi
