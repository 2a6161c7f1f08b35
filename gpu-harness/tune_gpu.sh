#!/usr/bin/env bash
# playbooks/tune.yml on the lent H200 (issue 38), through the toolkit's own inventory (inventory/gpu, connection
# local, runner backend), against the hybrid DDTREE release inventory/gpu deploys (h200-ddtree: Qwen3.5-class
# hybrid, dummy weights), deployed in the calls before, the machine still warm:
#
#   the carry calls of ctl-wheelhouse.tar.xz and wheelhouse.tar.xz (gpu-harness/README.md, "Carrying the archives"), then
#   run(command='KEEP=1 STAGES=deploy bash gpu-harness/e2e.sh', timeout_s=600)
#   run(command="bash gpu-harness/tune_gpu.sh", timeout_s=600)         # both passes, about 8 minutes
# or, when the servers start slowly, one pass a call: KEEP=1 PASSES=dummy ..., then PASSES=oracle ...
#
# Pass "dummy": NONE, DFLASH and DDTREE b15/k8 from the release's flags; the draft of random weights is never
#   right: expect "speculation does not pay here", every request's accept length about 1.0.
# Pass "oracle": DFLASH, DDTREE b15/k8 and b7/k4, every draft steered by the test-only oracle (patch 0101,
#   SGLANG_DDTREE_ORACLE) to the deployed instance's own greedy continuation of each prompt, the right token
#   on the second branch at depth 2 (gpu-harness/tune_oracle.py): DFLASH accepts 1 draft a step, DDTREE more:
#   expect a DDTREE configuration chosen over DFLASH (in the choice, or "among the speculative
#   configurations" when no speculation is also in the run).
# Each pass is one wave of 3 servers beside the deployed instance (about 2 minutes to start on the H200), sized
# from the GPU's free memory when the pass starts (gpu-harness/tune_memory.py over gpu_memory.py: an H200 or an
# 80 GB H100; a pass whose servers cannot fit is skipped before any starts and says why), a
# closed-loop round, then 3 rounds at the rates it gave (about 20 s each); its time budget (start included) is
# what the call has left, split between the passes: about 4 minutes each. A pass that would get under 200 s is
# skipped and says so: run it in a call of its own (the first with KEEP=1).
# Results: $OUT/tune-results.tgz (each run folder: run.json, cells/, rounds.jsonl, results.json, report.md,
# report.tex, charts; the PDF on the controller: python3 scripts/bench_report.py tune <run folder>).
# KEEP=1 leaves the deployed instance running for another call. Dry run on any machine (no GPU):
# DRY_RUN=1 bash gpu-harness/tune_gpu.sh -> the plan's and the sizing's checks of these passes (tests/harness/
# test_tune_gpu.py: the H200 manifest, an H100's and an H200's memory).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tune-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
PASSES=${PASSES:-dummy oracle}
BUDGET_S=${BUDGET_S:-530}
T0=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/tune.log") 2>&1
say() { echo "[tune +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none) passes='$PASSES'"
if [ -n "${DRY_RUN:-}" ]; then
  exec "$PY" -m pytest -q tests/harness/test_tune_gpu.py
fi
[ -d "${CTL:-$HOME/ctl}/ansible" ] && [ -f /opt/dflash/current/instances/h200-ddtree.env ] || {
  say "no deployed h200-ddtree: run KEEP=1 STAGES=deploy bash gpu-harness/e2e.sh first"; exit 2; }
export PYTHONPATH=${CTL:-$HOME/ctl} LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader

# the prompts (input_ids) and the oracle's reference: the deployed instance's greedy continuations
W=$HOME/tune-gpu
mkdir -p "$W"
"$PY" gpu-harness/tune_oracle.py --out "$W" --prompts 8 --input-len 64 --max-tokens 32 || { say "no oracle file"; }
cp -a "$W/oracle.json" "$OUT/" 2>/dev/null

run_pass() {  # NAME SECONDS CONFIGURATIONS-JSON
  local name=$1 secs=$2
  # the servers' memory flags from the GPU's free memory now (the deployed instance holds its part)
  "$PY" gpu-harness/tune_memory.py "$name" --out "$W/memory-$name.json" \
    || { say "pass $name skipped: its servers do not fit the GPU now (above)"; return 0; }
  say "pass $name: tune.yml, budget $(( secs - 45 )) s (start included), hard stop at $secs s"
  timeout "$secs" "$PY" -m ansible.cli.playbook -i inventory/gpu -l localhost playbooks/tune.yml \
    -e @gpu-harness/tune_h200.yml -e "@$W/memory-$name.json" -e "$3" \
    -e "{\"dflash_bench_tune_prompts\": \"$W/prompts.jsonl\", \"dflash_bench_tune_run_name\": \"h200-$name\",
         \"dflash_bench_tune_results_dir\": \"$OUT/runs\", \"dflash_bench_tune_budget\": $(( secs - 45 ))}"
  say "pass $name rc=$?"
  ls /run/dflash/ 2>/dev/null | grep -q bench && say "WARNING: tune servers left" || say "no tune server left"
}
# the passes' configurations: gpu-harness/tune_h200.yml's tune_gpu_passes
DUMMY='{"dflash_bench_tune_configurations": "{{ tune_gpu_passes.dummy }}"}'
ORACLE="{\"dflash_bench_tune_configurations\": \"{{ tune_gpu_passes.oracle }}\",
        \"dflash_bench_tune_server_env\": {\"SGLANG_DDTREE_ORACLE\": \"$W/oracle.json\"}}"
n=$(wc -w <<<"$PASSES")
for p in $PASSES; do
  secs=$(( $(left) / n - 5 )); n=$(( n - 1 ))
  [ "$secs" -lt 200 ] && { say "pass $p skipped: $secs s left (run it in a call of its own: PASSES=$p)"; continue; }
  case $p in
    dummy) run_pass dummy "$secs" "$DUMMY" ;;
    oracle) [ -f "$W/oracle.json" ] && run_pass oracle "$secs" "$ORACLE" || say "pass oracle skipped: no oracle file" ;;
  esac
done
for f in "$OUT"/runs/*/report.md; do
  [ -f "$f" ] && { echo "== $f"; sed -n '/^## The choice/,/^## What ran/p' "$f" | head -14; }
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
. gpu-harness/stop_all.sh && stop_all  # the deployed instance too, unless KEEP=1 (another call follows)
cp -a "$W"/memory-*.json "$OUT/" 2>/dev/null  # each pass's sizing, beside its run
cd "$OUT" && tar czf /tmp/tune-results.tgz --ignore-failed-read runs tune.log oracle.json memory-*.json 2>/dev/null \
  && find "$OUT" -mindepth 1 -delete && mv /tmp/tune-results.tgz "$OUT/"
