#!/usr/bin/env bash
# playbooks/tune.yml on the lent GPU machine (issue 38), through the toolkit's own inventory (inventory/gpu, connection
# local, runner backend), against the hybrid DDTREE release inventory/gpu deploys (h200-ddtree: Qwen3.5-class hybrid,
# dummy weights, triton) with whichever sglang version it runs (0.5.11, or 0.5.17 after gpu-harness/upgrade.sh's
# forward step: read from the release's manifest). ONE call, after a call that left that release deployed (the
# instance itself may be stopped, as upgrade.sh and ddtree_0517.sh leave it), the machine still warm:
#
#   run(command="BUDGET_S=390 bash gpu-harness/tune_gpu.sh", timeout_s=420)
#
# (gpu-harness/README.md, "Tune": the exact calls, the CPU dry run.) Two passes, each a tune.yml run of its own, one
# wave of temporary servers beside whatever serves, production untouched:
#   dummy   NONE, DFLASH and DDTREE b15/k8 from the release's flags; the draft of random weights is never right:
#           expect "speculation does not pay here", every request's accept length about 1.0;
#   oracle  DFLASH and DDTREE b15/k8, each draft steered by the test-only oracle (patch 0101, SGLANG_DDTREE_ORACLE) to
#           the target's own greedy continuation of each prompt, the right token on the second branch at depth 2
#           (gpu-harness/tune_oracle.py): DFLASH accepts 1 draft a step, DDTREE more: expect DDTREE chosen over DFLASH.
# The oracle's reference (each prompt's greedy continuation, one at a time): from the deployed instance when it
# serves (port 30001), else from an earlier call's on the same release (kept in $HOME/tune-oracle-<release>.json),
# else from the dummy pass's NONE server as soon as it is up (same target, same seeded dummy weights: the same
# greedy output; 8 prompts, a few seconds, while the wave's other servers start or its first round runs - that
# pass's NONE figures carry those requests' load, said in the summary). Without any, the oracle pass is skipped and
# says why. So the passes can also run as two calls, each with the whole budget (more rounds):
#   run(command="PASSES=dummy BUDGET_S=390 bash gpu-harness/tune_gpu.sh", timeout_s=420)
#   run(command="PASSES=oracle BUDGET_S=390 bash gpu-harness/tune_gpu.sh", timeout_s=420)   # within 30 s
# Budget: BUDGET_S (default 390: a 420 s call less the packing) is the whole call; the passes share what is left after
# the set-up, each a hard stop (timeout) and a tune budget MARGIN_S (60) below it for the playbook's own set-up, stop
# and report (tune's budget counts from its wave's start); a pass that would get less than MIN_PASS_S (150) is
# skipped and says so (run it alone: PASSES=oracle, with the deployed instance serving). The short settings of
# gpu-harness/tune_h200.yml (8 requests a cell, 3 rates, 3 rounds, the stopping rule within the budget) fit about
# 3 minutes a pass; TUNE_VARS=<file> adds or overrides tune variables (-e @file, last).
# Each pass's servers are sized from the GPU's free memory when it starts (gpu-harness/tune_memory.py over
# gpu_memory.py: an H200 or an 80 GB H100; a pass whose servers cannot fit is skipped before any starts).
# Results (4 files, $OUT/tune/): summary.md and summary.json (gpu-harness/tune_summary.py: each pass's choice, its
# interval and n, the accepted tokens, whether it says what is expected), run.log, runs.tar.xz (each run folder:
# run.json, cells/, rounds.jsonl, results.json, report.md, report.tex, charts/; the playbook's output; the oracle
# file; the sizing). The PDF and its pages as PNG: on the machine when it has pdflatex and pdftoppm (pages/ in each
# run folder), else on the controller from the returned archive: bash gpu-harness/tune_pages.sh <runs.tar.xz> DIR.
# KEEP=1 leaves the servers running (another call follows within 30 s); else every server is stopped at the end.
#
# CPU dry run against a lab host (the real tune.yml, the lab's stand-in servers playing the expected speeds,
# gpu-harness/tune_lab.yml; the host's release deployed first: deploy.yml on the lab host):
#   LAB_PREFIX=tug- lab/labctl up ct200 && ansible-playbook -i inventory/lab -i lab/.inv/tug.yml deploy.yml -l ct200
#   DRYRUN=1 PY=.venv/bin/python INVENTORY="-i inventory/lab -i lab/.inv/tug.yml" LIMIT=ct200 CONTAINER=tug-ct200 \
#     REFERENCE=dummy OUT=/tmp/o BUDGET_S=390 bash gpu-harness/tune_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
OUT=${OUT:-/tmp/tune-out}
R=$OUT/tune
PASSES=${PASSES:-dummy oracle}
BUDGET_S=${BUDGET_S:-390}
MARGIN_S=${MARGIN_S:-60}
MIN_PASS_S=${MIN_PASS_S:-150}
STAGES=${STAGES:-tune}   # wheels.sh reads it
W=${WORK:-$HOME/tune-gpu}
REFERENCE=${REFERENCE:-auto}   # the oracle's reference: auto (the deployed instance if it serves, else an earlier
                               # call's on this release, else the dummy pass's NONE server), deployed, dummy
