#!/usr/bin/env bash
# Issue 16 on the lent H200 (one GPU): sglang-router in front of two real sglang 0.5.11 instances on GPU 0,
# deployed by deploy.yml as two "hosts" of the machine (gpu-harness/fleet/hosts.yml), a canary first; the
# Prometheus targets file; /metrics of both instances and the router scraped; then a rolling restart
# (drain -> restart -> smoke -> back) under a client loop through the router. Records under $OUT.
#
#   first the archives, in carry calls of their own (gpu-harness/README.md, "Carrying the archives"):
#     ctl-wheelhouse.tar.xz, wheelhouse.tar.xz, router-wheelhouse.tar.xz
#   call 1, warm (no carry):                          KEEP=1 STAGES="deploy router" bash gpu-harness/fleet.sh
#     (the first deploy brings the router and the targets too; instances without CUDA graphs: ~1 min a start)
#   call 2, warm (no carry):                                  STAGES=roll bash gpu-harness/fleet.sh
#   or, when one call cannot hold two installs and two starts: call 1 as STAGES=install (both hosts' layers,
#     tree and probe in one batch, nothing serves yet), then KEEP=1 STAGES="deploy router", then STAGES=roll
#   (KEEP=1: the servers stay for the next call; without it the call ends by stopping them, gpu-harness/stop_all.sh)
#   here, no GPU:                                            DRY_RUN=1 bash gpu-harness/fleet.sh
#
# Each call must come while the machine is still warm (within 30 s: $HOME/wh and both instances are kept).
# The router's archive: python3 gpu-harness/make_wheelhouse.py gpu-harness/router-wheels.txt .gpu/router-wheelhouse.tar.xz
# (the others: gpu-harness/README.md, section 1)
# Env: STAGES (install | deploy | router | roll, in that order), BUDGET_S (default 585), DRY_RUN=1.
set -uo pipefail
cd "$(dirname "$0")/.."
# the fleet's own inventory (its group_vars/all is inventory/gpu's): inventory/gpu's localhost must not be among
# dflash_hosts, since the router fronts every instance of that group, not only the hosts of the run
INV=(-i gpu-harness/fleet/hosts.yml)
RINV=("${INV[@]}" -i gpu-harness/fleet/router.yml)
LIMIT=(-l h200-a,h200-b)

if [ "${DRY_RUN:-0}" = 1 ]; then
  # CPU: the inventories parse, deploy.yml parses with them, and what the GPU run will render
  # (instances' flags come from the real fingerprint there; here the router, targets and batches)
  export ANSIBLE_CONFIG=$PWD/ansible.cfg PATH=$PWD/.venv/bin:$PATH
  ansible-playbook "${RINV[@]}" "${LIMIT[@]}" --syntax-check deploy.yml || exit 1
  exec ansible-playbook "${RINV[@]}" gpu-harness/fleet_dryrun.yml
fi

