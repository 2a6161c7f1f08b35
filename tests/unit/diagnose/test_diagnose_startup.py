"""The start-up causes of round 6 (issue #15): incompatible options, speculative decoding on hybrid
targets, CUDA graph capture failures that are not out of memory; precedence against the older causes.
Every real fixture of these causes runs in test_diagnose.py with the others (tests/fixtures/logs/)."""

from __future__ import annotations

import dflash_diagnose.rules_startup as startup
import pytest
from dflash_diagnose.engine import diagnose_text
from dflash_diagnose.rules import CAUSES, RULES


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
    from dflash_diagnose.scan import _match_line, _split_lines

    root = pathlib.Path(__file__).resolve().parents[3]
    pair = {"bad_server_args", "incompatible_options"}
    logs = [(root / "tests/fixtures/logs" / e["file"], e["cause"])
            for e in yaml.safe_load((root / "tests/fixtures/logs/index.yml").read_text())["fixtures"]
            if e["cause"] in pair]
    logs += [(root / "files/lab/faults" / f"{c}.log", c) for c in sorted(pair)]
    assert {c for _, c in logs} == pair and len(logs) > 10
    for path, cause in logs:
        causes = {m.rule.cause for ln in _split_lines(path.read_text(errors="replace")) for m in _match_line(ln)}
        assert causes & pair == {cause}, (path.name, causes)
        assert diagnose_text(path.read_text(errors="replace"))["cause"] == cause, path.name