rm -rf "$R" "$W" && mkdir -p "$R" "$W/runs"
exec > >(tee -a "$R/run.log") 2>&1
say() { echo "[tune +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
say "start $(date -u +%FT%TZ) git=$(git rev-parse --short HEAD 2>/dev/null || echo none) passes='$PASSES' budget ${BUDGET_S} s"

VARS=(-e @gpu-harness/tune_h200.yml)
if [ -n "${DRYRUN:-}" ]; then
  # the lab: the controller's .venv, a lab host's container (its stand-in servers), no GPU, no wheelhouse
  PY=${PY:-.venv/bin/python}
  read -r -a INV <<<"${INVENTORY:--i inventory/lab}"
  INV+=(-l "${LIMIT:-ct200}")
  CONTAINER=${CONTAINER:?DRYRUN needs CONTAINER, the lab host container (e.g. tu-ct200)}
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/lab/containers.conf}
  export GPU_MEMORY_MIB=${GPU_MEMORY_MIB:-81559,80000}   # an 80 GB H100 with nothing on it
  VARS+=(-e @gpu-harness/tune_lab.yml)
  HW=/tmp/tune-gpu
  onhost() { podman exec "$CONTAINER" "$@"; }
  left_servers() { podman exec "$CONTAINER" systemctl list-units 'dflash-bench-*' --all --no-legend --plain | wc -l; }
  podman exec "$CONTAINER" rm -rf "$HW" && podman exec "$CONTAINER" mkdir -p "$HW/bin" && for f in tune_oracle.py ddtree_servers.py gpu_memory.py stop_servers.py; do
    podman cp "gpu-harness/$f" "$CONTAINER:$HW/bin/$f"; done
  HOST_ORACLE=(python3 "$HW/bin/tune_oracle.py")
  say "DRYRUN: the lab host $CONTAINER (its stand-in servers), GPU_MEMORY_MIB=$GPU_MEMORY_MIB, not the GPU machine"
else
  PY=/opt/torch/.venv/bin/python3
  CTL=${CTL:-$HOME/ctl}
  if [ -d "$CTL/ansible" ]; then   # the controller side (ansible-core) as a call before installed it
    export PYTHONPATH=$CTL LANG=C.UTF-8 LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  else
    . gpu-harness/wheels.sh   # else from the carried ctl-wheelhouse.tar.xz ($HOME/wh)
  fi
  INV=(-i inventory/gpu -l localhost)
  HW=$W
  onhost() { "$@"; }
  left_servers() { ls /run/dflash 2>/dev/null | grep -c bench; }
  HOST_ORACLE=("$PY" gpu-harness/tune_oracle.py)
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
fi
[ -n "${TUNE_VARS:-}" ] && VARS+=(-e "@$TUNE_VARS")

# the deployed release: its base instance and the sglang version it runs (tune checks the rules of that version)
MANIFEST=$(onhost cat /opt/dflash/current/manifest.json 2>/dev/null) || {
  say "no deployed release (/opt/dflash/current/manifest.json): deploy first (gpu-harness/upgrade.sh, or e2e.sh STAGES=deploy)"; exit 2; }
