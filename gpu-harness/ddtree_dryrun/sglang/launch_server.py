"""NOT sglang: a CPU stand-in for `python -m sglang.launch_server` to dry-run gpu-harness/ddtree_e2e.py and
gpu-harness/ddtree_lossless.py (re-scoring with return_logprob, /flush_cache, the test-only broken commit:
while SGLANG_DDTREE_TEST_BREAK's file says kv/state, outputs go wrong after a few tokens, as a real
broken commit does, so the control's failure path is exercised too).

It answers /health and /generate (deterministic toy continuation, fake spec meta_info), writes fake
step-timing lines and, for /start_profile, a stand-in trace (gpu-harness/ddtree_profile.py), so the driver's orchestration (staggered starts, phases, oracle file, summaries) can be
checked on any machine in ~30 s without a GPU:
  python gpu-harness/ddtree_e2e.py prepare --site <dir with an sglang/ package> --work /tmp/w --series \
      files/patches/sglang/0.5.11 --out /tmp/o
  PYTHONPATH=gpu-harness/ddtree_dryrun python gpu-harness/ddtree_e2e.py run --work /tmp/w --out /tmp/o
"""

import gzip
import json
import os
import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

a = sys.argv[1:]
# DDTREE_DRYRUN_FLAGS=<files/patches/sglang/<version>/server-flags.txt> (ddtree_setup.sh sets it): every flag of the
# command must be one of that version's parser, as the real server would refuse it ("unrecognized arguments")
_flags_file = os.environ.get("DDTREE_DRYRUN_FLAGS")
if _flags_file:
    with open(_flags_file) as fh:
        known = {ln.split()[0] for ln in fh if ln.startswith("--")}
    unknown = [x for x in a if x.startswith("--") and x.split("=", 1)[0] not in known]
    if unknown:
        sys.exit(f"launch_server: error: unrecognized arguments: {' '.join(unknown)} (not flags of {_flags_file})")
port = int(a[a.index("--port") + 1])
spec = "--speculative-algorithm" in a
W = 16
if "--speculative-draft-model-path" in a:  # the draft's block, as the real server reads it
    with open(os.path.join(a[a.index("--speculative-draft-model-path") + 1], "config.json")) as fh:
        W = int(json.load(fh)["dflash_config"]["block_size"])
if "--speculative-ddtree-budget" in a:
    budget = int(a[a.index("--speculative-ddtree-budget") + 1])
    if budget + 1 > W:  # the patched server's rule (0002/0102), so a dry run catches a bad pairing
        sys.exit(
            f"ValueError: DDTREE --speculative-ddtree-budget={budget} does not fit the DFlash block size {W}"
        )
    W = budget + 1
print("Memory pool end. avail mem=1", flush=True)
time.sleep(1 + random.random())


def toy(seq):
    return (sum((i + 1) * t for i, t in enumerate(seq[-4:])) * 31 + sum(seq) + len(seq)) % 150000


def write_standin_trace(body):
    """A Chrome trace shaped like torch's (kernels, runtime calls, a D2H copy per step): NOT a profile."""
    steps, ev, t = int(body.get("num_steps") or 1), [], 0.0
    for _ in range(steps):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t, "dur": 5.0})
        for k in range(3 if spec else 1):
            ev.append({"ph": "X", "cat": "kernel", "name": f"standin_kernel_{k}", "ts": t + 10 + 100 * k, "dur": 80.0})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": t + 400, "dur": 2.0})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t + 395, "dur": 10.0})
        t += 1000.0
    out = os.path.join(body["output_dir"], f"{body.get('profile_prefix') or 'standin'}-TP-0.trace.json.gz")
    os.makedirs(body["output_dir"], exist_ok=True)
    with gzip.open(out, "wt") as fh:
        json.dump({"traceEvents": ev, "note": "NOT sglang: ddtree_dryrun stand-in trace"}, fh)


class H(BaseHTTPRequestHandler):
    def log_message(self, *x):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.startswith("/flush_cache"):
            self.rfile.read(length)
            self.send_response(200)
            self.end_headers()
            return
        body = json.loads(self.rfile.read(length))
        if self.path.startswith("/start_profile"):  # a stand-in trace, written at once (sglang: after num_steps)
            write_standin_trace(body)
            self.send_response(200)
            self.end_headers()
            return
        ids = body["input_ids"]
        n = body["sampling_params"]["max_new_tokens"]
        batch = isinstance(ids[0], list)
        outs = []
        broken = False
        flag = os.environ.get("SGLANG_DDTREE_TEST_BREAK")
        if flag and os.path.exists(flag):
            with open(flag) as fh:
                broken = fh.read().split()[:1] in (["kv"], ["state"])
        starts = body.get("logprob_start_len")
        for i, p in enumerate(ids if batch else [ids]):
            seq = list(p)
            o = []
            for _ in range(n):
                t = toy(seq)
                if broken and len(o) >= 5:
                    t = (t + 1) % 150000
                seq.append(t)
                o.append(t)
            vc = (n + 2) // 3 if spec else None
            meta = {"spec_verify_ct": vc, "spec_accept_length": (n / vc) if vc else None}
            if body.get("return_logprob"):
                start = starts[i] if isinstance(starts, list) else starts
                toks, tops = [], []
                for j in range(start, len(p)):
                    if j == start:  # as sglang: the first position has no log-prob
                        toks.append([None, p[j], None])
                        tops.append(None)
                        continue
                    best = toy(list(p[:j]))
                    toks.append([0.0 if p[j] == best else -5.0, p[j], None])
                    tops.append([[0.0, best, None]])
                meta.update(input_token_logprobs=toks, input_top_logprobs=tops)
            outs.append({"output_ids": o, "meta_info": meta})
            tp = os.environ.get("SGLANG_DFLASH_STEP_TIMING")
            if tp and os.path.exists(tp + ".on"):
                with open(tp, "a") as fh:
                    for _ in range(vc):
                        fh.write(
                            json.dumps(
                                {
                                    "algo": "X",
                                    "bs": 1,
                                    "width": W,
                                    "cuda_graph": True,
                                    "accepted": 2,
                                    "prepare_ms": 1.0,
                                    "draft_ms": 0.7,
                                    "block_ms": 0.45,
                                    "head_ms": 0.25,
                                    "tree_ms": 0.3,
                                    "target_ms": 2.0 + W / 100,
                                    "verify_ms": 0.3,
                                    "draft_append_ms": 0.2,
                                }
                            )
                            + "\n"
                        )
        res = outs if batch else outs[0]
        data = json.dumps(res).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
