#!/bin/bash
# The patched sglang tree on the GPU machine (one H200): built by our own code under Python 3.12,
# then checked with sglang 0.5.11's real code (no server is started; each case imports sglang in a fresh
# child, ~20 s each on the H200: ~7 minutes in all, so give the call timeout_s=600).
#
#   1. builds, from the pinned wheel (.cache/wheels, carried) with module_utils/dflash_tree/, the
#      registration prefix of the series (0001-0002) and the whole series; each twice (the second run
#      must change nothing); compiles every patched file under this Python;
#   2. with PYTHONPATH=<tree>:<sglang bundle>: `import sglang` comes from the tree,
#      SpeculativeAlgorithm.DDTREE.is_dflash() and is_ddtree() are true, sglang's own argparse
#      (ServerArgs.add_cli_args) takes the --speculative-ddtree-* flags and rejects bad ones, and
#      prepare_server_args (ServerArgs.__post_init__, on config-only models) rejects bad values with
#      our messages and, on the registration tree, refuses DDTREE with the "not in this patch series
#      yet" message once the values are valid; DFLASH still passes. On the whole series DDTREE is
#      accepted (verify width budget + 1), budget + 1 above the draft's block is refused (16 and 31 on
#      the 16-block draft, 8 on an explicit 8-token block) and budget 31 on a 32-block draft accepted.
# Needs: the bundle site.tar.xz (`python3 gpu-harness/make_wheelhouse.py gpu-harness/overlay-wheels.txt
# .gpu/site.tar.xz --site`, carried first: gpu-harness/README.md, "Carrying the archives"), the wheel in .cache/wheels
# (the unit tests download it: tests/sglang_wheel.py; 7 MB, carried in this call); /opt/torch/.venv (torch cu130).
#
# Lead's command:
#   run(command="bash gpu-harness/tree_check.sh",
#       carry=[".cache/wheels/sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl"], timeout_s=600)
# Then commit $OUT/tree_check/{results.md,results.json,run.log} as gpu-harness/records/tree_check-<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tree-check-out}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
SITE=${SITE:-/root/site}
WORK=${WORK:-/root/tree-check}
WHEEL=.cache/wheels/sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl
mkdir -p "$OUT/tree_check" "$WORK"
exec > >(tee "$OUT/tree_check/run.log") 2>&1
echo "[tree_check] $(date -u +%FT%TZ) python=$PY $("$PY" --version 2>&1) git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo "[tree_check] command: bash gpu-harness/tree_check.sh (carry .gpu .cache/wheels)"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader || true

[ -f "$WHEEL" ] || { echo "[tree_check] missing $WHEEL (carry .cache/wheels; pytest tests/unit/tree/test_patch_sglang.py fetches it)"; exit 2; }
want=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheels"][sys.argv[2]]["sha256"])' \
  files/patches/sglang/0.5.11/wheels.json "$(basename "$WHEEL")")
got=$(sha256sum "$WHEEL" | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "[tree_check] $WHEEL sha256 $got, pinned $want"; exit 2; }

if [ ! -d "$SITE/sglang" ]; then
  . gpu-harness/carry.sh  # site.tar.xz: kept by the carry calls, or carried in this call (gpu-harness/README.md)
  ARCHIVE=$(carried site.tar.xz) || exit 2
  mkdir -p "$SITE" && tar -C "$SITE" -xJf "$ARCHIVE"
fi
rm -rf "$WORK/trees"
"$PY" gpu-harness/tree_check.py --wheel "$WHEEL" --site "$SITE" --work "$WORK" --out "$OUT/tree_check"
