"""Start-up hangs: a log with no error line that stops inside a start-up stage.

A multi-GPU start that stops after "Init torch distributed begin" and a few "NCCL INFO Bootstrap" lines
prints no error, ever: the log says exactly where it stopped, and the wait knows how long it has been
silent. ``last_stage(lines)`` finds the newest start-up marker (sglang 0.4 to 0.5.x, vLLM V0/V1, torch /
Lightning process groups, NCCL's own INFO lines) and the stage it leaves the server in; ``verdict``
writes the diagnosis of cause ``startup_hang`` with the remedy for that stage (NCCL: interface, P2P,
InfiniBand, /dev/shm, topology from the host's fingerprint).

Stages, in start-up order: distributed_init, nccl, weights, kv_pool, graph_capture, warmup (then ready).
A marker either says a stage is under way (the log stopped inside it) or that it ended (the log stopped
before the next one began). Without the silence from the wait, only a log that stops inside a stage is
called a hang; one that stops after a finished step is "no failure found" (it may simply be cut).
No Ansible import.
"""

from __future__ import annotations

import re

ORDER = ("distributed_init", "nccl", "weights", "kv_pool", "graph_capture", "warmup")
STAGE_WORDS = {
    "distributed_init": "distributed initialisation (the process group of the ranks)",
    "nccl": "NCCL set-up (the communicator between the GPUs)",
    "weights": "loading the weights",
    "kv_pool": "sizing and allocating the KV cache pool",
    "graph_capture": "CUDA graph capture",
    "warmup": "the warm-up request",
    "other": "start-up, before any stage the log names",
}

# (stage, under way? (False: the stage ended), pattern); newest marker of the log decides
MARKERS: list[tuple[str, bool, re.Pattern]] = [
    # ready: never a hang
    ("ready", False, re.compile(r"The server is fired up and ready to roll|lab stand-in: serving")),
    # warm-up (sglang: the HTTP server is up, one short request runs before "fired up")
    ("warmup", True, re.compile(r"Uvicorn running on|Application startup complete|Started server process"
                                r"|Warming up|warmup request|Start warmup")),
    ("warmup", True, re.compile(r"Prefill batch\. #new-seq: 1, #new-token: \d{1,3}\b")),
    # graph capture
    ("graph_capture", False, re.compile(r"Capture (?:cuda|CUDA) graph end|Capture piecewise CUDA graph end"
                                        r"|Graph capturing finished in|Capturing CUDA graphs? .*took")),
    ("graph_capture", True, re.compile(r"Capture (?:cuda|CUDA) graph begin|Capturing batches \(|Capture cuda graph bs"
                                       r"|Capture piecewise CUDA graph begin|Capturing num tokens|Compiling num tokens"
                                       r"|Registering \d+ cuda graph addresses|Capturing the model for CUDA graphs"
                                       r"|Capturing CUDA graph shapes|Capturing cudagraphs?|Compiling a graph for"
                                       # vLLM V1's progress bar: "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
                                       r"|Capturing CUDA graphs? \(")),
    # KV pool
    ("kv_pool", False, re.compile(r"Memory pool end|max_total_num_tokens=\d+|# GPU blocks: \d+"
                                  r"|KV cache is allocated|Available KV cache memory|GPU KV cache size")),
    ("kv_pool", True, re.compile(r"KV Cache is allocated|Memory profiling|determine_num_available_blocks"
                                 r"|profile_run|KV pool reserv|Allocating KV cache|init_memory_pool")),
    # weights
    ("weights", False, re.compile(r"Load weight end|Loading model weights took|Model loading took"
                                  r"|Loading weights took")),
    ("weights", True, re.compile(r"Load weight begin|Loading (?:safetensors|pt|bin) checkpoint shards"
                                 r"|Loading checkpoint shards|Starting to load model|Loading model weights"
                                 r"|Using model weights format|Using (?:\w+ )?(?:attention )?backend\.?$"
                                 r"|Using \w+ backend\.|Downloading|Fetching \d+ files"
                                 # engines that log each layer as they load it ("loading layer 58/64 (...)")
                                 r"|[Ll]oading (?:model )?layers? \d+ ?/ ?\d+")),
    # NCCL (after the process group: the communicator, custom all-reduce)
    ("nccl", False, re.compile(r"Init torch distributed ends|Init COMPLETE|ncclCommInitRank comm .* Init COMPLETE"
                               r"|custom allreduce.*(?:enabled|initialized)")),
    ("nccl", True, re.compile(r"Found nccl from library|is using nccl==|NCCL INFO|NCCL version \d"
                              r"|init_custom_ar|Custom allreduce|custom all-?reduce")),
    # distributed init
    ("distributed_init", True, re.compile(r"Init torch distributed begin|distributed_init_method=|world_size=\d+ rank="
                                          r"|Initializing distributed: GLOBAL_RANK|init_process_group"
                                          r"|Initializing (?:the )?process group"
                                          r"|Waiting for (?:the )?(?:other )?(?:ranks|workers|rendezvous)"
                                          r"|store_based_barrier|Rendezvous")),
]

