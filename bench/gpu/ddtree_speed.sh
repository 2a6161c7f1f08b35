#!/bin/bash
# DDTREE vs DFLASH step cost on one H200, each side in the same run, repeated (bench/gpu/ddtree_speed.py says
# what runs and what the summary holds). Same set-up as bench/gpu/ddtree_e2e.sh (its bundle, patch series
# and dummy models); results in $OUT/ddtree-speed/summary.md + summary.json, every server's log beside them.
# Lead's command:  run(command="bash bench/gpu/ddtree_speed.sh", carry=[".gpu/site.tar.xz"], timeout_s=600)
# CPU dry run (stand-in servers, ~2 min):
#   DRYRUN=1 PY=.venv/bin/python SITE=<dir with the wheel's sglang/> WORK=/tmp/w OUT=/tmp/o bash bench/gpu/ddtree_speed.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export DDTREE_DRIVER=bench/gpu/ddtree_speed.py DDTREE_OUT_NAME=ddtree-speed DEADLINE_S=${DEADLINE_S:-540}
exec bash bench/gpu/ddtree_e2e.sh
