"""Where a decode step's time goes: DFLASH vs DDTREE under torch's profiler, on the GPU (issue 13).

Run by gpu-harness/ddtree_profile.sh after `ddtree_e2e.py prepare`. The servers are ddtree_e2e.py's speed
servers (config-only bf16 model, CUDA graphs, triton; the test-only oracle sets acceptance: ranks all 0,
so both sides accept the same drafts per step, as in ddtree_e2e.py's matched-acceptance phase). Each
server is profiled through sglang's own profiler endpoint (`POST /start_profile` with `num_steps`:
sglang stops it itself after that many forward steps and writes `<prefix>-TP-0.trace.json.gz`, a
Chrome trace, under SGLANG_TORCH_PROFILER_DIR) while one request decodes; the trace is reduced here,
on the machine, to per-step figures (the traces themselves are too big to bring back):

  wall_ms        first to last GPU activity / steps           gpu_busy_ms   union of kernel/memcpy/memset time / steps
  client_ms_per_step  the last request's time / its verify steps (the client's view, prefill included)
  kernels        GPU kernels / step                          launches      cudaLaunchKernel (+ cuLaunchKernel) / step
  graph_launches cudaGraphLaunch / step                      syncs         host waits on the device / step
  d2h            device-to-host copies / step (each is a host round trip when followed by a sync)
  top_kernels / top_cpu_ops: where the time is (name, total ms, count)

Standard library only; summarize_trace() is pure (tests/harness/test_ddtree_profile.py).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys
import time
import urllib.request
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddtree_servers import (
    HTTP_ERRORS,
    size_for_gpu,
    start_staggered,
    stop_all,
    wait_healthy,
    write_json,
    write_oracle,
)
from gpu_memory import MemoryPlanError

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")  # fmt: skip
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
RANKS_MATCH = [0, 0, 0, 0, 0, 0]  # ddtree_e2e.py's matched acceptance: 6 drafts per step on every side
# forward steps per profile (the first request's prefill among them): fewer than one 256-token request's
# decode steps at accept length 7, so one request usually completes the window
STEPS = int(os.environ.get("DDTREE_PROFILE_STEPS", "24"))


def _union_ms(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1000.0


def summarize_trace(trace, steps, top=30):
    """A Chrome trace of torch's profiler (dict with traceEvents, or the list) -> per-step figures."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else list(trace)
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]
    steps = max(1, int(steps))
    gpu = [e for e in xs if e.get("cat") in GPU_CATS]
    kernels = [e for e in gpu if e.get("cat") == "kernel"]
    runtime = [e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    cpu_ops = [e for e in xs if e.get("cat") == "cpu_op"]
    # the window from the first to the last GPU activity (an idle scheduler before the request arrives
    # records host events, not kernels); host events only when the trace has no GPU activity
    sp = gpu or xs
    span = (max(e["ts"] + e["dur"] for e in sp) - min(e["ts"] for e in sp)) / 1000.0 if sp else 0.0

    def count(names):
        return sum(1 for e in runtime if e.get("name") in names)

    def by_name(evs):
        agg = defaultdict(lambda: [0.0, 0])
        for e in evs:
            a = agg[str(e.get("name"))[:100]]
            a[0] += e["dur"] / 1000.0
            a[1] += 1
        rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]
        return [{"name": n, "total_ms": round(t, 3), "count": c, "ms_per_step": round(t / steps, 4)} for n, (t, c) in rows]

    d2h = [e for e in gpu if e.get("cat") == "gpu_memcpy" and "DtoH" in str(e.get("name"))]
    return {
        "steps": steps,
        "events": len(xs),
        "wall_ms": round(span / steps, 4),
        "gpu_busy_ms": round(_union_ms([(e["ts"], e["ts"] + e["dur"]) for e in gpu]) / steps, 4),
        "gpu_kernel_ms": round(sum(e["dur"] for e in kernels) / 1000.0 / steps, 4),
        "kernels": round(len(kernels) / steps, 2),
        "launches": round(count(LAUNCH_CALLS) / steps, 2),
        "graph_launches": round(count(("cudaGraphLaunch", "cuGraphLaunch")) / steps, 2),
        "syncs": round(count(SYNC_CALLS) / steps, 2),
        "d2h": round(len(d2h) / steps, 2),
        "top_kernels": by_name(kernels),
        "top_cpu_ops": by_name(cpu_ops),
    }


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def profile_server(srv, prompt, n_new, steps, out_dir, timeout=180):
    """Warm up, start sglang's profiler for `steps` forward steps, decode one request, wait for the trace."""
    srv.generate(prompt, 16)
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, f"{srv.name}-*.trace.json*")):
        os.unlink(old)
    body = {"output_dir": out_dir, "num_steps": steps, "activities": ["CPU", "GPU"], "profile_prefix": srv.name,
            "record_shapes": False, "with_stack": False}  # fmt: skip
    req = urllib.request.Request(srv.base + "/start_profile", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as r:  # sglang answers plain text ("Start profiling.")
        r.read()
    end = time.time() + timeout
    res, dt = srv.generate(prompt, n_new)
    found, sent = [], 1
    while time.time() < end:
        found = sorted(glob.glob(os.path.join(out_dir, f"{srv.name}-*.trace.json*")))
        if found and os.path.getsize(found[-1]) > 0:
            time.sleep(1.0)  # written in one go by export_chrome_trace; let it finish
            break
        if sent < 8:  # the profiler stops itself after `steps` forward steps: decode until it has them
            res, dt = srv.generate(prompt, n_new)
            sent += 1
        else:
            time.sleep(0.5)
    mi = res.get("meta_info", {}) if isinstance(res, dict) else {}
    row = {"request_s": round(dt, 3), "requests": sent, "new_tokens": n_new, "verify_ct": mi.get("spec_verify_ct"),
           "accept_length": mi.get("spec_accept_length"), "trace": os.path.basename(found[-1]) if found else None}  # fmt: skip
    if not found:
        row["error"] = f"no trace in {out_dir} after {timeout} s"
        return row
    row.update(summarize_trace(load_trace(found[-1]), steps))
    if row.get("verify_ct"):  # the client's view of the last request: ms per forward step, prefill included
        row["client_ms_per_step"] = round(1000.0 * dt / row["verify_ct"], 4)
    return row


def write_markdown(summary, path):
    lines = [f"# DDTree step profile on the GPU ({summary['started']})", "",
             (f"model {summary['model']}; {summary['steps']} profiled forward steps per server (sglang /start_profile); "
             "acceptance matched by the oracle (ranks all 0)"), "",
             ("| server | accept length | client ms/step | wall ms/step | GPU busy ms/step | kernels/step | "
              "launches/step | graph launches/step | syncs/step | D2H/step |"), "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in summary["servers"].items():
        if "error" in r and "wall_ms" not in r:
            lines.append(f"| {name} | ERROR {r['error']} | | | | | | | | |")
            continue
        lines.append(f"| {name} | {r.get('accept_length')} | {r.get('client_ms_per_step')} | {r['wall_ms']} | {r['gpu_busy_ms']} | {r['kernels']} | "
                     f"{r['launches']} | {r['graph_launches']} | {r['syncs']} | {r['d2h']} |")
    for name, r in summary["servers"].items():
        for key in ("top_kernels", "top_cpu_ops"):
            if r.get(key):
                lines += ["", f"### {name}: {key.replace('_', ' ')}", "", "| name | total ms | count | ms/step |",
                          "|---|---|---|---|"]  # fmt: skip
                lines += [f"| `{k['name']}` | {k['total_ms']} | {k['count']} | {k['ms_per_step']} |" for k in r[key]]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def profiled_servers(servers, t31=False):
    """DFLASH, DDTREE b15 (and t15w in the walk A/B); with DDTREE_PROFILE_T31=1 DDTREE b31 too and DFLASH on
    b31's 32-block draft (dflash32: the same verify width without the tree)."""
    ends = ("-dflash", "-t15", "-t15w") + (("-t31", "-dflash32") if t31 else ())
    return [s for s in servers if s.name.endswith(ends)]


def run(args):
    import ddtree_e2e

    t0 = time.time()
    deadline = t0 + args.deadline_s
    trace_dir = os.path.join(args.work, "traces")
    os.environ["SGLANG_TORCH_PROFILER_DIR"] = trace_dir
    # DDTREE_PROFILE_WALK_AB=1: t15 without the walk's CUDA graph (SGLANG_DDTREE_WALK_GRAPH=0), t15w with it
    walk_ab = os.environ.get("DDTREE_PROFILE_WALK_AB") == "1"
    t31 = os.environ.get("DDTREE_PROFILE_T31") == "1"
    servers = profiled_servers(ddtree_e2e.bench_servers(args.model, 37000, args.work, args.out, walk_ab=walk_ab,
                                                        dflash32=t31), t31=t31)  # fmt: skip
    oracle = os.path.join(args.work, f"oracle-{args.model}.json")
    write_oracle(oracle, [], [])
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)), "model": args.model,
               "steps": args.steps, "servers": {}}  # fmt: skip
    try:  # every server's memory from the GPU's now (gpu_memory); nothing starts when they cannot fit
        summary["gpu_memory"] = vars(size_for_gpu(servers, ddtree_e2e.MAX_TOTAL_TOKENS))
    except MemoryPlanError as exc:
        summary["error"] = str(exc)
        write_json(os.path.join(args.out, "summary.json"), summary)
        raise SystemExit(f"[profile] {exc}") from None
    try:
        start_staggered(servers, deadline - 120)
        wait_healthy(servers, deadline - 90)
        live = [s for s in servers if s.healthy_after]
        ref = next((s for s in live if s.name.endswith("-dflash")), None)
        prompt = ddtree_e2e.PROMPTS[0]
        if ref is not None:  # the oracle's reference: DFLASH's own greedy output with the oracle off
            out, _ = ref.generate(prompt, args.new_tokens + 64)
            write_oracle(oracle, [{"input_ids": prompt, "output_ids": out["output_ids"]}], RANKS_MATCH)
        for s in servers:
            if not s.healthy_after or time.time() > deadline - 40:
                summary["servers"][s.name] = {"error": s.error or "skipped: deadline"}
                continue
            try:
                summary["servers"][s.name] = profile_server(s, prompt, args.new_tokens, args.steps, trace_dir,
                                                            timeout=max(10, int(deadline - time.time() - 30)))  # fmt: skip
            except HTTP_ERRORS as e:
                summary["servers"][s.name] = {"error": f"{type(e).__name__}: {e}"}
            write_json(os.path.join(args.out, "summary.json"), summary)
            write_markdown(summary, os.path.join(args.out, "summary.md"))
    finally:
        stop_all(servers)
        summary["elapsed_s"] = round(time.time() - t0, 1)
        write_json(os.path.join(args.out, "summary.json"), summary)
        write_markdown(summary, os.path.join(args.out, "summary.md"))
        print(f"[profile] done in {summary['elapsed_s']} s -> {args.out}/summary.md", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="hybrid", choices=["hybrid", "dense"])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--deadline-s", type=float, default=540)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
