#!/bin/bash
# One device call for both DDTree harnesses: the lossless check (gpu-harness/ddtree_lossless.sh) and the
# speed bench (gpu-harness/ddtree_e2e.sh), overlapped: the bench's servers start while the lossless check
# runs and measure only once it has ended (its servers stopped, the GPU theirs alone).
#   run(command="bash gpu-harness/ddtree_all.sh", timeout_s=600)    (site.tar.xz on the machine first: gpu-harness/README.md, "Carrying the archives")
# Results: $OUT/ddtree-lossless/ and $OUT/ddtree/ (summary.md, summary.json, logs.tar.xz each).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=/tmp/ddtree-bench-go
rm -f "$GO"
# LOSSLESS_MODELS / BENCH_MODELS: each harness's models (MODELS, when set, is both's default)
(MODELS=${LOSSLESS_MODELS:-${MODELS:-hybrid,dense}} BUDGET_S=${LOSSLESS_S:-340} bash gpu-harness/ddtree_lossless.sh >/dev/null 2>&1
 touch "$GO") &
sleep 25  # the lossless setup unpacks site.tar.xz into /root/site; the bench uses its own copy
MODELS=${BENCH_MODELS:-${MODELS:-dense,hybrid}} SITE=${SITE2:-/root/site2} DDTREE_BENCH_GO=$GO BUDGET_S=${BENCH_S:-430} \
  bash gpu-harness/ddtree_e2e.sh >/dev/null 2>&1
wait
for f in "${OUT:-/tmp/ddtree-out}/ddtree-lossless/summary.md" "${OUT:-/tmp/ddtree-out}/ddtree/summary.md"; do
  echo "== $f"
  # everything but the server table (its command lines are long; summary.json has them)
  awk '/^## Servers/{skip=1; next} /^## /{skip=0} !skip' "$f" 2>/dev/null | cut -c1-400 | head -120
done
