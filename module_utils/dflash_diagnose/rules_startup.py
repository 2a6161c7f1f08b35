"""Diagnosis rules for the start-up failures operators meet after the imports work: the server
refuses a combination of options, a backend / dtype / kernel refuses the GPU generation, speculative
decoding is refused on (or breaks) a hybrid / linear-attention target, CUDA graph capture fails for a
reason other than memory, the start-up stalls in a stage (hangs without an error line are found by
hang.py, not by a row).

Data only: ``CAUSES`` and ``ROWS`` (name, cause, priority, pattern, summary, remedy, weak, unless)
that module_utils/dflash_diagnose/rules.py turns into rows of its ``RULES`` table, and the lower-case
``KEYWORDS`` of its pre-filter. Out-of-memory during capture stays ``cuda_oom`` (those rules rank
higher and these ones step aside on an OOM line). No Ansible import.
"""

from __future__ import annotations

import re

from ansible.module_utils.dflash_diagnose import arch as _arch
from ansible.module_utils.dflash_diagnose import hang as _hang
from ansible.module_utils.dflash_diagnose.arch import ARCH_WORDS

CAUSES = ("incompatible_options", "speculative_hybrid", "cuda_graph_capture", "gpu_arch_refused", "startup_hang")

# sglang's attention backend names (a message listing two or more of them is about the backend option)
_BACKENDS = (r"(?:fa3|fa4|flashinfer|triton|trtllm_mha|trtllm_mla|aiter|torch_native|flashmla|cutlass_mla|intel_xpu"
             r"|ascend|wave|flex_attention|intel_amx|nsa|dual_chunk_flash_attn)")

# options and fields of ServerArgs the incompatible-option checks talk about
_OPTION = (
    r"(?:--[a-z][a-z0-9-]{2,}|\b(?:speculative[_ ]\w+|page[_ ]size|attention[_ ]backend|\w+AttentionBackend"
    r"|radix[_ ]cache|overlap[_ ]schedul\w*|dp[_ ]attention|[tdpe]p_size|chunked[_ ]prefill\w*|cuda[_ ]graph\w*"
    r"|torch[_ ]compile|mamba[_ ]\w+|disaggregation\w*|grammar[_ ]backend|kv[_ ]cache[_ ]dtype|enable_\w+"
    r"|disable_\w+|MambaRadixCache\w*|multi-layer EAGLE|speculative decoding"
    # vLLM's config fields and words: "num_speculative_tokens", "tensor_parallel_size", "cudagraph shapes", "spec-decode"
    r"|num_speculative_\w+|\w+_parallel_size|cudagraph[_ ]\w+|spec-decode|sequence parallelism)\b"
    r"|\b" + _BACKENDS + r"(?:,\s*|\s+or\s+)" + _BACKENDS + r"\b)"
)
_REFUSAL = (
    r"(?:\bincompatible with\b|\bnot compatible with\b|\bis not supported (?:with|when|yet|together)\b"
    r"|\bare not supported (?:with|when|together)\b|\bdoes not support\b|\brequires\b|\bmust be\b"
    r"|\bcannot be used (?:with|together)\b|\bcan only be used with\b|\bis only supported (?:with|when|for)\b"
    r"|\b(?:is|are) required for\b[^\n]*\bbut got\b"
    # "--mamba-radix-cache-strategy=extra_buffer needs a model with mamba state, but X has none"
    r"|\bneeds? (?:a|an)\b[^\n]*\bbut\b"
    # vLLM: "Speculative decoding not yet supported for RayGPU backend", "Expected both speculative_model and
    # num_speculative_tokens to be provided, but found ..."
    r"|\bnot yet supported (?:for|with|by|on|in)\b|\bexpected\b[^\n]*\bbut (?:found|got)\b"
    # the plain validation words, still only on an exception line that names an option
    r"|\b(?:is|are) not (?:yet )?supported\b|\bnot implemented\b|\bunsupported\b|\bonly supports?\b"
    r"|\bnot allowed\b|\bmust not\b|\bcannot\b|\bcan't\b|\binvalid\b|\bplease adjust\b|\bdoes not yet support\b)"
)
_OOM = r"out of memory|OutOfMemory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"

