"""The summary and remedy templates filled with the log's facts; evidence lines chosen and clipped."""

from __future__ import annotations

import os
import re

from ansible.module_utils.dflash_diagnose import rules_startup as _startup
from ansible.module_utils.dflash_diagnose.facts import _norm_sm
from ansible.module_utils.dflash_diagnose.scan import (
    GENERIC_FATAL_RE,
    INCIDENT_LINES,
    MAX_EVIDENCE,
    MAX_EVIDENCE_CHARS,
    NOISE_RE,
    _Line,
    _Match,
)


class _Fill(dict):
    def __missing__(self, key):  # unknown facts read as "?" rather than failing
        return "?"


_PIP_NAMES = {
    "cv2": "opencv-python-headless", "yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn",
    "google": "protobuf", "zmq": "pyzmq", "attr": "attrs", "sgl_kernel": "sglang-kernel",
    "flash_attn": "flash-attn", "flash_attn_2_cuda": "flash-attn", "dateutil": "python-dateutil",
    "jwt": "pyjwt", "Crypto": "pycryptodome",
    "bs4": "beautifulsoup4", "skimage": "scikit-image", "decord": "decord", "multipart": "python-multipart",
    "dotenv": "python-dotenv", "huggingface_hub": "huggingface-hub", "sentencepiece": "sentencepiece",
    "flashinfer": "flashinfer-python", "vllm": "vllm", "sglang": "sglang", "torch": "torch",
    "msgspec": "msgspec", "partial_json_parser": "partial-json-parser", "pybase64": "pybase64",
    "openai_harmony": "openai-harmony", "compressed_tensors": "compressed-tensors",
    "triton": "triton", "deep_gemm": "deep-gemm", "sgl_router": "sglang-router", "orjson": "orjson",
    "uvloop": "uvloop", "setproctitle": "setproctitle", "llguidance": "llguidance", "outlines": "outlines",
    "torchvision": "torchvision", "torchaudio": "torchaudio", "tiktoken": "tiktoken", "einops": "einops",
    "soundfile": "soundfile", "librosa": "librosa", "av": "av", "timm": "timm", "cuda": "cuda-python",
    "nvidia": "nvidia-ml-py", "pynvml": "nvidia-ml-py", "ray": "ray", "modelscope": "modelscope",
}


_SO_PACKAGES = {
    "sgl_kernel": "sglang-kernel", "vllm": "vllm", "flash_attn": "flash-attn", "flashinfer": "flashinfer-python",
    "xformers": "xformers", "torchvision": "torchvision", "torchaudio": "torchaudio", "deep_gemm": "deep-gemm",
    "apex": "apex", "bitsandbytes": "bitsandbytes", "transformer_engine": "transformer-engine",
    "flash_attn_2_cuda": "flash-attn", "vllm_flash_attn": "vllm", "mamba_ssm": "mamba-ssm",
    "causal_conv1d": "causal-conv1d", "torch": "torch", "sgl_kernel_npu": "sgl-kernel-npu",
}


# CUDA toolkit -> minimum Linux driver (NVIDIA's compatibility table)
_CUDA_DRIVER = {
    "11.8": "520", "12.0": "525", "12.1": "530", "12.2": "535", "12.3": "545", "12.4": "550",
    "12.5": "555", "12.6": "560", "12.8": "570", "12.9": "575", "13.0": "580",
}


