"""dflash_diagnose: every real fixture, precedence, normalisation, long logs, the module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_diagnose.engine import diagnose_file, diagnose_text
from ansible.module_utils.dflash_diagnose.rules import CAUSES, RULES
from ansible.module_utils.dflash_diagnose.scan import read_log, strip_prefixes

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
INDEX = yaml.safe_load((FIXTURES / "index.yml").read_text())["fixtures"]


def _blob(result: dict) -> str:
    return " ".join([result["summary"], result["remedy"], *result["evidence"]])


# --------------------------------------------------------------------------- index sanity


def test_index_lists_every_fixture_file_once():
    listed = [e["file"] for e in INDEX]
    assert len(listed) == len(set(listed))
    on_disk = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.log"))
    assert sorted(listed) == on_disk


def test_index_entries_are_complete():
    for e in INDEX:
        assert e["cause"] in CAUSES, e
        # https:// (public issue), synthetic: (built from real line shapes) or recorded: (a log this
        # project recorded on real hardware, kept under gpu-harness/records/)
        assert e["source"].startswith(("https://", "synthetic:", "recorded:")), e
        if e["source"].startswith("recorded:"):
            assert (FIXTURES.parents[2] / e["source"].split()[1]).is_dir(), e


def test_every_cause_has_real_fixtures():
    real = [e for e in INDEX if e["source"].startswith("https://")]
    assert len(real) >= 40
    for cause in CAUSES:
        assert any(e["cause"] == cause for e in real), cause


# --------------------------------------------------------------------------- every fixture


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_fixture(entry):
    result = diagnose_file(str(FIXTURES / entry["file"]))
    if entry.get("known_miss"):
        # labelled from its thread, not found yet for the reason given: it must not come out as another cause either
        assert result["cause"] == "unknown" != entry["cause"], (result["summary"], entry["known_miss"])
        return
    assert result["cause"] == entry["cause"], (result["summary"], result["evidence"])
    blob = _blob(result)
    for needle in entry.get("expect", []):
        assert needle in blob, (needle, blob)
    text = (FIXTURES / entry["file"]).read_text(errors="replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[ -/]*[@-~]", "", text).replace("\r", "")
    for line in result["evidence"]:
        # evidence is verbatim: every line is (a prefix of) a line of the log
        assert line.rstrip(".") .rstrip() in plain or line[:-3] in plain, line
    assert result["summary"] and result["remedy"]
    # a template field left unfilled (braces quoted from the log, e.g. Rust's "Os { code: 24 }", are fine)
    assert not re.search(r"\{[a-z_0-9]+\}", result["summary"] + result["remedy"]), "unfilled template"
    if result["cause"] != "unknown":
        assert result["evidence"], "a cause needs evidence"
        assert len(result["evidence"]) <= 6


# --------------------------------------------------------------------------- rule table


def test_rules_are_a_table_of_known_causes():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.cause in CAUSES and rule.cause != "unknown"
        assert isinstance(rule.priority, int)
        assert rule.summary and rule.remedy


def test_every_cause_has_a_rule():
    for cause in CAUSES[:-1]:
        assert any(r.cause == cause for r in RULES), cause


# --------------------------------------------------------------------------- precedence

SOUNDFILE = """Traceback (most recent call last):
  File "/opt/dflash/current/venv/lib/python3.12/site-packages/sglang/srt/entrypoints/http_server.py", line 60, in <module>
    import soundfile
