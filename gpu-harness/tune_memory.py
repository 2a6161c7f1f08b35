"""The memory of tune.yml's temporary servers on the GPU machine (gpu-harness/tune_gpu.sh), from gpu_memory.py.

A pass of tune_gpu.sh starts its servers (gpu-harness/tune_h200.yml's tune_gpu_passes) as one wave on the GPU the
deployed instance already holds half of. A fixed --mem-fraction-static sized for a 141 GB H200 does not carry
over to an 80 GB H100, and the hybrid target gives its linear-attention state cache a share of whatever
memory the fraction leaves (sglang 0.5.11, handle_max_mamba_cache: mamba_full_memory_ratio) unless the cache
size is given. So, from the GPU's memory now and the pass's servers:

  * gpu_memory.plan() shares the free memory (less its reserve) among them and steps the request and KV knobs
    down where a server's static pool would not hold what it needs; a pass that cannot fit stops before any
    server starts, saying how many would (exit 3);
  * every pool is bounded by a flag, so a server takes the same memory whatever the others took before it:
    --max-total-tokens (KV), --max-running-requests with --max-mamba-cache-size = requests x the state cache's
    slots a request (the hybrid's state cache), --cuda-graph-max-bs;
  * the wave's servers start together (the bench stage's waves), so each one's memory profile may already see
    the others' pools: sglang gives a server ``free after its load - free before it x (1 - fraction)``, and
    the fraction must leave its own pools even when every other server has taken all it will. That fraction
    (at most gpu_memory.FRACTION_CAP) is checked here, and the cap is passed: the flags above bound the rest.

Prints the pass's sizing and writes ``{"dflash_bench_extra_args": [...]}`` for ansible-playbook ``-e @FILE``
(tune_h200.yml's own extra args first). ``GPU_MEMORY_MIB=TOTAL,FREE`` gives the figures for a CPU dry run.
Needs PyYAML (the GPU machine's base venv has it); the sizing itself is gpu_memory.py's (standard library).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_memory

VARS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_h200.yml")
SIZED_FLAGS = ("--mem-fraction-static", "--max-total-tokens", "--max-running-requests", "--cuda-graph-max-bs",
               "--max-mamba-cache-size")


def servers_of(configs, model, draft_block=16):
    """gpu_memory's layout of a pass: [{name, model, args, verify_tokens}], one per configuration."""
    out = []
    for i, cfg in enumerate(configs):
        algo = str(cfg.get("algorithm") or "NONE").upper()
        name = "-".join(str(x) for x in (algo.lower(), cfg.get("budget"), cfg.get("topk")) if x is not None)
        spec = algo != "NONE"
        verify = int(cfg["budget"]) + 1 if algo == "DDTREE" else (draft_block if spec else 0)
        out.append({"name": f"{i}:{name}", "model": model,
                    "args": ["--speculative-algorithm", algo] if spec else [], "verify_tokens": verify})
    return out


def start_fraction(plan, servers, max_total_tokens) -> float:
    """The smallest --mem-fraction-static that leaves each server its pools when it starts beside the others:
    the free memory it saw before loading less every other server's whole use and its own static pool."""
    tokens = max_total_tokens * plan.requests // gpu_memory.REQUESTS[0]
    use = {s["name"]: gpu_memory.need_mib(s["model"], s["args"], plan.requests, s["verify_tokens"])
           + gpu_memory.outside_mib(s["args"], tokens) for s in servers}
    worst = max(sum(use.values()) - use[s["name"]]
                + gpu_memory.need_mib(s["model"], s["args"], plan.requests, s["verify_tokens"]) for s in servers)
    return worst / plan.free_mib


def size(configs, extra_args, model, max_total_tokens, total_mib, free_mib, draft_block=16):
    """(the pass's dflash_bench_extra_args, the plan, the start fraction it needs). Raises MemoryPlanError."""
    servers = servers_of(configs, model, draft_block)
    plan = gpu_memory.plan(total_mib, free_mib, servers, max_total_tokens)
    needed = start_fraction(plan, servers, max_total_tokens)
    if needed > gpu_memory.FRACTION_CAP:
        raise gpu_memory.MemoryPlanError(
            f"{len(servers)} servers starting at once on {free_mib} of {total_mib} MiB free: the last to profile its "
            f"memory could need --mem-fraction-static {needed:.3f} (> {gpu_memory.FRACTION_CAP}); start fewer at once "
            "(dflash_bench_parallel) or free the GPU first (bash gpu-harness/stop_all.sh)")
    knobs = plan.knobs(max_total_tokens)
    slots = gpu_memory.MODELS[model]["slot_mib"]
    if slots:
        knobs["--max-mamba-cache-size"] = str(plan.requests * gpu_memory.SLOTS_PER_REQUEST)
    knobs["--mem-fraction-static"] = str(gpu_memory.FRACTION_CAP)
    kept = []
    words = [str(a) for a in extra_args or []]
    i = 0
    while i < len(words):  # tune_h200.yml's own flags, less any this sizing sets
        if words[i] in SIZED_FLAGS:
            i += 2
            continue
        kept.append(words[i])
        i += 1
    args = kept + [w for flag in SIZED_FLAGS if flag in knobs for w in (flag, knobs[flag])]
    return args, plan, needed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the pass (a key of tune_gpu_passes)")
    ap.add_argument("--vars", default=VARS, help="tune_h200.yml")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--out", help="the extra-vars file to write (stdout when left out)")
    a = ap.parse_args(argv)
    import yaml

    with open(a.vars, encoding="utf-8") as fh:
        v = yaml.safe_load(fh)
    mem = v["tune_gpu_memory"]
    try:
        total, free = gpu_memory.query(a.gpu)
        args, plan, needed = size(v["tune_gpu_passes"][a.name], v.get("dflash_bench_extra_args"), mem["model"],
                                  int(mem["max_total_tokens"]), total, free, int(mem.get("draft_block", 16)))
    except gpu_memory.MemoryPlanError as exc:
        print(f"[tune-memory] pass {a.name}: {exc}", file=sys.stderr, flush=True)
        return 3
    print(f"[tune-memory] pass {a.name}: {plan.describe()}; started together they need --mem-fraction-static "
          f">= {needed:.3f}, given {gpu_memory.FRACTION_CAP} with every pool bounded", file=sys.stderr, flush=True)
    text = json.dumps({"dflash_bench_extra_args": args})
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
