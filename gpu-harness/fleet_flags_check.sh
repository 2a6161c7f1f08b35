#!/bin/bash
# Before the fleet run (gpu-harness/fleet.sh) and the bench matrix: do the fleet instances' flags start a real
# sglang 0.5.11 DFLASH server, how fast, with /metrics showing sglang:spec_accept_length; and does
# sglang.bench_serving import with gpu-harness/no_datasets standing in for `datasets`? One short call,
# no deploy: the sglang 0.5.11 site bundle (upstream DFLASH needs no patch) on the machine's torch venv.
#
#   python3 gpu-harness/make_wheelhouse.py gpu-harness/overlay-wheels.txt .gpu/site.tar.xz --site   (here)
#   run(command="bash gpu-harness/fleet_flags_check.sh", timeout_s=300)   (site.tar.xz on the machine: gpu-harness/README.md, "Carrying the archives")
#
# The command line is fleet-a's (gpu-harness/fleet/hosts.yml) as deploy.yml renders it on the H200.
# Results: $OUT/fleet-flags/{run.log,server.server.log,metrics.txt}; the server is stopped before the call ends.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fleet-flags-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
SITE=${SITE:-$HOME/site}
export MODELS=${MODELS:-/srv/models}
mkdir -p "$OUT/fleet-flags"
exec > >(tee "$OUT/fleet-flags/run.log") 2>&1
T0=$(date +%s)
say() { echo "[flags +$(( $(date +%s) - T0 ))s] $*"; }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
if [ ! -d "$SITE/sglang" ]; then
  . gpu-harness/carry.sh  # site.tar.xz: kept by the carry calls, or carried in this call (gpu-harness/README.md)
  ARCHIVE=$(carried site.tar.xz) || exit 2
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE" || exit 2
fi
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
"$PY" gpu-harness/make_models.py "$MODELS" >/dev/null && say "models in $MODELS"

say "import sglang.bench_serving with gpu-harness/no_datasets first on the path"
PYTHONPATH=$PWD/gpu-harness/no_datasets:$SITE "$PY" -c "import sglang.bench_serving as b, datasets; \
print('bench_serving imported; datasets stand-in:', datasets.__file__)" 2>&1 | tail -3

# fleet-a's command line (its port first: ddtree_servers.Server puts --port before the rest); start, health,
# one generation, /metrics, stop: gpu-harness/ddtree_servers.py (every server in its own session, ended at exit)
"$PY" - "$OUT/fleet-flags" <<'PY'
import os, sys, time, urllib.request
sys.path.insert(0, "gpu-harness")
import ddtree_servers as ds

out = sys.argv[1]
models = os.environ["MODELS"]
args = ["--model-path", f"{models}/target", "--host", "127.0.0.1", "--tp-size", "1",
        "--mem-fraction-static", "0.3", "--context-length", "4096", "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", f"{models}/draft", "--enable-metrics", "--load-format", "dummy",
        "--disable-cuda-graph", "--disable-piecewise-cuda-graph", "--random-seed", "1",
        "--attention-backend", "triton"]
s = ds.Server("server", 30001, args, out, out)
s.start()
try:
    ds.wait_healthy([s], time.time() + 200)
    if s.healthy_after is None:
        print(f"not healthy: {s.error}; the log's end:\n{ds.read_text(s.log_path)[-3000:]}")
        sys.exit(1)
    meta = s.post("/generate", {"text": "def fibonacci(n):",
                                "sampling_params": {"max_new_tokens": 64, "temperature": 0}})["meta_info"]
    print("completion_tokens", meta.get("completion_tokens"), "spec_verify_ct", meta.get("spec_verify_ct"))
    metrics = urllib.request.urlopen(s.base + "/metrics", timeout=5).read().decode()
    with open(f"{out}/metrics.txt", "w") as fh:
        fh.write(metrics)
    lines = [ln for ln in metrics.splitlines() if ln.startswith("sglang:")]
    print(f"metrics: {len(lines)} samples;", next((ln for ln in lines if ln.startswith("sglang:spec_accept_length")),
                                                  "no sglang:spec_accept_length"))
finally:
    ds.stop_all([s])
PY
rc=$?
grep -m3 -i "piecewise" "$OUT/fleet-flags/server.server.log"
[ "$rc" = 0 ] || { say "failed (rc $rc)"; exit "$rc"; }
say "done"
