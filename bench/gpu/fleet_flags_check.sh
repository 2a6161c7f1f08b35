#!/bin/bash
# Before the fleet run (bench/gpu/fleet.sh) and the bench matrix: do the fleet instances' flags start a real
# sglang 0.5.11 DFLASH server, how fast, with /metrics showing sglang:spec_accept_length; and does
# sglang.bench_serving import with bench/gpu/no_datasets standing in for `datasets`? One short call,
# no deploy: the sglang 0.5.11 site bundle (upstream DFLASH needs no patch) on the machine's torch venv.
#
#   python3 scripts/gpu/make_wheelhouse.py bench/gpu/overlay-wheels.txt .gpu/site.tar.xz --site   (here)
#   run(command="bash bench/gpu/fleet_flags_check.sh", carry=[".gpu/site.tar.xz"], timeout_s=300)
#
# The command line is fleet-a's (bench/gpu/fleet/hosts.yml) as deploy.yml renders it on the H200.
# Results: $OUT/fleet-flags/{run.log,server.log,metrics.txt}; the server is stopped before the call ends.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fleet-flags-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
SITE=${SITE:-$HOME/site}
mkdir -p "$OUT/fleet-flags"
exec > >(tee "$OUT/fleet-flags/run.log") 2>&1
T0=$(date +%s)
say() { echo "[flags +$(( $(date +%s) - T0 ))s] $*"; }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
if [ ! -d "$SITE/sglang" ]; then
  [ -f .gpu/site.tar.xz ] || { say "missing .gpu/site.tar.xz (carry it)"; exit 2; }
  mkdir -p "$SITE" && tar -C "$SITE" -xJf .gpu/site.tar.xz || exit 2
fi
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
"$PY" scripts/gpu/make_models.py /srv/models >/dev/null && say "models in /srv/models"

say "import sglang.bench_serving with bench/gpu/no_datasets first on the path"
PYTHONPATH=$PWD/bench/gpu/no_datasets:$SITE "$PY" -c "import sglang.bench_serving as b, datasets; \
print('bench_serving imported; datasets stand-in:', datasets.__file__)" 2>&1 | tail -3

ARGS=(--model-path /srv/models/target --host 127.0.0.1 --port 30001 --tp-size 1 --mem-fraction-static 0.3
      --context-length 4096 --speculative-algorithm DFLASH --speculative-draft-model-path /srv/models/draft
      --enable-metrics --load-format dummy --disable-cuda-graph --disable-piecewise-cuda-graph --random-seed 1
      --attention-backend triton)
say "sglang.launch_server ${ARGS[*]}"
setsid "$PY" -m sglang.launch_server "${ARGS[@]}" > "$OUT/fleet-flags/server.log" 2>&1 &
pid=$!
trap 'kill -- -$pid 2>/dev/null; sleep 3; kill -9 -- -$pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  curl -sf -m 2 http://127.0.0.1:30001/health >/dev/null && break
  kill -0 $pid 2>/dev/null || { say "server died"; tail -30 "$OUT/fleet-flags/server.log"; exit 1; }
  sleep 2
done
say "healthy: $(curl -s -o /dev/null -w '%{http_code}' -m 2 http://127.0.0.1:30001/health)"
curl -s -m 60 http://127.0.0.1:30001/generate -H 'content-type: application/json' \
  -d '{"text": "def fibonacci(n):", "sampling_params": {"max_new_tokens": 64, "temperature": 0}}' \
  | "$PY" -c "import json, sys; d = json.load(sys.stdin)['meta_info']; \
print('completion_tokens', d.get('completion_tokens'), 'spec_verify_ct', d.get('spec_verify_ct'))"
curl -s -m 5 http://127.0.0.1:30001/metrics > "$OUT/fleet-flags/metrics.txt"
say "metrics: $(grep -c '^sglang:' "$OUT/fleet-flags/metrics.txt") samples; $(grep -m1 '^sglang:spec_accept_length' "$OUT/fleet-flags/metrics.txt")"
grep -m3 -i "piecewise\|cuda graph" "$OUT/fleet-flags/server.log"
say "done"