_NEXT = {s: ORDER[i + 1] if i + 1 < len(ORDER) else "ready" for i, s in enumerate(ORDER)}

# the server announces its processes are gone: the log ends in a death, not a hang
_DEATH_RE = re.compile(r"Received sigquit|scheduler is dead|^Killed\s*$|exited with code|Main process exited"
                       r"|Failed with result|Stopped \S+\.service", re.IGNORECASE)

_MARKER_WORDS = ("fired up", "serving", "uvicorn", "startup complete", "server process", "warm", "prefill batch",
                 "captur", "graph", "memory pool", "max_total_num_tokens", "gpu blocks", "kv cache", "kv pool",
                 "memory profiling", "available_blocks", "profile_run", "init_memory_pool", "load weight",
                 "loading", "load model", "weights", "backend", "downloading", "fetching", "nccl", "init complete",
                 "distributed", "world_size", "init_process_group", "waiting for", "barrier", "rendezvous",
                 "custom al", "init_custom_ar", "process group")

# a stall notice names the work it waits for in passing ("... weight/kv cache quantization"): no stage marker
_STALL_NOTICE_RE = re.compile(r"No available shared memory broadcast block|some processes are hanging")


# the stage a dumped stack (py-spy, faulthandler, sglang's watchdog dump) stands in, innermost frame first: a
# watchdog that fires before any start-up marker still names where the stack was ("capture (cuda_graph_runner.py)")
STACK_STAGES = (
    ("graph_capture", re.compile(r"cuda_graph_runner|graph_runner|\bcapture\w*\b|init_device_graphs|cudagraph",
                                 re.IGNORECASE)),
    ("warmup", re.compile(r"\bwarmup|_warm_up|warm_up", re.IGNORECASE)),
    ("kv_pool", re.compile(r"init_memory_pool|profile_run|determine_num_available_blocks|profile_max_num_token",
                           re.IGNORECASE)),
    ("weights", re.compile(r"load_weights?\b|load_model\b|model_loader|safetensors", re.IGNORECASE)),
    ("nccl", re.compile(r"pynccl|ncclCommInitRank|init_custom_ar|custom_all_reduce", re.IGNORECASE)),
    ("distributed_init", re.compile(r"init_distributed_environment|init_process_group|initialize_model_parallel"
                                    r"|rendezvous", re.IGNORECASE)),
)


def stage_from_stack(lines: list) -> str | None:
    """The stage of the first (innermost) frame of a dumped stack that names one, or None."""
    for ln in lines:
        text = getattr(ln, "text", ln)
        for stage, rx in STACK_STAGES:
            if rx.search(text):
                return stage
    return None


def stage_of(text: str) -> tuple[str, bool] | None:
    low = text.lower()
    if not any(w in low for w in _MARKER_WORDS) or _STALL_NOTICE_RE.search(text):
        return None
    for stage, under_way, rx in MARKERS:
        if rx.search(text):
            return stage, under_way
    return None


