#!/bin/bash
# Where a decode step's time goes, DFLASH vs DDTREE b15 at matched acceptance, under sglang's torch profiler,
# on the GPU machine (one H200), one call: gpu-harness/ddtree_profile.py says what is reduced from the traces.
#   run(command="bash gpu-harness/ddtree_profile.sh", timeout_s=600)
#   once site.tar.xz is on the machine (gpu-harness/README.md, "Carrying the archives"; as for gpu-harness/ddtree_e2e.sh)
# Env: MODEL (hybrid | dense, default hybrid), DDTREE_PROFILE_T31=1 (DDTREE b31 profiled too),
# DDTREE_PROFILE_STEPS (default 24), BUDGET_S (default 575),
#   DDTREE_PROFILE_WALK_AB=1 (t15 walks eagerly, SGLANG_DDTREE_WALK_GRAPH=0, and a third server, t15w, with
#   the walk graph of patch 0105, on by default since 0106).
# Results: $OUT/ddtree-profile/{summary.md,summary.json,run.log,logs.tar.xz}.
# CPU dry run (stand-in servers that write a stand-in trace):
#   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash gpu-harness/ddtree_profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
TAG=profile
OUT=${OUT:-/tmp/ddtree-out}/ddtree-profile
WORK=${WORK:-$HOME/ddtree-profile}
MODEL=${MODEL:-hybrid}
FAMILIES=$MODEL
WEIGHTS=""
source gpu-harness/ddtree_setup.sh
LEFT=$(( ${BUDGET_S:-575} - ($(date +%s) - T0) ))
"$PY" gpu-harness/ddtree_profile.py --work "$WORK" --out "$OUT" --model "$MODEL" --deadline-s "$(( LEFT - 20 ))"
