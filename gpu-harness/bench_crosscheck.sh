#!/usr/bin/env bash
# The bench's load generator against SGLang's own (issue 14): sglang.bench_serving from the deployed venv with
# the instance's env, and the toolkit's client (module_utils/dflash_bench/client.py), the same request shape
# (random ids, 256 in / 256 out, 4 requests, concurrency 1) on the idle deployed instance h200-dflash.
# Run by gpu-harness/e2e.sh's stage `crosscheck` (after `deploy`, with DEPLOY_VARS=gpu-harness/h200-dflash.yml).
#   bash gpu-harness/bench_crosscheck.sh OUT_DIR        -> OUT_DIR/bench_serving.jsonl, client_random_c1.json
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench_crosscheck.sh OUT_DIR}
PY=${PY:-/opt/torch/.venv/bin/python3}
ENV=/opt/dflash/current/instances/h200-dflash.env
[ -f "$ENV" ] || { echo "no deployed h200-dflash ($ENV): deploy it first"; exit 2; }
mkdir -p "$OUT"
(
  set -a; . "$ENV"; set +a
  echo "sglang.bench_serving: random ids 256 in / 256 out, 4 requests, c1"
  # the overlay leaves `datasets` out; bench_serving imports it for a dataset this check does not use:
  # gpu-harness/no_datasets stands in for it, and says so if called
  PYTHONPATH=$PWD/gpu-harness/no_datasets${PYTHONPATH:+:$PYTHONPATH} \
  timeout 90 /opt/dflash/current/venv/bin/python -m sglang.bench_serving --backend sglang \
    --base-url http://127.0.0.1:30001 --dataset-name random-ids --random-input-len 256 --random-output-len 256 \
    --random-range-ratio 1 --num-prompts 4 --max-concurrency 1 --tokenizer /srv/models/target \
    --output-file "$OUT/bench_serving.jsonl" --disable-tqdm 2>&1 | tail -25
)
echo "the toolkit's client: the same shape"
timeout 60 "$PY" -c "import json, os, ansible.module_utils; ansible.module_utils.__path__.append(os.path.abspath('module_utils')); \
from ansible.module_utils.dflash_bench import client as c; \
print(json.dumps(c.run_cell('http://127.0.0.1:30001', 'random', 1, {'random': {'input_len': 256, \
'output_len': 256, 'per_slot': 4}}, 60)['summary']))" | tee "$OUT/client_random_c1.json"