def last_stage(lines: list) -> dict | None:
    """{stage, under_way, line, died} of the newest start-up marker (tqdm updates inside one line count),
    or None when the log names none. ``stage`` is where the server is: the marker's stage when under way,
    the next stage when the marker ended one."""
    for ln in reversed(lines):
        if not ln.raw.strip():
            continue
        # a progress bar's updates arrive on one line, separated by carriage returns (already split) or glued
        found = stage_of(ln.text)
        if found is None:
            continue
        stage, under_way = found
        after = lines[ln.index + 1:]
        died = next((x for x in after if _DEATH_RE.search(x.text)), None)
        return {"stage": stage if under_way else _NEXT.get(stage, "other"), "marker_stage": stage,
                "under_way": under_way, "line": ln, "died": died}
    return None


# ------------------------------------------------------------------------------------------------ remedies

_BOOTSTRAP_RE = re.compile(r"NCCL INFO Bootstrap ?: ?Using (?P<iface>[\w.-]+):(?P<addr>[^\s<]+)")
_IFNAME_RE = re.compile(r"NCCL_SOCKET_IFNAME set (?:by environment )?to (?P<v>\S+)")
_INIT_ADDR_RE = re.compile(r"distributed_init_method=tcp://(?P<v>[^\s,]+)|--dist-init-addr[ =](?P<v2>\S+)")
_NNODES_RE = re.compile(r"--nnodes[ =](?P<v>\d+)|nnodes=(?P<v2>\d+)")
_MEMBER_RE = re.compile(r"MEMBER: (?P<have>\d+)/(?P<total>\d+)")
_WORLD_RE = re.compile(r"world_size=(?P<v>\d+)")


def _topology_bits(host: dict | None) -> list[str]:
    """What the host's fingerprint says about the links between its GPUs (nvidia-smi topo)."""
    topo = (host or {}).get("topology") or {}
    bits = []
    p2p = topo.get("p2p") or {}
    bad = sorted(k for k, v in p2p.items() if v and v != "OK")
    if bad:
        bits.append(f"the fingerprint's `nvidia-smi topo -p2p r` has no peer-to-peer between GPUs {', '.join(bad[:6])}"
                    f" ({p2p[bad[0]]}): NCCL_P2P_DISABLE=1")
    links = topo.get("links") or {}
    sys_links = sorted(k for k, v in links.items() if v == "SYS")
    if sys_links:
        bits.append(f"GPUs {', '.join(sys_links[:6])} talk across CPU sockets (SYS in `nvidia-smi topo -m`)")
    if topo and not topo.get("nics"):
        bits.append("the fingerprint's topology lists no RDMA NIC: NCCL_IB_DISABLE=1")
    return bits


