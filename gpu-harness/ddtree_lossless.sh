#!/bin/bash
# DDTree lossless check on the GPU machine (one H200), one call (< 10 min): hybrid (Qwen3.5 class) and
# dense targets with real random weights in float32; DDTREE tree / shadow-linear and DFLASH against no
# speculation, with both controls (gpu-harness/ddtree_lossless.py says what is checked).
# Command (the lead's, or #13's):
#   run(command="bash gpu-harness/ddtree_lossless.sh", timeout_s=600)
#   once site.tar.xz is on the machine (gpu-harness/README.md, "Carrying the archives"; as for gpu-harness/ddtree_e2e.sh)
# Results: $OUT/ddtree-lossless/{summary.md,summary.json,tree.json,logs.tar.xz}.
# LOSSLESS_DTYPE=float32: every server (the speculative ones too) in float32 through gpu-harness/fp32_shim, the
#   float32 no-speculation server as the reference (ids must equal its ids; epsilon 0.01 nats); default bfloat16
#   servers judged by a float32 re-scorer (epsilon 0.25 nats).
# DDTREE_BUILD_KERNEL=0|1: passed to the DDTREE servers as SGLANG_DDTREE_BUILD_KERNEL (the tree build as one
# Triton kernel, patch 0107, on by default; 0 builds with the torch ops).
# DDTREE_WALK_GRAPH=0|1: passed to the DDTREE servers as SGLANG_DDTREE_WALK_GRAPH (the walk's CUDA graph, on by
# default since patch 0106; 0 walks eagerly).
# DDTREE_GDN_VERIFY_BLOCK_V=4|8|16|32, DDTREE_GDN_TREE_PATHS=0|1|auto: passed to every server as SGLANG_GDN_* (the GDN
# verify kernel's value block, patch 0108, default 16; the GDN tree verify node by node, patch 0109, default auto:
# on when requests x value heads <= 1.5 x verify tokens).
# DDTREE_CONV_PARENTS=0|1|auto, DDTREE_CONV_BLOCK_N=16..256: passed to every server as SGLANG_DDTREE_CONV_* (DDTREE's
# conv update from the tree's parents, patch 0110, default 0, auto: where batch x tokens <= 16; its channel block, 64).
# CPU dry run (stand-in servers, no weights):
#   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash gpu-harness/ddtree_lossless.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
TAG=lossless
OUT=${OUT:-/tmp/ddtree-out}/ddtree-lossless
WORK=${WORK:-/root/ddtree-lossless}
MODELS=${MODELS:-hybrid,dense}
FAMILIES=$(echo "$MODELS" | sed 's/\([a-z]*\)/\1-rw/g')  # only the models asked for get folders and weights
WEIGHTS=${WEIGHTS-$FAMILIES}
[ -n "${DRYRUN:-}" ] && WEIGHTS=""
source gpu-harness/ddtree_setup.sh
LEFT=$(( ${BUDGET_S:-575} - ($(date +%s) - T0) ))
"$PY" gpu-harness/ddtree_lossless.py --work "$WORK" --out "$OUT" --deadline-s "$(( LEFT - 20 ))" --models "$MODELS"
