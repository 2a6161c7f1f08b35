"""Size the harness's sglang servers from the GPU they share: its memory now and how many must fit at once.

The DDTree harnesses (ddtree_e2e.py, ddtree_lossless.py, ddtree_profile.py) run 3 to 12 servers on one
GPU. A fixed --mem-fraction-static was sized for a 141 GB H200 and left an 80 GB H100 too little: there the
third server of a model never started. Now:

  1. plan(): before any server starts, the GPU's free memory (less a reserve) is shared equally among the
     servers that must fit at once; each server's static pool (weights, KV cache, linear-attention state:
     what --mem-fraction-static covers) is its share less what it needs outside that pool (CUDA context,
     CUDA graphs, the draft's weights and KV cache). The KV and request knobs are stepped down
     (--max-running-requests 8 -> 4, --max-total-tokens and --cuda-graph-max-bs with it) when the largest
     server's pool would not hold what it needs; when even that does not fit, the run stops before it starts
     anything, with the GPU's figures and what would fit.
  2. fraction(): at each server's start, --mem-fraction-static = its static pool / the GPU's free memory at
     that moment. sglang 0.5.11 takes the fraction of the memory free when the server starts (model_runner:
     rest = free after loading - free before loading x (1 - fraction)), so with staggered starts each server
     gets the same pool whatever ran before it and whatever the card.

What a server's pool must hold comes from the H200 records' server logs (sglang prints each part), per model
folder of gpu-harness/make_models.py; GiB as sglang prints them, MiB here:
  dense, hybrid:        2026-12-03-ddtree-width, call4-e2e-dense / call3-e2e-hybrid (40000-token KV)
  dense-rw, hybrid-rw:  2026-12-03-ddtree-build-kernel, call6-lossless-dense / call5-lossless-hybrid (24000)
  weights_mib   "Load weight end ... mem usage" + "Init torch distributed ends ... mem usage" (the target)
  kv_kib        ("KV Cache is allocated" K size + V size) / #tokens, per token of the target
  state_mib     (intermediate_ssm_state_cache + intermediate_conv_window_cache) / (8 requests x verify tokens):
                the linear-attention state a speculative hybrid server keeps per request and verify token
  slot_mib      (ssm_state + conv_state) / max_mamba_cache_size: one slot of the hybrid's state cache
float32 servers (the lossless judge) hold twice each. Standard library only.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass

MODELS = {
    "dense": {"weights_mib": 1300, "kv_kib": 112.0, "state_mib": 0.0, "slot_mib": 0.0},
    "hybrid": {"weights_mib": 1761, "kv_kib": 12.1, "state_mib": 20.96, "slot_mib": 18.7},
    "dense-rw": {"weights_mib": 1782, "kv_kib": 63.8, "state_mib": 0.0, "slot_mib": 0.0},
    "hybrid-rw": {"weights_mib": 1792, "kv_kib": 7.9, "state_mib": 3.52, "slot_mib": 3.15},
}
REQUESTS = (8, 4)  # --max-running-requests tried, largest first (the harnesses send at most 4 at once)
KV_TOKENS_PER_REQUEST = 1536  # the longest request (100-token prompt + 1024 new + a 32-token block) and room
# sglang 0.5.11: the state cache holds 3 slots a request, 5 with extra_buffer and the overlap schedule (1 with
# --disable-radix-cache), and it takes 0.9 / 1.9 of what is left after the per-token state (mamba_full_memory_ratio)
SLOTS_PER_REQUEST, SLOTS_NO_RADIX, STATE_SHARE = 5, 1, 0.9 / 1.9
# outside the static pool, per server: CUDA context and activations; CUDA graphs (1.5 GiB measured on the -rw
# models' servers); the draft's weights and, per token of its KV cache, about 20 KiB (0.76 GiB at 40000)
CONTEXT_MIB, GRAPHS_MIB, DRAFT_MIB, DRAFT_KV_KIB = 1024, 1536, 200, 20.0
FRACTION_CAP = 0.9  # never ask sglang for more of the free memory than this
GPU_ENV = "GPU_MEMORY_MIB"  # "TOTAL,FREE": figures given instead of nvidia-smi's (CPU dry runs, tests)


class MemoryPlanError(RuntimeError):
    pass


def query(gpu: int = 0, nvidia_smi: str | None = None) -> tuple[int, int]:
    """(total, free) MiB of GPU `gpu`: $GPU_MEMORY_MIB when set, else nvidia-smi."""
    given = os.environ.get(GPU_ENV)
    if given:
        total, free = (int(x) for x in given.split(","))
        return total, free
    out = subprocess.run([nvidia_smi or os.environ.get("NVIDIA_SMI") or "nvidia-smi", "-i", str(gpu),
                          "--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    total, free = (int(x.strip()) for x in out.strip().splitlines()[0].split(","))
    return total, free


def _flag(args, flag):
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def need_mib(model: str, args: list[str], requests: int, verify_tokens: int) -> float:
    """What the server's static pool must hold at `requests` running requests."""
    m = MODELS[model]
    scale = 2 if _flag(args, "--dtype") == "float32" else 1
    spec = "--speculative-algorithm" in args
    need = m["weights_mib"] + m["kv_kib"] * KV_TOKENS_PER_REQUEST * requests / 1024
    if m["slot_mib"]:
        if spec:
            need += m["state_mib"] * requests * verify_tokens
        slots = requests * (SLOTS_NO_RADIX if "--disable-radix-cache" in args else SLOTS_PER_REQUEST)
        need += m["slot_mib"] * slots / STATE_SHARE
    return need * scale


