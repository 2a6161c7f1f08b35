#!/bin/bash
# Sourced by gpu-harness/ddtree_e2e.sh and gpu-harness/ddtree_lossless.sh on the GPU machine (one H200):
#   1. ends the server process groups an earlier run of these scripts left (their ids are in
#      $WORK/server-pids, written at each start; nothing else is touched);
#   2. the site: sglang $VERSION and what the machine's torch venv lacks. 0.5.11: site.tar.xz (built by
#      `python3 gpu-harness/make_wheelhouse.py gpu-harness/overlay-wheels.txt .gpu/site.tar.xz --site` and
#      carried to the machine as gpu-harness/README.md says, "Carrying the archives": gpu-harness/carry.sh),
#      unpacked. Another version (VERSION=0.5.17): its carried deploy wheelhouse (wheelhouse-0.5.17.tar.xz,
#      unpacked into $WH/0.5.17 by gpu-harness/wheels.sh or here) installed into $SITE with the machine's uv
#      (--no-deps --offline: seconds), or, where gpu-harness/upgrade.sh deployed that version a moment ago, the
#      site-packages of its overlay layer;
#   3. copies the wheel's sglang, applies files/patches/sglang/$VERSION/series (module_utils/dflash_tree/)
#      and writes the model folders (gpu-harness/make_models.py; weights for $WEIGHTS: make_weights.py);
#   4. exports PYTHONPATH (patched tree first) and the pid file for gpu-harness/ddtree_servers.py.
# Needs: OUT, WORK, SITE, PY (defaulted here), FAMILIES, WEIGHTS (may be empty), DRYRUN (optional), TAG,
# VERSION (default 0.5.11).
# Output goes to $OUT/run.log too; the server logs are packed into $OUT/logs.tar.xz when the caller exits
# (a device call returns at most 8 files).
set -euo pipefail
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
VERSION=${VERSION:-0.5.11}
[ -d "$(dirname "${BASH_SOURCE[0]}")/../files/patches/sglang/$VERSION" ] || {
  echo "[setup] no files/patches/sglang/$VERSION: VERSION must be a folder there"; exit 2; }