OUT=${OUT:-/tmp/fleet-out}
STAGES=${STAGES:-deploy}
PY=/opt/torch/.venv/bin/python3
T0=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/fleet.log") 2>&1
say() { echo "[fleet +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${BUDGET_S:-585} - ($(date +%s) - T0) )); }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none) stages='$STAGES'"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader

# 1. the carried wheelhouses, the controller side installed (gpu-harness/wheels.sh)
. gpu-harness/wheels.sh
export DFLASH_ROLLOUT_SUMMARY="$OUT/summary.json"
"$PY" gpu-harness/make_models.py /srv/models >/dev/null && say "models in /srv/models"
playbook() { timeout "$(( $(left) - 20 ))" "$PY" -m ansible.cli.playbook "$@"; }

prefix() {  # $1: host -> its dflash_prefix (gpu-harness/fleet/hosts.yml)
  "$PY" -m ansible.cli.inventory "${INV[@]}" --host "$1" 2>/dev/null \
    | "$PY" -c 'import json, sys; print(json.load(sys.stdin).get("dflash_prefix", "/opt/dflash"))'
}

scrape() {  # $1: label; every instance's and the router's /metrics, the router's workers and targets file
  mkdir -p "$OUT/$1"
  for p in 30001 30002; do curl -s -m 5 "http://127.0.0.1:$p/metrics" > "$OUT/$1/metrics-$p.txt"; done
  curl -s -m 5 http://127.0.0.1:29000/metrics > "$OUT/$1/metrics-router.txt"
  curl -s -m 5 http://127.0.0.1:30000/workers > "$OUT/$1/workers.json"
  cp /etc/prometheus/file_sd/dflash.json "$OUT/$1/" 2>/dev/null
  for h in a b; do  # each host's release manifest, from the prefix its inventory gives it
    cp "$(prefix "h200-$h")/current/manifest.json" "$OUT/$1/manifest-$h.json" 2>/dev/null
  done
  cp -a /var/log/dflash/. "$OUT/$1/logs/" 2>/dev/null
  for f in "$OUT/$1"/metrics-*.txt; do
    say "$(basename "$f"): $(grep -c '^sglang:\|^smg_' "$f") samples; $(grep -m1 '^sglang:spec_accept_length' "$f")"
  done
}

if [[ " $STAGES " == *" install "* ]]; then
  # deploy.yml's install phase for both hosts in one batch: layers, tree and probe (nothing that serves
  # changes, so no canary is needed); the deploy stage then finds them built and only starts and smoke-tests
  say "deploy.yml --tags install: h200-a and h200-b together"
  playbook "${INV[@]}" "${LIMIT[@]}" deploy.yml --tags install -e '{"dflash_rollout_serial": [2]}' \
    > "$OUT/install.log" 2>&1
  say "install rc=$? $(grep -A3 'PLAY RECAP' "$OUT/install.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
fi

if [[ " $STAGES " == *" deploy "* ]]; then
  # a server that an earlier call of this warm machine left (gpu-harness/e2e.sh's instance) holds GPU 0:
  # stopped through the runner module (the fleet's hosts have their own prefixes and do not know it)
  . gpu-harness/stop_all.sh && stop_servers 'dflash-fleet-*'
  # with the router stage in the same call, the first deploy already brings the router and the targets
  DINV=("${INV[@]}"); [[ " $STAGES " == *" router "* ]] && DINV=("${RINV[@]}")
  say "deploy.yml: h200-a (canary) then h200-b, one real instance each on GPU 0 (${DINV[*]})"
  playbook "${DINV[@]}" "${LIMIT[@]}" deploy.yml -e '{"dflash_rollout_serial": [1, 1]}' > "$OUT/deploy.log" 2>&1
  say "deploy rc=$? $(grep -A3 'PLAY RECAP' "$OUT/deploy.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
  sed -n '/DFLASH ROLLOUT SUMMARY/,$p' "$OUT/deploy.log" | head -8
  cp "$OUT/summary.json" "$OUT/summary-deploy.json" 2>/dev/null
  scrape deploy
fi

if [[ " $STAGES " == *" router "* ]]; then
  if [[ " $STAGES " != *" deploy "* ]]; then
    say "deploy.yml with the router and the Prometheus targets on h200-a (the instances do not change)"
    playbook "${RINV[@]}" "${LIMIT[@]}" deploy.yml -e '{"dflash_rollout_serial": [1, 1]}' > "$OUT/router.log" 2>&1
    say "router deploy rc=$? $(grep -A3 'PLAY RECAP' "$OUT/router.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
  fi
  "$PY" - "$OUT/through-router.json" <<'PY'
import json, sys, time, urllib.request
rows = []
for i in range(20):
    body = json.dumps({"model": "/srv/models/target", "temperature": 0, "max_tokens": 32,
                       "messages": [{"role": "user", "content": f"Count to {i}."}]}).encode()
    t = time.time()
    req = urllib.request.Request("http://127.0.0.1:30000/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    rows.append({"i": i, "s": round(time.time() - t, 3), "tokens": out["usage"]["completion_tokens"]})
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("20 requests through the router:", sum(r["tokens"] for r in rows), "tokens")
PY
  scrape router
fi

if [[ " $STAGES " == *" roll "* ]]; then
  say "rolling restart (release 2: --random-seed 2) h200-a then h200-b under a client loop through the router"
  rm -f /tmp/fleet-loop.stop
  "$PY" molecule/fleet/files/client_loop.py http://127.0.0.1:30000 /tmp/fleet-loop.stop "$OUT/client-loop.json" \
    "$(( $(left) - 30 ))" &
  loop=$!
  playbook "${RINV[@]}" "${LIMIT[@]}" deploy.yml -e '{"dflash_rollout_serial": [1, 1], "fleet_rev": 2}' \
    > "$OUT/roll.log" 2>&1
  say "rolling deploy rc=$?"
  touch /tmp/fleet-loop.stop; wait "$loop"
  say "client loop: $(cat "$OUT/client-loop.json" | tr -d '\n' | cut -c1-300)"
  sed -n '/DFLASH ROLLOUT SUMMARY/,$p' "$OUT/roll.log" | head -8
  cp "$OUT/summary.json" "$OUT/summary-roll.json" 2>/dev/null
  scrape roll
fi
. gpu-harness/stop_all.sh && stop_all  # unless KEEP=1: the install, deploy and router calls keep them for the next
say "done"
cd "$OUT" && tar czf /tmp/fleet-results.tgz . && find "$OUT" -mindepth 1 -delete && mv /tmp/fleet-results.tgz "$OUT/"
