#!/bin/bash
# Are dflash_instances' rendered command lines accepted by sglang 0.5.11's own argument parser?
#
# On the GPU machine (one H200), one call, ~2-4 minutes, no server is started:
#   1. the sglang 0.5.11 bundle (site.tar.xz, carried first: gpu-harness/README.md, "Carrying the archives") is unpacked,
#      the repository's patch series (files/patches/sglang/0.5.11) applied to a copy of its sglang
#      with module_utils/dflash_tree/, and that tree put first on PYTHONPATH;
#   2. config-only model folders at the seeds' paths (/dev/shm/Qwen3.6-27B, -DFlash: a tiny Qwen3
#      target and a DFlash draft with block_size 16) and -DFlash-b32 (the same draft, block_size 32);
#   3. gpu-harness/argparse_check.py renders the argument lists with module_utils/dflash_instances/ and
#      the rules table: this machine's LIVE fingerprint + LIVE probe (SM 9.0), the seeds' ct200
#      (lab/captures/ct200: SM 12.0 + nvcc 12.8 + xgrammar 0.1.10 -> triton / pytorch sampling /
#      grammar none) and ct129 (SM 8.6, no fallbacks), for DFLASH, DDTREE (tree, shadow-linear) and
#      NONE, plus negative controls that must be rejected (unknown flag, bad backend choice) and the
#      DDTree budget controls, judged by the server AND by dflash_instances' validator: budget 16 and
#      31 on the 16-token draft block must be rejected (budget + 1 must not exceed the block), budget
#      31 on the 32-token draft and budget 7 on the 16-token one must be accepted;
#   4. each list goes through argparse (ServerArgs.add_cli_args) and prepare_server_args
#      (ServerArgs.__post_init__) in its own subprocess.
# Results: $OUT/argparse/{cases.json,results.json,results.md,run.log}; exit 1 when a case is unexpected.
#
# Lead's command:  run(command="bash gpu-harness/argparse_check.sh", timeout_s=420)
# Then commit $OUT/argparse/results.{md,json} + run.log as gpu-harness/records/argparse-<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/argparse-out}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
SITE=${SITE:-/root/site}
WORK=${WORK:-/root/argparse-check}
mkdir -p "$OUT/argparse" "$WORK"
exec > >(tee "$OUT/argparse/run.log") 2>&1
echo "[argparse] $(date -u +%FT%TZ) python=$PY $("$PY" --version 2>&1) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader || true

if [ ! -d "$SITE/sglang" ]; then
  . gpu-harness/carry.sh  # site.tar.xz: kept by the carry calls, or carried in this call (gpu-harness/README.md)
  ARCHIVE=$(carried site.tar.xz) || exit 2
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE"
fi

# Patched tree: a full copy of the bundle's sglang with the series applied (pure python, no patch binary).
rm -rf "$WORK/tree" && mkdir -p "$WORK/tree" && cp -a "$SITE/sglang" "$WORK/tree/sglang"
"$PY" - "$SITE" "$WORK/tree" files/patches/sglang/0.5.11 <<'PYEOF'
import os, sys
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")
ansible.module_utils.__path__.append(os.path.abspath("module_utils"))
from ansible.module_utils.dflash_tree.diff import apply_series
from ansible.module_utils.dflash_tree.series import read_series_dir
site, tree, series = sys.argv[1:4]
def read(rel):
    p = os.path.join(site, rel)
    return open(p, "rb").read() if os.path.isfile(p) else None
patches = read_series_dir(series)
contents, _, touched = apply_series(read, patches)
for rel, data in contents.items():
    dst = os.path.join(tree, rel)
    if data is None:
        os.remove(dst)
        continue
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    open(dst, "wb").write(data)
print(f"[argparse] series: {[p['name'] for p in patches]} -> {len(contents)} file(s) patched")
PYEOF
find "$WORK/tree" -name __pycache__ -type d -prune -exec rm -rf {} +

# Config-only models (gpu-harness/make_models.py) at the seeds' paths (links; --load-format dummy in the
# cases). Budget 31 needs a draft trained with a 32-token block: the same draft config, same layer ids.
"$PY" -c 'import sys; sys.path.insert(0, "gpu-harness"); import make_models; make_models.write_configs(sys.argv[1], (16, 32))' "$WORK/models"
for pair in target:Qwen3.6-27B draft:Qwen3.6-27B-DFlash draft32:Qwen3.6-27B-DFlash-b32; do
  rm -rf "/dev/shm/${pair#*:}" && ln -s "$WORK/models/${pair%%:*}" "/dev/shm/${pair#*:}"
done
echo "[argparse] models: /dev/shm/Qwen3.6-27B, /dev/shm/Qwen3.6-27B-DFlash, /dev/shm/Qwen3.6-27B-DFlash-b32"

export PYTHONPATH="$WORK/tree:$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PY" gpu-harness/argparse_check.py cases --out "$OUT/argparse" --python "$PY" \
  --pythonpath "$WORK/tree" --pythonpath "$SITE"
"$PY" gpu-harness/argparse_check.py parse --cases "$OUT/argparse/cases.json" --out "$OUT/argparse" --python "$PY"
