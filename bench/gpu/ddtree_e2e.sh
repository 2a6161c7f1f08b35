#!/bin/bash
# DDTree end to end on the GPU machine (one H200), dummy weights, one call (< 9 min).
#
# What it proves (results in $OUT/ddtree/summary.md + summary.json, server logs beside them):
#   1. greedy output ids of DDTREE == no speculation: 3 prompts x 64/256 new tokens, batch 1, and
#      4 prompts together (batch 4) x 64/256; budgets 7/15 (16-block draft) and 31 (a second
#      config-only draft with block_size 32: budget + 1 must fit the block), with and without CUDA graphs,
#      and --speculative-ddtree-mode shadow-linear; DFLASH alongside.
#   2. with the test-only oracle (SGLANG_DDTREE_ORACLE) steering the draft, including non-first
#      branches: accept length > 1 and still identical ids.
#   3. verify-step time (target forward) of the tree vs the linear DFlash block at 16 tokens.
#   4. tok/s DDTREE vs DFLASH with the oracle at matched acceptance, budget 7/15/31 x top-k 1/4/8.
#
# Needs, in the repository root on the GPU machine: .gpu/site.tar.xz (the sglang 0.5.11 bundle from
# /work/shared/gpu/build_bundle.sh; carry it), python3.12 with torch (the image's
# /opt/torch/.venv). The patch series of files/patches/sglang/0.5.11 is applied to a copy of the
# bundle's sglang with module_utils/dflash_patch.py and put first on PYTHONPATH.
# Lead's command:  run(command="bash bench/gpu/ddtree_e2e.sh", carry=[".gpu/site.tar.xz"], timeout_s=600)
# DDTREE_DRIVER=bench/gpu/ddtree_speed.py runs that driver instead (bench/gpu/ddtree_speed.sh), results in
# $OUT/$DDTREE_OUT_NAME.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ddtree-out}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
WORK=${WORK:-/root/ddtree-e2e}
SITE=${SITE:-/root/site}
DRIVER=${DDTREE_DRIVER:-bench/gpu/ddtree_e2e.py}
RES="$OUT/${DDTREE_OUT_NAME:-ddtree}"
mkdir -p "$RES" "$WORK"
exec > >(tee "$RES/run.log") 2>&1
echo "[e2e] $(date -u +%FT%TZ) python=$PY $("$PY" --version 2>&1)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true

# A warm machine may still run the e2e deploy's instance (bench/gpu/e2e.sh, ~72 GiB): the servers here size
# their KV pools from free memory, so stop every sglang left over first (KEEP_LEFTOVERS=1 skips this).
if [ -z "${KEEP_LEFTOVERS:-}" ] && pgrep -f 'sglang.launch_server|sglang::' >/dev/null; then
  echo "[e2e] stopping leftover sglang processes: $(pgrep -f 'sglang.launch_server|sglang::' | tr '\n' ' ')"
  pkill -TERM -f 'sglang.launch_server|sglang::' || true
  for _ in $(seq 30); do pgrep -f 'sglang.launch_server|sglang::' >/dev/null || break; sleep 1; done
  pkill -KILL -f 'sglang.launch_server|sglang::' || true; sleep 2
  nvidia-smi --query-gpu=memory.used --format=csv,noheader || true
fi
if [ ! -d "$SITE/sglang" ]; then
  [ -f .gpu/site.tar.xz ] || { echo "[e2e] missing .gpu/site.tar.xz (carry it)"; exit 2; }
  mkdir -p "$SITE" && tar -C "$SITE" -xJf .gpu/site.tar.xz
fi
"$PY" bench/gpu/ddtree_e2e.py prepare --site "$SITE" --work "$WORK" \
  --series files/patches/sglang/0.5.11 --out "$RES"
export PYTHONPATH="$WORK/tree:$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ -n "${DRYRUN:-}" ]; then
  # CPU dry run of the orchestration: the stand-in server of bench/gpu/ddtree_dryrun answers instead of
  # sglang (same flags; it refuses budget + 1 above the draft's block like the patched server), e.g.
  #   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash bench/gpu/ddtree_e2e.sh
  echo "[e2e] DRYRUN: stand-in servers (bench/gpu/ddtree_dryrun), not sglang"
  export PYTHONPATH="$PWD/bench/gpu/ddtree_dryrun:$PYTHONPATH"
fi
"$PY" -m py_compile "$WORK"/tree/sglang/srt/speculative/ddtree_*.py "$WORK"/tree/sglang/srt/speculative/dflash_worker.py
"$PY" "$DRIVER" run --work "$WORK" --out "$RES" --deadline-s "${DEADLINE_S:-520}"
