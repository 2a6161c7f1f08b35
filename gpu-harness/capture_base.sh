#!/usr/bin/env bash
# GPU machine: describe its torch venv, the base layer of inventory/gpu (dflash_base_venv), for the
# computed overlay: interpreter, and every distribution it provides with its requirements
# (gpu-harness/describe_venv.py, the role's own reading of an existing_path base). Reads only; ~2 s.
#
#   run(command="bash gpu-harness/capture_base.sh", timeout_s=120)
#
# Then commit $OUT/h200-base.json as gpu-harness/h200-base.json: gpu-harness/make_wheelhouse.py --compute
# resolves the overlay for it on the controller and carries exactly the wheels the machine lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/capture-base-out}
BASE=${BASE:-/opt/torch/.venv}
mkdir -p "$OUT"
"$BASE/bin/python3" gpu-harness/describe_venv.py "$BASE" > "$OUT/h200-base.json"
"$BASE/bin/python3" - "$OUT/h200-base.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d['venv']}: Python {d['interpreter']['version']} {d['interpreter']['machine']} {d['interpreter']['libc']}, "
      f"{len(d['distributions'])} distributions")
print(" ".join(d["freeze"]))
PY
