# Sourced by gpu-harness/e2e.sh, fleet.sh and upgrade.sh on the lent GPU machine (needs say, PY, STAGES):
# the archives (the overlay's wheelhouse, the router's, the controller side's: ansible-core and what the image
# lacks), carried to this machine as gpu-harness/README.md says ("Carrying the archives": carry calls of their
# own, or carried in this call) -> $WH/wheelhouse and $WH/ctl, the controller side installed into $CTL.
WH=${WH:-$HOME/wh}
CTL=${CTL:-$HOME/ctl}
mkdir -p "$WH/ctl"
. "$(dirname "${BASH_SOURCE[0]}")/carry.sh"
while read -r line; do say "$line"; done < <(keep_carried)
# unpack NAME DIR: the archive NAME kept on this machine (carry.sh) into DIR; nothing when it is not here
unpack() {
  local a="$WH/$1"
  [ -f "$a" ] || return 0
  mkdir -p "$2" && tar -C "$2" -xJf "$a" || exit 2
}
rm -rf "$WH/ctl-new" && unpack ctl-wheelhouse.tar.xz "$WH/ctl-new"
[ -d "$WH/ctl-new" ] && mv "$WH"/ctl-new/wheelhouse/*.whl "$WH/ctl/" && rm -rf "$WH/ctl-new"
[ -d "$WH/wheelhouse" ] || unpack wheelhouse.tar.xz "$WH"
# an archive built the older way carries the controller wheels inside the overlay's
mv "$WH"/wheelhouse/ansible_core-* "$WH"/wheelhouse/resolvelib-* "$WH"/wheelhouse/cryptography-* "$WH/ctl/" 2>/dev/null
unpack router-wheelhouse.tar.xz "$WH"
# another sglang version's overlay (wheelhouse-0.5.17.tar.xz): its own folder, the find-links directory of its
# overlay in inventory/gpu (dflash_layers_overlays), so that one version's wheels never change the other's layer
for a in "$WH"/wheelhouse-*.tar.xz; do
  [ -f "$a" ] || continue
  v=${a##*/wheelhouse-}; v=${v%.tar.xz}
  [ -d "$WH/$v/wheelhouse" ] || unpack "wheelhouse-$v.tar.xz" "$WH/$v"
done
# the trees' sglang wheels (inventory/gpu's dflash_wheelhouse_dir: dflash_tree's cache), linked out of each
# version's wheelhouse
mkdir -p "$WH/trees" && ln -f "$WH"/wheelhouse/sglang-*.whl "$WH"/*/wheelhouse/sglang-*.whl "$WH/trees/" 2>/dev/null
say "wheelhouse: $(ls "$WH/wheelhouse" 2>/dev/null | wc -l) overlay wheels, $(ls "$WH/ctl" | wc -l) controller wheels;" \
  "other versions: $(for d in "$WH"/*/wheelhouse; do [ -d "$d" ] && printf '%s (%s wheels) ' "$(basename "$(dirname "$d")")" "$(ls "$d" | wc -l)"; done);" \
  "trees' wheels: $(ls "$WH/trees" | tr '\n' ' ')"
[ "$STAGES" = unpack ] && { say "unpacked; now the stages"; exit 0; }
[ -d "$WH/wheelhouse" ] || { say "no $WH/wheelhouse: carry wheelhouse.tar.xz first (gpu-harness/README.md)"; exit 2; }
if [ ! -d "$CTL/ansible" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$CTL" "$WH"/ctl/*.whl || exit 2
fi
export PYTHONPATH=$CTL LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
