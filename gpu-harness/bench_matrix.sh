#!/usr/bin/env bash
# playbooks/bench.yml on the lent H200 (issue 14), through the toolkit's own inventory (inventory/gpu,
# connection local, runner backend), against the release that `STAGES=deploy bash gpu-harness/e2e.sh`
# deployed in the call before (the machine must still be warm: same /opt/dflash, $HOME/ctl, /srv/models),
# with the dense DFLASH instance h200-dflash (gpu-harness/h200-dflash.yml), the matrix's base:
#
#   the carry calls of ctl-wheelhouse.tar.xz and wheelhouse.tar.xz (gpu-harness/README.md, "Carrying the archives"), then
#   run(command='KEEP=1 DEPLOY_VARS=gpu-harness/h200-dflash.yml STAGES="deploy crosscheck" bash gpu-harness/e2e.sh',
#       timeout_s=600)
#   run(command="bash gpu-harness/bench_matrix.sh", timeout_s=600)        # within 30 s of the one before
# (KEEP=1 bash gpu-harness/bench_matrix.sh to run it again in a further call; the last call stops every server)
#
# The matrix: gpu-harness/bench_h200.yml. Everything comes back as $OUT/bench-results.tgz (the run folder:
# run.json, cells/*.json, results.csv, report.md, report.tex; charts and the PDF when matplotlib and
# pdflatex are on the machine). On the controller, charts + PDF from the same data:
#   python3 scripts/bench_report.py render <the run folder>
# Dry run on any machine (no GPU): DRY_RUN=1 bash gpu-harness/bench_matrix.sh -> the plan's checks only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bench-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
T0=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/bench.log") 2>&1
say() { echo "[bench +$(( $(date +%s) - T0 ))s] $*"; }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
if [ -n "${DRY_RUN:-}" ]; then
  exec "$PY" -m pytest -q tests/unit/bench/test_bench_plan.py -k h200_matrix_file
fi
[ -d "${CTL:-$HOME/ctl}/ansible" ] && [ -f /opt/dflash/current/instances/h200-dflash.env ] || {
  say "no deployed h200-dflash: run DEPLOY_VARS=gpu-harness/h200-dflash.yml STAGES=deploy bash gpu-harness/e2e.sh first"; exit 2; }
export PYTHONPATH=${CTL:-$HOME/ctl} LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader

# the block-32 draft for budget 31 (config-only, same shapes as /srv/models/draft)
"$PY" -c "import sys; sys.path.insert(0, 'gpu-harness'); import make_models; \
make_models.write_configs('/srv/models', draft_blocks=(16, 32))" \
  && cp --update=none /srv/models/draft/tokenizer* /srv/models/draft32/ && say "models: $(ls /srv/models | tr '\n' ' ')"

# the run's deadline: the call's budget less 40 s for stopping the servers and rendering the report (on
# 2026-12-02 both took about 10 s); the sglang.bench_serving cross-check runs in the deploy call
# (STAGES="deploy crosscheck" bash gpu-harness/e2e.sh), whose start-up leaves it time, not here
HARD=$(( 575 - ($(date +%s) - T0) ))
say "bench.yml (deadline $(( HARD - 40 )) s inside the playbook; hard stop at $HARD s)"
timeout "$HARD" "$PY" -m ansible.cli.playbook -i inventory/gpu playbooks/bench.yml -e @gpu-harness/h200-dflash.yml -e @gpu-harness/bench_h200.yml \
  -e dflash_bench_results_dir="$OUT/runs" -e dflash_bench_run_name=h200-matrix -e dflash_bench_deadline=$(( HARD - 40 ))
say "bench.yml rc=$?"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
ls /run/dflash/ 2>/dev/null | grep bench && say "WARNING: benchmark pidfiles left" || say "no benchmark server left"
. gpu-harness/stop_all.sh && stop_all  # the deployed instance too, unless KEEP=1 (another call follows)
cd "$OUT" && tar czf /tmp/bench-results.tgz runs bench.log && find "$OUT" -mindepth 1 -delete && mv /tmp/bench-results.tgz "$OUT/"
