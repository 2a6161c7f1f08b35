#!/usr/bin/env bash
# On the controller: the PDF of each tune run gpu-harness/tune_gpu.sh brought back, and its pages as PNG (the GPU
# machine has no pdflatex; this one must: .ci/run installs it, as CI's PDF tests need it).
#   bash gpu-harness/tune_pages.sh <files_at>/tune/runs.tar.xz DIR
# -> DIR/runs/<run>/report.pdf (scripts/bench_report.py tune: the report again from the run's cells, its proposal as
#    written on the machine) and DIR/runs/<run>/pages/page-N.png (pdftoppm, 60 dpi), one line a run.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1")
D=$2
PY=${PY:-.venv/bin/python}
for t in pdflatex pdftoppm; do command -v "$t" >/dev/null || { echo "no $t on this machine"; exit 2; }; done
mkdir -p "$D" && tar -C "$D" -xJf "$A"
for r in "$D"/runs/*/; do
  r=${r%/}
  "$PY" scripts/bench_report.py tune "$r" >"$r/render.log" 2>&1 || { echo "$r: no report ($(tail -1 "$r/render.log"))"; continue; }
  [ -f "$r/report.pdf" ] || { echo "$r: no PDF ($(grep -m1 warning "$r/render.log"))"; continue; }
  rm -rf "$r/pages" && mkdir -p "$r/pages" && pdftoppm -r 60 -png "$r/report.pdf" "$r/pages/page"
  echo "$r: report.pdf, $(ls "$r/pages" | wc -l) pages as PNG in $r/pages"
done