# driver major -> highest CUDA it supports
_DRIVER_CUDA = [(580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"), (555, "12.5"), (550, "12.4"),
                (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"), (515, "11.7"),
                (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"), (460, "11.2"), (455, "11.1"),
                (450, "11.0")]


def _pip_name(module: str) -> str:
    top = module.split(".")[0]
    return _PIP_NAMES.get(top, top.replace("_", "-"))


# compiled libraries whose file name is not their package's (sgl_kernel ships common_ops / flash_ops)
_SO_OWNERS = {"common_ops": "sgl_kernel", "flash_ops": "sgl_kernel"}


def _so_package(path: str) -> str:
    parts = re.split(r"[/\\]", path)
    for i, part in enumerate(parts):
        if part in ("site-packages", "dist-packages") and i + 1 < len(parts):
            return parts[i + 1].split(".")[0]
    name = parts[-1].split(".")[0] if parts and parts[-1] else ""
    return _SO_OWNERS.get(name, name) or "the compiled extension"


def _oom_details(text: str, facts: dict, match: _Match, lines: list[_Line]) -> dict:
    out = {"oom_where": "", "oom_detail": ""}
    m = re.search(r"Tried to allocate (?P<alloc>[\d.]+ [GMK]i?B)", text)
    cap = re.search(r"GPU (?P<gpu>\d+) has a total capac\w* of (?P<total>[\d.]+ ?[GMK]i?B)"
                    r"(?: of which (?P<free>[\d.]+ ?[GMK]i?B) is free)?", text)
    procs = re.findall(r"Process (\d+) has ([\d.]+ [GMK]i?B) memory in use", text)
    bits = []
    if m:
        bits.append(f"tried to allocate {m.group('alloc')}")
    if cap:
        out["oom_where"] = f" on GPU {cap.group('gpu')}"
        if cap.group("free"):
            bits.append(f"{cap.group('free')} free of {cap.group('total')}")
    if procs:
        bits.append("processes holding it: " + ", ".join(f"pid {p} {s}" for p, s in procs))
    out["oom_detail"] = " (" + "; ".join(bits) + ")" if bits else ""
    # where in the start-up it happened: look back a little from the error
    start = max(0, match.line.index - 80)
    ctx = "\n".join(ln.text for ln in lines[start: match.line.index + 5])
    # torch's own OOM text says "allocated in private pools (e.g., CUDA Graphs)" whatever the phase
    ctx = re.sub(r"private pools \(e\.g\., CUDA Graphs\)", "private pools", ctx)
    in_graph = re.search(r"cuda ?graph|capture", ctx, re.IGNORECASE) is not None
    in_load = re.search(r"Load weight|load_model|Loading (?:safetensors|model|weights)", ctx, re.IGNORECASE)
    mfs = facts.get("mem_fraction_static")
    cgbs = facts.get("cuda_graph_max_bs")
    tips = []
    if in_graph:
        out["oom_where"] += " while capturing CUDA graphs"
        tips.append("lower `--cuda-graph-max-bs`" + (f" (now {cgbs})" if cgbs else "")
                    + " or add `--disable-cuda-graph`")
    if mfs:
        try:
            lower = max(0.3, round(float(mfs) - 0.1, 2))
            tips.append(f"lower `--mem-fraction-static` from {mfs} to about {lower}")
        except ValueError:
            tips.append("lower `--mem-fraction-static`")
    else:
        tips.append("lower `--mem-fraction-static` (e.g. 0.8, or 0.7 with speculative decoding)")
    if in_load and not in_graph:
        tips.append("the weights alone may not fit: use a larger `--tp-size` or a quantised model")
    tips.append("lower `--max-running-requests` / `--chunked-prefill-size`")
    if procs:
        tips.append("and make sure no other process holds the GPU (nvidia-smi; pids above)")
    else:
        tips.append("and check that no other process uses the GPU (nvidia-smi)")
    out["oom_remedy"] = "; ".join(tips)
    return out


def _nccl_remedy(text: str) -> str:
    low = text.lower()
    tips = ["rerun with NCCL_DEBUG=INFO (instance env) to see the failing call"]
    if "shm" in low or "/dev/shm" in low or "unhandled system error" in low or "ncclsystemerror" in low:
        tips.append("give the service a large /dev/shm (containers: --ipc=host or --shm-size=16g)")
        tips.append("NCCL_SOCKET_IFNAME=<the NIC> when several interfaces exist, NCCL_IB_DISABLE=1 without InfiniBand")
    if "cuda" in low and ("unhandled cuda" in low or "ncclunhandledcudaerror" in low or "peer" in low):
        tips.append("NCCL_P2P_DISABLE=1 if GPU peer-to-peer is broken (check `nvidia-smi topo -m`; IOMMU/ACS)")
    if re.search(r"cuda failure 2|'out of memory'|cudaErrorMemoryAllocation", low, re.IGNORECASE):
        tips.append("NCCL could not allocate GPU memory for its buffers: lower `--mem-fraction-static` "
                    "and check nvidia-smi for other processes on these GPUs")
    if "internal error" in low or "ncclinternalerror" in low:
        tips.append("NCCL_CUMEM_ENABLE=0, and one nvidia-nccl-cu* wheel matching torch's NCCL")
    if "timeout" in low or "timed out" in low:
        tips.append("check every rank started (one GPU each, CUDA_VISIBLE_DEVICES) and raise --dist-timeout")
    tips.append("make sure --tp-size equals the GPUs visible to the unit")
    return "; ".join(tips)


def _driver_facts(facts: dict, groups: dict) -> dict:
    out = {}
    raw = groups.get("driver_found") or facts.get("driver_cuda_raw")
    driver_cuda = facts.get("driver_cuda")
    if raw and raw.isdigit():
        val = int(raw)
        driver_cuda = f"{val // 1000}.{(val % 1000) // 10}"
    if not driver_cuda and facts.get("driver_version"):
        try:
            major = int(facts["driver_version"].split(".")[0])
            driver_cuda = next((c for d, c in _DRIVER_CUDA if major >= d), None)
        except ValueError:
            pass
    out["driver_cuda_ref"] = f"CUDA {driver_cuda} (what this driver supports)" if driver_cuda else \
        "the CUDA version the driver supports (nvidia-smi shows it)"
    found = []
    if facts.get("driver_version"):
        found.append(f"driver {facts['driver_version']}")
    if driver_cuda:
        found.append(f"supports CUDA {driver_cuda}")
    out["driver_found_s"] = f" ({', '.join(found)})" if found else ""
    tv = facts.get("torch_version", "")
    cu = re.search(r"\+cu(\d+)(\d)$", tv)
    cuda_needed = f"{cu.group(1)}.{cu.group(2)}" if cu else facts.get("cuda_runtime")
    if cuda_needed:
        out["cuda_needed_ref"] = f"CUDA {cuda_needed}"
        if cuda_needed in _CUDA_DRIVER:
            out["cuda_needed_ref"] += f" (driver >= {_CUDA_DRIVER[cuda_needed]})"
    else:
        out["cuda_needed_ref"] = "the CUDA version of the installed torch / runtime"
    return out


def _fill(match: _Match, facts: dict, lines: list[_Line], seg_text: str) -> dict:
    # a capture holding "{" comes from a source line quoted in a traceback, not from the log's values
    g = {k: v for k, v in match.groups.items() if "{" not in v}
    f = _Fill(facts)
    f.update(g)
    sm = facts.get("sm")
    if match.rule.name == "torch_sm_incompatible" and g.get("cap"):
        sm = _norm_sm(g["cap"][3:]) or sm
    if g.get("sm_major") and not sm:
        sm = f"{g['sm_major']}.x"
    gpu = facts.get("gpu_name", "").strip()
    bits = [f"SM {sm}"] if sm else []
    if gpu:
        bits.append(gpu)
    f["sm_s"] = f" ({', '.join(bits)})" if bits else ""
    if sm and "x" not in sm:
        f["sm_arch"] = "sm_" + sm.replace(".", "")
        f["arch_env"] = sm
    elif sm:
        f["sm_arch"] = f"sm_{sm.split('.')[0]}x (e.g. sm_{sm.split('.')[0]}0)"
        f["arch_env"] = sm.replace("x", "0")
    else:
        f["sm_arch"] = "this GPU's architecture (`nvidia-smi --query-gpu=compute_cap --format=csv`)"
        f["arch_env"] = "<the GPU's compute capability>"
    tv = facts.get("torch_version")
    f["torch"] = f"torch {tv}" if tv else "the installed torch"
    nv = facts.get("nvcc_version")
    f["nvcc_s"] = f" (nvcc {nv})" if nv else ""
    f["nvcc_ref"] = f"nvcc {nv}" if nv else "the nvcc on the unit's PATH / CUDA_HOME"
    arch = re.search(r"supports CUDA capabilities ((?:sm_\d+a? ?)+)", seg_text)
    f["torch_arch_s"] = f" (this torch only has {arch.group(1).strip()})" if arch else ""
    f["model"] = (g.get("model") or g.get("model2") or g.get("model3") or g.get("model4") or g.get("model5")
                  or g.get("model6") or g.get("model7") or g.get("model8") or g.get("model9") or g.get("model10")
                  or g.get("hf_model") or facts.get("model", "the configured model path"))
    f["missing_file"] = (g.get("missing_file") or "config.json / weights").rstrip(".")
    if g.get("model_file") and "model" not in g:
        f["model"] = facts.get("model", os.path.dirname(g["model_file"]))
    # ports
    port = g.get("port") or g.get("port2") or g.get("port3") or g.get("port4")
    if not port and g.get("zmq_addr"):
        pm = re.search(r":(\d+)$", g["zmq_addr"])
        port = pm.group(1) if pm else None
    if not port:
        pm = re.search(r"(?:port[ =:]+|:)(\d{4,5})\b[^\n]{0,40}(?:in use|EADDRINUSE)", seg_text)
        port = pm.group(1) if pm else facts.get("port")
    f["port"] = port or "?"
    holder = re.search(r"process\.name\(\)='([^']+)'.*?\bpid=(\d+)", seg_text)
    held = f" (held by pid {holder.group(2)}, {holder.group(1)})" if holder else ""
    f["port_ref"] = (f"port {port}" if port else "the port") + held
    f["port_ref_cap"] = f"port {port}" if port else "a port"
    f["addr"] = g.get("addr") or "0.0.0.0"
    f["zmq_addr_s"] = f" ({g['zmq_addr']})" if g.get("zmq_addr") else (f" ({port})" if port else "")
    # modules / packages
    if g.get("module"):
        f["package"] = _pip_name(g["module"])
    if g.get("import_from"):
        f["import_from_top"] = g["import_from"].split(".")[0]
        f["import_from_pip"] = _pip_name(g["import_from"])
    xv = facts.get("xgrammar_version")
    f["xgrammar_version_s"] = f" {xv}" if xv else ""
    f["xgr_symbol"] = (g.get("xgr_name") or g.get("xgr_attr") or
                       (f"xgrammar.{g['xgr_sub']}" if g.get("xgr_sub") else "an API"))
    so = g.get("so_path") or ""
    pkg = _so_package(so) if so else "a compiled extension"
    f["so_package"] = f"{pkg} ({os.path.basename(so)})" if so else pkg
    f["so_package_pip"] = _SO_PACKAGES.get(pkg, pkg)
    sym = g.get("symbol") or g.get("symbol2") or "?"
    f["symbol_short"] = sym if len(sym) <= 80 else sym[:77] + "..."
    f["op_name"] = g.get("op") or g.get("op_full") or "?"
    f["op_full2"] = g.get("op_full2", "?")
    f["op_ns_s"] = f" ({g['op_ns']})" if g.get("op_ns") else ""
    f["ext_module"] = g.get("ext_module", "?")
    ext2 = g.get("ext_module2", "")
    f["ext_module2"] = ext2 or "?"
    f["ext_pkg"] = _SO_PACKAGES.get(ext2.split(".")[0], _pip_name(ext2)) if ext2 else "the package"
    f["arch_name"] = g.get("nvcc_arch") or g.get("ptxas_arch") or g.get("ptx_arch") or f["sm_arch"]
    if g.get("pkg"):
        f["pkg_pip"] = _pip_name(g["pkg"])
        f["req_v"] = g.get("req_v") or g.get("req_v2") or "?"
        f["pkg_state"] = (f"is installed in version {g['have_v']}, older than the server needs" if g.get("have_v")
                          else "is not installed in a version the server accepts")
    f["cuda_req"] = g.get("cuda_req", "12.9")
    mfs = facts.get("mem_fraction_static")
    f["mem_fraction_static"] = mfs or "default"
    f["want_frac_s"] = f", now {g['want_frac']}" if g.get("want_frac") else ""
    f["mfs_s"] = f" (--mem-fraction-static {mfs})" if mfs else ""
    f.update(_driver_facts(facts, g))
    nv = facts.get("nccl_version")
    f["nccl_version_s"] = f", NCCL {nv}" if nv else ""
    f["nccl_kind_s"] = g.get("nccl_kind") or g.get("nccl_code") or "NCCL error"
    f["nccl_call_s"] = f" ({g['nccl_call']})" if g.get("nccl_call") else ""
    if match.rule.cause == "nccl_init":
        f["nccl_remedy"] = _nccl_remedy(seg_text)
    if match.rule.cause == "cuda_oom":
        f.update(_oom_details(seg_text, facts, match, lines))
    if match.rule.cause in _startup.CAUSES or match.rule.name.startswith("blackwell_hybrid_gdn"):
        # the deciding line with the few lines before it (an assert statement, the frame that raised)
        near = "\n".join(ln.text for ln in lines[max(0, match.line.index - 3): match.line.index + 1])
        f.update(_startup.fill(g, facts, near if match.rule.name == "gpu_arch_refused" else seg_text,
                               match.rule.name, match.line.text))
    return f


def _evidence(chosen: _Match, matches: list[_Match], lines: list[_Line]) -> list[str]:
    """The deciding line, the lines of the same cause near it, and its hint lines."""
    picked = [chosen.line]
    same = [m.line for m in matches if m.rule.cause == chosen.rule.cause and m.line is not chosen.line]
    near = [ln for ln in same if abs(ln.index - chosen.line.index) <= INCIDENT_LINES]
    hints = [m.line for m in matches if m.rule.weak and m.rule.cause == chosen.rule.cause]
    for ln in near + hints[:1]:
        if ln not in picked:
            picked.append(ln)
    # the exception line that closes the traceback the decisive line belongs to
    for ln in lines[chosen.line.index + 1: chosen.line.index + 6]:
        if GENERIC_FATAL_RE.search(ln.text) and not NOISE_RE.search(ln.text) and ln not in picked:
            if chosen.rule.pattern.search(ln.text) or any(ln is m.line for m in matches):
                picked.append(ln)
            break
    uniq = {ln.index: ln for ln in picked}
    picked = [uniq[i] for i in sorted(uniq)][:MAX_EVIDENCE]
    return [_clip(ln.raw) for ln in picked]


def _clip(s: str) -> str:
    return s if len(s) <= MAX_EVIDENCE_CHARS else s[: MAX_EVIDENCE_CHARS - 3] + "..."
