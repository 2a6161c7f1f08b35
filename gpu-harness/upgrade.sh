#!/usr/bin/env bash
# sglang 0.5.11 -> 0.5.17 as a release like any other, on the lent GPU machine (issue 34), ONE call (< 9.5 min):
# deploy.yml on inventory/gpu's hybrid DDTREE b15 / k8 instance with sglang 0.5.11 (an identical release already
# there is reused: the run then changes nothing), the upgrade to 0.5.17 (-e dflash_sglang_version=0.5.17: its own
# overlay layer and patched tree, healthy, smoke test passed, the performance gate against the 0.5.11 release),
# deploy.yml again (changed=0), rollback.yml back to 0.5.11 and rollback.yml -e rollback_to=<the 0.5.17 release>
# forward again. After each step the state (gpu-harness/upgrade_state.yml: releases, manifest, smoke records,
# sglang's own /get_server_info version) is read, and gpu-harness/upgrade_summary.py judges each step.
#
#   the archives first, in carry calls of their own (gpu-harness/README.md, "sglang 0.5.17"): ctl-wheelhouse.tar.xz,
#   wheelhouse.tar.xz (0.5.11's overlay) and wheelhouse-0.5.17.tar.xz; then
#     run(command="bash gpu-harness/upgrade.sh", timeout_s=600)
#
# Env: STAGES (default "deploy511 upgrade again rollback forward", run in that order, each only when named; a step
#      starts only with the time it needs left), FROM / TO (0.5.11 / 0.5.17), GRAPHS=1 (inventory/gpu's instance as
#      it is, CUDA graphs on; default gpu-harness/upgrade-vars.yml: graphs off, four starts fit one call),
#      KEEP=1 (leave the server running), BUDGET_S (570).
# CPU dry run against a lab host (real deploy.yml and rollback.yml, the lab's stand-in server: `make lab-up`):
#   DRYRUN=1 PY=.venv/bin/python INVENTORY="-i inventory/lab -i lab/.inv/ver.yml" LIMIT=ct200 OUT=/tmp/o \
#     bash gpu-harness/upgrade.sh
# Results: $OUT/upgrade/{summary.md,summary.json,logs.tar.xz} (the playbook logs and states inside).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
OUT=${OUT:-/tmp/upgrade-out}/upgrade
STAGES=${STAGES:-deploy511 upgrade again rollback forward}
FROM=${FROM:-0.5.11}
TO=${TO:-0.5.17}
BUDGET_S=${BUDGET_S:-570}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { echo "[upgrade +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none) $FROM -> $TO stages='$STAGES'"
: >"$OUT/steps.jsonl"

pack() {  # what comes back: summary.md, summary.json, logs.tar.xz (logs, states, run.log)
  "$PY" gpu-harness/upgrade_summary.py "$OUT" "$FROM" "$TO" >/dev/null 2>&1
  (cd "$OUT" && tar -cJf logs.tar.xz --remove-files ./*.log ./*.state.json steps.jsonl 2>/dev/null)
}

if [ -n "${DRYRUN:-}" ]; then
  # the lab: the controller's .venv, the lab inventory and host; no wheelhouse, no models to write
  PY=${PY:-.venv/bin/python}
  read -r -a INV <<<"${INVENTORY:--i inventory/lab}"
  INV+=(-l "${LIMIT:-ct200}")
  VARS=()
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/lab/containers.conf}
  say "DRYRUN: the lab host ${LIMIT:-ct200} (its stand-in server), not the GPU machine"
else
  PY=/opt/torch/.venv/bin/python3
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.used,memory.total --format=csv,noheader
  . gpu-harness/wheels.sh   # the carried wheelhouses (0.5.11's, 0.5.17's), the controller side installed
  "$PY" gpu-harness/make_models.py /srv/models >/dev/null && say "models in /srv/models"
  INV=(-i inventory/gpu)
  if [ "${GRAPHS:-0}" = 1 ]; then VARS=(); else VARS=(-e @gpu-harness/upgrade-vars.yml); fi
fi
trap pack EXIT

# step NAME NEEDS_S PLAYBOOK [ARGS...]: run it (within the time left), then read the state; one line of steps.jsonl
step() {
  local name=$1 needs=$2 play=$3 rc t
  shift 3
  if [[ " $STAGES " != *" $name "* ]]; then return 0; fi
  if [ "$(left)" -lt "$needs" ]; then say "$name: skipped, $(left) s left and it needs about $needs"; return 1; fi
  say "$name: $play $*"
  t=$(date +%s)
  timeout "$(( $(left) - 15 ))" "$PY" -m ansible.cli.playbook "${INV[@]}" "${VARS[@]}" "$play" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  "$PY" -m ansible.cli.playbook "${INV[@]}" gpu-harness/upgrade_state.yml -e "upgrade_state_out=$OUT/$name.state.json" \
    >"$OUT/$name.state.log" 2>&1 || say "$name: the state could not be read (see $name.state.log)"
  printf '{"step": "%s", "rc": %s, "seconds": %s, "log": "%s.log", "state": "%s.state.json"}\n' \
    "$name" "$rc" "$(( $(date +%s) - t ))" "$name" "$name" >>"$OUT/steps.jsonl"
  say "$name: rc $rc in $(( $(date +%s) - t )) s; $(grep -A3 'PLAY RECAP' "$OUT/$name.log" | grep -E 'ok=' | head -2 | tr -s ' ')"
  [ "$rc" = 0 ] || tail -25 "$OUT/$name.log"
  "$PY" gpu-harness/upgrade_summary.py "$OUT" "$FROM" "$TO" >/dev/null 2>&1
  return "$rc"
}

current() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("current") or "")' "$OUT/$1.state.json" 2>/dev/null; }

# seconds each step needs at least (H200 records: a deploy with a new layer and tree and a start 120-210 s, an
# unchanged re-run 55 s, a restart with its smoke test 70-140 s)
step deploy511 150 deploy.yml -e "dflash_sglang_version=$FROM" || say "deploy511 did not pass: the steps after it judge what they find"
step upgrade 170 deploy.yml -e "dflash_sglang_version=$TO"
R2=$(current upgrade)
step again 60 deploy.yml -e "dflash_sglang_version=$TO"
step rollback 90 rollback.yml
[ -n "$R2" ] && step forward 90 rollback.yml -e "rollback_to=$R2"

if [ -z "${DRYRUN:-}" ]; then
  . gpu-harness/stop_all.sh && stop_all
fi
"$PY" gpu-harness/upgrade_summary.py "$OUT" "$FROM" "$TO"
say "done"
