# Sourced by gpu-harness/e2e.sh and gpu-harness/fleet.sh on the lent GPU machine (needs say, PY, STAGES):
# the carried archives -> $WH/wheelhouse (the overlay's, and the router's) and $WH/ctl (the controller
# side: ansible-core and what the image lacks), installed into $CTL. The archives are carried in separate
# calls (the tree and all of them pass one call's 64 MiB): `STAGES=unpack` with .gpu/ctl-wheelhouse.tar.xz
# first, then, the machine still warm, the stages with .gpu/wheelhouse.tar.xz (gpu-harness/README.md).
WH=${WH:-$HOME/wh}
CTL=${CTL:-$HOME/ctl}
mkdir -p "$WH/ctl"
# an archive too big to travel beside the tree comes in parts over several calls: kept in $WH/parts, joined
# into $WH/<name> once all are there (gpu-harness/join_parts.sh)
. "$(dirname "${BASH_SOURCE[0]}")/join_parts.sh"
while read -r line; do say "$line"; done < <(join_parts "$WH/parts" "$WH")
# unpack NAME DIR: the archive NAME, carried in this call (.gpu/NAME) or joined from parts ($WH/NAME), into DIR
unpack() {
  local a=".gpu/$1"; [ -f "$a" ] || a="$WH/$1"
  [ -f "$a" ] || return 0
  mkdir -p "$2" && tar -C "$2" -xJf "$a" || exit 2
}
rm -rf "$WH/ctl-new" && unpack ctl-wheelhouse.tar.xz "$WH/ctl-new"
[ -d "$WH/ctl-new" ] && mv "$WH"/ctl-new/wheelhouse/*.whl "$WH/ctl/" && rm -rf "$WH/ctl-new"
[ -d "$WH/wheelhouse" ] || unpack wheelhouse.tar.xz "$WH"
# an archive built the older way carries the controller wheels inside the overlay's
mv "$WH"/wheelhouse/ansible_core-* "$WH"/wheelhouse/resolvelib-* "$WH"/wheelhouse/cryptography-* "$WH/ctl/" 2>/dev/null
unpack router-wheelhouse.tar.xz "$WH"
say "wheelhouse: $(ls "$WH/wheelhouse" 2>/dev/null | wc -l) overlay wheels, $(ls "$WH/ctl" | wc -l) controller wheels"
[ "$STAGES" = unpack ] && { say "unpacked; now the stages, carrying .gpu/wheelhouse.tar.xz"; exit 0; }
[ -d "$WH/wheelhouse" ] || { say "no $WH/wheelhouse: carry .gpu/wheelhouse.tar.xz"; exit 2; }
if [ ! -d "$CTL/ansible" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$CTL" "$WH"/ctl/*.whl || exit 2
fi
export PYTHONPATH=$CTL LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