_HYBRID_REMEDY = (
    "speculative decoding on a hybrid target (linear attention / GDN / Mamba layers, e.g. Qwen3.5 / Qwen3.6 / "
    "Qwen3-Next{arch_s}) needs the server's hybrid support switched on: with sglang start with "
    "`--mamba-scheduler-strategy extra_buffer` and SGLANG_ENABLE_SPEC_V2=1 in the instance env, or give up the "
    "prefix cache with `--disable-radix-cache`; if the server has no speculative path for this architecture on "
    "this device, use a release that has one or deploy the instance with algorithm NONE (no draft) until then"
)

# sglang 0.5.17+'s Blackwell sets for hybrid GDN targets (upstream sgl-project/sglang#35080), in the version's words
GDN_BLACKWELL_REMEDY = (
    "start with `--attention-backend {gdn_first}` (pin_flags {{'--attention-backend': {gdn_first}}}); for sglang 0.5.17 on "
    "SM 10.x/11.x the toolkit's rule blackwell-hybrid-gdn-attention makes it triton, and its validation refuses a "
    "pinned backend outside the set before a deploy (sglang 0.5.23 allows FlashInfer on SM 10.x again; upstream "
    "sgl-project/sglang#35080)")

# (name, cause, priority, pattern, summary, remedy, weak, unless)
ROWS = [
    # ---------------------------------------------------------------- speculative_hybrid
    ("spec_mamba_radix_cache", "speculative_hybrid", 68,
     # sglang's _handle_mamba_radix_cache(); the message may be wrapped after "not compatible"
     (r"Speculative decoding for (?P<arch>\w+) is not compatible(?: with radix cache when using "
     r"--mamba-scheduler-strategy (?P<mamba_strategy>\w+))?"),
     ("sglang refuses speculative decoding on the hybrid (Mamba / linear-attention) target {arch} with the radix "
     "cache{mamba_strategy_s}"),
     _HYBRID_REMEDY, False, None),
    ("spec_linear_attention_kernel", "speculative_hybrid", 67,
     r"(?P<lin>gdn|mamba|linear)[_ ]attention does not (?:yet )?support '?spec\w*",
     ("the {lin} (linear-attention) kernels of this server/device cannot run speculative verification on the "
     "hybrid target{arch_s}"),
     _HYBRID_REMEDY, False, None),
    ("spec_hybrid_refused", "speculative_hybrid", 66,
     (r"(?:hybrid|mamba|linear[- ]attention|\bGDN\b|gated[ -]delta)[^\n]{0,100}(?:speculative|spec[ _-]?decod\w*|EAGLE"
     r"|\bMTP\b|DFlash|draft model)[^\n]{0,80}(?:not supported|not compatible|incompatible|does not support|unsupported"
     r"|cannot start)"
     r"|(?:speculative|spec[ _-]?decod\w*|EAGLE|\bMTP\b|DFlash)[^\n]{0,80}(?:not supported|not compatible|incompatible"
     r"|does not support|unsupported)[^\n]{0,60}(?:hybrid|mamba|linear[- ]attention|\bGDN\b|gated[ -]delta)"
     # vllm-metal: "Prefix caching for hybrid GDN models on Metal does not support speculative decoding yet"
     r"|(?:hybrid|mamba|linear[- ]attention|\bGDN\b|gated[ -]delta)[^\n]{0,100}(?:does not support|not supported|cannot"
     r" be used with|incompatible with)[^\n]{0,40}(?:speculative|spec[ _-]?decod\w*|EAGLE|\bMTP\b|DFlash|draft)"),
     "speculative decoding is refused on a hybrid (linear-attention / Mamba) target{arch_s}",
     _HYBRID_REMEDY, False, r"HybridAttentionBackend"),

    ("spec_state_not_trimmable", "speculative_hybrid", 66,
     # speculative decoding rolls rejected drafts back; a hybrid target's recurrent state (mlx's ArraysCache,
     # mamba / conv state) cannot be trimmed or rolled back
     (r"(?:speculative|spec[ _-]?decod\w*|draft)[^\n]{0,80}(?:requires?|needs?)[^\n]{0,40}(?:trimmable|rollback|roll"
      r" back|rewind)[^\n]{0,40}(?:cache|state)(?:[^\n]*?got \{'(?P<cache_cls>\w+)')?"),
     ("speculative decoding needs a cache it can roll back to the accepted tokens, and the hybrid target's recurrent "
      "(linear-attention / Mamba) state {cache_cls_s}cannot be trimmed{arch_s}"),
     _HYBRID_REMEDY, False, None),
    ("spec_hybrid_tree_kernels", "speculative_hybrid", 69,
     # this toolkit's patch 0103: DDTREE tree mode on linear-attention kernels that cannot follow a tree
     (r"DDTREE tree verify on a hybrid target needs linear-attention kernels that follow a tree[^\n]*?: "
     r"(?P<lin>\w+) with verify kernel (?P<kernel>\w+)"),
     ("DDTREE's tree verify cannot run on this hybrid target's linear-attention kernels ({lin}, verify kernel "
     "{kernel}): they do not follow a tree"),
     ("use the Gated DeltaNet triton kernels (drop --linear-attn-backend / --linear-attn-decode-backend flashinfer "
     "from the instance's flags), or set the instance's ddtree.mode to shadow-linear (verifies a chain), or use "
     "algorithm DFLASH"), False, None),

    # ---------------------------------------------------------------- incompatible_options
    ("mamba_extra_buffer_unsupported", "incompatible_options", 63,
     # sglang's _handle_mamba_radix_cache(support_mamba_cache_extra_buffer=False)
     r"mamba extra_buffer is not supported for (?P<arch>\w+)",
     "sglang has no extra_buffer mamba scheduling for {arch}: --mamba-scheduler-strategy extra_buffer is refused",
     ("drop --mamba-scheduler-strategy extra_buffer from the instance's flags; speculative decoding on {arch} then "
     "needs the radix cache off (--disable-radix-cache; this toolkit's rule hybrid-spec-radix-off adds it)"),
     False, None),
    ("attention_backend_refused_for_arch", "incompatible_options", 62,
     # sglang's _handle_model_specific_adjustments (NemotronH, LFM2: the first layer may not be attention)
     r"(?P<arch>\w+For\w+) does not support (?P<refused>\w+) attention backend",
     "sglang refuses the {refused} attention backend on {arch}",
     ("give the instance another attention backend (`--attention-backend {sg_tree_mask_not_triton}` in pin_flags), "
     "and check which fallback rule chose {refused} (dflash_flags names it); DDTREE needs {sg_tree_mask}: "
     "{sg_tree_mask_not_triton}"),
     False, None),
    ("ddtree_tree_mask_backend", "incompatible_options", 61,
     # this toolkit's patches: DDTREE's verify needs a target attention backend with a tree mask (0.5.11's 0102:
     # "... got fa3"; 0.5.17/0.5.23's 0001: "... the verify would run on fa3")
     r"DDTREE needs a target attention backend that takes a tree mask[^\n]*?(?:got|would run on) (?P<backend>\w+)",
     ("DDTREE's tree verify needs a target attention backend that takes a per-request tree mask "
     "({sg_tree_mask}); this server runs {backend}"),
     ("set `--attention-backend triton` for the instance (pin_flags); this toolkit derives it on Hopper, where "
     "{sg_version}'s default is {sg_hopper_default} (rule tree-verify-attention-triton)"), False, None),
    ("ddtree_option_refused", "incompatible_options", 62,
     # this toolkit's 0.5.17 / 0.5.23 series (ddtree_spec.handle_ddtree_args): options DDTREE refuses at start
     (r"DDTREE (?:does not support|tree mode cannot run with) (?P<ddtree_flag>--[a-z][\w-]+(?: extra_buffer_lazy)?)"
      r"[:,]?\s*(?P<ddtree_why>[^\n]{0,160})"),
     "DDTREE on {sg_version} refuses {ddtree_flag} at start",
     ("leave {ddtree_flag} out of the instance's extra_args / pin_flags ({ddtree_why}); the toolkit's validation "
      "refuses it before a deploy changes anything"), False, None),
    ("ddtree_draft_head_refused", "incompatible_options", 62,
     # this toolkit's 0.5.23 series (DDTreeWorkerV2): drafts whose head is not the plain top-k of the block
     r"DDTREE takes a plain DFlash draft[^\n]*?runs a (?P<draft_head>Domino / selector / LiLiCorr) head",
     "the draft runs a {draft_head} head, which DDTREE on {sg_version} cannot use (it takes a plain DFlash draft)",
     ("serve this draft with algorithm DFLASH, or give the DDTREE instance a plain DFlash draft; the toolkit's "
      "validation reads the draft's config.json and refuses this before a deploy changes anything"), False, None),
    ("blackwell_hybrid_gdn_backend", "incompatible_options", 93,
     # sglang 0.5.17/0.5.23 attention_registry.py (upstream sgl-project/sglang#35080); 0.5.11's wording too
     (r"Only \{(?P<gdn_allowed>[^}\n]{1,80})\} backends are supported on Blackwell GPUs for hybrid GDN models\. "
      r"Got (?:attention_backend=(?P<gdn_got>\w+)|prefill=(?P<gdn_got_p>\w+), decode=(?P<gdn_got_d>\w+))"
      r"|(?P<gdn_allowed_old>triton, trtllm_mha, fa4, or flashinfer) backend are the only supported backends on "
      r"Blackwell GPUs for hybrid GDN models"),
     ("{sg_version} refuses this attention backend for hybrid GDN models on this Blackwell GPU{sm_s}: it allows "
     "{gdn_allowed_words}{gdn_got_s}"),
     GDN_BLACKWELL_REMEDY, False,
     # FlashInfer refused keeps its cause (flashinfer_arch: rules.py's blackwell_hybrid_gdn_flashinfer)
     r"(?:attention_backend|prefill|decode)=flashinfer"),
    ("gdn_flashinfer_prefill_state_dtype", "incompatible_options", 63,
     # FlashInfer's GDN prefill on SM120 needs float32 state checkpoints, its decode on SM 10+ a bfloat16 state
     # (sglang 0.5.17+): the two together cannot start (sgl-project/sglang#36532)
     r"state_checkpoints must have dtype float32, got torch\.bfloat16",
     ("FlashInfer's Gated DeltaNet prefill needs a float32 recurrent state here{sm_s}, while its decode on SM 10+ "
      "needs bfloat16 (--mamba-ssm-dtype bfloat16): FlashInfer for both cannot run (sgl-project/sglang#36532)"),
     ("start with `--linear-attn-prefill-backend triton` (keep `--linear-attn-decode-backend flashinfer` with "
      "`--mamba-ssm-dtype bfloat16`, the combination that runs), or drop the flashinfer linear-attention backends"),
     False, None),
    ("gdn_flashinfer_bf16_state", "incompatible_options", 66,  # above gpu_arch_refused: it names SM100+
     # sglang 0.5.17 server_args.py / 0.5.23 arg_groups/attention_hook.py
     (r"(?P<gdn_flag>--linear-attn-(?:decode|verify|prefill)-backend) flashinfer on SM100\+ requires "
     r"--mamba-ssm-dtype bfloat16"),
     ("{sg_version} refuses FlashInfer's Gated DeltaNet kernels ({gdn_flag} flashinfer) on this SM 10+ GPU{sm_s} "
     "without a bfloat16 recurrent state"),
     ("drop --mamba-ssm-dtype from the instance's flags (the toolkit's rule blackwell-gdn-flashinfer-bf16-state "
      "then sets bfloat16), or drop {gdn_flag} flashinfer (sglang's Triton kernels keep a float32 state)"),
     False, None),
    ("backend_refuses_speculative", "incompatible_options", 60,
     r"(?:Currently )?(?P<backend>\w+Backend) does not support speculative decoding",
     "the attention backend {backend} (chosen by the options) refuses speculative decoding",
     ("use one attention backend for prefill and decode (leave out --prefill-attention-backend / "
     "--decode-attention-backend) or one that supports speculative decoding (`--attention-backend triton` or "
     "`fa3`), or use a server release that supports this combination"),
     False, None),
    ("server_args_refusal", "incompatible_options", 58,
     # pydantic (vLLM's config classes) prints the ValueError of a validator as "Value error, <message>"
     r"^(?:(?:[\w.]+\.)?(?P<exc>ValueError|AssertionError|Exception|NotImplementedError|RuntimeError):|Value error,)\s*"
     r"(?=[^\n]*" + _OPTION + r")(?=[^\n]*" + _REFUSAL + r")(?P<check>[^\n]{4,300})",
     "the server refused a combination of its options: {check_short}",
     ("{options_hint}change the instance's flags so the combination the message names is gone (extra_args / "
     "pin_flags, or the fallback rule that added one of them: dflash_flags shows which rule added which flag)"),
     False, _OOM),

    # ---------------------------------------------------------------- cuda_graph_capture
    ("cuda_graph_capture_failed", "cuda_graph_capture", 62,
     r"Capture (?:cuda|CUDA) graph failed:?\s*(?P<capture_error>[^\n]{0,200})",
     "capturing CUDA graphs failed at start-up (not for memory){capture_error_s}",
     ("start once with `--disable-cuda-graph` (vLLM: `--enforce-eager`) to confirm it is the capture (expect a large "
     "speed loss: the performance gate will measure it, keep it only as a stopgap); then remove what cannot be "
     "captured: drop `--enable-torch-compile`, try another attention backend (`--attention-backend triton`), lower "
     "`--cuda-graph-max-bs`{cgbs_s}, or use a server release that fixes the kernel the traceback names"),
     False, _OOM),
    ("piecewise_graph_failed", "cuda_graph_capture", 62,
     # sglang >= 0.5.6: piecewise CUDA graphs are on by default and name their own workaround
     r"Piecewise CUDA Graph failed with error:?\s*(?P<capture_error>[^\n]{0,200})",
     "capturing piecewise CUDA graphs failed at start-up{capture_error_s}",
     ("start with `--disable-piecewise-cuda-graph` (the regular CUDA graphs stay on; what the server's own message "
      "advises), or use a server release where the kernel the message names supports piecewise capture"),
     False, _OOM),
    ("stream_capture_error", "cuda_graph_capture", 61,
     (r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w+|capturing stream has unjoined work"
     # CUDA's cudaErrorStreamCaptureIsolation text (NCCL prints it as a "Cuda failure" warning inside the capture)
     r"|dependency created on uncaptured work"
     r"|(?:during|while) CUDA graph capture|cudaStreamCaptureStatus(?:Active|Invalidated)"
     # torch's RNG refusals: "philox_cuda_state for an unexpected CUDA generator used during capture"
     r"|\b(?:used|called|read|allocated) (?:during|while) (?:stream |graph )?captur(?:e|ing)\b"
     r"|stream capture (?:is )?(?:invalidated|unsupported)"),
     ("a kernel did something CUDA graph capture does not allow (a sync, an allocation, an RNG seed or another "
     "stream while capturing)"),
     ("start once with `--disable-cuda-graph` (vLLM: `--enforce-eager`) to confirm (large speed loss: a stopgap only); "
     "then drop `--enable-torch-compile` (a torch.compile'd function first called inside the capture), try another "
     "attention backend (`--attention-backend triton`), or use a server / "
     "kernel release where the kernel in the traceback is capture-safe"),
     False, _OOM),
]

