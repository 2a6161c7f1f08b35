#!/usr/bin/env python3
"""Time to healthy and tok/s on the H200 for DFLASH vs no speculation x triton vs flashinfer, each
server started from the deployed release (same venv, patched tree, env, model folders) and measured
the same way: greedy /generate with input_ids, 256 new tokens (ignore_eos), 3 prompts, batch 1,
after one warm-up. Servers start staggered (sglang sizes its KV cache from the free memory it sees),
so their time to healthy overlaps the others' start-up: a contended figure, noted as such."""
import argparse
import json
import os
import statistics
import time

from e2e_common import Server, deployed_instance, drop_speculative, post, set_flag

PROMPTS = [[151643] + [(i * 7919 + 13) % 150000 for i in range(31)],
           [(i * 104729 + 5) % 150000 for i in range(100)],
           [1, 2, 3, 4, 5, 6, 7, 8] * 4]


def measure(port, n_new=256):
    post(port, "/generate", {"input_ids": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
    runs = []
    for k, ids in enumerate(PROMPTS):
        t = time.time()
        out = post(port, "/generate", {"input_ids": ids, "sampling_params": {
            "temperature": 0, "max_new_tokens": n_new, "ignore_eos": True}})
        dt = time.time() - t
        mi = out.get("meta_info", {})
        runs.append({"prompt": k, "tokens": len(out.get("output_ids", [])), "seconds": round(dt, 3),
                     "tok_per_s": round(len(out.get("output_ids", [])) / dt, 1),
                     "spec_verify_ct": mi.get("spec_verify_ct"), "spec_accept_length": mi.get("spec_accept_length"),
                     "output_ids_head": out.get("output_ids", [])[:16]})
    return runs


ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--deadline-s", type=float, default=560)
a = ap.parse_args()
t_start = time.time()
name, env, args = deployed_instance()
deployed_backend = args[args.index("--attention-backend") + 1] if "--attention-backend" in args else "?"
deployed_port = int(args[args.index("--port") + 1])
configs = []
for i, (spec, backend) in enumerate([(True, "triton"), (False, "triton"), (True, "flashinfer"), (False, "flashinfer")]):
    if spec and backend == deployed_backend:
        configs.append({"name": f"dflash-{backend}", "deployed": True, "port": deployed_port})
        continue
    cargs = args if spec else drop_speculative(args)
    cargs = set_flag(set_flag(cargs, "--attention-backend", backend), "--port", 30021 + i)
    configs.append({"name": f"{'dflash' if spec else 'none'}-{backend}", "args": cargs})
frac = 0.55
servers = {}
for c in configs:
    if c.get("deployed"):
        continue
    frac += 0.1
    c["args"] = set_flag(c["args"], "--mem-fraction-static", round(frac, 2))
    s = servers[c["name"]] = Server(c["name"], c["args"], env, a.out).start()
    s.wait_allocated()
results = []
for c in configs:
    rec = {"name": c["name"], "deployed_by_toolkit": bool(c.get("deployed"))}
    if c.get("deployed"):
        rec["runs"] = measure(c["port"])
    else:
        s = servers[c["name"]]
        left = a.deadline_s - (time.time() - t_start)
        if s.wait_healthy(max(left - 40, 5)):
            rec["time_to_healthy_s"] = s.healthy_s
            rec["runs"] = measure(s.port)
        else:
            rec["error"] = "not healthy before the deadline" if s.proc.poll() is None else f"exited rc={s.proc.poll()}"
            rec["log_tail"] = s.text()[-1500:]
        s.stop()
    if rec.get("runs"):
        rec["tok_per_s_median"] = statistics.median(r["tok_per_s"] for r in rec["runs"])
    results.append(rec)
    print(json.dumps({k: v for k, v in rec.items() if k not in ("runs", "log_tail")}), flush=True)
for s in servers.values():
    s.stop()
with open(os.path.join(a.out, "bench.json"), "w") as fh:
    json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}, fh, indent=1)
