#!/usr/bin/env python3
"""Time to healthy and tok/s on the H200 for DFLASH vs no speculation x triton vs flashinfer, each
server started from the deployed release (same venv, patched tree, env, model folders) and measured
the same way: greedy /generate with input_ids, 256 new tokens (ignore_eos), 3 prompts, batch 1,
after one warm-up.

--mode sequential (default): one extra server at a time, beside the idle deployed instance (which holds
its memory but computes nothing), so a server's time to healthy is its own start-up; `--only` picks and
orders the configs (`dflash-flashinfer` then means a fresh server of the deployed configuration, not
the deployed one). --mode concurrent: the first session's layout (all start staggered; contended
start-up; the 4th server can run out of memory, as it did on 2026-11-30)."""
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
ap.add_argument("--mode", choices=["sequential", "concurrent"], default="sequential")
ap.add_argument("--only", default="", help="comma list of dflash-triton,none-triton,dflash-flashinfer,none-flashinfer")
ap.add_argument("--mem-fraction", type=float, default=0.85,
                help="--mem-fraction-static of each extra server: sglang takes that share of the memory free when "
                     "the server starts (so it fits beside the deployed instance on any card)")
a = ap.parse_args()
t_start = time.time()
name, env, args = deployed_instance()
deployed_backend = args[args.index("--attention-backend") + 1] if "--attention-backend" in args else "?"
deployed_port = int(args[args.index("--port") + 1])
CONFIGS = [(True, "triton"), (False, "triton"), (True, "flashinfer"), (False, "flashinfer")]


def config_args(spec, backend, port):
    cargs = args if spec else drop_speculative(args)
    return set_flag(set_flag(cargs, "--attention-backend", backend), "--port", port)


def record(name, s, deadline_left):
    rec = {"name": name, "deployed_by_toolkit": False, "mode": a.mode}
    if s.wait_healthy(max(deadline_left - 40, 5)):
        rec["time_to_healthy_s"] = s.healthy_s
        rec["runs"] = measure(s.port)
    else:
        rec["error"] = "not healthy before the deadline" if s.proc.poll() is None else f"exited rc={s.proc.poll()}"
        rec["log_tail"] = s.text()[-1500:]
    s.stop()
    return rec


results = []


def report(rec):
    if rec.get("runs"):
        rec["tok_per_s_median"] = statistics.median(r["tok_per_s"] for r in rec["runs"])
    results.append(rec)
    print(json.dumps({k: v for k, v in rec.items() if k not in ("runs", "log_tail")}), flush=True)
    write()


def write():
    with open(os.path.join(a.out, "bench.json"), "w") as fh:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mode": a.mode,
                   "deployed": {"name": name, "attention_backend": deployed_backend, "port": deployed_port},
                   "results": results}, fh, indent=1)


if a.mode == "sequential":
    # the deployed instance first (as deployed), then one fresh server per config, alone beside it
    report({"name": f"dflash-{deployed_backend}", "deployed_by_toolkit": True, "runs": measure(deployed_port)})
    wanted = a.only.split(",") if a.only else [f"{'dflash' if sp else 'none'}-{be}" for sp, be in CONFIGS]
    for i, cname in enumerate(wanted):
        left = a.deadline_s - (time.time() - t_start)
        if left < 60:
            report({"name": cname, "error": f"skipped: {left:.0f} s left before the deadline"})
            continue
        spec, backend = cname.split("-", 1)[0] == "dflash", cname.split("-", 1)[1]
        cargs = set_flag(config_args(spec, backend, 30031 + i), "--mem-fraction-static", a.mem_fraction)
        report(record(cname, Server(cname, cargs, env, a.out).start(), left))
else:
    configs = []
    for i, (spec, backend) in enumerate(CONFIGS):
        if spec and backend == deployed_backend:
            configs.append({"name": f"dflash-{backend}", "deployed": True, "port": deployed_port})
            continue
        configs.append({"name": f"{'dflash' if spec else 'none'}-{backend}",
                        "args": config_args(spec, backend, 30021 + i)})
    frac = 0.55
    servers = {}
    for c in configs:
        if c.get("deployed"):
            continue
        frac += 0.1
        c["args"] = set_flag(c["args"], "--mem-fraction-static", round(frac, 2))
        s = servers[c["name"]] = Server(c["name"], c["args"], env, a.out).start()
        s.wait_allocated()
    for c in configs:
        if c.get("deployed"):
            report({"name": c["name"], "deployed_by_toolkit": True, "runs": measure(c["port"])})
        else:
            report(record(c["name"], servers[c["name"]], a.deadline_s - (time.time() - t_start)))
    for s in servers.values():
        s.stop()
write()