read -r BASE SGL NOGRAPH < <("$PY" -c '
import json, sys, yaml
m = json.loads(sys.stdin.read()); want = [yaml.safe_load(open(f))["dflash_bench_base_instance"] for f in sys.argv[1:]][-1]
i = (m.get("instances") or {}).get(want) or {}
v = i.get("sglang_version") or (m.get("tree") or {}).get("sglang_version") or "?"
print(want if i else "-", v, int("--disable-cuda-graph" in (i.get("args") or [])))' gpu-harness/tune_h200.yml \
  ${DRYRUN:+gpu-harness/tune_lab.yml} <<<"$MANIFEST")
[ "$BASE" != "-" ] || { say "the deployed release has no instance the tune vars name as base: $(head -c 300 <<<"$MANIFEST")"; exit 2; }
RELID=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$MANIFEST")
say "release $RELID: instance $BASE, sglang $SGL"
SAVED="$(dirname "$HW")/tune-oracle-$RELID.json"   # the reference kept for a later call on the same release
VARS+=(-e "dflash_sglang_version=$SGL")
# the release upgrade.sh deploys has CUDA graphs off (upgrade-vars.yml): the same instance in the inventory, so that
# a proposal's diff shows the configuration's change only
[ -z "${DRYRUN:-}" ] && [ "$NOGRAPH" = 1 ] && VARS+=(-e @gpu-harness/upgrade-vars.yml)

# the prompts (input_ids: the oracle knows a request by its ids), on the controller
"$PY" gpu-harness/tune_oracle.py --out "$W" --prompts 8 --input-len 64 --max-tokens 32 --no-oracle

# the oracle's reference: the deployed instance when it serves, else the dummy pass's NONE server (below)
WATCH=""
REF_FROM="none"
if [ "$REFERENCE" != dummy ] && onhost "${HOST_ORACLE[@]}" --out "$HW" --prompts 8 --input-len 64 --max-tokens 32 \
     --server http://127.0.0.1:30001 >"$W/oracle.log" 2>&1; then
  say "oracle reference from the deployed instance: $(tail -1 "$W/oracle.log")"
  REF_FROM="the deployed instance $BASE (port 30001), before the passes"
  onhost cp "$HW/oracle.json" "$SAVED"
elif [ "$REFERENCE" = auto ] && onhost test -s "$SAVED"; then
  onhost cp "$SAVED" "$HW/oracle.json"
  say "oracle reference from an earlier call on this release ($SAVED)"
  REF_FROM="an earlier call's reference on release $RELID ($SAVED)"
elif [ "$REFERENCE" != deployed ] && [[ " $PASSES " == *" dummy "* ]]; then
  say "the oracle's reference comes from the dummy pass's NONE server (REFERENCE=$REFERENCE; the deployed instance: $(tail -1 "$W/oracle.log" 2>/dev/null || echo not asked))"
  WATCH=1
  REF_FROM="the dummy pass's NONE server, as soon as it was up (its first round carries those 8 requests)"
else
  say "the deployed instance does not serve and no dummy pass runs: no oracle reference"
fi

GPU_NAME=$( [ -n "${DRYRUN:-}" ] && echo "none (DRYRUN on $CONTAINER)" || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)
"$PY" -c 'import json,sys; print(json.dumps({"meta": dict(zip(["budget_s", "passes", "gpu", "release_manifest_base", "sglang", "reference"], sys.argv[1:]))}))' \
  "$BUDGET_S" "$PASSES" "$GPU_NAME" "$BASE" "$SGL" "$REF_FROM" >"$W/steps.jsonl"
step_line() {  # pass run rc seconds limit budget skipped
  printf '{"pass": "%s", "run": "%s", "rc": %s, "seconds": %s, "limit_s": %s, "budget_s": %s, "sglang": "%s", "skipped": %s}\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$SGL" "$7" >>"$W/steps.jsonl"
}

run_pass() {  # NAME SECONDS ENV-JSON
  local name=$1 secs=$2 env=$3 run="tune-$1" t rc
  # the servers' memory flags from the GPU's free memory now
  if ! "$PY" gpu-harness/tune_memory.py "$name" --out "$W/memory-$name.json"; then
    say "pass $name skipped: its servers do not fit the GPU now (above)"
    step_line "$name" "" null null "$secs" null '"its servers do not fit the GPU (tune_memory.py)"'
    return 0
  fi
  say "pass $name: tune.yml, tune budget $(( secs - MARGIN_S )) s (its wave's start included), hard stop at $secs s"
  t=$(date +%s)
  timeout "$secs" "$PY" -m ansible.cli.playbook "${INV[@]}" playbooks/tune.yml "${VARS[@]}" -e "@$W/memory-$name.json" \
    -e "{\"dflash_bench_tune_configurations\": \"{{ tune_gpu_passes.$name }}\", \"dflash_bench_tune_server_env\": $env,
         \"dflash_bench_tune_prompts\": \"$W/prompts.jsonl\", \"dflash_bench_tune_run_name\": \"$run\",
         \"dflash_bench_tune_results_dir\": \"$W/runs\", \"dflash_bench_tune_budget\": $(( secs - MARGIN_S ))}" \
    >"$W/$run.log" 2>&1   # straight to the file: a pipe would outlive the hard stop through the playbook's workers
  rc=$?
  # a pass its hard stop cut: its report from the rounds it recorded (each round is written as it ends)
  if [ ! -f "$W/runs/$run/results.json" ] && [ -s "$W/runs/$run/rounds.jsonl" ]; then
    "$PY" scripts/bench_report.py tune "$W/runs/$run" --no-pdf >"$W/$run.render.log" 2>&1 \
      && say "pass $name: its report from the rounds it recorded ($(wc -l <"$W/runs/$run/rounds.jsonl") rounds)" \
      || say "pass $name: no report from its rounds: $(tail -1 "$W/$run.render.log")"
  fi
  grep -E '^ok: .*"msg"|deciding|verdict|winner|does not pay|no winner' "$W/$run.log" | tail -12
  grep -A3 'PLAY RECAP' "$W/$run.log" | grep -E 'ok=' | head -2 | tr -s ' '
  if [ "$rc" != 0 ]; then
    tail -30 "$W/$run.log"
    stop_bench   # a pass cut short leaves its servers: stopped before the next pass sizes its own
  fi
  say "pass $name: rc $rc in $(( $(date +%s) - t )) s"
  step_line "$name" "$run" "$rc" "$(( $(date +%s) - t ))" "$secs" "$(( secs - MARGIN_S ))" null
}

stop_bench() {  # tune's temporary servers (never the deployed instance)
  if [ -n "${DRYRUN:-}" ]; then
    podman exec "$CONTAINER" sh -c "systemctl stop 'dflash-bench-*'; systemctl reset-failed 'dflash-bench-*'" 2>/dev/null
  else
    . gpu-harness/stop_all.sh && stop_servers "dflash-$BASE*"
  fi
}

with_speeds() {  # ENV-JSON PASS: the lab stand-in's speeds of the pass added (DRYRUN)
  if [ -n "${DRYRUN:-}" ]; then
    "$PY" -c 'import json,sys; e=json.loads(sys.argv[1]); e["DFLASH_STANDIN_SPEEDS"]="{{ tune_lab_speeds.%s | to_json }}" % sys.argv[2]; print(json.dumps(e))' "$1" "$2"
  else
    echo "$1"
  fi
}

n=$(wc -w <<<"$PASSES")
for p in $PASSES; do
  secs=$(( ($(left) - 15) / n )); n=$(( n - 1 ))
  if [ "$secs" -lt "$MIN_PASS_S" ]; then
    say "pass $p skipped: $secs s left for it (run it in a call of its own: PASSES=$p)"
    step_line "$p" "" null null "$secs" null "\"$secs s left, under MIN_PASS_S=$MIN_PASS_S\""
    continue
  fi
  case $p in
    dummy)
      if [ -n "$WATCH" ]; then
        onhost "${HOST_ORACLE[@]}" --out "$HW" --prompts 8 --input-len 64 --max-tokens 32 --scan 30100-30199 \
          --wait "$(( secs - 30 ))" >"$W/oracle.log" 2>&1 &
        WATCH_PID=$!
      fi
      run_pass dummy "$secs" "$(with_speeds '{}' dummy)"
      if [ -n "$WATCH" ]; then
        wait "$WATCH_PID"; say "oracle reference: $(tail -1 "$W/oracle.log")"
        onhost test -s "$HW/oracle.json" && onhost cp "$HW/oracle.json" "$SAVED"
      fi ;;
    oracle)
      if onhost test -s "$HW/oracle.json"; then
        run_pass oracle "$secs" "$(with_speeds "{\"SGLANG_DDTREE_ORACLE\": \"$HW/oracle.json\"}" oracle)"
      else
        say "pass oracle skipped: no oracle reference ($(tail -1 "$W/oracle.log" 2>/dev/null))"
        step_line oracle "" null null "$secs" null '"no oracle reference (the deployed instance did not serve and the dummy pass gave none)"'
      fi ;;
    *) say "unknown pass $p (dummy, oracle)" ;;
  esac
