#!/usr/bin/env bash
# The toolkit's own deploy on the lent GPU machine (gpu-harness/README.md): deploy.yml runs ON the machine
# against itself (inventory/gpu, connection local). The machine has no systemd and no network:
# units are rendered as in production and run by scripts/unit_runner.py (dflash_service_manager:
# runner); the overlay is installed offline from the carried wheelhouse (wheelhouse.tar.xz).
#
#   the archives first, in carry calls of their own (gpu-harness/README.md, "Carrying the archives"):
#     python3 gpu-harness/make_wheelhouse.py gpu-harness/controller-wheels.txt .gpu/ctl-wheelhouse.tar.xz
#     python3 gpu-harness/make_wheelhouse.py gpu-harness/overlay-wheels.txt .gpu/wheelhouse.tar.xz
#     python3 gpu-harness/split_carry.py plan .gpu/ctl-wheelhouse.tar.xz .gpu/wheelhouse.tar.xz  -> the carry calls
#   then, each within 30 s of the one before: run(command="bash gpu-harness/e2e.sh", timeout_s=600)
#
# Env: STAGES (default "deploy bench again"; also "crosscheck", "probe", "fail", "gates"; run in the order
# deploy, crosscheck, probe, fail, gates, bench, again),
# BENCH_ARGS (passed to e2e_bench.py), BUDGET_S (default 585: the call's 600 s less the pack-up),
# KEEP=1 (leave the deployed instance running for the next call, e.g. gpu-harness/bench_matrix.sh; without it
# every server this machine runs is stopped at the end: gpu-harness/stop_all.sh),
# DEPLOY_VARS (a vars file given to deploy.yml with -e @, e.g. gpu-harness/h200-dflash.yml: the dense DFLASH
# instance that gpu-harness/bench_matrix.sh measures, instead of inventory/gpu's hybrid DDTREE one).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/e2e-out}
STAGES=${STAGES:-deploy bench again}
PY=/opt/torch/.venv/bin/python3
T0=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/e2e.log") 2>&1
say() { echo "[e2e +$(( $(date +%s) - T0 ))s] $*"; }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none) stages='$STAGES'"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.used,memory.total --format=csv,noheader

# 1. the carried wheelhouses, the controller side installed (gpu-harness/wheels.sh)
. gpu-harness/wheels.sh
VARS=(); [ -n "${DEPLOY_VARS:-}" ] && VARS=(-e "@$DEPLOY_VARS")
say "ansible: $("$PY" -m ansible.cli.playbook --version | head -1)"

# 3. config-only models + an offline tokenizer
"$PY" gpu-harness/make_models.py /srv/models >/dev/null && say "models in /srv/models"

collect() {  # what later tests can use offline
  mkdir -p "$OUT/artifacts"
  cp -a /opt/dflash/current/manifest.json "$OUT/artifacts/" 2>/dev/null
  mkdir -p "$OUT/artifacts/smoke" "$OUT/artifacts/logs"  # src/. into dst/: a second collect must not nest
  cp -a /opt/dflash/current/smoke/. "$OUT/artifacts/smoke/" 2>/dev/null
  cp -a /etc/systemd/system/dflash-*.service "$OUT/artifacts/" 2>/dev/null
  cp -a /var/log/dflash/. "$OUT/artifacts/logs/" 2>/dev/null
  sed 's/^\(.*TOKEN.*=\).*/\1<redacted>/' /opt/dflash/current/instances/*.env > "$OUT/artifacts/instance.env" 2>/dev/null
  # the layers' markers (the computed overlay: installed, from_parent, bytes, build_seconds) and the base
  mkdir -p "$OUT/artifacts/layers"
  for d in /opt/dflash/layers/*/; do
    [ -f "$d.dflash-layer.json" ] && cp -a "$d.dflash-layer.json" "$OUT/artifacts/layers/$(basename "$d").json"
  done
  du -sb /opt/dflash/layers/*/ > "$OUT/artifacts/layers/du.txt" 2>/dev/null
  [ -f "$OUT/artifacts/h200-base.json" ] || "$PY" gpu-harness/describe_venv.py /opt/torch/.venv > "$OUT/artifacts/h200-base.json" 2>/dev/null
}

left() { echo $(( ${BUDGET_S:-585} - ($(date +%s) - T0) )); }
if [[ " $STAGES " == *" deploy "* ]]; then
  say "deploy.yml (first run)"
  timeout "$(( $(left) - 30 ))" "$PY" -m ansible.cli.playbook -i inventory/gpu "${VARS[@]}" deploy.yml 2>&1 | tee "$OUT/deploy.log"; rc=${PIPESTATUS[0]}
  say "deploy rc=$rc"
  collect
fi

if [[ " $STAGES " == *" crosscheck "* ]]; then
  say "cross-check: sglang.bench_serving vs the toolkit's client on the deployed h200-dflash"
  bash gpu-harness/bench_crosscheck.sh "$OUT/crosscheck" 2>&1 | tail -30
fi

if [[ " $STAGES " == *" probe "* ]]; then
  say "per-GPU CUDA probe with the base venv's torch: GPU 0 (present) and GPU 1 (not on this machine: refused)"
  for g in "[0]" "[0,1]"; do
    "$PY" -m ansible.cli.adhoc localhost -m dflash_probe -o \
      -a "{\"python\": \"$PY\", \"components\": [\"torch\"], \"gpus\": $g}" 2>&1 | tail -c 3000 | tee -a "$OUT/probe-gpus.log"
  done
fi

if [[ " $STAGES " == *" fail "* ]]; then
  say "deliberate failure: an instance whose attention backend's kernels are not installed (fa3)"
  "$PY" gpu-harness/e2e_fail.py --out "$OUT" 2>&1 | tail -20
fi

if [[ " $STAGES " == *" gates "* ]]; then
  say "perf gate: deploy again with --disable-cuda-graph; the release must be refused and rolled back"
  "$PY" gpu-harness/e2e_gates.py --out "$OUT" --timeout "$(( $(left) - 30 ))" 2>&1 | tail -40
  collect
fi

if [[ " $STAGES " == *" bench "* ]]; then
  say "bench: time to healthy and tok/s, DFLASH vs none x triton vs flashinfer (deadline $(( $(left) - 100 )) s)"
  # shellcheck disable=SC2086  # BENCH_ARGS: e.g. "--only dflash-triton,none-flashinfer" or "--mode concurrent"
  "$PY" gpu-harness/e2e_bench.py --out "$OUT" --deadline-s "$(( $(left) - 100 ))" ${BENCH_ARGS:-} 2>&1 | tail -30
fi

if [[ " $STAGES " == *" again "* ]] && [ "$(left)" -gt 80 ]; then
  say "deploy.yml again: must change nothing"
  timeout "$(( $(left) - 20 ))" "$PY" -m ansible.cli.playbook -i inventory/gpu "${VARS[@]}" deploy.yml > "$OUT/deploy-again.log" 2>&1
  say "second run rc=$? $(grep -A1 'PLAY RECAP' "$OUT/deploy-again.log" | tail -1)"
fi
collect
. gpu-harness/stop_all.sh && stop_all
say "done"
cd "$OUT" && tar czf /tmp/e2e-results.tgz . && find "$OUT" -mindepth 1 -delete && mv /tmp/e2e-results.tgz "$OUT/"
