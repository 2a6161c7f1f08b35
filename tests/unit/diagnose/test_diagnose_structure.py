"""Diagnosis by structure: the exception class and the frames it is raised from, the GPU generation a
message names (gpu_arch_refused), and the host's fingerprint handed to the diagnosis. The shapes below are
the real ones of sglang / vLLM / flash-attn-4 tracebacks, reworded and moved to other frames where noted:
a rule written from one version's wording must hold on another's."""

from __future__ import annotations

import pytest
from ansible.module_utils.dflash_diagnose import arch, host
from ansible.module_utils.dflash_diagnose.engine import diagnose_text, fields_for
from ansible.module_utils.dflash_diagnose.rules import CAUSES
from ansible.module_utils.dflash_diagnose.scan import _split_lines
from ansible.module_utils.dflash_diagnose.structure import STRUCT_RULES, classify, raised

RTX5090 = {"gpu_count": 1, "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "sm": "12.0", "arch": "blackwell"}],
           "driver_version": "575.51.03", "driver_cuda_version": "12.9",
           "cuda_toolkits": [{"path": "/usr/local/cuda-12.9", "version": "12.9"}], "nvcc_version": "12.9",
           "torch": {"version": "2.8.0+cu128", "cuda": "12.8", "available": True}}
H100 = {"gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "sm": "9.0"} for i in range(2)],
        "driver_version": "580.65.06", "driver_cuda_version": "13.0"}


def _tb(frames, exc_line):
    out = ["Traceback (most recent call last):"]
    for path, func, src in frames:
        out += [f'  File "{path}", line 10, in {func}', f"    {src}"]
    return "\n".join([*out, exc_line]) + "\n"


SPEC_VERIFY_TB = _tb([
    ("/venv/sglang/srt/managers/scheduler.py", "run_batch", "batch_result = self.draft_worker.forward_batch(batch)"),
    ("/venv/sglang/srt/speculative/eagle_worker_v2.py", "verify", "spec_info.prepare_for_verify(batch)"),
    ("/venv/sglang/srt/mem_cache/mamba_radix_cache.py", "cache_unfinished_req", "idx = req.mamba_pool_idx.item()"),
], "AttributeError: 'NoneType' object has no attribute 'item'")

