#!/bin/bash
# Real sglang 0.5.11 failures on the GPU machine (one H200), diagnosed by dflash_diagnose.
#
# One call, ~5-8 minutes. The bundle's sglang (unpatched) is started with dummy weights in states
# that fail like the seeds' deployment did, each log is kept and diagnosed:
#   healthy                  normal start-up, stopped once /health is 200   -> unknown (no failure)
#   model_missing            --model-path that does not exist               -> model_missing
#   port_in_use              the --port is already bound by another socket  -> port_in_use
#   cuda_oom                 another process holds all but 1.5 GiB of HBM   -> cuda_oom
#   missing_module           `import pybase64` fails (sitecustomize hook)   -> missing_module
#   xgrammar_structural_tag  xgrammar without StructuralTag (hook), as 0.1.10 lacked it
#                                                                           -> xgrammar_structural_tag
#   flashinfer_wrong_arch    FlashInfer JIT for sm_80 only on the sm_90 GPU -> no_kernel_image / flashinfer_arch
# Results: $OUT/diagnose/{results.md,results.json,<scenario>.log,run.log}. The logs are real 0.5.11
# output: commit them under tests/fixtures/logs/<cause>/h200-<scenario>.log with the run's date.
#
# Lead's command:  run(command="bash gpu-harness/diagnose_real.sh", timeout_s=600)
# Needs site.tar.xz (the sglang 0.5.11 bundle, carried first: gpu-harness/README.md, "Carrying the archives") and the
# image's /opt/torch/.venv python (torch 2.11.0+cu130).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/diagnose-out}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
SITE=${SITE:-/root/site}
WORK=${WORK:-/root/diagnose-real}
mkdir -p "$OUT/diagnose" "$WORK"
exec > >(tee "$OUT/diagnose/run.log") 2>&1
echo "[diagnose] $(date -u +%FT%TZ) python=$PY $("$PY" --version 2>&1) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,memory.used --format=csv,noheader || true

if [ ! -d "$SITE/sglang" ]; then
  . gpu-harness/carry.sh  # site.tar.xz: kept by the carry calls, or carried in this call (gpu-harness/README.md)
  ARCHIVE=$(carried site.tar.xz) || exit 2
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE"
fi
"$PY" gpu-harness/make_models.py "$WORK/models" >/dev/null
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PY" gpu-harness/diagnose_real.py --models "$WORK/models" --out "$OUT/diagnose" --work "$WORK" \
  --deadline-s "${DEADLINE_S:-540}" ${ONLY:+--only "$ONLY"}
cat "$OUT/diagnose/results.md"