def outside_mib(args: list[str], max_total_tokens: int) -> float:
    """What the server takes beside its static pool."""
    out = CONTEXT_MIB + (0 if "--disable-cuda-graph" in args else GRAPHS_MIB)
    if "--speculative-algorithm" in args:
        out += DRAFT_MIB + DRAFT_KV_KIB * max_total_tokens / 1024
    return out


@dataclass
class Plan:
    total_mib: int
    free_mib: int
    servers: int
    share_mib: float  # each server's part of the free memory
    requests: int  # --max-running-requests
    static_mib: dict  # server name -> its static pool

    def knobs(self, max_total_tokens: int) -> dict:
        """The KV/request flags for a harness whose --max-total-tokens at 8 requests is max_total_tokens."""
        return {"--max-running-requests": str(self.requests),
                "--max-total-tokens": str(max_total_tokens * self.requests // REQUESTS[0]),
                "--cuda-graph-max-bs": str(min(4, self.requests))}

    def describe(self) -> str:
        return (f"{self.servers} servers on {self.free_mib} of {self.total_mib} MiB free: {self.share_mib:.0f} MiB "
                f"each, static pools {min(self.static_mib.values()):.0f}-{max(self.static_mib.values()):.0f} MiB, "
                f"{self.requests} requests each")


def reserve_mib(total_mib: int) -> float:
    """Kept free for what no server accounts for (fragmentation, the harness's own CUDA use): 3%, >= 2 GiB."""
    return max(2048.0, 0.03 * total_mib)


def plan(total_mib: int, free_mib: int, servers: list[dict], max_total_tokens: int) -> Plan:
    """servers: [{name, model, args, verify_tokens}] that must fit at once. Raises MemoryPlanError."""
    if not servers:
        raise MemoryPlanError("no server to size")
    share = (free_mib - reserve_mib(total_mib)) / len(servers)
    worst = None
    for requests in REQUESTS:
        tokens = max_total_tokens * requests // REQUESTS[0]
        static = {s["name"]: share - outside_mib(s["args"], tokens) for s in servers}
        short = [(s["name"], need_mib(s["model"], s["args"], requests, s["verify_tokens"]), static[s["name"]])
                 for s in servers]
        short = [x for x in short if x[1] > x[2]]
        if not short:
            return Plan(total_mib, free_mib, len(servers), share, requests, static)
        worst = max(short, key=lambda x: x[1] - x[2])
    name, need, got = worst
    fits = int(len(servers) * share // (share + need - got))
    raise MemoryPlanError(
        f"{len(servers)} servers do not fit this GPU: {free_mib} of {total_mib} MiB free, {share:.0f} MiB each "
        f"(a reserve of {reserve_mib(total_mib):.0f} MiB kept); {name} needs a {need:.0f} MiB static pool even at "
        f"{REQUESTS[-1]} requests and would get {got:.0f}; about {fits} such servers fit at once: run fewer "
        f"(one model a call: MODELS=hybrid), or free the GPU first (bash gpu-harness/stop_all.sh)")


def fraction(static_mib: float, free_now_mib: int) -> float:
    """--mem-fraction-static for a static pool of static_mib when free_now_mib is free as the server starts."""
    if free_now_mib <= 0 or static_mib > FRACTION_CAP * free_now_mib:
        raise MemoryPlanError(f"a {static_mib:.0f} MiB static pool does not fit the {free_now_mib} MiB free now")
    return max(0.001, math.floor(1000 * static_mib / free_now_mib) / 1000)
