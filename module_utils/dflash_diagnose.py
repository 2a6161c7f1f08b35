"""Diagnose why an SGLang (or vLLM / PyTorch) server failed, from its log.

Pure functions, no Ansible import. ``diagnose_text(text)`` / ``diagnose_file(path)`` return
``{cause, summary, remedy, evidence, ...}`` where cause is one of ``CAUSES``.

How a verdict is reached:

1. The log is normalised line by line: ANSI colour codes and carriage returns are dropped and
   journal / rank / logger prefixes are peeled off for matching (evidence keeps the line as it
   was, less colour codes).
2. When the log spans several starts of a systemd unit, the latest start that failed is judged.
3. Every line is tried against ``RULES`` (a data table: pattern, cause, priority, summary and
   remedy templates). Strong rules are fatal errors; weak rules are warnings that only hint.
4. The root cause is the first fatal error: the earliest strong match, unless a match of higher
   priority belongs to the same incident (within ``INCIDENT_LINES`` lines after it). Later noise
   ("Rank 0 scheduler is dead", "Received sigquit", NCCL aborts of the other ranks) never wins
   over an earlier root error.
5. Facts are collected from the whole log (SM, GPU, torch/CUDA/driver versions, server args) and
   fill the templates so the remedy names the real module, port, path, SM and versions.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
from dataclasses import dataclass, field

try:  # the start-up causes after the imports (incompatible options, hybrid targets, graph capture)
    from ansible.module_utils import dflash_diagnose_startup as _startup
except ImportError:
    import dflash_diagnose_startup as _startup

CAUSES = (
    "missing_module",
    "kernel_abi",
    "xgrammar_structural_tag",
    "flashinfer_arch",
    "cuda_oom",
    "port_in_use",
    "model_missing",
    "nccl_init",
    "no_kernel_image",
    "driver_too_old",
    "bad_server_args",
    *_startup.CAUSES,
    "unknown",
)

# A strong match of higher priority this many lines after the first one is taken as the same
# incident (e.g. the "undefined symbol" line a few lines after sgl_kernel's CRITICAL banner).
INCIDENT_LINES = 40
# Evidence lines returned at most, and the longest line kept verbatim in evidence.
MAX_EVIDENCE = 6
MAX_EVIDENCE_CHARS = 600
# Lines before / after the deciding line that remedy details are read from.
CONTEXT_BEFORE = 400
CONTEXT_AFTER = 100
# Files larger than this are read as head + tail (the first fatal error is usually near the
# start of a failed run, the latest run is at the end).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
HEAD_FRACTION = 0.25

# --------------------------------------------------------------------------- normalisation

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]|\u2190\[[0-9;]*m")

# Prefixes peeled off (repeatedly) before matching.
_PREFIX_RES = [
    # journalctl short: "May 23 10:15:02 host python[1234]: "
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ [^\s:\[]+(?:\[\d+\])?: "),
    # journalctl short-iso / -o short-precise: "2025-05-23T10:15:02+0000 host python[1234]: "
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? \S+ [^\s:\[]+(?:\[\d+\])?: "),
    # bracketed ISO timestamps (CI / kubectl): "[2025-09-12T15:42:57Z] "
    re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]\s*"),
    # docker/k8s timestamps: "2025-05-23T10:15:02.123456789Z "
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"),
    # vLLM / ray worker tags: "(VllmWorker rank=1 pid=123) ", "(EngineCore_DP0 pid=1) ", "(pid=1) "
    re.compile(r"^\((?:[A-Za-z_][\w.:-]*\s+)?(?:rank=\d+\s+)?pid=\d+(?:,\s*ip=[\d.]+)?\)\s*"),
    # docker compose service prefixes: "openedai-images-flux  | "
    re.compile(r"^[a-z0-9][\w.-]*(?:-\d+)?\s+\| "),
    # torchrun rank prefixes: "[rank0]: ", "[default0]:", "0: "
    re.compile(r"^\[(?:rank|default)\d+\]:\s?"),
    # sglang: "[2025-05-23 10:15:02 TP0] ", "[2025-05-23 10:15:02 DP0 TP1 EP1] ", "[2025-05-23 10:15:02] "
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]{2,4}\d+)*\] "),
    # vLLM: "ERROR 05-23 10:15:02 [core.py:123] ", "INFO 05-23 10:15:02 engine.py:12] "
    re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s*"),
    # python logging: "2025-05-23 10:15:02,123 - name - ERROR - ", "2025-05-23 10:15:02 ERROR "
    re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s+-\s+[\w.]+)?\s+-?\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)?\s*-?\s*"),
]


def strip_ansi(line: str) -> str:
    return ANSI_RE.sub("", line)


def strip_prefixes(line: str) -> str:
    """Peel journal / rank / logger prefixes (any order, a few levels deep)."""
    for _ in range(6):
        for rx in _PREFIX_RES:
            m = rx.match(line)
            if m and m.end() > 0:
                line = line[m.end():]
                break
        else:
            return line
    return line


# --------------------------------------------------------------------------- rule table


@dataclass(frozen=True)
class Rule:
    """One row of the table: a line pattern and what it means."""

    name: str
    cause: str
    priority: int
    pattern: re.Pattern
    summary: str
    remedy: str
    weak: bool = False
    # a match is dropped when the line also matches this (e.g. generic rules vs specific ones)
    unless: re.Pattern | None = None


def _rx(p: str) -> re.Pattern:
    return re.compile(p, re.IGNORECASE)


_DRIVER_REMEDY = (
    "upgrade the NVIDIA driver{driver_found_s} to one that supports {cuda_needed_ref} (CUDA 12.8 needs "
    "driver >= 570, 12.9 >= 575, 13.0 >= 580), or install torch / kernel wheels built for "
    "{driver_cuda_ref} or older"
)
_MODULE_REMEDY = (
    "install the missing package into the server's venv: `uv pip install {package}` "
    "(in the toolkit: add `{package}` to the overlay layer of dflash_venv_layers so every "
    "release has it), then restart"
)

RULES: list[Rule] = [
    # ---------------------------------------------------------------- driver_too_old
    Rule("driver_too_old_torch", "driver_too_old", 100,
         _rx(r"NVIDIA driver on your system is too old(?: \(found version (?P<driver_found>\d+)\))?"),
         "the NVIDIA driver is too old for this CUDA build{driver_found_s}",
         _DRIVER_REMEDY),
    Rule("driver_insufficient", "driver_too_old", 100,
         _rx(r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"
             r"|CUDA_ERROR_INSUFFICIENT_DRIVER|driver version is insufficient"),
         "the CUDA runtime in the venv is newer than the installed driver supports{driver_found_s}",
         _DRIVER_REMEDY),
    Rule("driver_ptx_toolchain", "driver_too_old", 95,
         _rx(r"provided PTX was compiled with an unsupported toolchain|CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
             r"|cudaErrorUnsupportedPtxVersion"),
         "the driver is older than the toolkit that compiled the PTX (unsupported toolchain){driver_found_s}",
         "upgrade the NVIDIA driver to one that supports the CUDA toolkit used for JIT "
         "({nvcc_ref}; CUDA 12.8 needs driver >= 570, 12.9 >= 575, 13.0 >= 580), or use a toolkit / "
         "triton build no newer than {driver_cuda_ref}"),
    Rule("driver_lib_mismatch", "driver_too_old", 94,
         _rx(r"system has unsupported display driver / cuda driver combination|cudaErrorSystemDriverMismatch"
             r"|Error 803|Driver/library version mismatch"),
         "the CUDA user-space driver in use (libcuda / cuda-compat) does not match the loaded NVIDIA kernel "
         "driver{driver_found_s}",
         "make the unit use the host's own libcuda (drop cuda-compat / bundled libcuda directories from "
         "LD_LIBRARY_PATH), or upgrade the NVIDIA driver to one that supports {cuda_needed_ref}; after a "
         "driver upgrade reboot or reload the nvidia kernel modules"),
    Rule("driver_forward_compat", "driver_too_old", 95,
         _rx(r"forward compatibility was attempted on non supported HW|cudaErrorCompatNotSupportedOnDevice"
             r"|Error 804"),
         "CUDA forward-compatibility libraries were picked up on a GPU/driver that does not support them",
         "upgrade the NVIDIA driver to one that natively supports {cuda_needed_ref}, or remove the "
         "cuda-compat libraries from LD_LIBRARY_PATH and use wheels built for {driver_cuda_ref}"),
    Rule("driver_missing", "driver_too_old", 70,
         _rx(r"Found no NVIDIA driver on your system|NVIDIA-SMI has failed because it couldn't communicate"
             r" with the NVIDIA driver|libcuda\.so(?:\.1)?: cannot open shared object file"
             r"|No CUDA GPUs are available|Failed to infer device type"
             r"|could not select device driver \"[^\"]*\" with capabilities: \[\[gpu\]\]"),
         "no usable NVIDIA driver / GPU was visible to the server (driver not installed / not loaded / not "
         "mounted into the container, or CUDA_VISIBLE_DEVICES hides the GPUs)",
         "install or load the NVIDIA driver (nvidia-smi must work on the host, and inside containers "
         "use the NVIDIA container runtime (nvidia-container-toolkit, then `nvidia-ctk runtime configure`) with "
         "the GPUs passed in, e.g. `--gpus all` / a compose GPU reservation), check that CUDA_VISIBLE_DEVICES of the unit names existing GPUs, then restart"),

    Rule("vllm_no_platform", "driver_too_old", 69,
         _rx(r"No platform detected, vLLM is running on UnspecifiedPlatform"),
         "vLLM found no GPU platform (no NVIDIA driver / GPU visible to the process)",
         "pass the GPUs to the server (containers: the NVIDIA container runtime and `--gpus all` / a compose "
         "GPU reservation; check `nvidia-smi` inside it), check CUDA_VISIBLE_DEVICES of the unit, then restart",
         weak=True),

    # ---------------------------------------------------------------- flashinfer_arch
    Rule("flashinfer_cuda_129", "flashinfer_arch", 92,
         _rx(r"SM ?(?P<sm_major>1[0-2])\.?x? requires CUDA >= ?(?P<cuda_req>\d+\.\d+)"),
         "FlashInfer JIT cannot target this GPU{sm_s} with the available CUDA{nvcc_s}",
         "start with `--attention-backend triton` (no FlashInfer JIT), or provide a CUDA >= {cuda_req} nvcc "
         "for FlashInfer JIT (CUDA_HOME / PATH of the unit), or use a flashinfer-jit-cache / cubin build "
         "that covers {sm_arch}", weak=True),
    Rule("flashinfer_sm_check", "flashinfer_arch", 92,
         _rx(r"FlashInfer(?: JIT)?[^\n]{0,80}(?:requires|only supports?|not supported)[^\n]{0,60}"
             r"(?:sm_?\d+|SM ?\d+|compute capability|architecture)"
             r"|(?:sm_?\d+|SM ?\d+|compute capability|architecture)[^\n]{0,60}not supported[^\n]{0,40}FlashInfer"),
         "FlashInfer rejected this GPU architecture{sm_s}",
         "start with `--attention-backend triton` (and `--sampling-backend pytorch`), or install a "
         "FlashInfer build / CUDA >= 12.9 nvcc whose JIT supports {sm_arch}"),
    Rule("flashinfer_unsupported_arch", "flashinfer_arch", 91,
         _rx(r"flashinfer[^\n]*Unsupported architectur|Unsupported architectur[^\n]*flashinfer"
             r"|backends are supported on Blackwell[^\n]*attention_backend=flashinfer"),
         "FlashInfer does not support this GPU architecture for the chosen kernels{sm_s}",
         "start with `--attention-backend triton` (the FlashInfer kernels chosen here have no build for "
         "{sm_arch}), or use an attention backend the log names as supported"),
    Rule("flashinfer_no_arch", "flashinfer_arch", 92,
         _rx(r"No supported CUDA architectures found for major versions"),
         "FlashInfer JIT found no CUDA architecture it can build for{sm_s}{nvcc_s}",
         "start with `--attention-backend triton`, or give FlashInfer JIT a CUDA >= 12.9 nvcc "
         "(needed for {sm_arch}) via CUDA_HOME / PATH, or set FLASHINFER_CUDA_ARCH_LIST to the GPU's arch"),
    Rule("nvcc_unsupported_arch", "flashinfer_arch", 91,
         _rx(r"nvcc fatal\s*:\s*Unsupported gpu architecture '(?P<nvcc_arch>[\w]+)'"
             r"|Value '(?P<ptxas_arch>sm_\w+)' is not defined for option 'gpu-name'"),
         "the CUDA compiler used for JIT kernels does not know {arch_name}{nvcc_s}",
         "start with `--attention-backend triton` to avoid FlashInfer JIT, or install a newer CUDA "
         "toolkit (CUDA >= 12.9 for sm_120/sm_121, >= 12.8 for sm_100) and point CUDA_HOME / PATH of "
         "the unit at it"),
    Rule("flashinfer_jit_fail", "flashinfer_arch", 60,
         _rx(r"flashinfer[^\n]{0,120}(?:Ninja build failed|build failed|compilation failed|JIT compil\w+ fail)"
             r"|RuntimeError: Ninja build failed"),
         "FlashInfer JIT compilation failed{sm_s}{nvcc_s}",
         "start with `--attention-backend triton`, or provide a CUDA >= 12.9 nvcc that supports "
         "{sm_arch} for FlashInfer JIT"),

    # ---------------------------------------------------------------- no_kernel_image
    Rule("no_kernel_image", "no_kernel_image", 90,
         _rx(r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice"
             r"|CUDA_ERROR_NO_BINARY_FOR_GPU|no binary for gpu"),
         "a CUDA binary in the venv has no kernel for this GPU{sm_s}",
         "install torch and the kernel wheels (sglang-kernel, flashinfer, ...) built for {sm_arch} "
         "(e.g. a CUDA 12.8+ torch for Blackwell sm_100/sm_120), or rebuild the extension with "
         "TORCH_CUDA_ARCH_LIST=\"{arch_env}\"{torch_arch_s}"),
    Rule("invalid_device_function", "no_kernel_image", 80,
         _rx(r"CUDA error: invalid device function|cudaErrorInvalidDeviceFunction"),
         "a CUDA kernel in the venv was not built for this GPU{sm_s} (invalid device function)",
         "install torch / kernel wheels built for {sm_arch}, or rebuild the extension with "
         "TORCH_CUDA_ARCH_LIST=\"{arch_env}\""),
    Rule("torch_sm_incompatible", "no_kernel_image", 89,
         _rx(r"with CUDA capability (?P<cap>sm_\d+a?) is not compatible with the current PyTorch installation"),
         "the installed torch has no kernels for this GPU{sm_s}",
         "install a torch build that includes {sm_arch} (e.g. torch +cu128 or newer for Blackwell), and "
         "kernel wheels built against that torch{torch_arch_s}", weak=True),
    Rule("triton_ptxas", "no_kernel_image", 93,
         _rx(r"triton[\w/.-]*/ptxas\W[^\n]*?--gpu-name=(?P<ptx_arch>sm_\w+)[^\n]*?(?:non-zero exit status|\.ptx\.o\s*$)"
             r"|PTXASError|Internal Triton PTX codegen error"),
         "triton's ptxas could not compile kernels for {arch_name}{sm_s} (the ptxas bundled with this triton "
         "does not know the GPU)",
         "point triton at the ptxas of a CUDA toolkit that supports {arch_name} (`TRITON_PTXAS_PATH=/usr/local/"
         "cuda/bin/ptxas` in the instance env; CUDA >= 12.8 for sm_100/sm_120, >= 12.9 for sm_121, 13.0 for "
         "sm_110), or "
         "install a torch + triton release built for this GPU"),
    Rule("triton_arch_unsupported", "no_kernel_image", 70,
         _rx(r"(?:PTX .* not supported|ptxas[^\n]{0,40}fatal|Unsupported architecture)[^\n]{0,80}sm_\d+"),
         "the kernel compiler does not support this GPU{sm_s}",
         "install a torch / triton built for {sm_arch} (newer CUDA), or a CUDA toolkit that knows it"),

    # ---------------------------------------------------------------- xgrammar_structural_tag
    Rule("xgrammar_import", "xgrammar_structural_tag", 88,
         _rx(r"cannot import name '(?P<xgr_name>\w+)' from 'xgrammar"
             r"|module 'xgrammar[\w.]*' has no attribute '(?P<xgr_attr>\w+)'"
             r"|No module named 'xgrammar\.(?P<xgr_sub>[\w.]+)'"),
         "the installed xgrammar{xgrammar_version_s} lacks {xgr_symbol} that this sglang needs",
         "add `--grammar-backend none` to the instance flags (no grammar-constrained output), or pin "
         "xgrammar>=0.1.32 (what sglang 0.5.11 requires) in the layer and redeploy"),

    Rule("xgrammar_binding_mismatch", "xgrammar_structural_tag", 87,
         _rx(r"(?:Mismatched type|incompatible function arguments|TypeError)[^\n]*xgrammar[\w.]*"
             r"|xgrammar[\w.]*[^\n]*(?:Mismatched type|incompatible function arguments)"),
         "the installed xgrammar{xgrammar_version_s} does not match the API this sglang calls",
         "add `--grammar-backend none` to the instance flags, or pin the xgrammar version this sglang "
         "pins (sglang 0.5.11: xgrammar==0.1.32) in the layer and redeploy"),

    # ---------------------------------------------------------------- kernel_abi
    Rule("sgl_kernel_common_ops", "kernel_abi", 86,
         _rx(r"\[sgl_kernel\] CRITICAL: Could not load any common_ops library"),
         "sgl_kernel's compiled common_ops could not be loaded (ABI mismatch with {torch})",
         "install the sglang-kernel wheel built for {torch} and its CUDA "
         "(sglang 0.5.11 pairs sglang-kernel 0.4.2 with torch 2.11.0+cu130); keep torch, triton, "
         "nvidia-* and sgl_kernel from ONE CUDA build (do not mix +cu128 and +cu130)"),
    Rule("undefined_symbol", "kernel_abi", 85,
         _rx(r"(?P<so_path>[\w./+-]*\.so[\w.]*): undefined symbol: (?P<symbol>\S+)"
             r"|undefined symbol: (?P<symbol2>\S+)"),
         "{so_package} was built against a different torch/CUDA ABI than "
         "{torch} (undefined symbol {symbol_short})",
         "reinstall {so_package_pip} built for {torch} (same torch version AND CUDA "
         "variant), or install the torch it was built for; keep torch, triton, nvidia-* and compiled "
         "extensions from ONE CUDA build (do not overlay +cu130 kernels on a +cu128 torch)"),
    Rule("cuda_lib_missing", "kernel_abi", 84,
         _rx(r"(?P<cuda_lib>lib(?:cudart|cublas\w*|cudnn\w*|nvrtc|nccl|cufft|curand|cusparse\w*|cusolver\w*"
             r"|nvJitLink|nvToolsExt|torch\w*|c10\w*)\.so(?:\.[\d.]+)?): cannot open shared object file"),
         "a compiled extension needs {cuda_lib}, which is not installed (CUDA major version mismatch "
         "between wheels)",
         "install wheels that all target the same CUDA major ({torch}): the missing "
         "{cuda_lib} comes from the nvidia-* wheel of that CUDA, or reinstall the extension built for "
         "the installed torch"),
    Rule("torch_ops_missing", "kernel_abi", 80,
         _rx(r"'_OpNamespace' '(?P<op_ns>\w+)' object has no attribute '(?P<op>\w+)'"
             r"|No such operator (?P<op_full>sgl_kernel::\w+|_C::\w+)"),
         "the compiled kernel library{op_ns_s} does not provide the op {op_name} (its version does not "
         "match the Python package calling it)",
         "install the kernel package version the server pins (sglang 0.5.11 -> sglang-kernel 0.4.2; "
         "vllm -> its own vllm._C build), built for {torch}"),
    Rule("operator_missing", "kernel_abi", 79,
         _rx(r"operator (?P<op_full2>\w+::\w+) does not exist"),
         "the compiled operator {op_full2} is missing: a torch extension does not match {torch}",
         "reinstall the package that registers {op_full2} (e.g. torchvision / torchaudio) in the build "
         "that matches {torch} (same version and CUDA variant)"),
    Rule("cuda_major_mismatch", "kernel_abi", 80,
         _rx(r"compiled with different CUDA (?:major )?versions"
             r"|detected CUDA version \([\d.]+\) mismatches the version that was used to compile PyTorch"),
         "packages in the venv were built for different CUDA versions",
         "reinstall torch, torchvision/torchaudio and compiled extensions from the same CUDA variant "
         "({torch})"),
    Rule("glibcxx", "kernel_abi", 75,
         _rx(r"version `(?P<glibc_sym>GLIBCXX_[\d.]+|GLIBC_[\d.]+|CXXABI_[\d.]+)' not found"),
         "a compiled extension needs {glibc_sym}, newer than the host's C/C++ runtime provides",
         "use wheels built for this OS's glibc/libstdc++ (manylinux tag), or install a newer "
         "libstdc++ (e.g. conda's libstdcxx-ng) into the environment"),

    # ---------------------------------------------------------------- cuda_oom
    Rule("torch_oom", "cuda_oom", 70,
         _rx(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
             r"|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|out of memory \(cudaMalloc\)"),
         "the GPU ran out of memory{oom_where}{oom_detail}",
         "{oom_remedy}"),
    Rule("sglang_not_enough_memory", "cuda_oom", 72,
         _rx(r"Not enough memory\. Please try to increase --mem-fraction-static"
             r"|max_total_num_tokens=\d+ is too small|(?:KV cache|kv_cache) pool[^\n]*(?:too small|negative)"
             r"|leave no GPU memory for the KV cache"),
         "too little GPU memory is left for the KV cache after loading the weights{mfs_s}",
         "raise `--mem-fraction-static` (now {mem_fraction_static}) if the GPU is otherwise free, and/or "
         "lower `--context-length` / `--max-running-requests`, use a larger `--tp-size`, or free the GPU "
         "(other processes: check nvidia-smi)"),
    Rule("vllm_no_cache_memory", "cuda_oom", 72,
         _rx(r"No available memory for the cache blocks"
             r"|larger than the maximum number of tokens that can be stored in KV cache"
             r"|larger than the available KV cache memory|KV cache is needed, which is larger"
             r"|insufficient KV cache|not enough KV cache space"),
         "too little GPU memory is left for the KV cache",
         "raise `--gpu-memory-utilization` (vLLM) / `--mem-fraction-static` (SGLang), lower "
         "`--max-model-len` / `--context-length`, or shard with a larger tensor-parallel size"),
    Rule("gpu_busy_at_start", "cuda_oom", 73,
         _rx(r"Free memory on device(?: \S+)? \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup is less "
             r"than desired GPU memory utilization(?: \((?P<want_frac>[\d.]+), (?P<want_gib>[\d.]+) GiB\))?"
             r"|on startup is less than desired GPU memory utilization"),
         "only {free_gib} of {total_gib} GiB of GPU memory was free when the server started: other processes "
         "hold the GPU",
         "stop the other processes on this GPU (nvidia-smi lists them; a stale server of an earlier run is the "
         "usual one), or lower the fraction the server claims (`--gpu-memory-utilization` in vLLM{want_frac_s}, "
         "`--mem-fraction-static` in SGLang) below the free share"),
    Rule("cache_budget_too_small", "cuda_oom", 71,
         _rx(r"\b(?:KV[ _-]?cache|cache|memory) budget\b[^\n]{0,80}?(?:too small|is negative|budget -\d)"),
         "the GPU memory left for the KV cache after the weights is too small (budget negative or below the "
         "minimum){mfs_s}",
         "free the GPU from other processes (nvidia-smi), raise the memory fraction the server may use "
         "(`--mem-fraction-static` in SGLang), lower the context length / reserved tokens, or use a smaller "
         "(quantised) model or more GPUs"),

    # ---------------------------------------------------------------- port_in_use
    Rule("port_bind", "port_in_use", 65,
         _rx(r"error while attempting to bind on address \('?(?P<addr>[^']*)'?,\s*(?P<port>\d+)(?:, \d+, \d+)?\)"
             r"[^\n]*address already in use"),
         "port {port} on {addr} is already in use",
         "stop the process holding port {port} (`ss -ltnp 'sport = :{port}'` shows it) or give this "
         "instance another `--port`; leave room for SGLang's internal ports (it also binds a few "
         "ports after --port and a --nccl-port)"),
    Rule("port_zmq", "port_in_use", 64,
         _rx(r"ZMQError: Address (?:already )?in use(?: \(addr='(?P<zmq_addr>[^']+)'\))?"),
         "an internal ZMQ port{zmq_addr_s} is already in use",
         "another server (or a stale process of this one) holds the port{zmq_addr_s}: stop it "
         "(`ss -ltnp` shows it), or move this instance to a `--port` far from other instances"),
    Rule("port_torch_dist", "port_in_use", 64,
         _rx(r"EADDRINUSE|server socket has failed to bind|failed to listen on any local network address"
             r"|Address already in use|port (?P<port2>\d+) is (?:already )?(?:in use|not available|occupied)"
             r"|\w*port\w* at (?P<port4>\d+) is not available in"
             r"|(?:already in use|not available)[^\n]{0,30}port[ =:]*(?P<port3>\d+)"),
         "{port_ref_cap} needed by the server is already in use",
         "stop the process holding {port_ref} (`ss -ltnp` shows it) or pick another port "
         "(`--port`, or `--nccl-port` / `--dist-init-addr` for the distributed rendezvous)"),

    # ---------------------------------------------------------------- bad_server_args
    # the server's argument parser (argparse: "<prog>: error: ...") stops before anything loads
    Rule("argparse_unrecognized", "bad_server_args", 90,
         _rx(r"(?:^|[\w./-]+(?: serve)?: )error: unrecognized arguments: (?P<unrecognized>[^\n]+)"),
         "the server's argument parser stopped at start-up: unrecognized arguments: {unrecognized}",
         "remove or correct {unrecognized} in the instance's extra_args / pin_flags: it is not a flag of this "
         "server version (a flag of another version or of another server, a typo, '_' for '-', one dash for two, "
         "or a value after a flag that takes none). The pinned sglang's flags are in "
         "files/patches/sglang/<version>/server-flags.txt, and deploy.yml checks extra_args against them "
         "before anything changes"),
    Rule("argparse_argument", "bad_server_args", 90,
         _rx(r"(?:^|[\w./-]+(?: serve)?: )error: argument (?P<flag>-[\w-]+(?:/-[\w-]+)*): "
             r"(?P<problem>invalid choice(?:: [^\n]+)?|expected (?:one|at least one|\d+) arguments?"
             r"|invalid \w+ value: [^\n]+|ignored explicit argument [^\n]+|not allowed with argument [^\n]+)"),
         "the server's argument parser rejected {flag}: {problem}",
         "fix {flag} in the instance's extra_args / pin_flags (or the instance field it comes from): {problem}"),
    Rule("argparse_ambiguous", "bad_server_args", 90,
         _rx(r"(?:^|[\w./-]+(?: serve)?: )error: ambiguous option: (?P<flag>-[\w-]+) could match "
             r"(?P<matches>[^\n]+)"),
         "the server's argument parser found {flag} ambiguous (it abbreviates {matches})",
         "write the whole flag instead of {flag} in the instance's extra_args / pin_flags"),
    Rule("argparse_required", "bad_server_args", 90,
         _rx(r"(?:^|[\w./-]+(?: serve)?: )error: the following arguments are required: (?P<required>[^\n]+)"),
         "the server's argument parser misses required arguments: {required}",
         "the toolkit passes --model-path from the field model_path: check that the instance's flags reach the "
         "server (the unit's $DFLASH_ARGS, the env file of the current release)"),

    # ---------------------------------------------------------------- model_missing
    Rule("hf_repo_id", "model_missing", 62,
         _rx(r"Repo id must (?:be in the form|use alphanumeric)[^\n]*?: '(?P<model>[^']+)'"),
         "the model path {model} does not exist on the host, so it was taken for a Hub repo id",
         "fix `--model-path` ({model}): it must be an existing local directory with config.json "
         "(or a valid Hub repo id with network access); check the instance's model_path and mounts"),
    Rule("hf_cant_load_config", "model_missing", 62,
         _rx(r"Can't load (?:the )?(?:configuration|tokenizer|config)[^\n]*? for '(?P<model>[^']+)'"
             r"|(?P<model2>[^\s'\"]+) does not appear to have a file named (?P<missing_file>[\w.-]+)"),
         "the model at {model} could not be loaded (missing {missing_file})",
         "fix `--model-path` ({model}): point it at the directory that holds config.json, the "
         "tokenizer and the weights (download it first / check mounts and permissions)"),
    Rule("hf_gated", "model_missing", 61,
         _rx(r"Cannot access gated repo for url https://huggingface\.co/(?:api/models/)?(?P<model7>[\w.-]+/[\w.-]+)/"
             r"|Access to model (?P<model8>[\w.-]+/[\w.-]+) is restricted|You are trying to access a gated repo"
             r"|40[13] Client Error[^\n]*?https://huggingface\.co/(?!api/)(?P<model9>[\w.-]+/[\w.-]+)/resolve/"),
         "the model {model} is a gated or private Hub repository and the Hub refused the download (HTTP 401/403: "
         "no token reached the server, or the token's account has not been granted access)",
         "accept the model's terms on its Hub page with the account that owns the token, then set HF_TOKEN in the "
         "instance env (huggingface_hub reads HF_TOKEN; HUGGINGFACEHUB_API_TOKEN is not read), or download the "
         "model ahead and point `--model-path` at the local directory"),
    Rule("hf_repo_not_found", "model_missing", 60,
         _rx(r"RepositoryNotFoundError|GatedRepoError|Repository Not Found for url|is not a valid model identifier"
             r"|is not a local folder and is not a valid model"),
         "the model {model} is neither a local directory nor an accessible Hub repository",
         "fix `--model-path` ({model}) to an existing local directory, or for a gated/private Hub "
         "model set HF_TOKEN in the instance env (and download it ahead, since servers run offline)"),
    Rule("hf_offline", "model_missing", 58,
         _rx(r"couldn't connect to 'https://huggingface\.co/?'(?:[^\n]*?it looks like (?P<hf_model>\S+) is not the "
             r"path)?|LocalEntryNotFoundError"
             r"|outgoing traffic has been disabled|Cannot find the requested files in the (?:local )?cache"),
         "the model {model} is not on disk and could not be fetched (offline)",
         "download the model to the host ahead of time and set `--model-path` to that directory "
         "(HF_HUB_OFFLINE=1 needs a complete local copy)"),
    Rule("model_file_missing", "model_missing", 55,
         _rx(r"No such file or directory: '(?P<model_file>[^']*(?:config\.json|\.safetensors|tokenizer[^']*|"
             r"\.bin|generation_config\.json|/models?/[^']*))'"),
         "a model file is missing: {model_file}",
         "fix `--model-path` ({model}) or finish the download: {model_file} must exist and be readable "
         "by the service user"),
    Rule("hf_bad_path", "model_missing", 57,
         _rx(r"Incorrect path_or_model_id: '(?P<model3>[^']+)'|Unrecognized model in (?P<model4>\S+?)\.? Should have"
             r"|No supported config format found in (?P<model5>[^\s{}\"']+)"
             r"|config file at '(?P<model6>[^']+)' is not a valid JSON file"),
         "{model} is not a usable model directory",
         "fix `--model-path` ({model}): point it at the directory that holds config.json (with model_type), "
         "the tokenizer and the weights"),
    Rule("no_safetensors", "model_missing", 55,
         _rx(r"Cannot find any model weights with|No model weights found|Error no file named "
             r"(?:pytorch_model\.bin|model\.safetensors)"),
         "no model weights were found at {model}",
         "point `--model-path` at a directory holding the *.safetensors weights (or finish the download)"),

    # ---------------------------------------------------------------- nccl_init
    Rule("nccl_shm", "nccl_init", 52,
         _rx(r"Error while creating shared memory segment (?P<shm_seg>\S+)(?: \(size (?P<shm_size>\d+)\))?"
             r"|posix_fallocate failed\s*:\s*No space left on device"),
         "NCCL could not create its shared-memory segment in /dev/shm (/dev/shm too small or full){nccl_version_s}",
         "give the service a larger /dev/shm: NCCL puts a segment of several MB per GPU pair there (containers: "
         "`--shm-size=16g` or `--ipc=host`; Kubernetes: a memory-backed emptyDir on /dev/shm; bare hosts: "
         "`df -h /dev/shm` and free it); NCCL_SHM_DISABLE=1 works around it at some speed cost"),
    Rule("gpu_peer_access", "nccl_init", 53,
         _rx(r"peer access is not supported between these two devices|cudaErrorPeerAccessUnsupported"),
         "GPU peer-to-peer access between the tensor-parallel GPUs is not available on this host (custom "
         "all-reduce / NCCL P2P need it)",
         "start with `--disable-custom-all-reduce` and set NCCL_P2P_DISABLE=1 in the instance env (P2P is "
         "blocked by the PCIe topology, IOMMU/ACS, a VM or the GPU model; `nvidia-smi topo -p2p r` shows which "
         "pairs support it); if it persists rerun with NCCL_DEBUG=INFO"),
    Rule("nccl_error", "nccl_init", 50,
         _rx(r"NCCL error[^\n]*?(?P<nccl_kind>unhandled system error|internal error|unhandled cuda error|"
             r"invalid usage|remote process exited|invalid argument|unhandled system|Call to \w+ failed)"
             r"|(?P<nccl_code>ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage"
             r"|ncclRemoteError|ncclInvalidArgument)"),
         "NCCL failed to initialise the communicator ({nccl_kind_s}{nccl_version_s})",
         "{nccl_remedy}"),
    # a segfault / abort while a frame of sglang's or vLLM's ctypes NCCL wrapper is on the stack
    Rule("nccl_call_crash", "nccl_init", 44,
         _rx(r"pynccl(?:_wrapper)?\.py\"[^\n]*?(?:\bin (?P<nccl_call>nccl\w+)\s*$|$)"),
         "the server crashed inside an NCCL library call{nccl_call_s} while setting up the communicator "
         "between the GPUs{nccl_version_s}",
         "rerun with NCCL_DEBUG=INFO (instance env) to see the last NCCL step; on consumer or virtual GPUs "
         "(GeForce / RTX, vGPU profiles) peer-to-peer is often unavailable: set NCCL_P2P_DISABLE=1 and start with "
         "`--disable-custom-all-reduce`; make sure the NCCL library (nvidia-nccl-cu* wheel) is the one torch "
         "was built with and supports this GPU; check /dev/shm has room (`df -h /dev/shm`)"),
    Rule("nccl_generic", "nccl_init", 45,
         _rx(r"DistBackendError|ProcessGroupNCCL[^\n]*(?:error|failed)|Failed to initialize NCCL"
             r"|NCCL communicator was aborted|Watchdog caught collective operation timeout"
             r"|init_process_group[^\n]*(?:timed out|failed)"),
         "the distributed (NCCL) setup between the GPUs failed{nccl_version_s}",
         "{nccl_remedy}"),

    Rule("nccl_warn", "nccl_init", 40,
         _rx(r"NCCL WARN"),
         "NCCL printed warnings{nccl_version_s}",
         "{nccl_remedy}", weak=True),

    # ---------------------------------------------------------------- missing_module
    Rule("module_not_found", "missing_module", 78,
         _rx(r"No module named '(?P<module>[\w.]+)'"),
         "Python module '{module}' is not installed in the server's venv",
         _MODULE_REMEDY,
         unless=_rx(r"No module named '(?:common_ops|xgrammar\.|_soundfile_data|[\w.]*\._C\b|"
                    r"[\w.]*_C'|sgl_kernel\.common_ops)")),
    Rule("sglang_submodule_missing", "missing_module", 79,
         _rx(r"No module named '(?P<sgl_module>sglang\.[\w.]+)'"),
         "the installed sglang has no module '{sgl_module}' (another sglang version, or the patched tree "
         "is not the one on the path)",
         "deploy the sglang tree that provides {sgl_module}: the toolkit's patched sglang 0.5.11 "
         "(dflash_tree) on PYTHONPATH of the unit, not a plain PyPI sglang; check `python -c 'import "
         "sglang; print(sglang.__file__)'` in the unit's venv"),
    Rule("sndfile_lib", "missing_module", 79,
         _rx(r"sndfile library not found|cannot load library 'libsndfile"),
         "soundfile is installed but the libsndfile system library is missing",
         "install the library: `apt-get install -y libsndfile1` (or `uv pip install --reinstall soundfile` "
         "to get the wheel that bundles it), then restart"),
    # sgl_kernel without its FA3 extension (a slimmed or source build, or a GPU family FA3 has no build for):
    # the fa3 attention backend (sglang's default on Hopper) dies at start; the wheel's version is not the point.
    Rule("fa3_flash_ops_missing", "missing_module", 65,
         _rx(r"cannot import name 'flash_ops' from 'sgl_kernel'|No module named 'sgl_kernel\.flash_ops'"),
         "sgl_kernel in this venv has no FA3 kernels (sgl_kernel.flash_ops), which the fa3 attention backend "
         "needs (sglang's default on Hopper)",
         "start with `--attention-backend flashinfer` or `triton` (the toolkit's fallback rule sm90-without-fa3 "
         "does this when the probe finds no flash_ops), or install the full sglang-kernel wheel with its "
         "flash_ops extension, then restart"),
    Rule("pkg_min_version", "missing_module", 76,
         _rx(r"(?P<pkg>[\w.-]+) (?:with minimum required version (?P<req_v>[\w.+-]+?)\.? is not installed"
             r"|is installed with version (?P<have_v>[\w.+-]+), which is less than the minimum required "
             r"version (?P<req_v2>[\w.+-]+?)\.?(?:\s|$))"),
         "{pkg} {pkg_state} (the server checks for >= {req_v}; a package installed under another "
         "distribution name also reads as missing)",
         "install `{pkg_pip}>={req_v}` into the server's venv (in the toolkit: pin it in the layer of "
         "dflash_venv_layers that carries the server), then restart; if a new enough {pkg_pip} is installed "
         "and still reported missing, the server release predates that package's name: use the server "
         "release that pins it"),
    Rule("package_metadata_missing", "missing_module", 74,
         _rx(r"PackageNotFoundError: (?:No package metadata was found for )?(?P<module>[\w.-]+)"),
         "Python package '{module}' is not installed in the server's venv (no distribution metadata)",
         _MODULE_REMEDY),
    Rule("cannot_import_name", "missing_module", 60,
         _rx(r"cannot import name '(?P<import_name>\w+)' from '(?P<import_from>[\w.]+)'"),
         "'{import_name}' is missing from the installed {import_from_top} (incompatible version)",
         "install the version of {import_from_pip} that this sglang pins (check `uv pip check` in the "
         "venv) so that {import_from}.{import_name} exists, then restart",
         unless=_rx(r"from 'xgrammar")),
    Rule("ext_module_missing", "kernel_abi", 77,
         _rx(r"No module named '(?P<ext_module>common_ops|sgl_kernel\.common_ops)'"),
         "sgl_kernel's compiled {ext_module} could not be imported (no build for this torch/CUDA/GPU)",
         "install the sglang-kernel wheel built for {torch} and its CUDA (sglang 0.5.11 pairs "
         "sglang-kernel 0.4.2 with torch 2.11.0+cu130)"),
    Rule("compiled_ext_missing", "missing_module", 78,
         _rx(r"No module named '(?P<ext_module2>[\w.]*\._C|[\w.]*_C)'"),
         "the compiled extension module '{ext_module2}' is missing from the venv",
         "install {ext_pkg} as a built wheel matching {torch} (`uv pip install --reinstall {ext_pkg}`); "
         "a source checkout without its compiled parts, or starting the server from inside that checkout, "
         "shadows the installed package"),
]

RULES += [
    Rule(name, cause, prio, _rx(pattern), summary, remedy, weak, _rx(unless) if unless else None)
    for name, cause, prio, pattern, summary, remedy, weak, unless in _startup.ROWS
]

# Cheap pre-check before the rule table: a line without any of these (lower-case) words matches no
# rule (plain substring tests are much faster than one big case-insensitive regex).
_RULE_KEYWORDS = (
    "driver", "ptx", "804", "803", "forward compat", "requires cuda", "flashinfer", "supported", "architectur",
    "nvcc", "gpu-name", "kernel image", "no_binary", "binary for gpu", "capability", "xgrammar", "common_ops",
    "undefined symbol", "shared object", "_opnamespace", "operator", "cuda version", "cuda major", "glibc",
    "cxxabi", "memory", "alloc_failed", "kv cache", "kv_cache", "max_total_num_tokens", "bind", "address",
    "eaddrinuse", "port", "repo id", "can't load", "does not appear", "repositorynotfound", "gatedrepo",
    "repository not found", "model identifier", "local folder", "huggingface", "localentrynotfound",
    "outgoing traffic", "cache", "no such file", "model weights", "no file named", "nccl", "distbackend",
    "init_process_group", "watchdog", "no module named", "sndfile", "cannot import name", "ninja",
    "display driver", "mismatch", "device function", "path_or_model_id", "unrecognized model", "has no attribute",
    "config format", "valid json", "budget", "minimum required version", "packagenotfound", "no cuda gpus",
    "gated repo", "is restricted", "client error", "shared memory segment", "posix_fallocate",
    "infer device type", "no platform detected", "peer access",
    "error: unrecognized arguments", "error: argument ", "error: ambiguous option", "arguments are required",
    *_startup.KEYWORDS,
)


_HEALTHY_KEYWORDS = ("fired up", "uvicorn running", "startup complete", "started server process",
                     "lab stand-in: serving")
# Lines that show the server came up (a weak-only hint before/after them is just a warning).
HEALTHY_RE = re.compile(
    r"The server is fired up and ready to roll|Uvicorn running on|Application startup complete"
    r"|Started server process"
    r"|lab stand-in: serving",
    re.IGNORECASE,
)

# Generic failure lines, for an honest "unknown" when no rule matched.
GENERIC_FATAL_RE = re.compile(
    r"^(?:[\w.]+\.)?(?:(?:[A-Z]\w*)?(?:Error|Exception)|KeyboardInterrupt|SystemExit)(?::|\(|$)"
    r"|^Exception has occurred: |\b[A-Z_]*ASSERT\w*\(.*\) failed|Assertion [`'].*' failed"
    r"|Segmentation fault|core dumped|Fatal Python error|terminate called after|Aborted"
    r"|CUDA error:|Main process exited, code=|Failed with result|ERROR|FATAL|CRITICAL"
    # a bare OS error, a process killed by SIGKILL (shell / docker / kernel OOM killer / systemd), a Rust
    # panic (sglang's router), a quantization the GPU cannot run (vLLM's check, printed without a class)
    r"|^\[Errno \d+\] |^Killed\s*$|\]Killed\s*$|\d Killed\s|Out of memory: Kill(?:ed)? process|killed by the OOM killer"
    r"|exited with code 137|exit code 137|status=9/KILL|\bpanicked at |on an `Err` value"
    r"|is not supported for the current GPU",
)
# ... but these are consequences, never a root cause.
NOISE_RE = re.compile(
    r"scheduler is dead|Received sigquit|sigquit|Please check if there are relevant logs"
    r"|Killing process|child process|Exception ignored in|Traceback \(most recent call last\)"
    r"|During handling of the above exception|The above exception was the direct cause"
    r"|Failed with result 'exit-code'|Main process exited|Unit .* entered failed state"
    r"|EngineCore encountered an issue|Engine core initialization failed|See root cause above"
    r"|(?<![A-Za-z])(?-i:ERROR)\s*$|^\s*$",
    re.IGNORECASE,
)

# systemd lines that start a new run of the unit ("Started" is logged on every (re)start).
START_RE = re.compile(
    r"(?:^|systemd\[\d+\]: )Started (?:\S+\.service\b|.*(?:sglang|SGLang|dflash|DFlash|[Ss]erver))"
)


# --------------------------------------------------------------------------- facts

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


# --------------------------------------------------------------------------- reading


class _Line:
    """One log line: ``raw`` (ANSI/CR removed, shown in evidence); ``text`` (prefixes peeled, lazily)."""

    __slots__ = ("_text", "index", "raw")

    def __init__(self, index: int, raw: str):
        self.index = index
        self.raw = raw
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = strip_prefixes(self.raw.lstrip()).strip()
        return self._text


@dataclass
class _Match:
    rule: Rule
    line: _Line
    groups: dict = field(default_factory=dict)


def read_log(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, dict]:
    """Read a log file; over max_bytes keep the head and the tail. Returns (text, info)."""
    size = os.path.getsize(path)
    info = {"bytes": size, "skipped_bytes": 0}
    with open(path, "rb") as fh:
        if size <= max_bytes:
            data = fh.read()
        else:
            head_n = int(max_bytes * HEAD_FRACTION)
            tail_n = max_bytes - head_n
            head = fh.read(head_n)
            fh.seek(size - tail_n)
            tail = fh.read(tail_n)
            # cut at line boundaries so no half line is matched
            head = head[: head.rfind(b"\n") + 1] if b"\n" in head else head
            nl = tail.find(b"\n")
            tail = tail[nl + 1:] if nl >= 0 else tail
            info["skipped_bytes"] = size - len(head) - len(tail)
            marker = b"[... %d bytes skipped ...]\n" % info["skipped_bytes"]
            data = head + (marker if head.endswith(b"\n") else b"\n" + marker) + tail
    return data.decode("utf-8", errors="replace"), info


def _split_lines(text: str) -> list[_Line]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x1b" in text or "\u2190[" in text:
        text = ANSI_RE.sub("", text)
    return [_Line(i, raw.rstrip()) for i, raw in enumerate(text.split("\n"))]


def _lines_with(lines: list[_Line], low_text: str, starts: list[int], words) -> set[int]:
    """Indexes of the lines that contain any of ``words`` (lower-case), found with str.find."""
    found: set[int] = set()
    end = len(low_text)
    for word in words:
        pos = low_text.find(word)
        while pos >= 0:
            li = bisect.bisect_right(starts, pos) - 1
            found.add(li)
            nxt = starts[li + 1] if li + 1 < len(starts) else end
            pos = low_text.find(word, nxt)
    return found


class _Scan:
    """The candidate lines of a log, found once over the whole (lower-cased) text."""

    def __init__(self, lines: list[_Line]):
        joined = "\n".join(ln.raw for ln in lines)
        starts, pos = [], 0
        for ln in lines:
            starts.append(pos)
            pos += len(ln.raw) + 1
        low = joined.lower()
        self.rule_lines = _lines_with(lines, low, starts, _RULE_KEYWORDS)
        self.fact_lines = _lines_with(lines, low, starts, _FACT_KEYWORDS)
        cands = sorted(_lines_with(lines, low, starts, _HEALTHY_KEYWORDS))
        first = next((i for i in cands if HEALTHY_RE.search(lines[i].raw)), None)
        last = next((i for i in reversed(cands) if HEALTHY_RE.search(lines[i].raw)), None)
        # the first and the last line that shows the server up (all that the verdict needs)
        self.healthy_lines = sorted({i for i in (first, last) if i is not None})
        self.start_lines = sorted(i for i in _lines_with(lines, low, starts, ("started",))
                                  if START_RE.search(lines[i].raw))


# --------------------------------------------------------------------------- matching


# A line logged as a warning only hints, whatever it says (its rule is treated as weak).
WARNING_LINE_RE = re.compile(r"\bWARN(?:ING)?\b|UserWarning|warnings\.warn|\bW\d{4} ")


# Lines that report an error the program deliberately ignores (sglang skips model classes whose
# imports fail; vLLM falls back to slower kernels): never a cause.
NONFATAL_LINE_RE = re.compile(
    r"Ignore import error|\bignor(?:e|ed|ing)\b[^\n]{0,40}\berror|Falling back to|falls? back to"
    r"|will be disabled|is not available\. Fall",
    re.IGNORECASE,
)


def _match_line(line: _Line) -> list[_Match]:
    if NONFATAL_LINE_RE.search(line.raw):
        return []
    found = []
    warning = WARNING_LINE_RE.search(line.raw) is not None
    for rule in RULES:
        m = rule.pattern.search(line.text)
        if not m:
            continue
        if rule.unless is not None and rule.unless.search(line.text):
            continue
        if warning and not rule.weak:
            rule = dataclasses.replace(rule, weak=True)
        found.append(_Match(rule, line, {k: v for k, v in m.groupdict().items() if v}))
    return found


def _segments(lines: list[_Line], scan: _Scan) -> list[tuple[int, int]]:
    """(start, end) line ranges, one per start of the systemd unit (whole log if none)."""
    starts = list(scan.start_lines)
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    bounds = [*starts, len(lines)]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]


def _pick(matches: list[_Match]) -> _Match | None:
    strong = [m for m in matches if not m.rule.weak]
    if not strong:
        return None
    first = min(strong, key=lambda m: m.line.index)
    window = [m for m in strong if first.line.index <= m.line.index <= first.line.index + INCIDENT_LINES]
    # same priority: the exception line itself beats the source line quoted in the traceback
    return max(window, key=lambda m: (m.rule.priority, _EXC_LINE_RE.match(m.line.text) is not None,
                                      -m.line.index))


_EXC_LINE_RE = re.compile(r"^-?\s*[\w.]*(?:Error|Exception|Warning)\b")


# --------------------------------------------------------------------------- templates


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


def _so_package(path: str) -> str:
    parts = re.split(r"[/\\]", path)
    for i, part in enumerate(parts):
        if part in ("site-packages", "dist-packages") and i + 1 < len(parts):
            return parts[i + 1].split(".")[0]
    name = parts[-1].split(".")[0] if parts and parts[-1] else ""
    return name or "the compiled extension"


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
                  or g.get("model6") or g.get("model7") or g.get("model8") or g.get("model9")
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
    if match.rule.cause in _startup.CAUSES:
        f.update(_startup.fill(g, facts, seg_text))
    return f


# --------------------------------------------------------------------------- verdict


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


_GENERIC_HINTS = ("Error", "Exception", "Interrupt", "SystemExit", "Segmentation", "core dumped", "Fatal",
                  "terminate called", "Aborted", "ERROR", "FATAL", "CRITICAL", "exited, code=", "Failed with",
                  "ASSERT", "Assertion", "Errno", "Killed", "OOM killer", "code 137", "9/KILL", "panicked",
                  "`Err` value", "for the current GPU")

# What an error outside CAUSES usually means, for the remedy of an "unknown" verdict (first match wins).
_UNKNOWN_HINTS = (
    (re.compile(r"No space left on device|Errno 28\b|StorageFull|Disk quota exceeded|Errno 122\b"),
     ("the filesystem named is full: free space (`df -h`; `df -h /dev/shm` for shared memory) or move the "
      "model and cache directories (HF_HOME, TRITON_CACHE_DIR) to a larger disk")),
    (re.compile(r"Read-only file system|Errno 30\b"),
     ("that path is on a read-only filesystem (a read-only mount, or the unit's ProtectSystem= / ProtectHome= / "
      "ReadOnlyPaths=): point HOME, HF_HOME, XDG_CACHE_HOME, TRITON_CACHE_DIR and FLASHINFER_WORKSPACE_BASE of the "
      "instance at a writable directory, or list it in ReadWritePaths=")),
    (re.compile(r"Permission denied|Errno 13\b|PermissionError"),
     ("the service user may not use that path: make the unit's user own it, or point HOME / HF_HOME / the "
      "cache directories at a directory it owns (ProtectHome= and a HOME of / cause this too)")),
    (re.compile(r"Too many open files|Errno 24\b|code: 24\b"),
     "the open-files limit is too low: raise it (LimitNOFILE=65536 in the unit, `ulimit -n 65536` in a shell)"),
    (re.compile(r"Killed|OOM killer|code 137|9/KILL|oom-kill|SIGKILL", re.IGNORECASE),
     ("the process was killed with SIGKILL (exit 137); on a host that is usually the kernel OOM killer after "
      "host RAM ran out while loading weights: check `journalctl -k | grep -i 'out of memory'`, then add RAM or "
      "swap, or run fewer servers per host")),
    (re.compile(r"does not recognize this architecture|Unrecognized configuration class"),
     ("the installed transformers (or this server release) does not know the model's architecture: install "
      "a transformers / server release that supports it (the model card names the minimum)")),
    (re.compile(r"speculative_|--speculative|speculative decoding|draft[_ -]model|\bEAGLE\d?\b"),
     ("the speculative-decoding settings do not fit this server release / model pair: check "
      "--speculative-algorithm and --speculative-draft-model-path (a draft trained for this target), and set "
      "--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens explicitly")),
    (re.compile(r"[Cc]hat template|chat_template|TemplateSyntaxError|TemplateError"),
     ("the chat template cannot be used: give --chat-template a built-in template name or a template file this "
      "server release accepts, or leave it out to use the tokenizer's own template (tokenizer_config.json / "
      "chat_template.jinja)")),
    (re.compile(r"No HIP GPUs|\bhipError|HIP error"),
     "this torch is a ROCm (HIP) build: on an NVIDIA host install a CUDA build of torch (+cuXXX)"),
    (re.compile(r"not supported for the current GPU|Min(?:imum)? capability|fp8e4nv not supported"
                r"|is_sm\d+_supported"),
     ("the model's quantization has no kernel path on this GPU: serve a checkpoint in a format this GPU "
      "supports (e.g. bf16 / fp16 instead of fp8 / awq), or use a GPU the message names as supported")),
)


# A process killed with SIGKILL (shell, kernel OOM killer, gunicorn, docker). systemd's "status=9/KILL" is left
# out: systemd also sends SIGKILL to a unit that did not stop in time, after its real failure.
KILL_RE = re.compile(
    r"^Killed\s*$|\]Killed\s*$|\d Killed\s|Out of memory: Kill(?:ed)? process|killed by the OOM killer"
    r"|was sent SIGKILL|exited with code 137|exit code 137"
)
_KILL_WORDS = ("Killed", "SIGKILL", "OOM killer", "code 137")
# how far after the matched line a kill is looked for (a few hundred lines of loading progress)
KILL_WINDOW = 500


_ERROR_WORD_RE = re.compile(r"error|exception|fatal|fail|traceback|abort|assert", re.IGNORECASE)
# the process logging progress: an INFO line, a progress bar, "Loading ..."
_PROGRESS_RE = re.compile(r"\bINFO\b|\d+%\s*\||\bLoading\b")


def _kill_after(lines: list[_Line], index: int, end: int, rule_lines: set[int]) -> _Line | None:
    """A SIGKILL line after the matched line ``index`` that, not the match, ended the run: the matched
    line is a bare diagnostic (no error / exception word, as a library prints and survives), nothing
    failed between the two, and the process visibly went on working in between (it logged progress).
    A kill after a real error (a launcher killing its children) never qualifies."""
    if any(_ERROR_WORD_RE.search(ln.text) for ln in lines[max(0, index - 3): index + 1]):
        return None
    kill = next((ln for ln in lines[index + 1: min(end, index + 1 + KILL_WINDOW)]
                 if any(w in ln.raw for w in _KILL_WORDS) and KILL_RE.search(ln.text)), None)
    if kill is None:
        return None
    went_on = False
    for ln in lines[index + 1: kill.index]:
        t = ln.text
        if not t or NOISE_RE.search(t):
            continue
        if GENERIC_FATAL_RE.search(t) or _ERROR_WORD_RE.search(t) or (ln.index in rule_lines and _match_line(ln)):
            return None
        went_on = went_on or _PROGRESS_RE.search(t) is not None
    return kill if went_on else None


def _unknown_hint(text: str) -> str:
    return next((hint for rx, hint in _UNKNOWN_HINTS if rx.search(text)), "")


def _first_generic_failure(lines: list[_Line]) -> _Line | None:
    # the candidate lines come from one substring search per hint over the joined text (a long healthy
    # log has few of them), in log order
    joined = "\n".join(ln.raw for ln in lines)
    starts, pos = [], 0
    for ln in lines:
        starts.append(pos)
        pos += len(ln.raw) + 1
    nxt = {h: p for h in _GENERIC_HINTS if (p := joined.find(h)) >= 0}
    while nxt:
        i = bisect.bisect_right(starts, min(nxt.values())) - 1
        ln = lines[i]
        if ln.text and GENERIC_FATAL_RE.search(ln.text) and not NOISE_RE.search(ln.text):
            return ln
        after = starts[i + 1] if i + 1 < len(lines) else len(joined) + 1
        for h in [h for h, p in nxt.items() if p < after]:
            p = joined.find(h, after)
            if p < 0:
                del nxt[h]
            else:
                nxt[h] = p
    return None


_BARE_EXC_RE = re.compile(r"^(?:Exception has occurred: )?[\w.]*(?:Error|Exception)\s*$")


def _generic_text(lines: list[_Line], ln: _Line) -> str:
    """The first error as a sentence: a bare exception name gets the message line after it, or the
    assert statement before it."""
    text = ln.text
    if re.search(r"\]Killed\s*$", text):  # the shell's message glued to an unterminated progress bar
        bar = re.sub(r"[\u2580-\u259f#=]+", "", text[:-len("Killed")].rstrip())
        bar = " ".join(bar.split())[:80]
        return f"Killed (the shell's message, after: {bar})"
    if re.search(r"\bpanicked at \S+:\s*$", text):
        nxt = next((x for x in lines[ln.index + 1: ln.index + 3] if x.text), None)
        return f"{text} {nxt.text}" if nxt is not None else text
    if not _BARE_EXC_RE.match(text):
        return text
    nxt = next((x for x in lines[ln.index + 1: ln.index + 3] if x.text), None)
    if nxt is not None and not nxt.text.startswith(("File ", "Traceback")):
        return f"{text}: {nxt.text}"
    prev = next((x for x in reversed(lines[max(0, ln.index - 2): ln.index]) if x.text), None)
    if prev is not None and prev.text.startswith("assert "):
        return f"{text} ({prev.text})"
    return text


_OS_ERROR_RE = re.compile(r"\[Errno \d+\]|Os \{ code: \d+")


def _first_traceback(lines: list[_Line]) -> _Line | None:
    for ln in lines:
        if "Traceback (most recent call last)" in ln.raw or "hit an exception" in ln.raw:
            return ln
    return None


def diagnose_text(text: str, *, source: str = "log", read_info: dict | None = None) -> dict:
    """Diagnose a log given as text. Returns {cause, summary, remedy, evidence, ...}."""
    lines = _split_lines(text or "")
    scan = _Scan(lines)
    segs = _segments(lines, scan)
    facts = _collect_facts([lines[i].text for i in sorted(scan.fact_lines)])
    rule_lines = sorted(scan.rule_lines)

    chosen = None
    seg_matches: list[_Match] = []
    seg_no, seg = len(segs), segs[-1] if segs else (0, 0)
    weak_only: list[_Match] = []
    # latest start of the unit that failed; if none failed, the whole log
    for i in range(len(segs) - 1, -1, -1):
        a, b = segs[i]
        lo, hi = bisect.bisect_left(rule_lines, a), bisect.bisect_left(rule_lines, b)
        ms = [m for li in rule_lines[lo:hi] for m in _match_line(lines[li])]
        pick = _pick(ms)
        if pick:
            chosen, seg_matches, seg_no, seg = pick, ms, i + 1, (a, b)
            break
        if i == len(segs) - 1:
            weak_only = [m for m in ms if m.rule.weak]
            seg_matches = ms

    result = {
        "cause": "unknown",
        "summary": "",
        "remedy": "",
        "evidence": [],
        "facts": {k: v for k, v in facts.items() if k != "driver_cuda_raw"},
        "lines": len(lines),
        "source": source,
        "starts": len(segs),
    }
    if read_info:
        result.update(read_info)

    superseded = None
    if chosen is not None and not chosen.rule.weak:
        kill = _kill_after(lines, chosen.line.index, seg[1], scan.rule_lines)
        if kill is not None:
            superseded, chosen = (chosen, kill), None
    if chosen is None and weak_only:
        hint = min(weak_only, key=lambda m: (-m.rule.priority, m.line.index))
        healthy_after = any(i >= hint.line.index for i in scan.healthy_lines)
        generic = _first_generic_failure(lines[hint.line.index:])
        if not healthy_after or generic:
            chosen = hint  # a warning that explains a crash nobody named
    if chosen is None:
        healthy = [lines[i] for i in scan.healthy_lines]
        generic = superseded[1] if superseded else _first_generic_failure(lines)
        notes = "; ".join(sorted({m.rule.summary.split("{")[0].strip() for m in weak_only}))
        if generic is not None:
            first = _generic_text(lines, generic)
            result["summary"] = (f"no known cause matched in {source} ({len(lines)} lines); first error: "
                                 f"{_clip(first)}")
            hint = _unknown_hint(first)
            result["remedy"] = (f"{hint}; " if hint else "") + (
                "read the evidence line and the lines before it; rerun the server in the foreground to see "
                "the full traceback")
            result["evidence"] = [_clip(generic.raw)]
            if superseded:
                early = superseded[0]
                result["summary"] += (f"; the earlier {early.rule.cause} line {early.line.index + 1} did not stop "
                                      "the process (it went on until it was killed)")
                result["evidence"].insert(0, _clip(early.line.raw))
        elif (tb := _first_traceback(lines)) is not None and not healthy:
            result["summary"] = (f"a traceback starts at line {tb.index + 1} of {source} but the log ends "
                                 "before its error line (log cut short?)")
            result["remedy"] = ("read the full journal of the unit (journalctl -u <unit> --no-pager) or "
                                "rerun the server in the foreground to see the exception")
            result["evidence"] = [_clip(tb.raw)]
            # an OS error logged before the traceback (even one the program chose to ignore) is the lead
            oserr = next((ln for ln in lines[: tb.index] if _OS_ERROR_RE.search(ln.text)), None)
            if oserr is not None:
                result["summary"] += f"; an OS error precedes it: {_clip(oserr.text)}"
                hint = _unknown_hint(oserr.text)
                if hint:
                    result["remedy"] = f"{hint}; {result['remedy']}"
                result["evidence"].insert(0, _clip(oserr.raw))
        else:
            state = "the server reported ready" if healthy else "no error line"
            result["summary"] = f"no failure found in {source} ({len(lines)} lines; {state})"
            if notes:
                result["summary"] += f"; warnings only: {notes}"
            result["remedy"] = "nothing to fix from this log"
            result["evidence"] = [_clip(healthy[-1].raw)] if healthy else []
        return result

    # the text around the decision (remedy details such as OOM numbers or NCCL hints come from here)
    lo = max(seg[0], chosen.line.index - CONTEXT_BEFORE)
    hi = min(seg[1], chosen.line.index + CONTEXT_AFTER)
    seg_text = "\n".join(ln.raw for ln in lines[lo:hi])
    fill = _fill(chosen, facts, lines, seg_text)
    rule = chosen.rule
    summary = rule.summary.format_map(fill)
    if len(segs) > 1:
        summary += f" (start {seg_no} of {len(segs)} in this log)"
    others = []
    for m in sorted(seg_matches, key=lambda m: m.line.index):
        if m.rule.cause != rule.cause and not m.rule.weak and m.rule.cause not in others:
            others.append(m.rule.cause)
    result.update({
        "cause": rule.cause,
        "summary": summary,
        "remedy": rule.remedy.format_map(fill),
        "evidence": _evidence(chosen, seg_matches, lines),
        "rule": rule.name,
        "line": chosen.line.index + 1,
        "also_seen": others,
    })
    if rule.weak:
        result["summary"] += " (from a warning: no fatal error line was found)"
    return result


def diagnose_file(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    text, info = read_log(path, max_bytes=max_bytes)
    return diagnose_text(text, source=os.path.basename(path), read_info=info)


def fields_for(cause: str) -> list[Rule]:
    """The rules of one cause (for docs and tests)."""
    return [r for r in RULES if r.cause == cause]