if [ "$VERSION" = 0.5.11 ]; then SITE=${SITE:-/root/site}; else SITE=${SITE:-/root/site-$VERSION}; fi
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/run.log") 2>&1
echo "[$TAG] $(date -u +%FT%TZ) sglang $VERSION python=$PY $("$PY" --version 2>&1)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
# what comes back: summary.md, summary.json and logs.tar.xz (server logs, run.log, tree.json)
pack_logs() {
  cp "$OUT/run.log" "$OUT/run-copy.log" 2>/dev/null || true
  tar -C "$OUT" -cJf "$OUT/logs.tar.xz" --remove-files $(cd "$OUT" && ls *.server.log run-copy.log tree.json 2>/dev/null) 2>/dev/null || true
}
trap pack_logs EXIT
export DDTREE_PID_FILE="$WORK/server-pids"
# every server is registered for gpu-harness/stop_servers.py too (bash gpu-harness/stop_all.sh ends them);
# a CPU dry run keeps its registry in $WORK (/run is root's)
[ -z "${DRYRUN:-}" ] || export GPU_HARNESS_RUN=${GPU_HARNESS_RUN:-$WORK/registry}
# the servers' memory is sized from the GPU's (gpu-harness/gpu_memory.py, nvidia-smi); a CPU dry run sizes them
# for an 80 GB H100's figures unless GPU_MEMORY_MIB=TOTAL,FREE says otherwise
[ -z "${DRYRUN:-}" ] || export GPU_MEMORY_MIB=${GPU_MEMORY_MIB:-81559,80900}
if [ -s "$DDTREE_PID_FILE" ]; then
  while read -r pid; do
    [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null && echo "[setup] ended leftover server group $pid" || true
  done <"$DDTREE_PID_FILE"
  sleep 5
  while read -r pid; do [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true; done <"$DDTREE_PID_FILE"
fi
: >"$DDTREE_PID_FILE"
if [ ! -d "$SITE/sglang" ] && [ "$VERSION" != 0.5.11 ]; then
  # the version's deploy wheelhouse (carried, gpu-harness/wheels.sh unpacks it), installed as the layers role
  # installs the overlay on this machine: the wheels with --no-deps, over the machine's torch venv
  . "$(dirname "${BASH_SOURCE[0]}")/carry.sh"
  keep_carried
  VWH="$WH/$VERSION/wheelhouse"
  if [ ! -d "$VWH" ] && A=$(carried "wheelhouse-$VERSION.tar.xz" 2>/dev/null); then
    mkdir -p "$WH/$VERSION" && tar -C "$WH/$VERSION" -xJf "$A"
  fi
  LAYER=$(ls -d /opt/dflash/layers/overlay-*/lib/python3*/site-packages 2>/dev/null | while read -r d; do
    [ -d "$d/sglang-$VERSION.dist-info" ] && echo "$d"; done | head -1)
  if [ -n "$LAYER" ]; then
    echo "[setup] site: the deployed sglang $VERSION layer $LAYER"
    SITE=$LAYER
  elif [ -d "$VWH" ]; then
    UV=$(command -v uv || echo /usr/local/bin/uv)
    "$UV" pip install -q --offline --no-index --no-deps --target "$SITE" --python "$PY" "$VWH"/*.whl || exit 2
    echo "[setup] site: $(ls "$VWH" | wc -l) wheels of $VWH installed into $SITE"
  else
    echo "[setup] missing the sglang $VERSION wheelhouse: carry wheelhouse-$VERSION.tar.xz first (gpu-harness/README.md)"
    exit 2
  fi
fi
if [ ! -d "$SITE/sglang" ]; then
  # kept by the carry calls (gpu-harness/carry.sh), or carried in this call, whole or as its last part
  . "$(dirname "${BASH_SOURCE[0]}")/carry.sh"
  keep_carried
  if ! ARCHIVE=$(carried site.tar.xz 2>/dev/null); then
    if ls "$WH"/parts/site.tar.xz.part* >/dev/null 2>&1; then
      echo "[setup] site.tar.xz parts kept; nothing run: call again, carrying the next part"; trap - EXIT; exit 0
    fi
    echo "[setup] missing site.tar.xz: carry it first (gpu-harness/README.md, \"Carrying the archives\")"; exit 2
  fi
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE"
  # the bundle has no bytecode: without this every server compiles sglang's imports itself (about a
  # minute per server on a fresh machine, H200 run 3 of issue 13)
  [ -n "${DRYRUN:-}" ] || "$PY" -m compileall -q -j 0 "$SITE" >/dev/null 2>&1 || true
fi
"$PY" gpu-harness/ddtree_e2e.py prepare --site "$SITE" --work "$WORK" --series "files/patches/sglang/$VERSION" \
  --out "$OUT" --families "$FAMILIES" --weights "$WEIGHTS"
export PYTHONPATH="$WORK/tree:$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ -n "${DRYRUN:-}" ]; then
  # CPU dry run of the orchestration: gpu-harness/ddtree_dryrun's stand-in answers instead of sglang
  echo "[setup] DRYRUN: stand-in servers (gpu-harness/ddtree_dryrun), not sglang; flags checked against sglang $VERSION's"
  export PYTHONPATH="$PWD/gpu-harness/ddtree_dryrun:$PYTHONPATH"
  export DDTREE_DRYRUN_FLAGS="$PWD/files/patches/sglang/$VERSION/server-flags.txt"
fi
"$PY" -m py_compile "$WORK"/tree/sglang/srt/speculative/ddtree_*.py "$WORK"/tree/sglang/srt/speculative/dflash_worker*.py
