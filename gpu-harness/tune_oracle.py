"""tune.yml on the GPU machine (gpu-harness/tune_gpu.sh): the prompts of its runs and the test-only oracle.

  prompts  N prompts of random token ids as a tune prompts file (JSONL, {"input_ids": [...], "max_tokens": M}):
           input_ids, because the oracle knows a request by its token ids
  oracle   each prompt's greedy continuation from a running server (the deployed instance: its /generate,
           greedy, ignore_eos, M + 32 tokens, one prompt at a time), written as the oracle file of patch 0101
           (SGLANG_DDTREE_ORACLE: {"reference": [{input_ids, output_ids}], "ranks": [...]}); with ranks
           [0, 1, 0, 0, 0, 0, 0, 0] the target's own next token is the draft's first choice at every depth but
           the second, where it is the second: a linear DFlash draft accepts 1 draft a step, a DDTree that
           keeps the second branch accepts more. The servers read the file at every step; a request whose
           output leaves the reference (a batch shape that rounds otherwise in bfloat16) is no longer steered
           from there, and its accept length says so.
Standard library only (the GPU harness's ddtree_servers.write_oracle writes the file).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddtree_servers import write_oracle

RANKS_BRANCH = [0, 1, 0, 0, 0, 0, 0, 0]


def prompts(n, input_len, max_tokens, seed=0):
    rng = random.Random(f"dflash-tune-gpu|{seed}")
    return [{"input_ids": [rng.randrange(1000, 100000) for _ in range(input_len)], "max_tokens": max_tokens}
            for _ in range(n)]


def greedy(base_url, ids, n, timeout=120):
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    req = urllib.request.Request(base_url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())["output_ids"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for prompts.jsonl and oracle.json")
    ap.add_argument("--server", default="http://127.0.0.1:30001", help="the server whose greedy output is the reference")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--no-oracle", action="store_true", help="the prompts file only")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    ps = prompts(a.prompts, a.input_len, a.max_tokens)
    with open(os.path.join(a.out, "prompts.jsonl"), "w") as fh:
        fh.write("".join(json.dumps(p) + "\n" for p in ps))
    print(f"[tune-oracle] {len(ps)} prompts of {a.input_len} ids, {a.max_tokens} new tokens each", flush=True)
    if a.no_oracle:
        return 0
    ref = [{"input_ids": p["input_ids"], "output_ids": greedy(a.server, p["input_ids"], a.max_tokens + 32)}
           for p in ps]
    write_oracle(os.path.join(a.out, "oracle.json"), ref, RANKS_BRANCH)
    print(f"[tune-oracle] reference from {a.server}: {len(ref)} continuations of {a.max_tokens + 32} tokens; "
          f"ranks {RANKS_BRANCH}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
