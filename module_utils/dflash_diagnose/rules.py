"""The diagnosis causes and rule table: data (pattern, cause, priority, summary and remedy templates).

Over 500 lines on purpose: one row per known failure of a real log, kept in one table so that their priorities
are read side by side (the start-up rows of the options, hybrids and graph capture are apart: rules_startup.py).

Strong rules are fatal errors; weak rules are warnings that only hint. Placeholders in ``{}`` are filled
from the log's facts (facts.py, fill.py). A line without any of ``RULE_KEYWORDS`` (lower-case) is not
tried against the table: add a keyword when a new pattern's words are not there yet.
"""

from __future__ import annotations

from ansible.module_utils.dflash_diagnose import rules_startup as _startup
from ansible.module_utils.dflash_diagnose.rule import Rule, _rx

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
    "context_length",
    *_startup.CAUSES,
    "unknown",
)


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
    Rule("blackwell_hybrid_gdn_flashinfer", "flashinfer_arch", 93,
         # sglang 0.5.17+ attention_registry.py: FlashInfer refused for hybrid GDN models on SM 10.x/11.x
         _rx(r"Only \{(?P<gdn_allowed>[^}\n]{1,80})\} backends are supported on Blackwell GPUs for hybrid GDN "
             r"models\. Got (?:attention_backend=(?P<gdn_got>flashinfer)|prefill=(?P<gdn_got_p>\w+), "
             r"decode=(?P<gdn_got_d>\w+))"),
         "{sg_version} refuses FlashInfer attention for hybrid GDN models on this Blackwell GPU{sm_s}: it allows "
         "{gdn_allowed_words}{gdn_got_s}",
         _startup.GDN_BLACKWELL_REMEDY),
    Rule("flashinfer_unsupported_arch", "flashinfer_arch", 91,
         _rx(r"flashinfer[^\n]*Unsupported architectur|Unsupported architectur[^\n]*flashinfer"
             # FlashInfer's TRT-LLM-gen runners (sglang's trtllm_mha / trtllm_mla backends) raise in their own name;
             # TensorRT-LLM's own assertion carries its "[TensorRT-LLM]" tag (gpu_arch_refused's)
             r"|^(?:RuntimeError: )?TllmGen\w*Runner: Unsupported architectur"
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
         "{sg_xgrammar_pin} in the layer and redeploy"),

    Rule("xgrammar_binding_mismatch", "xgrammar_structural_tag", 87,
         _rx(r"(?:Mismatched type|incompatible function arguments|TypeError)[^\n]*xgrammar[\w.]*"
             r"|xgrammar[\w.]*[^\n]*(?:Mismatched type|incompatible function arguments)"),
         "the installed xgrammar{xgrammar_version_s} does not match the API this sglang calls",
         "add `--grammar-backend none` to the instance flags, or pin {sg_xgrammar_pin} in the layer and "
         "redeploy"),

    # ---------------------------------------------------------------- kernel_abi
    Rule("sgl_kernel_common_ops", "kernel_abi", 86,
         _rx(r"\[sgl_kernel\] CRITICAL: Could not load any common_ops library"),
         "sgl_kernel's compiled common_ops could not be loaded (ABI mismatch with {torch})",
         "install the sglang-kernel wheel built for {torch} and its CUDA "
         "({sg_kernel_pair}); keep torch, triton, "
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
         "install the kernel package version the server pins ({sg_kernel_pin}; "
         "vllm -> its own vllm._C build), built for {torch}"),
    Rule("op_no_backend_kernel", "kernel_abi", 81,
         # torch's dispatcher: the op is registered, but no kernel for the backend it was called with: the extension
         # (or torch / torchvision) is a build without that backend's kernels, or for another torch; above the capture
         # rows: CUDA graph capture is where the first kernel runs, not what failed (sgl-project/sglang#6322)
         _rx(r"Could not run '(?P<op_nb>[\w.]+::\w+)' with arguments from the '(?P<op_backend>\w+)' backend"),
         "the op {op_nb} has no kernel for the {op_backend} backend: its compiled library is a build without "
         "{op_backend} kernels or for another torch than {torch}",
         "reinstall the package that registers {op_nb} (sgl_kernel::* -> the sgl-kernel / sglang-kernel wheel the "
         "server pins; _C::* -> the server's own build; torchvision::* -> torchvision) built for {torch} with its "
         "CUDA kernels, and keep torch, triton, nvidia-* and the kernel wheels from ONE CUDA build"),
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
             r"|leave no GPU memory for the KV cache"
             # forks / other versions: "Not enough memory for KV cache，try reducing --num-pages"
             r"|(?:not enough|insufficient|no) (?:GPU )?memory (?:left )?for (?:the )?(?:KV|kv)[ _-]?cache"),
         "too little GPU memory is left for the KV cache after loading the weights{mfs_s}",
         "raise `--mem-fraction-static` (now {mem_fraction_static}) if the GPU is otherwise free, and/or "
         "lower `--context-length` / `--max-running-requests`, use a larger `--tp-size`, or free the GPU "
         "(other processes: check nvidia-smi)"),
    Rule("kv_pool_profiled_negative", "cuda_oom", 72,
         # sglang: the memory left after the weights, profiled, gives a negative number of KV tokens (the run then
         # fails however it is worded, or not at all on some versions)
         _rx(r"max_total_(?:num_)?tokens=\d+ is larger than the profiled value (?P<profiled>-\d+)"),
         "too little GPU memory is left for the KV cache after loading the weights: the profiled KV pool is "
         "{profiled} tokens{mfs_s}",
         "the weights (and activations) take more than the memory the server may use: use more GPUs (a larger "
         "`--tp-size`), a quantised model, or raise `--mem-fraction-static` (now {mem_fraction_static}) when the GPU "
         "holds nothing else; lower `--context-length` / `--max-running-requests`"),
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
             # Windows: "[Errno 10048] ... only one usage of each socket address ... is normally permitted"
             r"[^\n]*(?:address already in use|only one usage of each socket address)"),
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
         _rx(r"EADDRINUSE|\[(?:Errno|WinError) 10048\]|only one usage of each socket address|server socket has failed to bind|failed to listen on any local network address"
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
         "or a value after a flag that takes none; a flag newer than the installed release: upgrade the server to "
         "one that has it). The pinned sglang's flags are in "
         "files/patches/sglang/<version>/server-flags.txt, and deploy.yml checks extra_args against them "
         "before anything changes"),
    Rule("argparse_argument", "bad_server_args", 90,
         _rx(r"(?:^|[\w./-]+(?: serve)?: )error: argument (?P<flag>-[\w-]+(?:/-[\w-]+)*): "
             r"(?P<problem>invalid choice(?:: [^\n]+)?|expected (?:one|at least one|\d+) arguments?"
             r"|invalid \w+ value: [^\n]+|ignored explicit argument [^\n]+|not allowed with argument [^\n]+)"),
         "the server's argument parser rejected {flag}: {problem}",
         "fix {flag} in the instance's extra_args / pin_flags (or the instance field it comes from): {problem}"),
    # parsers other than argparse (llama.cpp's common/arg.cpp: 'error while handling argument "--x": ...'): the same
    # refusal of one flag before anything loads
    Rule("cli_argument_refused", "bad_server_args", 89,
         _rx(r'error while (?:handling|parsing) argument "?(?P<flag>-{1,2}[\w-]+)"?: (?P<problem>[^\n]{3,200})'),
         "the server's argument parser rejected {flag}: {problem}",
         "fix or drop {flag} in the instance's extra_args / pin_flags (or the instance field it comes from): a flag "
         "this server version does not take (removed, renamed, or another server's)"),
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
             r"|(?P<model2>[^\s'\"]+) does not appear to have a fil(?:e named (?P<missing_file>[\w.-]+))?"),
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
             r"|is not a local folder and is not a valid model"
             # the Hub's plain HTTP 404 for a file of a repo id / revision (401/403 are hf_gated's)
             r"|404 Client Error[^\n]*?https://huggingface\.co/(?!api/)(?P<model10>[\w.-]+(?:/[\w.-]+)?)/resolve/"),
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
         "deploy the sglang tree that provides {sgl_module}: the toolkit's patched tree of {sg_version} "
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
         "needs ({sg_version}'s default on Hopper is {sg_hopper_default})",
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
         "install the sglang-kernel wheel built for {torch} and its CUDA ({sg_kernel_pair})"),
    Rule("compiled_ext_missing", "missing_module", 78,
         _rx(r"No module named '(?P<ext_module2>[\w.]*\._C|[\w.]*_C)'"),
         "the compiled extension module '{ext_module2}' is missing from the venv",
         "install {ext_pkg} as a built wheel matching {torch} (`uv pip install --reinstall {ext_pkg}`); "
         "a source checkout without its compiled parts, or starting the server from inside that checkout, "
         "shadows the installed package"),
    # ---------------------------------------------------------------- context_length
    # sglang (ModelConfig, since PR 1778) and vLLM refuse a context length above the one derived from the
    # model's config.json; SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 turns sglang's refusal into a warning
    # ("Warning: ... is greater than the derived context_length"), which is not matched here.
    Rule("context_length_over_derived", "context_length", 70,
         _rx(r"User-specified (?:context_length|max_model_len) \((?P<ctx_user>\d+)\) is greater than the derived "
             r"(?:context_length|max_model_len) \((?:[a-z_]+=)?(?P<ctx_derived>\d+)"),
         "the server was asked for a context length of {ctx_user} tokens, above the {ctx_derived} the model's "
         "config.json gives",
         "lower the instance's context_length to {ctx_derived} or less (dflash_instances: context_length, or "
         "--context-length in extra_args); only for a model that really handles more (rope scaling set up in "
         "its config), set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the instance's env"),
]


RULES += [
    Rule(name, cause, prio, _rx(pattern), summary, remedy, weak, _rx(unless) if unless else None)
    for name, cause, prio, pattern, summary, remedy, weak, unless in _startup.ROWS
]


# Cheap pre-check before the rule table: a line without any of these (lower-case) words matches no
# rule (plain substring tests are much faster than one big case-insensitive regex).
RULE_KEYWORDS = (
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
    "greater than the derived", "profiled value",
    "error: unrecognized arguments", "error: argument ", "error while handling argument", "error while parsing argument", "error: ambiguous option", "arguments are required",
    *_startup.KEYWORDS,
)
