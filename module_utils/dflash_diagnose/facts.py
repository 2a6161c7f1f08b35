"""Facts collected from the whole log (SM, GPU, torch / CUDA / driver versions, server args)."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_diagnose.rule import _rx

_FACT_RES: list[tuple[str, re.Pattern]] = [
    ("sm", _rx(r"(?:compute capability|CUDA capability|capability)[: =(]+(?P<v>\d{1,2}\.\d|\d{2,3})\b")),
    ("sm", _rx(r"get_device_capability\(\)[^\n]*\((?P<v>\d{1,2}, ?\d)\)")),
    ("sm", _rx(r"capability[^\n]{0,20}\((?P<v>\d{1,2}, ?\d)\)")),
    ("sm", _rx(r"\bSM ?(?P<v>\d{1,2}\.\d)\b")),
    ("sm", _rx(r"(?<![/\w])sm_?(?P<v>\d{2,3})a?\b(?!\+| or (?:higher|newer|above)| and (?:higher|above))")),
    ("sm", _rx(r"\bSM ?(?P<v>1\d)\.x\b")),
    ("gpu_name", _rx(r"(?P<v>NVIDIA (?:GeForce |RTX |Tesla |A\d|H\d|B\d|L\d)[\w -]*?)(?: with CUDA capability|\s*\||,|$)")),
    ("torch_version", _rx(r"\btorch(?:==| version[: ]+| )(?P<v>\d+\.\d+\.\d+(?:\+\w+)?)")),
    ("torch_version", _rx(r"PyTorch (?:version )?(?P<v>\d+\.\d+\.\d+(?:\+\w+)?)")),
    ("nvcc_version", _rx(r"Cuda compilation tools, release (?P<v>\d+\.\d+)")),
    ("nvcc_version", _rx(r"nvcc(?: version)?[: ]+(?P<v>\d+\.\d+)")),
    ("cuda_runtime", _rx(r"CUDA Runtime Version[: ]+(?P<v>\d+\.\d+)")),
    ("driver_version", _rx(r"Driver Version: (?P<v>\d+\.\d+(?:\.\d+)?)")),
    ("driver_version", _rx(r"driver(?: version)?[: ]+(?P<v>\d{3}\.\d+(?:\.\d+)?)")),
    ("driver_cuda_raw", _rx(r"found version (?P<v>\d{4,5})")),
    ("driver_cuda", _rx(r"CUDA Version: (?P<v>\d+\.\d+)")),
    ("xgrammar_version", _rx(r"xgrammar(?:==| version[: ]+| )(?P<v>\d+\.\d+\.\d+)")),
    ("nccl_version", _rx(r"NCCL version (?P<v>\d+\.\d+\.\d+)")),
    ("model", _rx(r"model_path='(?P<v>[^']+)'")),
    ("model", _rx(r"--model(?:-path)?[ =](?P<v>\S+)")),
    ("model", _rx(r"model='(?P<v>[^']+)'")),
    ("model", _rx(r"Repo model (?P<v>\S+) is gated|Access to model (?P<v2>\S+) is restricted")),
    ("model", _rx(r"huggingface\.co/(?:api/models/)?(?P<v>[\w.-]+/[\w.-]+)/(?:resolve|tree|revision)")),
    ("model", _rx(r"it looks like (?P<v>[^\s']+) is not the path to a directory")),
    ("model", _rx(r"Max retries exceeded with url: /(?:api/models/)?(?P<v>[\w.-]+/[\w.-]+)/(?:resolve|tree|revision)")),
    ("port", _rx(r"\bport=(?P<v>\d{2,5})\b")),
    ("port", _rx(r"--port[ =](?P<v>\d{2,5})\b")),
    ("mem_fraction_static", _rx(r"mem_fraction_static=(?P<v>[\d.]+)")),
    ("mem_fraction_static", _rx(r"--mem-fraction-static[ =](?P<v>[\d.]+)")),
    ("cuda_graph_max_bs", _rx(r"cuda_graph_max_bs=(?P<v>\d+)")),
    ("cuda_graph_max_bs", _rx(r"--cuda-graph-max-bs[ =](?P<v>\d+)")),
    ("tp_size", _rx(r"\btp_size=(?P<v>\d+)")),
    ("gpu_memory_utilization", _rx(r"gpu_memory_utilization=(?P<v>[\d.]+)")),
]


_FACT_KEYWORDS = ("sm", "capability", "nvidia", "torch", "nvcc", "cuda", "driver", "found version", "xgrammar",
                  "nccl version", "model", "port", "mem_fraction", "mem-fraction", "cuda_graph", "cuda-graph",
                  "tp_size", "gpu_memory", "huggingface.co", "looks like")


_FACT_PREFILTER = re.compile(
    r"sm|capability|NVIDIA|torch|PyTorch|nvcc|Cuda|CUDA|Driver|driver|found version|xgrammar|NCCL version"
    r"|model|port|mem_fraction|mem-fraction|cuda_graph|cuda-graph|tp_size|gpu_memory|huggingface\.co|looks like",
)


def _norm_sm(raw: str) -> str | None:
    """'120' / '12.0' / '12, 0' / '90a' -> '12.0' (major.minor); '12' (from 'SM 12.x') -> '12.x'."""
    raw = raw.replace(" ", "").replace(",", ".").rstrip("a")
    if raw.isdigit() and len(raw) == 2 and raw.startswith("1") and int(raw) <= 13:
        return f"{raw}.x"
    if "." in raw:
        major, _, minor = raw.partition(".")
        return f"{int(major)}.{int(minor[:1] or 0)}" if major.isdigit() else None
    if raw.isdigit() and len(raw) in (2, 3):
        val = int(raw)
        if 30 <= val <= 130:
            return f"{val // 10}.{val % 10}"
    return None


def _collect_facts(lines: list[str]) -> dict:
    """First value of each fact; for one fact, an earlier pattern of _FACT_RES beats a later one."""
    best: dict[str, tuple[int, str]] = {}
    for line in lines:
        if not _FACT_PREFILTER.search(line):
            continue
        for rank, (key, rx) in enumerate(_FACT_RES):
            if key in best and best[key][0] <= rank:
                continue
            m = rx.search(line)
            if not m:
                continue
            val = (m.group("v") or m.groupdict().get("v2") or "").strip().rstrip(",;")
            if re.fullmatch(r"[\d.]+", val):
                val = val.rstrip(".")
            if not val:
                continue
            if key == "sm":
                val = _norm_sm(val)
                if not val:
                    continue
            best[key] = (rank, val)
    return {k: v for k, (_, v) in best.items()}
