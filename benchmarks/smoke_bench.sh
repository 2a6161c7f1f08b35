#!/usr/bin/env bash
# Smoke-test timings on a lab host (results: benchmarks/smoke_bench.md):
#   crash-to-verdict   restart of a unit whose server exits at import -> failed verdict (+ diagnosis)
#   health lag         /health turning 200 -> the wait returning / the next task starting
#   rollback.yml       wall time of ansible-playbook rollback.yml, including its smoke test
# Uses its own lab host: LAB_PREFIX (default bench-) + ct200 via lab/labctl, the release scenario's
# fixture (molecule/release/prepare.yml + converge.yml), then two releases to switch between.
#   benchmarks/smoke_bench.sh [RUNS]      (default 3; KEEP_LAB=1 leaves the lab host running)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
runs="${1:-3}"
export LAB_PREFIX="${LAB_PREFIX:-bench-}"
inv=(-i inventory/lab -i "lab/.inv/${LAB_PREFIX%-}.yml" -l ct200)
ap=.venv/bin/ansible-playbook
out="$(mktemp -d)"
now() { date +%s.%N; }

if [[ "$(podman container inspect -f '{{.State.Status}}' "${LAB_PREFIX}ct200" 2>/dev/null)" != running ]]; then
  lab/labctl up ct200 >/dev/null
fi
run() { "$@" >"$out/last.log" 2>&1 || { tail -40 "$out/last.log"; exit 1; }; }
current() { podman exec "${LAB_PREFIX}ct200" readlink /opt/dflash/current | sed 's#.*/##'; }
run $ap "${inv[@]}" molecule/release/prepare.yml
run $ap "${inv[@]}" molecule/release/converge.yml
ids=("$(current)")
run $ap "${inv[@]}" molecule/release/converge.yml -e '{"release_extra_main_args": ["--grammar-backend", "none"]}'
ids+=("$(current)")
[[ "${ids[0]}" != "${ids[1]}" ]] || { echo "expected two releases, got ${ids[*]}"; exit 1; }

export BENCH_OUT="$out/wait.json"
run $ap "${inv[@]}" benchmarks/smoke_bench.yml -e bench_runs="$runs"

rb=()
for i in $(seq 1 "$runs"); do
  target="${ids[$(( (i - 1) % 2 ))]}"  # current is ids[1]: every run switches
  t0=$(now)
  run $ap "${inv[@]}" rollback.yml -e rollback_to="$target"
  t1=$(now)
  rb+=("$(python3 -c "print(round($t1 - $t0, 2))")")
done

python3 - "$out/wait.json" "${rb[@]}" <<'PY'
import json, statistics as st, sys
w = json.load(open(sys.argv[1])); rb = [float(x) for x in sys.argv[2:]]
def row(name, xs, goal):
    return f"| {name} | {min(xs):.2f} | {st.median(xs):.2f} | {max(xs):.2f} | {goal} |"
print("| measure (s) | min | median | max | goal |\n|---|---|---|---|---|")
c, l = w["crash"], w["lag"]
print(row("crash: restart -> failed verdict", [x["restart_to_verdict_s"] for x in c], "<= 10"))
print(row("crash: restart -> verdict + diagnosis (module returns)", [x["restart_to_diagnosis_s"] for x in c], "<= 10"))
print(row("crash: restart -> next Ansible task starts", [x["restart_to_next_task_s"] for x in c], ""))
print(row("lag: /health 200 -> wait verdict", [x["health_200_to_verdict_s"] for x in l], "<= 1"))
print(row("lag: /health 200 -> module returns", [x["health_200_to_module_return_s"] for x in l], "<= 1"))
print(row("lag: /health 200 -> next Ansible task starts", [x["health_200_to_next_task_s"] for x in l], ""))
print(row("rollback.yml wall time incl. smoke", rb, "<= 15"))
print("causes diagnosed:", sorted({x["cause"] for x in c}))
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
[[ "${KEEP_LAB:-0}" == 1 ]] || lab/labctl down ct200 >/dev/null
rm -rf "$out"