# ---------------------------------------------------------------- gpu_arch_refused
# an exception (or the assert statement printed for it) that names a GPU generation / compute capability and
# what it needs: "Bfloat16 is only supported on GPUs with compute capability of at least 8.0", "The 'fa3' backend
# is not supported on Blackwell GPUs", "assert arch // 10 == 10, 'FP8 is only supported on SM100 ...'". FlashInfer's
# own refusals keep their cause (flashinfer_arch), and so does a quantization the GPU cannot run.
_NEEDS = (r"(?:\bonly\b[^\n]{0,80}\bsupport|\bnot supported (?:on|for|by)\b|\bunsupported (?:on|for)\b|\brequires?\b"
          r"|\brequired\b|\bat least\b|\bor (?:newer|later|above|higher)\b|\bminimum\b|\bneeds?\b|\bonly works\b"
          r"|\bdoes not support\b|>="
          # vLLM: "GPUs with compute capability below 7.0 are not supported" / "less than 7.0"
          r"|\b(?:below|less than|lower than|older than)\b)")
ROWS += [
    ("gpu_arch_refused", "gpu_arch_refused", 64,
     (r"^(?:-?\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\s*:|assert\b)(?=[^\n]*" + ARCH_WORDS + r")(?=[^\n]*" + _NEEDS
      + r")(?P<arch_msg>[^\n]{4,400})"),
     "{arch_subject} refused this GPU{arch_here_s}: it needs {arch_need} ({arch_msg_short})",
     "{arch_fix}", False, (r"quantization method|FlashInfer(?: JIT)? (?:requires|only|does not|is not)"
                         r"|attention_backend=flashinfer")),

    ("unsupported_arch_assert", "gpu_arch_refused", 64,
     # a compiled engine's own architecture check: TensorRT-LLM's "[TensorRT-LLM][ERROR] Assertion failed: Unsupported
     # architecture (.../fmhaRunner.cpp:87)" / "Unsupported Arch (cutlass_preprocessors.cpp)", TensorRT's "Assertion
     # failed: Unsupported SM." (FlashInfer's own runners keep flashinfer_arch)
     (r"(?:Assertion failed|Assertion Error in \w+: \d+ \()[:\s]*(?P<arch_msg>Unsupported (?:architecture|arch|SM)\b"
      r"[^\n]{0,200})"),
     ("{arch_subject}: no kernels for this GPU's architecture{arch_here_s}, the release was not built for its SM "
      "({arch_msg_short})"),
     ("{arch_fix}; a compiled engine (TensorRT-LLM, TensorRT) runs only on the SMs its release was built for: use a "
      "release that lists this GPU, build it with this SM in its CUDA architecture list, or run on a GPU it supports"),
     False, r"flashinfer|TllmGen"),
    ("fa3_hopper_kernel_launch", "gpu_arch_refused", 64,
     # FlashAttention 3 is flash-attention's hopper/ tree: its kernels fail to launch on any other SM, often with a
     # bare "invalid argument" and no word of the GPU (freetoken#442: FA3 on an SM 8.9 card)
     (r"CUDA error \([^)\n]*\bhopper/(?:flash|mainloop|epilogue)\w*\.(?:h|hpp|cu|cuh):\d+\):\s*(?P<fa3_err>[^\n]{1,120})"),
     ("FA3 (FlashAttention 3, flash-attention's Hopper kernels) failed to launch{arch_here_s}: {fa3_err}; FA3 runs on "
      "SM 9.0 (Hopper) only"),
     "{arch_fix}", False, None),

    # ---------------------------------------------------------------- startup_hang (a hang the log names)
    ("sglang_watchdog_timeout", "startup_hang", 41,
     # sglang's own watchdog ("Watchdog timeout (self.watchdog_timeout=300)", "Scheduler watchdog timeout
     # (self.watchdog_timeout=300, self.soft=False)", TokenizerManager's): a forward or a collective that did not
     # move for that long; it then dumps the stacks and SIGQUITs the server. The stage comes from the lines before.
     r"(?:\b\w+ )?[Ww]atchdog timeout \((?:self\.)?watchdog_timeout=(?P<wd_secs>[\d.]+)",
     ("sglang's watchdog ended a server that did not move for {wd_secs} s, in {stage_words} ({stage}): a hang, "
      "not a crash"),
     "{hang_remedy}", False, None),
    # ---------------------------------------------------------------- startup_hang (a stall the log names)
    ("startup_compaction_stall", "startup_hang", 40,
     # host memory compaction while a start-up step reserves contiguous memory (unified-memory GPUs)
     (r"(?P<stalls>\d+) compaction stalls[^\n]*?(?:while|during) '(?P<stall_step>[^'\n]{3,60})'"
      r"|(?:^|\] )(?P<stall_step2>[A-Za-z][\w ]{2,40}):[^\n]*?\b(?P<stalls2>\d+) compaction stalls"),
     ("the start-up stalled in {stall_step} ({stage_words}): the host's memory compaction stalled {stalls} times "
      "while reserving contiguous memory"),
     ("host memory is fragmented: compact and drop the caches before the start (`sync; echo 3 > "
      "/proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory`, e.g. an ExecStartPre of the unit), watch "
      "compact_stall in /proc/vmstat, and leave more host memory free for the KV pool"), False, None),
]