ModuleNotFoundError: No module named 'soundfile'
"""


def test_first_fatal_error_beats_later_noise():
    log = SOUNDFILE + (
        "[2026-05-23 10:15:04] Received sigquit from a child process. It usually means the child failed.\n"
        "[2026-05-23 10:15:04] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "missing_module"
    assert "soundfile" in r["summary"]
    assert r["also_seen"] == ["nccl_init"]


def test_root_cause_before_consequence_even_when_consequence_is_specific():
    log = (
        "[2026-05-23 10:15:02 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free.\n" + "\n" * 80 +
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "cuda_oom"
    assert "GPU 1" in r["summary"]


def test_higher_priority_in_same_incident_wins():
    # sgl_kernel: the generic "No module named 'common_ops'" must not turn this into missing_module
    log = (
        "- ModuleNotFoundError: No module named 'foo_helper'\n"
        "- ImportError: /venv/lib/python3.12/site-packages/sgl_kernel/sm90/common_ops.abi3.so: "
        "undefined symbol: _ZN3c104cuda9SetDeviceEa\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "kernel_abi"
    assert "sglang-kernel" in r["remedy"]


def test_far_apart_errors_keep_the_first():
    log = SOUNDFILE + "\n" * 200 + "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    assert diagnose_text(log)["cause"] == "missing_module"


def test_warning_only_does_not_override_a_fatal_error():
    log = (
        "WARNING flashinfer: SM 12.x requires CUDA >= 12.9\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
    )
    assert diagnose_text(log)["cause"] == "cuda_oom"


def test_warning_then_healthy_is_no_failure():
    log = (
        "[2026-05-23 10:15:02] WARNING: SM 12.x requires CUDA >= 12.9 for FlashInfer JIT\n"
        "[2026-05-23 10:15:40] The server is fired up and ready to roll!\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "unknown"
    assert "no failure found" in r["summary"]
    assert "warnings only" in r["summary"]


def test_an_error_the_start_went_on_past_is_survived_not_the_cause():
    caught = "ModuleNotFoundError: No module named 'openai_harmony'\n"
    ready = "[2026-12-02 08:33:06] The server is fired up and ready to roll!\n"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    r = diagnose_text(caught + ready)
    assert r["cause"] == "unknown" and r["survived"] and "openai_harmony" in r["summary"]
    # the same line after the warm-up, or without one, is the cause
    assert diagnose_text(ready + caught)["cause"] == "missing_module"
    assert diagnose_text(caught)["cause"] == "missing_module"
    # a survived error does not hide a crash after the server was up
    assert diagnose_text(caught + ready + oom)["cause"] == "cuda_oom"
    # only the end of the warm-up counts: "Uvicorn running" comes before the warm-up request
    assert diagnose_text(caught + "INFO:     Uvicorn running on http://127.0.0.1:30001\n")["cause"] == \
        "missing_module"


def test_warning_then_crash_names_the_warning():
    log = (
        "[2026-05-23 10:15:02] WARNING: SM 12.x requires CUDA >= 12.9 for FlashInfer JIT\n"
        "[2026-05-23 10:15:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: Error in function 'run' at /tmp/kernel.cu:77: unspecified launch failure\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "flashinfer_arch"
    assert "--attention-backend triton" in r["remedy"]


def test_latest_failed_start_of_the_unit_is_judged():
    log = (
        "May 23 10:00:00 ct200 systemd[1]: Started dflash-a.service - SGLang a.\n"
        "May 23 10:00:05 ct200 python[10]: ModuleNotFoundError: No module named 'soundfile'\n"
        "May 23 10:00:05 ct200 systemd[1]: dflash-a.service: Main process exited, code=exited, status=1/FAILURE\n"
        "May 23 10:05:00 ct200 systemd[1]: Started dflash-a.service - SGLang a.\n"
        "May 23 10:05:09 ct200 python[20]: ImportError: cannot import name 'StructuralTag' from 'xgrammar' "
        "(/opt/dflash/layers/base/lib/python3.12/site-packages/xgrammar/__init__.py)\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "xgrammar_structural_tag"
    assert "start 2 of 2" in r["summary"]
    assert "StructuralTag" in r["summary"]


# --------------------------------------------------------------------------- normalisation


def test_journal_prefixes_ansi_and_crlf():
    log = (
        "May 23 10:15:02 ct200 python[1234]: \x1b[31mTraceback (most recent call last):\x1b[0m\r\n"
        "May 23 10:15:02 ct200 python[1234]: \x1b[1;31mOSError: [Errno 98] error while attempting to bind on "
        "address ('0.0.0.0', 30001): address already in use\x1b[0m\r\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "port_in_use"
    assert "30001" in r["summary"] and "30001" in r["remedy"]
    assert all("\x1b" not in e and "\r" not in e for e in r["evidence"])
    assert r["evidence"][0].startswith("May 23 10:15:02 ct200 python[1234]: OSError")


def test_rank_interleaved_tracebacks():
    w0 = "(VllmWorker rank=0 pid=200) ERROR 05-23 10:15:02 [multiproc_executor.py:527] "
    w1 = "(VllmWorker rank=1 pid=201) ERROR 05-23 10:15:02 [multiproc_executor.py:527] "
    log = (
        f"{w1}Traceback (most recent call last):\n"
        f"{w0}Traceback (most recent call last):\n"
        f'{w1}  File "x.py", line 1, in f\n'
        f"{w0}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
        "capacity of 23.55 GiB of which 100.06 MiB is free.\n"
        f"{w1}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "cuda_oom"
    assert "512.00 MiB" in r["summary"]


@pytest.mark.parametrize("line, expected", [
    ("May 23 10:15:02 ct200 python3[1234]: hello", "hello"),
    ("2026-05-23T10:15:02+0000 ct200 python3[1234]: hello", "hello"),
    ("[2026-05-23 10:15:02 TP0] hello", "hello"),
    ("[2026-05-23 10:15:02 DP0 TP1 EP1] hello", "hello"),
    ("(VllmWorker rank=1 pid=201) ERROR 05-23 10:15:02 [core.py:12] hello", "hello"),
    ("[rank3]: hello", "hello"),
    ("[2025-09-12T15:42:57Z] (ApiServer_1 pid=20007) hello", "hello"),
    ("openedai-images-flux  | hello", "hello"),
    ("sglang-1  | [2026-05-23 10:15:02 TP0] hello", "hello"),
])
def test_strip_prefixes(line, expected):
    assert strip_prefixes(line) == expected


def test_healthy_log_is_unknown_no_failure():
    log = (
        "[2026-05-23 10:15:02] server_args=ServerArgs(model_path='/dev/shm/Qwen3.6-27B', port=30001)\n"
        "[2026-05-23 10:15:40] INFO:     Uvicorn running on http://0.0.0.0:30001 (Press CTRL+C to quit)\n"
        "[2026-05-23 10:15:41] The server is fired up and ready to roll!\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "unknown"
    assert r["summary"].startswith("no failure found")
    assert r["facts"]["port"] == "30001"


def test_empty_log():
    r = diagnose_text("")
    assert r["cause"] == "unknown" and "no failure found" in r["summary"]


def test_unrecognised_failure_is_unknown_but_named():
    r = diagnose_text("Traceback (most recent call last):\nValueError: Unsupported architectures: ['Foo']\n")
    assert r["cause"] == "unknown"
    assert "Unsupported architectures" in r["summary"]
    assert r["evidence"] == ["ValueError: Unsupported architectures: ['Foo']"]


def test_facts_fill_the_remedy():
    log = (
        "server_args=ServerArgs(model_path='/m', mem_fraction_static=0.88, cuda_graph_max_bs=160, port=30001)\n"
        "Capture cuda graph begin. This can take up to several minutes.\n"
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.12 GiB is free. Process 4242 has 40.00 GiB memory in use. "
        "Process 4343 has 38.00 GiB memory in use.\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "cuda_oom"
    assert "now 160" in r["remedy"]
    assert "from 0.88 to about 0.78" in r["remedy"]
    assert "pid 4242" in r["summary"] and "pid 4343" in r["summary"]


# --------------------------------------------------------------------------- long logs


def test_long_log_head_and_tail(tmp_path):
    path = tmp_path / "big.log"
    filler = "[2026-05-23 10:15:02 TP0] Decode batch. #running-req: 1, #token: 100, gen throughput (token/s): 120.0\n"
    with open(path, "w") as fh:
        fh.write(SOUNDFILE)
        fh.write(filler * 60_000)
        fh.write("[2026-05-23 11:00:00] Received sigquit from a child process.\n")
    size = path.stat().st_size
    t0 = time.monotonic()
    r = diagnose_file(str(path), max_bytes=1024 * 1024)
    took = time.monotonic() - t0
    assert size > 5 * 1024 * 1024
    assert r["cause"] == "missing_module"
    assert r["skipped_bytes"] > 0
    assert took < 10


def test_read_log_keeps_whole_lines(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n" for i in range(10_000)))
    text, info = read_log(str(path), max_bytes=4096)
    body = [ln for ln in text.splitlines() if not ln.startswith("[...")]
    assert all(re.fullmatch(r"line \d+", ln) for ln in body)
    assert body[0] == "line 0" and body[-1] == "line 9999"
    assert info["skipped_bytes"] > 0


# --------------------------------------------------------------------------- the Ansible module


@pytest.mark.skipif(not os.path.exists(os.path.join(sys.prefix, "bin", "ansible")), reason="ansible not in venv")
def test_module_from_repo_root():
    fixture = "tests/fixtures/logs/missing_module/audioldm-soundfile.log"
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    out = subprocess.run(
        [os.path.join(sys.prefix, "bin", "ansible"), "localhost", "-m", "dflash_diagnose", "-a",
         f"log_file={fixture}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("localhost | SUCCESS => "), out.stdout
    res = json.loads(out.stdout.split("=>", 1)[1])
    assert res["cause"] == "missing_module"
    assert res["changed"] is False
    assert "uv pip install soundfile" in res["remedy"]


# --------------------------------------------------------------------------- the same real logs, mangled


def _journal_ansi_crlf(text: str) -> str:
    """What journalctl of a coloured, Windows-edited log would look like."""
    out = []
    for i, line in enumerate(text.splitlines()):
        colour = "\x1b[1;31m" if "Error" in line else "\x1b[32m"
        out.append(f"May 23 10:15:{i % 60:02d} ct200 python3[4242]: {colour}{line}\x1b[0m")
    return "\r\n".join(out) + "\r\n"


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_fixture_through_journal_ansi_crlf(entry):
    text = (FIXTURES / entry["file"]).read_text(errors="replace")
    plain = diagnose_text(text)
    mangled = diagnose_text(_journal_ansi_crlf(text))
    assert mangled["cause"] == plain["cause"] == ("unknown" if entry.get("known_miss") else entry["cause"])
    assert all("\x1b" not in e and "\r" not in e for e in mangled["evidence"])


# a hang ends without any line; a kill after it is another ending (test_diagnose_hang.py checks what it gives)
_NOISY = [e for e in INDEX if e["cause"] not in ("unknown", "startup_hang") and not e.get("known_miss")]


@pytest.mark.parametrize("entry", _NOISY, ids=[e["file"] for e in _NOISY])
def test_fixture_followed_by_noise_and_healthy_restart_lines(entry):
    text = (FIXTURES / entry["file"]).read_text(errors="replace")
    noise = (
        "[2026-05-23 10:15:04] Received sigquit from a child process. It usually means the child failed.\n"
        "[2026-05-23 10:15:04] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "Killed\n"
    )
    assert diagnose_text(text + "\n" + noise)["cause"] == entry["cause"]


@pytest.mark.parametrize("line, cause, needle", [
    ("ModuleNotFoundError: No module named 'vllm._C'", "missing_module", "uv pip install --reinstall vllm"),
    ("ModuleNotFoundError: No module named 'sglang.srt.speculative.dflash_worker'", "missing_module",
     "patched tree of this sglang"),
    ("ModuleNotFoundError: No module named 'cv2'", "missing_module", "uv pip install opencv-python-headless"),
    ("- ModuleNotFoundError: No module named 'common_ops'", "kernel_abi", "sglang-kernel"),
    ("ImportError: cannot import name 'StructuralTag' from 'xgrammar' (/v/xgrammar/__init__.py)",
     "xgrammar_structural_tag", "--grammar-backend none"),
    ("RuntimeError: CUDA error: invalid device function", "no_kernel_image", "TORCH_CUDA_ARCH_LIST"),
    ("RuntimeError: operator torchvision::nms does not exist", "kernel_abi", "torchvision::nms"),
    (("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
      "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on "
      "non supported HW"), "driver_too_old", "cuda-compat"),
    (("ValueError: Free memory on device (10.5/79.2 GiB) on startup is less than desired GPU memory utilization "
      "(0.9, 71.28 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
     "cuda_oom", "lower the fraction the server claims (`--gpu-memory-utilization` in vLLM, now 0.9"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_120a'", "flashinfer_arch", "compute_120a"),
    ("NCCL WARN Cuda failure 'peer access is not supported between these two devices'", "nccl_init", "NCCL_DEBUG"),
    # shapes generalised after the held-out round 3 (other packages / arches than the fixtures)
    ("Exception: transformers with minimum required version 4.51.0 is not installed. Please upgrade it.",
     "missing_module", "transformers>=4.51.0"),
    ("importlib.metadata.PackageNotFoundError: No package metadata was found for sgl-kernel",
     "missing_module", "sgl-kernel"),
    (("subprocess.CalledProcessError: Command '['/venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/"
      "ptxas', '-lineinfo', '-v', '--gpu-name=sm_103a', '/tmp/t.ptx', '-o', '/tmp/t.ptx.o']' returned non-zero "
      "exit status 255."), "no_kernel_image", "sm_103a"),
    ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9.",
     "cuda_oom", "now 0.9)"),
    ("RuntimeError: KV cache budget is negative after loading the weights", "cuda_oom", "other processes"),
    ("RuntimeError: No CUDA GPUs are available", "driver_too_old", "CUDA_VISIBLE_DEVICES"),
    ("zmq.error.ZMQError: Address in use (addr='tcp://127.0.0.1:45974')", "port_in_use", "tcp://127.0.0.1:45974"),
])
def test_single_line_rules(line, cause, needle):
    r = diagnose_text(line + "\n")
    assert r["cause"] == cause, r["summary"]
    assert needle in r["summary"] + " " + r["remedy"]


def test_nccl_warn_in_a_healthy_log_is_no_failure():
    log = (
        "node1:123:123 [0] NCCL WARN Missing \"iommu_group\" for PCI device\n"
        "[2026-05-23 10:15:04] The server is fired up and ready to roll!\n"
    )
    r = diagnose_text(log)
    assert r["cause"] == "unknown" and "no failure found" in r["summary"]


@pytest.mark.skipif(not os.path.exists(os.path.join(sys.prefix, "bin", "ansible")), reason="ansible not in venv")
def test_module_log_text_fail_on_cause():
    text = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    out = subprocess.run(
        [os.path.join(sys.prefix, "bin", "ansible"), "localhost", "-m", "dflash_diagnose", "-a",
         json.dumps({"log_text": text, "fail_on_cause": True})],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode != 0
    marker = "localhost | FAILED! => "
    assert marker in out.stdout, out.stdout
    res = json.loads(out.stdout.split(marker, 1)[1])
    assert res["cause"] == "cuda_oom" and res["msg"].startswith("cuda_oom: ")
    assert "raise `--mem-fraction-static`" in res["remedy"]


def test_torch_oom_text_about_private_pools_is_not_graph_capture():
    # torch's OOM message always says "allocated in private pools (e.g., CUDA Graphs)"
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 0 has a total capacity of "
           "23.57 GiB of which 594.88 MiB is free. Of the allocated memory 20.21 GiB is allocated by PyTorch, with "
           "128.00 MiB allocated in private pools (e.g., CUDA Graphs), and 185.98 MiB is reserved by PyTorch\n")
    r = diagnose_text(log)
    assert r["cause"] == "cuda_oom"
    assert "capturing" not in r["summary"] and "--cuda-graph-max-bs" not in r["remedy"]


@pytest.mark.parametrize("log, needle", [
    # a bare exception name: the assert statement before it says what failed
    ("  File \"x/backend.py\", line 8, in forward\n    assert not args.disable_cache\nAssertionError\n",
     "AssertionError (assert not args.disable_cache)"),
    # an IDE's exception header: the message is on the next line
    ("Exception has occurred: KeyError\n'rope_theta'\n  File \"a.py\", line 1, in <module>\n",
     "KeyError: 'rope_theta'"),
    # C/C++ asserts are crashes too
    ("src/llama.cpp:12: GGML_ASSERT(n_tokens > 0) failed\n", "GGML_ASSERT(n_tokens > 0) failed"),
    ("python3: kernel.cu:40: void run(): Assertion `idx < n' failed.\nAborted (core dumped)\n", "Assertion `idx < n'"),
    ("Exception: data did not match any variant of untagged enum ModelWrapper at line 3 column 1\n",
     "untagged enum ModelWrapper"),
])
def test_unknown_crash_names_its_first_error(log, needle):
    r = diagnose_text(log)
    assert r["cause"] == "unknown"
    assert needle in r["summary"], r["summary"]
    assert "no failure found" not in r["summary"]


@pytest.mark.parametrize("line, cause, needle", [
    # shapes generalised after the held-out round 4 (other repos / codes / wordings than the fixtures)
    (("huggingface_hub.errors.HfHubHTTPError: 403 Client Error: Forbidden for url: "
      "https://huggingface.co/mistralai/Mistral-7B-v0.3/resolve/main/config.json"), "model_missing",
     "mistralai/Mistral-7B-v0.3"),
    ("Access to model google/gemma-3-27b-it is restricted and you are not in the authorized list.",
     "model_missing", "HF_TOKEN"),
    ("host:12:34 [3] include/shm.h:48 NCCL ERROR Error while creating shared memory segment /dev/shm/nccl-x (size 1)",
     "nccl_init", "--shm-size"),
])
def test_single_line_rules_round4(line, cause, needle):
    r = diagnose_text(line + "\n")
    assert r["cause"] == cause, r["summary"]
    assert needle in r["summary"] + " " + r["remedy"]


@pytest.mark.parametrize("log, first, hint", [
    # systemd's own words for a kernel OOM kill of the unit
    (("Nov 30 10:00:01 ct200 systemd[1]: sglang@a.service: A process of this unit has been killed by the OOM killer.\n"
     "Nov 30 10:00:01 ct200 systemd[1]: sglang@a.service: Failed with result 'oom-kill'.\n"),
     "killed by the OOM killer", "journalctl -k"),
    ("OSError: [Errno 122] Disk quota exceeded: '/srv/models/x/model-00001-of-00004.safetensors'\n",
     "Disk quota exceeded", "df -h"),
    ("[Errno 30] Read-only file system: '/var/lib/sglang/.triton'\n", "Read-only file system", "ReadWritePaths"),
    (("thread 'main' panicked at src/main.rs:9:5:\ncalled `Result::unwrap()` on an `Err` value: Os { code: 24, "
     "kind: Uncategorized, message: \"Too many open files\" }\n"), "Too many open files", "LimitNOFILE"),
    (("ValueError: The quantization method gptq_marlin is not supported for the current GPU. Minimum capability: 80. "
     "Current capability: 75.\n"), "gptq_marlin", "bf16"),
])
def test_unknown_outside_causes_names_error_and_points_the_way(log, first, hint):
    r = diagnose_text(log)
    assert r["cause"] == "unknown"
    assert "no failure found" not in r["summary"] and first in r["summary"], r["summary"]
    assert hint in r["remedy"], r["remedy"]


def test_log_cut_short_names_an_os_error_before_the_traceback():
    log = ("Ignored error while writing commit hash: [Errno 13] Permission denied: '/home/sglang/.cache'\n"
           "Traceback (most recent call last):\n")
    r = diagnose_text(log)
    assert r["cause"] == "unknown" and "log cut short" in r["summary"]
    assert "Permission denied" in r["summary"] and "HF_HOME" in r["remedy"]


def test_killed_after_a_named_error_is_not_the_first_error():
    r = diagnose_text("RuntimeError: something specific broke\nKilled\n")
    assert "something specific broke" in r["summary"] and "OOM" not in r["remedy"]


@pytest.mark.parametrize("line, cause, needle", [
    # shapes generalised after the held-out round 4b
    ("RuntimeError: CUDA error: cudaErrorPeerAccessUnsupported", "nccl_init", "--disable-custom-all-reduce"),
    ("host:1:1 [0] NCCL WARN Cuda failure 'peer access is not supported between these two devices'", "nccl_init",
     "NCCL_P2P_DISABLE=1"),
    ("RuntimeError: Failed to infer device type", "driver_too_old", "--gpus all"),
])
def test_single_line_rules_round4b(line, cause, needle):
    r = diagnose_text(line + "\n")
    assert r["cause"] == cause, r["summary"]
    assert needle in r["summary"] + " " + r["remedy"]


def test_vllm_without_a_platform_is_only_a_hint_when_the_server_comes_up():
    hint = "INFO 08-02 02:39:50 [__init__.py:248] No platform detected, vLLM is running on UnspecifiedPlatform\n"
    assert diagnose_text(hint + "Traceback (most recent call last):\n")["cause"] == "driver_too_old"
    healthy = diagnose_text(hint + "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n")
    assert healthy["cause"] == "unknown" and "no failure found" in healthy["summary"]


@pytest.mark.parametrize("line, cause, needle", [
    # shapes generalised after the held-out round 5
    ('docker: Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]].',
     "driver_too_old", "nvidia-container-toolkit"),
    ("Cannot access gated repo for url https://huggingface.co/api/models/acme/secret-7b/revision/main.",
     "model_missing", "the model acme/secret-7b is"),
    (('  File "/srv/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", '
      "line 300 in ncclCommInitRank"), "nccl_init", "(ncclCommInitRank)"),
])
def test_single_line_rules_round5(line, cause, needle):
    r = diagnose_text(line + "\n")
    assert r["cause"] == cause, r["summary"]
    assert needle in r["summary"] + " " + r["remedy"]


def test_segfault_inside_the_nccl_wrapper_is_nccl_init():
    log = ("[2026-01-02 10:00:00 TP1] Init torch distributed begin.\n"
           "Fatal Python error: Aborted\n\n"
           "Current thread 0x00007f00 (most recent call first):\n"
           '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/distributed/device_communicators/'
           'pynccl_wrapper.py", line 400 in ncclCommInitRank\n'
           '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/distributed/device_communicators/'
           'pynccl.py", line 99 in __init__\n')
    r = diagnose_text(log)
    assert r["cause"] == "nccl_init" and "NCCL_P2P_DISABLE=1" in r["remedy"]


def test_killed_glued_to_a_progress_bar_is_the_first_error():
    r = diagnose_text("Fetching 4 files:  25%|\u2588\u2588\u258c      | 1/4 [00:10<00:30,  1.2s/it]Killed\n")
    assert r["cause"] == "unknown" and "first error: Killed" in r["summary"] and "OOM killer" in r["remedy"]


def test_a_survived_library_diagnostic_then_a_kill_is_the_kill():
    # a library prints a bare "undefined symbol" line and goes on; the host then kills the process
    diag = "/opt/venv/lib/python3.12/site-packages/somelib/libsome_cpu.so: undefined symbol: some_fn\n"
    r = diagnose_text(diag + "INFO: loading the model\nLoading checkpoint shards:   0%|   | 0/4\nKilled\n")
    assert r["cause"] == "unknown" and "first error: Killed" in r["summary"] and "did not stop" in r["summary"]
    # the same line as an exception, or with no sign of progress before the kill, stays the cause
    r = diagnose_text("ImportError: " + diag + "Killed\n")
    assert r["cause"] == "kernel_abi"
    r = diagnose_text(diag + "Killed\n")
    assert r["cause"] == "kernel_abi"


def test_speculative_and_chat_template_errors_get_a_hint():
    # a ServerArgs check: its own cause since round 6 (incompatible_options), with the speculative hint
    r = diagnose_text("ValueError: speculative_eagle_topk must be 1 when speculative_num_steps is 1\n")
    assert r["cause"] == "incompatible_options" and "--speculative-num-draft-tokens" in r["remedy"]
    r = diagnose_text("jinja2.exceptions.TemplateSyntaxError: unexpected '}'\n")
    assert r["cause"] == "unknown" and "--chat-template" in r["remedy"]


def test_context_length_refused_but_not_the_allowed_override():
    """The cause added in one place (module_utils/dflash_diagnose/rules.py) as README's demonstration:
    sglang's refusal names both lengths and the remedy; its warning once the override is allowed
    (the line as published in jpezzulli/sglang-rtxpro6000 #19) is no failure."""
    refused = ("ValueError: User-specified context_length (524288) is greater than the derived context_length "
               "(262144). This may lead to incorrect model outputs or CUDA errors.\n")
    d = diagnose_text(refused)
    assert d["cause"] == "context_length"
    assert "524288 tokens, above the 262144" in d["summary"] and "context_length to 262144 or less" in d["remedy"]
    allowed = ("[2026-09-21 03:09:14] Warning: Target model's context_length (524288) is greater than the derived "
               "context_length (262144). This may lead to incorrect model outputs or CUDA errors. Note that the "
               "derived context_length may differ from max_position_embeddings in the model's config.\n")
    assert diagnose_text(allowed)["cause"] != "context_length"
