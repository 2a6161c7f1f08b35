#!/bin/bash
# DDTree speed on the GPU machine (one H200), one call (< 10 min): DDTREE (budget 15 and 31) vs DFLASH on a
# dense and a hybrid (Qwen3.5 class) target, bfloat16 config-only models (--load-format dummy), acceptance
# set by the test-only oracle; verify-step phases, matched-acceptance tok/s in repeated rounds, a non-first
# branch (gpu-harness/ddtree_e2e.py says what is measured). The lossless check is gpu-harness/ddtree_lossless.sh.
# Command (the lead's, or #13's):
#   run(command="bash gpu-harness/ddtree_e2e.sh", timeout_s=600)
#   once site.tar.xz is on the machine (gpu-harness/README.md, "Carrying the archives"):
#   `python3 gpu-harness/make_wheelhouse.py gpu-harness/overlay-wheels.txt .gpu/site.tar.xz --site` here, then the
#   carry calls `python3 gpu-harness/split_carry.py plan .gpu/site.tar.xz` prints
# DDTREE_E2E_DFLASH32=1: one more server per model, DFLASH on the 32-block draft (verifies 32 tokens a step, as
# b31 does): the control that tells the verify width's cost from the tree's. DDTREE_E2E_TOKENS: tokens per
# request in the tok/s rounds (256). DDTREE_REPEATS: rounds (5).
# DDTREE_BUILD_KERNEL=0|1: passed to the DDTREE servers as SGLANG_DDTREE_BUILD_KERNEL (the tree build as one
# Triton kernel, patch 0107, on by default; 0 builds with the torch ops).
# DDTREE_WALK_GRAPH=0|1: passed to every DDTREE server as SGLANG_DDTREE_WALK_GRAPH (the walk's CUDA graph,
# on by default since patch 0106; 0 walks eagerly).
# DDTREE_GDN_VERIFY_BLOCK_V=4|8|16|32, DDTREE_GDN_TREE_PATHS=0|1|auto: passed to every server as SGLANG_GDN_* (the GDN
# verify kernel's value block, patch 0108, default 16; the GDN tree verify node by node, patch 0109, default auto:
# on when requests x value heads <= 1.5 x verify tokens).
# DDTREE_CONV_PARENTS=0|1|auto, DDTREE_CONV_BLOCK_N=16..256: passed to every server as SGLANG_DDTREE_CONV_* (DDTREE's
# conv update from the tree's parents, patch 0110, default 0, auto: where batch x tokens <= 16; its channel block, 64).
# Results: $OUT/ddtree/{summary.md,summary.json,tree.json,logs.tar.xz}.
# CPU dry run (stand-in servers, ~30 s):
#   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash gpu-harness/ddtree_e2e.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
TAG=e2e
OUT=${OUT:-/tmp/ddtree-out}/ddtree
WORK=${WORK:-/root/ddtree-e2e}
FAMILIES=dense,hybrid
WEIGHTS=""
source gpu-harness/ddtree_setup.sh
LEFT=$(( ${BUDGET_S:-575} - ($(date +%s) - T0) ))
"$PY" gpu-harness/ddtree_e2e.py run --work "$WORK" --out "$OUT" --deadline-s "$(( LEFT - 20 ))" --models "${MODELS:-dense,hybrid}"
