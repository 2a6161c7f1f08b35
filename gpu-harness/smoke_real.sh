#!/bin/bash
# The release stage's smoke logic against real sglang 0.5.11 on the GPU machine (one H200, dummy
# weights), one call (< 8 min): see gpu-harness/smoke_real.py. Results: $OUT/smoke/summary.json and
# the server logs beside it.
# Needs on the GPU machine: site.tar.xz (the sglang 0.5.11 bundle of `python3 gpu-harness/make_wheelhouse.py
# gpu-harness/overlay-wheels.txt .gpu/site.tar.xz --site`, carried first: gpu-harness/README.md, "Carrying the archives")
# and python3.12 with torch (/opt/torch/.venv).
# Lead's command:  run(command="bash gpu-harness/smoke_real.sh", timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/smoke-out}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
SITE=${SITE:-/root/site}
mkdir -p "$OUT/smoke"
exec > >(tee "$OUT/smoke/run.log") 2>&1
echo "[smoke] $(date -u +%FT%TZ) python=$PY"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader || true
if [ ! -d "$SITE/sglang" ]; then
  . gpu-harness/carry.sh  # site.tar.xz: kept by the carry calls, or carried in this call (gpu-harness/README.md)
  ARCHIVE=$(carried site.tar.xz) || exit 2
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE"
fi
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PY" gpu-harness/smoke_real.py "$OUT/smoke"