def remedy(stage: str, text: str, host: dict | None = None) -> str:
    """The remedy for a start-up that hangs in ``stage``; ``text`` is the log (names taken from it)."""
    tips: list[str] = []
    boot = _BOOTSTRAP_RE.search(text)
    ifname = _IFNAME_RE.search(text)
    init = _INIT_ADDR_RE.search(text)
    init_addr = (init.group("v") or init.group("v2")) if init else None
    nnodes = _NNODES_RE.search(text)
    multi_node = bool(nnodes and int(nnodes.group("v") or nnodes.group("v2")) > 1) or bool(
        init_addr and not re.match(r"(?:127\.0\.0\.1|localhost|\[?::1\]?)(?::|$)", init_addr))
    topo = _topology_bits(host)
    if stage == "distributed_init":
        member = _MEMBER_RE.search(text)
        have = f" (the log shows member {member.group('have')} of {member.group('total')})" if member else ""
        tips.append(f"not every rank joined the process group{have}: start every rank / node with the same "
                    "`--nnodes`, its own `--node-rank` and one `--dist-init-addr` host:port that every node reaches "
                    "(an address, not a name that resolves differently or to IPv6 on some nodes; the port open in the "
                    "firewall)" + (f"; this log uses {init_addr}" if init_addr else ""))
        tips.append("on one host: CUDA_VISIBLE_DEVICES of the unit must give as many GPUs as `--tp-size`")
    if stage == "weights":
        tips.append("loading the weights stalls on host memory or on the disk: check free host RAM (`free -g`; the "
                    "weights pass through host memory, and the kernel OOM killer / swap show in `journalctl -k`), a "
                    "slow or network filesystem (copy the model to a local disk), or a download still running "
                    "(download ahead and set HF_HUB_OFFLINE=1)")
        tips.append("with several ranks, one rank blocked elsewhere holds the others at the next collective")
    if stage == "kv_pool":
        tips.append("sizing the KV pool profiles a forward pass and then allocates the pool: another process on the "
                    "GPU (nvidia-smi), a `--mem-fraction-static` that leaves too little, or host memory that is "
                    "fragmented (unified-memory GPUs: `echo 1 > /proc/sys/vm/compact_memory` before the start)")
    if stage == "graph_capture":
        tips.append("start once with `--disable-cuda-graph` to confirm it is the capture (a large speed loss: a "
                    "stopgap only); with tensor parallel a capture hang is usually custom all-reduce or NCCL inside "
                    "the capture: start with `--disable-custom-all-reduce` (and NCCL_P2P_DISABLE=1 where P2P is broken)"
                    "; lower `--cuda-graph-max-bs`; piecewise graphs: `--disable-piecewise-cuda-graph`")
        if re.search(r"flashinfer\.jit|Loading JIT ops|JIT", text):
            tips.append("FlashInfer JIT-compiles kernels during the capture (minutes on a cold cache): wait once, "
                        "keep FLASHINFER_WORKSPACE_BASE / the JIT cache on a persistent disk")
    if stage == "warmup":
        tips.append("the first request (sglang's warm-up) never finished: with tensor parallel its all-reduce "
                    "hangs: start with `--disable-custom-all-reduce`, and NCCL_P2P_DISABLE=1 where GPU "
                    "peer-to-peer is broken; `--skip-server-warmup` only hides it until the first real request")
    if stage in ("nccl", "distributed_init") or (stage in ("graph_capture", "warmup") and (multi_node or boot)):
        if stage == "nccl" and init_addr and multi_node:
            tips.append(f"the ranks meet at {init_addr} (`--dist-init-addr`): every node must resolve and reach it "
                        "(use an IP address), with the same sglang and NCCL on all nodes")
        tips.append("rerun with NCCL_DEBUG=INFO (instance env) to see the last NCCL step")
        if boot:
            tips.append(f"NCCL bootstraps over {boot.group('iface')} ({boot.group('addr')}): if the nodes or ranks do "
                        f"not reach each other there, set NCCL_SOCKET_IFNAME=<the interface they share>"
                        + (f" (now {ifname.group('v')})" if ifname else ""))
        else:
            tips.append("NCCL_SOCKET_IFNAME=<the interface the ranks share> when the host has several")
        tips.extend(topo)
        if not any("NCCL_P2P_DISABLE" in t for t in topo):
            tips.append("NCCL_P2P_DISABLE=1 when GPU peer-to-peer is broken or blocked (`nvidia-smi topo -p2p r`; "
                        "IOMMU / ACS, VMs, consumer GPUs)")
        if not any("NCCL_IB_DISABLE" in t for t in topo):
            tips.append("NCCL_IB_DISABLE=1 when there is no working InfiniBand / RoCE")
        tips.append("a large /dev/shm: NCCL keeps its intra-host buffers there (`df -h /dev/shm`; containers: "
                    "`--shm-size=16g` or `--ipc=host`)")
    if stage in ("nccl", "distributed_init", "graph_capture", "warmup"):
        tips.extend(t for t in topo if t not in tips)
    if stage == "other":
        tips.append("the server printed nothing past its start: check the unit runs the right command "
                    "(`systemctl cat <unit>`), that the GPUs are free (nvidia-smi) and rerun it in the foreground")
    return "; ".join(tips)


def silence_text(silent_seconds: float | None) -> str:
    if silent_seconds is None:
        return ""
    s = round(silent_seconds)
    return f"{s // 60} min {s % 60} s" if s >= 120 else f"{s} s"
