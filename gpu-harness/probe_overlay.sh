#!/usr/bin/env bash
# GPU machine: build a dflash overlay layer with uv on top of the machine's torch venv (used as
# an existing_path base layer, torch 2.11.0+cu130), offline from a directory of wheels, then run
# the dflash probe with the overlay's python. Writes $OUT/h200.json (fixture form for
# tests/fixtures/probe/h200.json), $OUT/layers.json and $OUT/build.log.
#
#   gpu-harness/probe_overlay.sh WHEEL_DIR [BASE_VENV]
#
#   WHEEL_DIR  the sglang 0.5.11 runtime wheels that the torch venv lacks (e.g. the 62 wheels of
#              shared/gpu/carried_wheels.txt); every *.whl in it is pinned into the overlay and
#              installed with --no-index --no-deps (the rest comes from the base).
#   BASE_VENV  default /opt/torch/.venv
# Needs: uv on PATH (or UV=...), nvidia-smi, no network. Runs from the repository root.
set -euo pipefail
WHEELS=$(cd "${1:?usage: $0 WHEEL_DIR [BASE_VENV]}" && pwd)
BASE=${2:-/opt/torch/.venv}
OUT=${OUT:-$(pwd)/.cache/probe-out}
UV=${UV:-$(command -v uv)}
PREFIX=${PREFIX:-/tmp/dflash-probe-prefix}
mkdir -p "$OUT"
DRIVER_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
echo "uv: $("$UV" --version); base: $BASE; wheels: $(ls "$WHEELS"/*.whl | wc -l); driver CUDA: ${DRIVER_CUDA:-?}"
"$BASE/bin/python" - "$WHEELS" "$BASE" "$PREFIX" "$UV" "$OUT" "${DRIVER_CUDA:-}" "$0 $*" <<'PY' 2>&1 | tee "$OUT/build.log"
import json, os, sys, time
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")
ansible.module_utils.__path__.append(os.path.join(os.getcwd(), "module_utils"))
from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import probe as P

wheels, base, prefix, uv, out, driver_cuda, command = sys.argv[1:8]
reqs = []
for f in sorted(os.listdir(wheels)):
    if f.endswith(".whl"):
        name, version = f[:-4].split("-")[:2]
        reqs.append(f"{L.canonical_name(name)}=={version}")
layers = [
    {"name": "torch", "existing_path": base, "cuda": "13.0"},
    {"name": "overlay", "parent": "torch", "python": os.path.join(base, "bin", "python"), "cuda": "13.0",
     "no_index": True, "no_deps": True, "find_links": [wheels], "requirements": reqs},
]
t0 = time.monotonic()
builder = L.LayerBuilder(prefix, uv, cache_dir=os.path.join(prefix, "cache", "uv"))
items, changed, _ = builder.ensure(layers)
build_s = round(time.monotonic() - t0, 1)
fact = L.layers_fact(items)
print(json.dumps({"built": [i["name"] for i in items if i.get("changed")], "seconds": build_s}))
t0 = time.monotonic()
required = ["torch", "sgl_kernel", "flashinfer", "xgrammar", "soundfile", "sglang"]
probe = P.run_probe(fact[-1]["python"], timeout=600)
problems = P.gate(probe, driver_cuda or None, required)
print("\n".join(P.summary(probe)))
print("problems:", problems)
ok = {k: v for k, v in probe.items() if not k.startswith("_") and v.get("ok")}
expect = {
    "components": [c for c in P.COMPONENTS],
    "driver_cuda_version": driver_cuda or None,
    "required": required,
    "problems": problems,
    "versions": {k: ok[k]["version"] for k in ("torch", "flashinfer", "xgrammar", "soundfile", "sglang") if k in ok},
}
if "torch" in ok:
    expect["torch_cuda"] = ok["torch"]["cuda"]
if "sglang" in ok:
    expect["speculative_algorithms"] = ok["sglang"]["speculative_algorithms"]
record = {
    "source": "gpu-harness/probe_overlay.sh on the lent GPU machine (H200): overlay built with uv on "
              f"{base} (existing_path base), offline from {len(reqs)} wheels",
    "command": command,
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "build_seconds": build_s,
    "probe_seconds": round(time.monotonic() - t0, 1),
    "layers": fact,
    "probe": probe,
    "expect": expect,
}
with open(os.path.join(out, "h200.json"), "w") as fh:
    json.dump(record, fh, indent=1, sort_keys=True)
    fh.write("\n")
with open(os.path.join(out, "layers.json"), "w") as fh:
    json.dump(fact, fh, indent=1)
print("wrote", os.path.join(out, "h200.json"))
PY
