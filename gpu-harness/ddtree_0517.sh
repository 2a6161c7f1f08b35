#!/bin/bash
# DDTree on sglang 0.5.17 on the GPU machine (issue 34), ONE call (< 9.5 min), the two harnesses one after the other:
#   1. the float32 lossless matrix on the hybrid (Qwen3.5 class, real random weights; gpu-harness/ddtree_lossless.sh
#      with LOSSLESS_DTYPE=float32: every server float32 through gpu-harness/fp32_shim, whose patches follow
#      0.5.17's moved kernels): DDTREE tree (CUDA graphs on and off), shadow-linear and DFLASH against the float32
#      no-speculation reference, on 0.5.17's default overlap scheduler, with both negative controls (the test-only
#      broken commits 'state' and 'kv' of 0.5.17's DDTreeWorkerV2, SGLANG_DDTREE_TEST_BREAK) that must fail;
#   2. DDTREE b15 / DFLASH tok/s at matched acceptance (the test-only oracle), each with the overlap scheduler and
#      without it (--disable-overlap-schedule), 3 rounds interleaved prompt by prompt, each DDTREE server over the
#      DFLASH server of its own mode (gpu-harness/ddtree_e2e.sh with DDTREE_E2E_OVERLAP=both).
# The site: 0.5.17's deploy wheelhouse (wheelhouse-0.5.17.tar.xz, carried; gpu-harness/ddtree_setup.sh installs it
# with the machine's uv), or the 0.5.17 overlay gpu-harness/upgrade.sh deployed a moment before.
#   run(command="bash gpu-harness/ddtree_0517.sh", timeout_s=600)
# Env: LOSSLESS_S (300) and the rest of BUDGET_S (555) for the bench; VERSION (0.5.17).
# CPU dry run (stand-in servers checking every flag against 0.5.17's parser, ~40 s):
#   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the 0.5.17 wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash gpu-harness/ddtree_0517.sh
# Results: $OUT/ddtree-lossless/ and $OUT/ddtree/ (summary.md, summary.json, run.log, logs.tar.xz each: 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
export VERSION=${VERSION:-0.5.17}
BUDGET_S=${BUDGET_S:-555}
WORK_BASE=${WORK:-/root}
say() { echo "[ddtree-$VERSION +$(( $(date +%s) - T0 ))s] $*"; }

say "lossless (float32, hybrid, both controls): ${LOSSLESS_S:-300} s"
LOSSLESS_DTYPE=float32 MODELS=hybrid BUDGET_S=${LOSSLESS_S:-300} WORK="$WORK_BASE/ddtree-lossless-$VERSION" \
  bash gpu-harness/ddtree_lossless.sh >/dev/null 2>&1
say "lossless rc=$?"

LEFT=$(( BUDGET_S - ($(date +%s) - T0) ))
say "bench (hybrid b15 vs DFLASH, overlap on and off, 3 rounds): $LEFT s"
DDTREE_E2E_OVERLAP=both DDTREE_E2E_B31=0 DDTREE_E2E_PHASES=matched DDTREE_REPEATS=${DDTREE_REPEATS:-3} MODELS=hybrid \
  BUDGET_S=$LEFT WORK="$WORK_BASE/ddtree-e2e-$VERSION" bash gpu-harness/ddtree_e2e.sh >/dev/null 2>&1
say "bench rc=$?"

[ -n "${DRYRUN:-}" ] || bash gpu-harness/stop_all.sh >/dev/null 2>&1 || say "a process still holds the GPU (stop_all.sh)"
for f in "${OUT:-/tmp/ddtree-out}/ddtree-lossless/summary.md" "${OUT:-/tmp/ddtree-out}/ddtree/summary.md"; do
  echo "== $f"
  # everything but the server table (its command lines are long; summary.json has them)
  awk '/^## Servers/{skip=1; next} /^## /{skip=0} !skip' "$f" 2>/dev/null | cut -c1-400 | head -120
done
say "done"