KEYWORDS = (
    "speculative", "spec_", "spec decod", "mamba", "attention does not", "does not support", "incompatible",
    "compatible with", "not supported", "requires", "must be", "cannot be used", "only be used", "only supported",
    "capture", "capturing", "ddtree", "extra_buffer",
    "blackwell", "hopper", "ampere", "volta", "turing", "pascal", " ada", "sm_", "sm1", "sm9", "sm8", "sm7", "sm 1",
    "sm 9", "sm 8", "sm 7", "arch.sm", "capabilit", "is required", "trimmable", "rollback", "piecewise",
    "compaction stall", "state_checkpoints", "uncaptured work", "assertion failed", "assertion error", "hopper/",
)


def fill(groups: dict, facts: dict, text: str, rule_name: str = "", line_text: str = "") -> dict:
    """Template fields of these rules (arch_s, check_short, capture_error_s, cgbs_s, the GPU-generation and
    stall fields)."""
    out = {}
    arch = groups.get("arch")
    if not arch:
        m = re.search(r"\b(\w+For(?:CausalLM|ConditionalGeneration))\b", text or "")
        arch = m.group(1) if m else None
    out["arch"] = arch or "the target"
    out["arch_s"] = f"; here {arch}" if arch else ""
    check = (groups.get("check") or "").strip()
    out["check_short"] = check if len(check) <= 200 else check[:197] + "..."
    err = (groups.get("capture_error") or "").strip()
    out["capture_error_s"] = f": {err[:160]}" if err else ""
    cgbs = facts.get("cuda_graph_max_bs")
    out["cgbs_s"] = f" (now {cgbs})" if cgbs else ""
    out["lin"] = groups.get("lin") or "linear-attention"
    out["backend"] = groups.get("backend") or "the attention backend"
    out["refused"] = groups.get("refused") or "this"
    out["kernel"] = groups.get("kernel") or "?"
    # blackwell_hybrid_gdn_backend: "Only {'triton', 'fa4', ...} backends ..." (a Python set's repr) or 0.5.11's list
    allowed = re.findall(r"\w+", groups.get("gdn_allowed") or groups.get("gdn_allowed_old") or "")
    allowed = [b for b in allowed if b != "or"]
    order = [b for b in ("triton", "trtllm_mha", "flashinfer", "fa4") if b in allowed] + sorted(
        b for b in allowed if b not in ("triton", "trtllm_mha", "flashinfer", "fa4"))
    out["gdn_allowed_words"] = ", ".join(order) or "the backends the message names"
    out["gdn_first"] = order[0] if order else "triton"
    got = groups.get("gdn_got") or ", ".join(x for x in (groups.get("gdn_got_p"), groups.get("gdn_got_d")) if x)
    out["gdn_got_s"] = f" (this server runs {got})" if got else ""
    out["ddtree_flag"] = groups.get("ddtree_flag") or "the option"
    out["ddtree_why"] = (groups.get("ddtree_why") or "").strip().rstrip(".") or "the message says why"
    out["gdn_flag"] = groups.get("gdn_flag") or "--linear-attn-decode-backend"
    ms = groups.get("mamba_strategy") or (re.search(r"--mamba-scheduler-strategy (\w+)", text or "") or [None, None])[1]
    out["mamba_strategy_s"] = f" under --mamba-scheduler-strategy {ms}" if ms else ""
    low = check.lower()
    listed = re.findall(r"\b" + _BACKENDS + r"\b", low)
    if re.search(r"speculative_(?:num|eagle)|num_speculative_tokens|num_steps|draft_tokens|eagle_topk|eagle requires",
                 low):
        hint = ("set --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens explicitly "
                "so that they agree with each other and with the algorithm (the message states the rule); ")
    elif "speculative" in low:
        hint = ("speculative decoding cannot run together with the option the message names: leave that option out "
                "of the instance's flags, or deploy the instance with algorithm NONE; ")
    elif "mamba" in low or "page" in low:
        hint = ("hybrid (Mamba / linear-attention) targets restrict the cache options: leave --page-size at 1 or "
                "switch the radix cache off (--disable-radix-cache); ")
    elif len(set(listed)) >= 2:
        got = re.search(r"but got (\w+)", low)
        ok = [b for b in dict.fromkeys(listed) if b != (got.group(1) if got else None)
              and _arch.runs_on(b, _arch.parse_sm(facts.get("sm"))) is not False]
        hint = (f"the message lists the attention backends this model accepts: set one of them with "
                f"`--attention-backend {ok[0] if ok else listed[0]}`" + (f" (or {', '.join(ok[1:3])})" if len(ok) > 1 else "")
                + "; ")
    elif "attention" in low:
        refused = re.search(r"does not support (\w+) attention", low)
        other = "flashinfer" if refused and refused.group(1) == "triton" else "triton"
        hint = f"pick an attention backend the message lists as supported (e.g. `--attention-backend {other}`); "
    else:
        hint = ""
    out["options_hint"] = hint
    cache_cls = groups.get("cache_cls")
    out["cache_cls_s"] = f"({cache_cls}) " if cache_cls else ""
    if rule_name in ("gpu_arch_refused", "unsupported_arch_assert"):
        out.update(_arch_fill((groups.get("arch_msg") or line_text).strip(), facts, text))
    if rule_name == "arch_support_assert":
        out.update(_arch_fill(groups.get("check_stmt") or line_text, facts, text))
    out["check_stmt"] = groups.get("check_stmt") or ""
    if rule_name == "fa3_hopper_kernel_launch":
        out.update(_arch_fill("FA3 is only supported on Hopper (SM 9.0)", facts))
        out["fa3_err"] = (groups.get("fa3_err") or "").strip()
    if groups.get("stall_step") or groups.get("stall_step2"):
        out["stall_step"] = groups.get("stall_step") or groups.get("stall_step2")
        out["stalls"] = groups.get("stalls") or groups.get("stalls2") or "?"
        step = out["stall_step"].lower()
        stage = ("kv_pool" if re.search(r"kv|cache|pool", step) else "weights" if re.search(r"weight|load", step)
                 else "graph_capture" if "graph" in step else "other")
        out["stage"] = stage
        out["stage_words"] = _hang.STAGE_WORDS[stage]
    return out