ARGS_HOOK_TB = _tb([
    ("/venv/sglang/launch_server.py", "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    ("<string>", "__init__", ""),
    ("/venv/sglang/srt/server_args.py", "__post_init__", "self._handle_model_specific_adjustments()"),
    ("/venv/sglang/srt/server_args.py", "_handle_model_specific_adjustments", "assert self.page_size == 1"),
], "AssertionError: page_size 64 is not allowed for Gemma3 with chunked prefill")

CAPTURE_TB = _tb([
    ("/venv/sglang/srt/model_executor/model_runner.py", "init_device_graphs", "self.graph_runner = CudaGraphRunner(self)"),
    ("/venv/sglang/srt/model_executor/cuda_graph_runner.py", "capture", "self.capture_one_batch_size(bs, forward)"),
    ("/venv/sglang/srt/layers/moe/topk.py", "select_experts", "torch.cuda.synchronize()"),
], "RuntimeError: CUDA error: an illegal instruction was encountered")


def test_traceback_is_read_into_class_message_and_frames():
    (r,) = raised(_split_lines(SPEC_VERIFY_TB))
    assert (r.cls, r.message) == ("AttributeError", "'NoneType' object has no attribute 'item'")
    assert [f.func for f in r.frames] == ["run_batch", "verify", "cache_unfinished_req"]
    assert r.frames[-1].source == "idx = req.mamba_pool_idx.item()"
    assert r.where() == "cache_unfinished_req (mamba_radix_cache.py) from verify (eagle_worker_v2.py)"


def test_an_assert_statement_printed_without_its_exception_is_read_as_one():
    (r,) = raised(_split_lines('assert arch // 10 == 10, "FP8 is only supported on SM100 for FA4 CuTE"\n'))
    assert r.implied and r.cls == "AssertionError" and r.message == "FP8 is only supported on SM100 for FA4 CuTE"
    # with its AssertionError line after it, that line is the exception (not two)
    rs = raised(_split_lines('assert x, "no"\nAssertionError: no\n'))
    assert [(r.cls, r.implied) for r in rs] == [("AssertionError", False)]


@pytest.mark.parametrize(("log", "cause", "needles"), [
    # a TypeError / AttributeError deep in the hybrid state tracking of a speculative verify (no words to match)
    (SPEC_VERIFY_TB, "speculative_hybrid", ["cache_unfinished_req (mamba_radix_cache.py)", "--disable-radix-cache"]),
    # an AssertionError in a model-specific argument hook, with a message no row knows
    (ARGS_HOOK_TB, "incompatible_options", ["_handle_model_specific_adjustments (server_args.py)", "pin_flags"]),
    # a capture traceback with no out-of-memory line and no capture words in the message
    (CAPTURE_TB, "cuda_graph_capture", ["select_experts (topk.py)", "--disable-cuda-graph", "--enforce-eager"]),
])
def test_exceptions_are_diagnosed_by_the_frames_they_come_from(log, cause, needles):
    r = diagnose_text(log)
    assert r["cause"] == cause, r["summary"]
    for n in needles:
        assert n in r["summary"] + " " + r["remedy"], (n, r["summary"], r["remedy"])


def test_frames_alone_do_not_override_a_specific_row_or_memory():
    oom = CAPTURE_TB.replace("RuntimeError: CUDA error: an illegal instruction was encountered",
                             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert diagnose_text(oom)["cause"] == "cuda_oom"
    nki = CAPTURE_TB.replace("an illegal instruction was encountered",
                             "no kernel image is available for execution on the device")
    assert diagnose_text(nki)["cause"] == "no_kernel_image"
    # a GPU-generation refusal raised from the argument hooks is about the GPU, not the options
    arch_tb = ARGS_HOOK_TB.replace("page_size 64 is not allowed for Gemma3 with chunked prefill",
                                   "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100).")
    assert diagnose_text(arch_tb)["cause"] == "gpu_arch_refused"


def test_structural_rows_are_rows_of_known_causes():
    assert {r.cause for r in STRUCT_RULES} <= set(CAUSES)
    assert {r.name for r in fields_for("speculative_hybrid")} >= {"spec_hybrid_state_crash", "spec_mamba_radix_cache"}
    # an exception without frames, or from anywhere else, is left to the table
    (plain,) = raised(_split_lines("TypeError: 'NoneType' object cannot be interpreted as an integer\n"))
    assert classify(plain) is None


@pytest.mark.parametrize(("line", "needles"), [
    (("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
      "compute capability 7.5."), ["Tesla T4, SM 7.5, Turing", "--dtype float16"]),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", ["Ampere", "--attention-backend"]),
    ("ValueError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.",
     ["FA3", "--attention-backend flashinfer"]),
    ("AssertionError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100).", ["SM100", "TRT-LLM MLA"]),
    ("ValueError: The 'fa3' backend is not supported on Blackwell GPUs", ["a GPU other than Blackwell",
                                                                         "--mm-attention-backend"]),
])
def test_gpu_generation_refusals(line, needles):
    r = diagnose_text(line + "\n")
    assert r["cause"] == "gpu_arch_refused", r["summary"]
    for n in needles:
        assert n in r["summary"] + " " + r["remedy"], (n, r)


def test_gpu_arch_keeps_off_flashinfer_and_quantization_refusals():
    fi = ("AssertionError: Only {'trtllm_mha', 'triton', 'fa4'} backends are supported on Blackwell GPUs for hybrid "
          "GDN models. Got attention_backend=flashinfer.\n")
    assert diagnose_text(fi)["cause"] == "flashinfer_arch"
    q = "ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 80.\n"
    assert diagnose_text(q)["cause"] == "unknown"


def test_the_fingerprint_names_the_hosts_gpu_and_sm_in_the_diagnosis():
    """The remedy names the real GPU and its options: FA4's SM100 check on an RTX 5090 (SM 12.0) -> flashinfer /
    triton, not the SM100 backends; the host and the SM appear in the output."""
    log = ('assert arch // 10 == 10, "FP8 is only supported on SM100 (compute capability 10.x) for FA4 CuTE".\n')
    r = diagnose_text(log, fingerprint=RTX5090)
    text = r["summary"] + " " + r["remedy"]
    assert "NVIDIA GeForce RTX 5090" in text and "SM 12.0" in text
    assert "`--attention-backend flashinfer` or `--attention-backend triton`" in r["remedy"]
    assert r["host"]["gpu"] == "NVIDIA GeForce RTX 5090" and r["host"]["sm"] == "12.0"
    # on an H100 the same refusal points at Hopper's backends
    r = diagnose_text(log, fingerprint=H100)
    assert "NVIDIA H100 80GB HBM3" in r["summary"] and "`--attention-backend fa3`" in r["remedy"]


def test_a_misread_sm_in_the_log_does_not_override_the_fingerprint():
    # the arch list of the installed torch reads as "SM 7.5" ; the host is an RTX 5090
    log = ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
           "installation.\nThe current PyTorch install supports CUDA capabilities sm_75 sm_80 sm_86 sm_90.\n"
           "RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    log_only = "The current PyTorch install supports CUDA capability 7.5 only.\n" + log.splitlines()[-1] + "\n"
    assert diagnose_text(log_only)["facts"]["sm"] == "7.5"
    r = diagnose_text(log_only, fingerprint=RTX5090)
    assert r["cause"] == "no_kernel_image"
    assert "SM 12.0, NVIDIA GeForce RTX 5090" in r["summary"] and "sm_120" in r["remedy"]
    assert r["facts"]["sm"] == "12.0" and r["facts"]["log_sm"] == "7.5"
    assert any("the log reads SM 7.5" in n for n in r["notes"])


def test_host_summary_of_a_mixed_host_names_every_model_but_no_single_sm():
    fp = {"gpus": [{"name": "NVIDIA H100", "sm": "9.0"}, {"name": "NVIDIA L40S", "sm": "8.9"}],
          "driver_version": "570.1", "cuda_toolkits": [{"version": "12.8"}, {"version": "12.4"}]}
    s = host.summary(fp)
    assert s["gpus"] == "1 x NVIDIA H100 (SM 9.0), 1 x NVIDIA L40S (SM 8.9)"
    assert "sm" not in s and s["toolkits"] == "12.4, 12.8"
    assert host.summary(None) == {} and host.summary({}) == {}


@pytest.mark.parametrize(("sm", "refused", "expect"), [
    ((12, 0), "fa4", "`--attention-backend flashinfer` or `--attention-backend triton`"),
    ((9, 0), "fa4", "`--attention-backend fa3` or `--attention-backend flashinfer`"),
    ((9, 0), "fa3", "`--attention-backend flashinfer` or `--attention-backend triton`"),
    ((10, 0), "fa3", "`--attention-backend trtllm_mha` or `--attention-backend flashinfer`"),
    ((7, 0), "flash_attn", "`--attention-backend triton`"),
])
def test_attention_choice_per_generation(sm, refused, expect):
    assert arch.attention_choice(sm, refused) == expect


# ----------------------------------------------------------------------- short excerpts (round 5, issue 33)


def test_the_statement_above_a_bare_exception_is_read_as_its_frame():
    # sglang#39430 (a Mamba option armed for a model without Mamba state): no traceback, only the statement
    text = "track_index = req.kv.mamba_ping_pong_track_buffer[...].item()\nTypeError: 'NoneType' object is not subscriptable\n"
    r = diagnose_text(text)
    assert r["cause"] == "incompatible_options" and "--mamba-radix-cache-strategy" in r["remedy"], r["summary"]
    # the same None on the speculative path is the hybrid-speculative crash
    spec = "track_index = batch.spec_info.mamba_track_for_verify(req)\nTypeError: 'NoneType' object is not subscriptable\n"
    assert diagnose_text(spec)["cause"] == "speculative_hybrid"
    # a None with no hybrid state named is nobody's
    assert diagnose_text("x = req.output_ids[-1]\nTypeError: 'NoneType' object is not subscriptable\n")["cause"] == "unknown"


def test_a_condensed_stack_below_a_bare_exception_is_read_as_its_frames():
    text = ("TypeError: 'NoneType' object cannot be interpreted as an integer\n"
            "  set_mamba_track_indices_from_reqs (schedule_batch.py)\n"
            "  <- eagle_prepare_for_verify <- multi_layer_eagle_worker_v2.verify\n")
    r = diagnose_text(text)
    assert r["cause"] == "speculative_hybrid" and "set_mamba_track_indices_from_reqs" in r["summary"], r["summary"]


def test_an_assert_on_a_support_check_is_a_gpu_generation_refusal_outside_quantization():
    frames = ('File "/x/vllm/v1/attention/backends/flash_attn.py", line 156, in __init__\n'
              "    assert is_fa_version_supported(self.fa_version)\nAssertionError\n")
    r = diagnose_text("Traceback (most recent call last):\n" + frames)
    assert r["cause"] == "gpu_arch_refused" and "is_fa_version_supported" in r["summary"], r["summary"]
    quant = frames.replace("attention/backends/flash_attn.py", "layers/quantization/fp8.py")
    assert diagnose_text("Traceback (most recent call last):\n" + quant)["cause"] == "unknown"


def test_flashinfer_jit_frames_and_an_empty_pool_allocation_decide_by_their_frames():
    jit = ('Traceback (most recent call last):\n'
           '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 10, in capture\n    run()\n'
           '  File "/x/flashinfer/jit/cpp_ext.py", line 299, in run_ninja\n    subprocess.run(\n'
           "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n")
    assert diagnose_text(jit)["cause"] == "flashinfer_arch"  # the JIT build, not the capture that triggered it
    pool = ('Traceback (most recent call last):\n'
            '  File "/x/sglang/srt/managers/schedule_batch.py", line 203, in prepare_for_extend\n'
            '    req_pool_indices_cpu = req_pool_indices.cpu().numpy()\n'
            "AttributeError: 'NoneType' object has no attribute 'cpu'\n")
    r = diagnose_text(pool)
    assert r["cause"] == "cuda_oom" and "--mem-fraction-static" in r["remedy"], r["summary"]
