"""The start-up causes of round 6 (issue #15): incompatible options, speculative decoding on hybrid
targets, CUDA graph capture failures that are not out of memory; precedence against the older causes.
Every real fixture of these causes runs in test_diagnose.py with the others (tests/fixtures/logs/)."""

from __future__ import annotations

import pytest
from ansible.module_utils.dflash_diagnose import rules_startup as startup
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from ansible.module_utils.dflash_diagnose.rules import CAUSES, RULES


def test_causes_and_rules_are_in_the_table():
    for cause in startup.CAUSES:
        assert cause in CAUSES and any(r.cause == cause for r in RULES)
    assert CAUSES[-1] == "unknown"


@pytest.mark.parametrize(("line", "cause", "needle"), [
    (("ValueError: Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache when using "
     "--mamba-scheduler-strategy no_buffer."), "speculative_hybrid", "Qwen3NextForCausalLM"),
    ("NotImplementedError: mamba_attention does not support 'spec_decode_metadata'", "speculative_hybrid",
     "--mamba-scheduler-strategy extra_buffer"),
    ("RuntimeError: EAGLE speculative decoding is not supported for hybrid linear-attention models yet",
     "speculative_hybrid", "algorithm NONE"),
    ("AssertionError: Currently HybridAttentionBackend does not support speculative decoding.", "incompatible_options",
     "--prefill-attention-backend"),
    ("ValueError: --enable-dp-attention requires --tp-size to be divisible by --dp-size", "incompatible_options",
     "--enable-dp-attention"),
    ("Exception: Capture cuda graph failed: RuntimeError: CUDA error: operation not permitted when stream is capturing",
     "cuda_graph_capture", "--disable-cuda-graph"),
    ("RuntimeError: CUDA error: capturing stream has unjoined work", "cuda_graph_capture", "--enable-torch-compile"),
    # sglang 0.5.11's own messages (server_args.py) on hybrids other than Qwen3.5 / Qwen3-Next
    ("AssertionError: mamba extra_buffer is not supported for NemotronHForCausalLM model", "incompatible_options",
     "--disable-radix-cache"),
    (("AssertionError: NemotronHForCausalLM does not support triton attention backend,as the first layer might not "
     "be an attention layer"), "incompatible_options", "`--attention-backend flashinfer`"),
    # this toolkit's patches 0102 / 0103 (the DDTREE worker's refusals at start)
    (("ValueError: DDTREE needs a target attention backend that takes a tree mask in verify (TritonAttnBackend, "
     "FlashInferAttnBackend); got FlashAttentionBackend. Pass --attention-backend triton."), "incompatible_options",
     "this server runs FlashAttentionBackend"),
    (("ValueError: DDTREE tree verify on a hybrid target needs linear-attention kernels that follow a tree (parent "
     "pointers): GDNAttnBackend with verify kernel FlashInferGDNKernel does not. Use --linear-attn-backend triton "
     "(the Gated DeltaNet triton kernels), or --speculative-ddtree-mode shadow-linear (verifies a chain)."),
     "speculative_hybrid", "shadow-linear"),
])
def test_single_lines(line, cause, needle):
    r = diagnose_text(line + "\n")
    assert r["cause"] == cause, r["summary"]
    assert needle in r["summary"] + " " + r["remedy"]


@pytest.mark.parametrize(("text", "cause"), [
    # out of memory while capturing stays cuda_oom (lower the batch sizes / fraction, not "drop the graphs")
    (("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 79.11 GiB of which 1.06 GiB is free.\n"), "cuda_oom"),
    # a capture that starts (INFO) is no failure
    (("[2026-11-30 08:04:41] Capture cuda graph begin. This can take up to several minutes. avail mem=79.21 GB\n"
     "[2026-11-30 08:06:00] Capture cuda graph end. Time elapsed: 79.07 s.\n"), "unknown"),
    # FlashInfer on Blackwell for hybrid GDN models keeps its specific cause (the remedy is the backend)
    (("AssertionError: Only {'trtllm_mha', 'triton', 'fa4'} backends are supported on Blackwell GPUs for hybrid GDN "
     "models. Got attention_backend=flashinfer.\n"), "flashinfer_arch"),
    # a quantization the GPU cannot run is not an option conflict
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 80.\n",
     "unknown"),
    # an import error before the options are checked stays what it is
    ("ModuleNotFoundError: No module named 'soundfile'\nValueError: --enable-foo requires --bar to be set\n",
     "missing_module"),
])
def test_precedence(text, cause):
    assert diagnose_text(text)["cause"] == cause


def test_argument_rejections_have_one_cause_each():
    """argparse's refusals (bad_server_args, before anything loads) and ServerArgs' refusals of a
    combination (incompatible_options, after parsing) never both match one real log: no line of a
    fixture of one of them is matched by a rule of the other, nor the stand-in's fault logs."""
    import pathlib

    import yaml
    from ansible.module_utils.dflash_diagnose.scan import _match_line, _split_lines

    root = pathlib.Path(__file__).resolve().parents[3]
    pair = {"bad_server_args", "incompatible_options"}
    logs = [(root / "tests/fixtures/logs" / e["file"], e["cause"])
            for e in yaml.safe_load((root / "tests/fixtures/logs/index.yml").read_text())["fixtures"]
            if e["cause"] in pair]
    logs += [(root / "files/lab/faults" / f"{c}.log", c) for c in sorted(pair)]
    assert {c for _, c in logs} == pair and len(logs) > 10
    for path, cause in logs:
        causes = {m.rule.cause for ln in _split_lines(path.read_text(errors="replace")) for m in _match_line(ln)}
        # a structural row (class + frames) may decide with no line row at all; never the other one's line row
        assert causes & pair <= {cause}, (path.name, causes)
        assert diagnose_text(path.read_text(errors="replace"))["cause"] == cause, path.name


def test_the_attention_hint_never_suggests_the_backend_the_message_refuses():
    """The generic option-refusal row suggests a backend; it must not be the one refused."""
    line = "AssertionError: Foo attention backend: FooForCausalLM does not support triton attention here\n"
    r = diagnose_text(line)
    assert "`--attention-backend triton`" not in r["remedy"], r