def _arch_fill(msg: str, facts: dict, context: str = "") -> dict:
    """Summary and remedy fields of a GPU-generation refusal, for the host's GPU when known. ``context``: the
    message with the lines printed just before it (the ``assert`` statement names the kernel's own check)."""
    key, subject = _arch.refused_subject(msg)
    if key is None and context:
        key, subject = _arch.refused_subject(context)
    need = _arch.needed(msg)
    host_sm = _arch.parse_sm(facts.get("host_sm"))
    gpu = facts.get("host_gpu")
    if host_sm is None:
        said_gpu, said_sm = _arch.host_from_message(msg)
        host_sm, gpu = said_sm, gpu or said_gpu
    fam = _arch.family(host_sm)
    here = [b for b in (gpu, f"SM {_arch.sm_text(host_sm)}" if host_sm else None, fam) if b]
    out = {"arch_subject": subject[:1].upper() + subject[1:], "arch_need": need,
           "arch_here_s": f" ({', '.join(here)})" if here else "",
           "arch_msg_short": msg if len(msg) <= 200 else msg[:197] + "..."}
    on = f" on this {gpu or 'GPU'}" + (f" (SM {_arch.sm_text(host_sm)})" if host_sm else "")
    if key == "bf16":
        fix = (f"serve in float16{on}: `--dtype float16` (`--dtype half` is the same, in sglang and vLLM); bfloat16 "
               "needs SM 8.0 (Ampere) or newer. A checkpoint stored in bf16 loads as float16")
    elif key == "fp8":
        fix = (f"leave FP8 out{on}: `--kv-cache-dtype auto` and a bf16 / fp16 checkpoint instead of an FP8 one (FP8 "
               "needs SM 8.9 or newer, and some kernels SM 10.x only)")
    elif key in _arch.BACKEND_SM or key == "flash_attn":
        choice = _arch.attention_choice(host_sm, key)
        fix = f"use an attention backend that runs{on}: {choice}"
        if key in ("fa3", "fa4"):
            fix += ("; a multimodal model's vision blocks choose their own backend: set `--mm-attention-backend` "
                    "too (e.g. `--mm-attention-backend triton_attn`) when the instance sets no fa3 / fa4 itself")
        if key == "fa4":
            fix += ("; or install a flash-attn-4 release whose arch check includes this GPU (newer releases add "
                    "SM 10.3 / 11.x / 12.x)")
        if key == "flash_attn":
            fix += "; FlashAttention 2 needs SM 8.0 (Ampere) or newer (triton runs on older GPUs)"
    else:
        fix = (f"choose the option, dtype or kernel the message names as supported{on}, or run the model on a GPU "
               f"of {need}")
    out["arch_fix"] = fix
    return out
