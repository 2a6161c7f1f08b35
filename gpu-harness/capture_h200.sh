#!/usr/bin/env bash
# Capture the lent H200 in the dflash_fingerprint capture-folder format (no Ansible needed there).
#
#   run (device tool, repository root):  bash gpu-harness/capture_h200.sh
#
# Writes $OUT/h200-capture/ (nvidia-smi.txt, nvidia-smi-query.csv, nvidia-smi-apps.csv,
# nvidia-smi-q.xml, proc-driver-nvidia-version.txt, nvcc-version.txt, torch.json, os-release,
# glibc-version.txt, cuda-toolkits.json, capture-meta.json) and $OUT/h200-fingerprint.json (the
# parsed fact). Commit the folder as tests/fixtures/captures/h200/; tests/unit/fingerprint/test_fingerprint_h200.py
# then checks SM 9.0 / hopper / 143771 MiB / driver 580.159.04 / CUDA 13.0 / torch 2.11.0+cu130.
# Needs: nvidia-smi on PATH, torch in VENV_PYTHON, a python3 >= 3.9 with ansible-core importable (PY, default
# VENV_PYTHON): scripts/fingerprint.py imports the toolkit as ansible.module_utils.dflash_fingerprint.
# Takes a few seconds (the torch import dominates); touches nothing outside $OUT.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_root="${OUT:?OUT must name the folder whose files come back}"
venv_python="${VENV_PYTHON:-/opt/torch/.venv/bin/python3}"
py="${PY:-$venv_python}"

mkdir -p "$out_root/h200-capture"
"$py" "$repo/scripts/fingerprint.py" \
  --capture-dir "$out_root/h200-capture" --venv-python "$venv_python" \
  >"$out_root/h200-fingerprint.json"
{
  echo "captured: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) by gpu-harness/capture_h200.sh"
  echo "command: $py scripts/fingerprint.py --capture-dir \$OUT/h200-capture --venv-python $venv_python"
} >"$out_root/h200-capture/SOURCE.md"
ls -l "$out_root/h200-capture"
cat "$out_root/h200-fingerprint.json"