done

# the PDF's pages as PNG where this machine can (else on the controller: gpu-harness/tune_pages.sh)
for d in "$W"/runs/*/; do
  [ -f "$d/report.pdf" ] && command -v pdftoppm >/dev/null && mkdir -p "$d/pages" \
    && pdftoppm -r 60 -png "$d/report.pdf" "$d/pages/page" && say "$(basename "$d"): $(ls "$d/pages" | wc -l) PDF pages as PNG"
done
ls "$W"/runs/*/report.pdf >/dev/null 2>&1 || say "no PDF on this machine (pdflatex: $(command -v pdflatex || echo none)):" \
  "render it and its pages on the controller: bash gpu-harness/tune_pages.sh <files_at>/tune/runs.tar.xz <dir>"

[ "$(left_servers)" = 0 ] && say "no tune server left" || say "WARNING: tune servers left: $(left_servers)"
if [ -z "${DRYRUN:-}" ]; then
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  . gpu-harness/stop_all.sh && stop_all   # unless KEEP=1 (another call follows)
else
  stop_bench
  podman cp "$CONTAINER:$HW/oracle.json" "$W/oracle.json" 2>/dev/null
fi
"$PY" gpu-harness/tune_summary.py "$W" "$R" | head -60
(cd "$W" && tar -cJf "$R/runs.tar.xz" runs ./*.log ./*.json ./*.jsonl 2>/dev/null)
say "done: $(ls "$R" | tr '\n' ' ')"
