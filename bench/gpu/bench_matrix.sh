#!/usr/bin/env bash
# playbooks/bench.yml on the lent H200 (issue 14), through the toolkit's own inventory (inventory/gpu,
# connection local, runner backend), against the release that `STAGES=deploy bash bench/gpu/e2e.sh`
# deployed in the call before (the machine must still be warm: same /opt/dflash, $HOME/ctl, /srv/models),
# with the dense DFLASH instance h200-dflash (bench/gpu/h200-dflash.yml), the matrix's base:
#
#   run(command="STAGES=unpack bash bench/gpu/e2e.sh", carry=[".gpu/ctl-wheelhouse.tar.xz"], timeout_s=120)
#   run(command="DEPLOY_VARS=bench/gpu/h200-dflash.yml STAGES=deploy bash bench/gpu/e2e.sh",
#       carry=[".gpu/wheelhouse.tar.xz"], timeout_s=600)
#   run(command="bash bench/gpu/bench_matrix.sh", timeout_s=600)        # within 30 s of the first
#
# The matrix: bench/gpu/bench_h200.yml. Everything comes back as $OUT/bench-results.tgz (the run folder:
# run.json, cells/*.json, results.csv, report.md, report.tex; charts and the PDF when matplotlib and
# pdflatex are on the machine). On the controller, charts + PDF from the same data:
#   python3 scripts/bench_report.py render <the run folder>
# Dry run on any machine (no GPU): DRY_RUN=1 bash bench/gpu/bench_matrix.sh -> the plan's checks only.
set -uo pipefail
cd "$(dirname "$0")/../.."
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
  say "no deployed h200-dflash: run DEPLOY_VARS=bench/gpu/h200-dflash.yml STAGES=deploy bash bench/gpu/e2e.sh first"; exit 2; }
export PYTHONPATH=${CTL:-$HOME/ctl} LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader

# the block-32 draft for budget 31 (config-only, same shapes as /srv/models/draft)
"$PY" -c "import sys; sys.path.insert(0, 'scripts/gpu'); import make_models; \
make_models.write_configs('/srv/models', draft_blocks=(16, 32))" \
  && cp --update=none /srv/models/draft/tokenizer* /srv/models/draft32/ && say "models: $(ls /srv/models | tr '\n' ' ')"

# cross-check of the toolkit's client against sglang.bench_serving (SGLang's own load generator, from the
# deployed venv with the instance's env), same request shape, on the idle deployed instance, before the matrix
set -a; . /opt/dflash/current/instances/h200-dflash.env; set +a
say "cross-check: sglang.bench_serving vs the toolkit's client, random ids 256 in / 256 out, 4 requests, c1"
# (the overlay leaves `datasets` out; bench_serving imports it for a dataset this check does not use:
# bench/gpu/no_datasets stands in for it, and says so if called)
PYTHONPATH=$PWD/bench/gpu/no_datasets${PYTHONPATH:+:$PYTHONPATH} \
timeout 60 /opt/dflash/current/venv/bin/python -m sglang.bench_serving --backend sglang \
  --base-url http://127.0.0.1:30001 --dataset-name random-ids --random-input-len 256 --random-output-len 256 \
  --random-range-ratio 1 --num-prompts 4 --max-concurrency 1 --tokenizer /srv/models/target \
  --output-file "$OUT/bench_serving.jsonl" --disable-tqdm 2>&1 | tail -25
timeout 60 "$PY" -c "import json, sys; sys.path.insert(0, 'module_utils'); from dflash_bench import client as c; \
print(json.dumps(c.run_cell('http://127.0.0.1:30001', 'random', 1, {'random': {'input_len': 256, \
'output_len': 256, 'per_slot': 4}}, 60)['summary']))" | tee "$OUT/client_random_c1.json"
unset DFLASH_ARGS PYTHONPATH CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER LD_LIBRARY_PATH CUDA_HOME
export PYTHONPATH=${CTL:-$HOME/ctl}

say "bench.yml (deadline 470 s inside the playbook; hard stop at $(( 575 - ($(date +%s) - T0) )) s)"
timeout $(( 575 - ($(date +%s) - T0) )) "$PY" -m ansible.cli.playbook -i inventory/gpu playbooks/bench.yml -e @bench/gpu/h200-dflash.yml -e @bench/gpu/bench_h200.yml \
  -e dflash_bench_results_dir="$OUT/runs" -e dflash_bench_run_name=h200-matrix -e dflash_bench_deadline=470
say "bench.yml rc=$?"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
ls /run/dflash/ 2>/dev/null | grep bench && say "WARNING: benchmark pidfiles left" || say "no benchmark server left"
cd "$OUT" && tar czf /tmp/bench-results.tgz runs bench.log bench_serving.jsonl client_random_c1.json && find "$OUT" -mindepth 1 -delete && mv /tmp/bench-results.tgz "$OUT/"
