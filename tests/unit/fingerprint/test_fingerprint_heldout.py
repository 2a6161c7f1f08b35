"""Fingerprint on GPUs, drivers and torch builds the first fixtures did not cover (benchmarks/fingerprint_heldout.md).

Every fixture folder is real published output (tests/fixtures/captures/SOURCE.md). What each must say:
values, a clear reason for whatever is null, and what the gate makes of the host.
"""

import json
import random
from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import collect, gate, merge, parse, report, values

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "captures"
LAB = ROOT / "lab" / "captures"
LAYER_128 = [{"name": "base", "cuda": "12.8"}]


def fp_of(folder):
    return merge.fingerprint_from_raw(collect.read_capture(FIXTURES / folder))


def refusals(fp, gpus=(0,), layers=(), host="h"):
    return gate.gate(fp, list(layers), [{"instance": "main", "gpus": list(gpus)}], host=host)


# --------------------------------------------------------------------------- MIG


@pytest.mark.parametrize(("folder", "used", "total", "slices", "largest"), [
    ("gh200-570-mig", 29465, 97871, 3, 47616),
    ("h100nvl-560-mig-azure", 64, 95830, 3, 47488),
])
def test_mig_enabled_gpu_is_seen_and_refused(folder, used, total, slices, largest):
    fp = fp_of(folder)
    (g,) = fp["gpus"]
    assert (g["sm"], g["arch"], g["memory_used_mib"], g["memory_total_mib"]) == ("9.0", "hopper", used, total)
    assert g["mig_mode"] == "enabled" and len(g["mig_devices"]) == slices
    assert max(d["memory_total_mib"] for d in g["mig_devices"]) == largest
    assert g["healthy"]  # MIG is a configuration, not a fault
    assert any(p.startswith("GPU 0: MIG mode enabled") for p in fp["problems"])
    (ref,) = refusals(fp, layers=[{"name": "base", "cuda": "12.4"}])
    assert "instance main: GPU 0" in ref and "MIG mode enabled" in ref and f"largest {largest} MiB" in ref
    assert "nvidia-smi -i 0 -mig 0" in ref
    # allow_busy does not make a MIG GPU usable as a whole GPU
    assert gate.check_requested_gpus(fp, [{"instance": "main", "gpus": [0], "allow_busy": True}])


def test_mig_processes_keep_their_gpu_and_slice_rows_are_not_the_gpu_memory():
    fp = fp_of("gh200-570-mig")
    assert [(p["pid"], p["used_mib"]) for p in fp["gpus"][0]["processes"]] == \
        [(3808491, 24402), (3809492, 3506), (3810762, 1450)]
    # a MIG GPU whose own memory cell is N/A: the MIG device rows below must not become its memory
    text = collect.read_capture(FIXTURES / "gh200-570-mig")["nvidia-smi.txt"].replace(
        "29465MiB /  97871MiB", "           N/A      ")
    (g,) = merge.fingerprint_from_raw({"nvidia-smi.txt": text})["gpus"]
    assert g["memory_used_mib"] is None and g["memory_total_mib"] is None
    assert g["null_reasons"]["memory_total_mib"] == "N/A" and g["mig_mode"] == "enabled"


def test_mig_mode_from_the_xml():
    """The real H200 -q -x (MIG Disabled), and the same with MIG enabled and one MIG device."""
    xml = collect.read_capture(FIXTURES / "h200")["nvidia-smi-q.xml"]
    plain = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})
    assert plain["gpus"][0]["mig_mode"] == "disabled" and refusals(plain) == []
    xml = xml.replace("<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>", 1).replace(
        "<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>",
        "<mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id>"
        "<compute_instance_id>0</compute_instance_id><fb_memory_usage><total>70912 MiB</total>"
        "<used>12 MiB</used></fb_memory_usage></mig_device></mig_devices>", 1)
    fp = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})
    assert fp["gpus"][0]["mig_mode"] == "enabled"
    assert fp["gpus"][0]["mig_devices"] == [{"gpu_instance": 1, "compute_instance": 0, "memory_used_mib": 12,
                                             "memory_total_mib": 70912}]
    assert "MIG mode enabled (1 MIG device(s), largest 70912 MiB)" in refusals(fp)[0]


# --------------------------------------------------------------------------- placeholders and permissions


def test_insufficient_permissions_is_null_with_a_reason_and_a_warning():
    fp = fp_of("a100-535-mig-pod-noperm")
    (g,) = fp["gpus"]
    assert (g["index"], g["name"], g["sm"], g["sm_source"]) == (0, "NVIDIA A100-SXM4-80GB", "8.0", "name")
    assert fp["driver_version"] == "535.161.08" and fp["driver_cuda_version"] == "12.2"
    assert g["memory_total_mib"] is None and g["memory_used_mib"] is None
    assert g["null_reasons"]["memory_used_mib"] == "Insufficient Permissions"
    assert g["healthy"]  # we could not look; nothing says it is broken
    assert fp["problems"] == [("GPU 0: memory use unknown (Insufficient Permissions): whether the GPU is busy is "
                               "judged by its processes only")]
    verdict = report.host_verdict(fp, refusals(fp, layers=[{"name": "base", "cuda": "12.2"}]))
    assert verdict.startswith("warning: ") and "Insufficient Permissions" in verdict


@pytest.mark.parametrize(("cell", "expect"), [
    ("81559", ("81559", None, None)),
    ("[N/A]", (None, "[N/A]", "na")),
    ("[Not Supported]", (None, "[Not Supported]", "na")),
    ("Not Supported", (None, "Not Supported", "na")),
    ("[Insufficient Permissions]", (None, "Insufficient Permissions", "soft")),
    ("[Unknown Error]", (None, "Unknown Error", "hard")),
    ("ERR!", (None, "ERR!", "hard")),
    ("[GPU requires reset]", (None, "GPU requires reset", "hard")),
    ("[GPU is lost]", (None, "GPU is lost", "hard")),
    (None, (None, None, None)),
])
def test_placeholder(cell, expect):
    assert values.placeholder(cell) == expect


def test_query_cells_that_do_not_parse_are_null_with_a_reason():
    # an extra comma outside the name (a comma decimal, say) would shift every column: nothing shifted is read
    text = "0, NVIDIA H100 80GB HBM3, GPU-a, 00000000:19:00.0, 9,0, 570.86.15, 81559, 12\n"
    fp = merge.fingerprint_from_raw({"nvidia-smi-query.csv": text})
    (g,) = fp["gpus"]
    assert (g["index"], g["name"], g["uuid"], g["pci_bus_id"], g["memory_total_mib"], g["memory_used_mib"]) == \
        (0, "NVIDIA H100 80GB HBM3", None, None, None, None)
    assert g["sm"] == "9.0" and g["sm_source"] == "name" and fp["driver_version"] is None
    assert g["null_reasons"]["memory_used_mib"] == "unparsable row: 9 cells for 8 fields"
    assert any("memory use unknown (unparsable row" in p for p in fp["problems"])
    text = "0, NVIDIA H100 80GB HBM3, GPU-a, 00000000:19:00.0, 9.x, 570.86.15, [Unknown Error], 12\n"
    fp = merge.fingerprint_from_raw({"nvidia-smi-query.csv": text})
    (g,) = fp["gpus"]
    assert g["sm"] == "9.0" and g["sm_source"] == "name"  # compute_cap unparsable: from the name
    assert g["memory_total_mib"] is None and g["null_reasons"]["memory_total_mib"] == "Unknown Error"
    assert not g["healthy"] and "memory_total_mib: Unknown Error" in g["problem"]


def test_old_driver_without_compute_cap_field_says_so():
    fp = fp_of("old-driver-470-no-compute-cap")
    assert fp["gpu_count"] == 0
    assert fp["problems"] == [
        ("this nvidia-smi does not know the query field compute_cap (driver older than the field: compute_cap "
         "needs driver >= 510); the capture retries without it, this one did not")]
    assert fp["null_reasons"]["driver_version"] == fp["problems"][0]


# --------------------------------------------------------------------------- layouts, WSL, lost GPUs


def test_two_digit_indexes_without_header():
    fp = fp_of("rtx4000ada-err-idx13")
    assert [(g["index"], g["sm"], g["memory_total_mib"], g["healthy"]) for g in fp["gpus"]] == \
        [(13, "8.9", 20475, True), (14, "8.9", 20475, False)]
    assert fp["driver_version"] is None
    assert fp["null_reasons"]["driver_version"].startswith("no source printed a driver version")
    ref = refusals(fp, gpus=[13], layers=LAYER_128)
    assert ref == ["h: layer 'base' installs CUDA 12.8 wheels (driver >= 570.26) but the host's driver is unknown: "
                   + fp["null_reasons"]["driver_version"]]
    assert "GPU 14 (NVIDIA RTX 4000 Ada Gene...) is unhealthy: nvidia-smi reports ERR!" in refusals(fp, gpus=[14])[0]


@pytest.mark.parametrize(("folder", "driver", "cuda", "used"), [
    ("rtx5090-wsl-596", "596.36", "13.2", 1307),
    ("rtx5090-wsl-591", "591.59", "13.1", 2187),
])
def test_wsl_driver_version_is_the_windows_driver(folder, driver, cuda, used):
    fp = fp_of(folder)
    assert (fp["driver_version"], fp["driver_cuda_version"]) == (driver, cuda) and fp["problems"] == []
    (g,) = fp["gpus"]
    assert (g["sm"], g["arch"], g["memory_used_mib"], g["memory_total_mib"], g["mig_mode"]) == \
        ("12.0", "blackwell", used, 32607, None)
    assert refusals(fp, layers=[{"name": "base", "cuda": "13.1"}], gpus=[0]) and \
        refusals(fp, layers=[{"name": "base", "cuda": "13.3"}], gpus=[])[0].startswith(f"h: GPU 0 NVIDIA GeForce RTX 5090 (SM 12.0): driver {driver}")


def test_wsl_driver_version_is_the_driver_not_the_smi():
    fp = fp_of("rtx5090-wsl-596")
    assert fp["driver_version"] == "596.36" and fp["driver_cuda_version"] == "13.2" and fp["nvcc_version"] == "13.2"
    (g,) = fp["gpus"]
    assert (g["name"], g["sm"], g["arch"], g["memory_used_mib"], g["memory_total_mib"]) == \
        ("NVIDIA GeForce RTX 5090", "12.0", "blackwell", 1307, 32607)
    assert refusals(fp, layers=[{"name": "base", "cuda": "13.0"}]) == [
        ("h: instance main: GPU 0 (NVIDIA GeForce RTX 5090) is busy: 1307 of 32607 MiB used with no listed process "
         "(another container or a MIG/vGPU tenant?) (set allow_busy_gpus: true to share it)")]


def test_jetson_orin_without_bus_id_and_its_own_driver_branch():
    fp = fp_of("orin-540-jetson")
    (g,) = fp["gpus"]
    assert (g["index"], g["name"], g["pci_bus_id"], g["sm"], g["arch"], g["sm_source"]) == \
        (0, "Orin (nvgpu)", None, "8.7", "ampere", "name")
    assert g["memory_total_mib"] is None and g["null_reasons"]["memory_total_mib"] == "Not Supported"
    assert fp["problems"] == [] and (fp["driver_version"], fp["driver_cuda_version"]) == ("540.4.0", "12.6")
    assert fp["driver_cuda_source"] == "nvidia-smi"
    # 540 is Jetson's own branch, below the x86_64 minimum for 12.4 (550.54.14): the printed CUDA decides
    assert refusals(fp, layers=[{"name": "base", "cuda": "12.4"}]) == []
    (ref,) = refusals(fp, layers=LAYER_128)
    assert "driver 540.4.0 supports CUDA up to 12.6, but layer 'base' installs CUDA 12.8 wheels" in ref
    inferred = dict(fp, driver_cuda_version=None)  # without the printed CUDA the table still applies
    assert "need driver >= 550.54.14" in gate.check_driver_compat(inferred, [{"name": "b", "cuda": "12.4"}])[0]


def test_lost_gpu_with_a_three_digit_domain_keeps_its_bus_id():
    fp = fp_of("unreachable-3digit-domain")
    (g,) = fp["gpus"]
    assert g["index"] is None and g["pci_bus_id"] == "00000000:BA:80.0" and not g["healthy"]
    assert fp["problems"] == ["GPU 00000000:BA:80.0: Unable to determine the device handle: Unknown Error"]


def test_sources_without_bus_id_or_with_foreign_uuids_do_not_duplicate_or_lose_gpus():
    table = collect.read_capture(FIXTURES / "gh200-570-mig")["nvidia-smi.txt"]
    query = "index, name, memory.used [MiB]\n0, NVIDIA GH200 480GB, 29465\n"
    apps = "MIG-51fa7c7a-4c41-59bf-b08a-9cb4b47525a7, 3808491, /opt/nim/llm/.venv/bin/python3, 24402\n"
    fp = merge.fingerprint_from_raw({"nvidia-smi.txt": table, "nvidia-smi-query.csv": query,
                                   "nvidia-smi-apps.csv": apps})
    assert fp["gpu_count"] == 1 and fp["gpus"][0]["pci_bus_id"] == "00000009:01:00.0"
    assert [p["pid"] for p in fp["gpus"][0]["processes"]] == [3808491, 3809492, 3810762]
    alone = merge.fingerprint_from_raw({"nvidia-smi-apps.csv": apps, "nvidia-smi-query.csv": query})
    assert any("not attributed to a GPU" in p for p in alone["problems"])


def test_a_non_zero_exit_with_data_is_not_a_host_error(tmp_path):
    """A lost GPU: nvidia-smi prints the line, then the other GPUs, and exits non-zero."""
    table = (FIXTURES / "rtxpro6000-610-unreachable" / "nvidia-smi.txt").read_text()
    (tmp_path / "table.txt").write_text(table)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nif [ $# -eq 0 ]; then cat {tmp_path / 'table.txt'}; exit 15; fi\n"
                   "case $1 in --query-compute-apps*) echo 'No devices were found'; exit 6;; esac\nexit 2\n")
    smi.chmod(0o755)
    raw = collect.collect_raw(nvidia_smi=str(smi), proc_version_path=str(tmp_path / "x"),
                          toolkit_roots=(str(tmp_path / "none"),))
    meta = json.loads(raw["capture-meta.json"])
    assert meta["errors"]["nvidia-smi.txt"] == "exit code 15"
    fp = merge.fingerprint_from_raw(raw)
    assert [g["index"] for g in fp["gpus"]] == [0, 1, 2, 3]
    assert fp["problems"] == ["nvidia-smi -q -x: no XML output",
                              "nvidia-smi --query-compute-apps: no NVIDIA devices were found",
                              "GPU 1: Unable to determine the device handle: Unknown Error"]


@pytest.mark.parametrize(("name", "sm"), [
    ("NVIDIA H100L-2-24C", "9.0"),  # a vGPU profile on a MIG-backed H100 (HSF/prmon pull 318)
    ("NVIDIA A100-SXM4-80GB", "8.0"),
    ("NVIDIA GH200 480GB", "9.0"),
    ("NVIDIA H100 NVL", "9.0"),
    ("NVIDIA RTX 4000 Ada Gene...", "8.9"),
])
def test_names_of_the_heldout_gpus(name, sm):
    assert values.sm_from_name(name) == sm


@pytest.mark.parametrize(("text", "version"), [
    (("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)  "
      "Thu Sep 25 2025\n"), "580.95.05"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.182.03  Fri Feb 24 03:29:56 UTC 2023\n", "470.182.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.142  Release Build\n", "580.142"),
    ("cat: /proc/driver/nvidia/version: No such file or directory\n", None),
])
def test_proc_driver_version_forms(text, version):
    assert parse.parse_proc_version(text) == version


# --------------------------------------------------------------------------- torch builds


def test_torch_without_kernels_for_the_gpu_is_a_warning():
    fp = fp_of("rtx5090-580-torch-cu118")
    assert fp["problems"] == [("torch 2.0.1 (CUDA 11.8) has no kernels for SM 12.0 (GPU 0): its arch list is "
                               "sm_37 sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90")]
    assert report.host_verdict(fp, refusals(fp, layers=LAYER_128)).startswith("warning: torch 2.0.1")
    # the display processes (type G) do not make it busy
    assert refusals(fp, layers=LAYER_128) == []


def test_torch_rocm_build():
    fp = fp_of("torch-rocm-no-nvidia")
    assert fp["gpu_count"] == 0
    assert fp["problems"] == ["nvidia-smi not found",
                              "torch 2.5.1+rocm6.2 is a ROCm (AMD) build: it cannot use NVIDIA GPUs"]


@pytest.mark.parametrize(("torch", "expect"), [
    ({"version": "2.5.1+cpu", "cuda": None, "available": False}, ["CPU-only build"]),
    ({"version": "2.6.0+rocm6.2.4", "cuda": None, "hip": "6.2.41134", "available": True}, ["ROCm (AMD) build"]),
    ({"version": "2.9.1+cu130", "cuda": "13.0", "available": True, "arch_list": ["sm_90", "sm_100", "sm_120"]},
     ["newer than the driver's CUDA 12.8"]),
    ({"version": "2.11.0+cu128", "cuda": "12.8", "available": True, "arch_list": ["sm_80", "sm_90", "sm_120"]}, []),
    ({"version": None, "cuda": None, "available": False,
      "error": "ModuleNotFoundError(\"No module named 'torch'\")"}, ["torch probe failed: ModuleNotFoundError"]),
])
def test_torch_build_kinds(torch, expect):
    raw = {"nvidia-smi.txt": collect.read_capture(LAB / "ct200")["nvidia-smi.txt"].replace(
        "CUDA Version: 13.0", "CUDA Version: 12.8"), "torch.json": json.dumps(torch)}
    problems = merge.fingerprint_from_raw(raw)["problems"]
    assert len(problems) == len(expect)
    for p, e in zip(problems, expect):
        assert e in p


@pytest.mark.parametrize(("archs", "sm", "covered"), [
    (["sm_80"], "8.6", True),       # same major, lower minor: SASS runs
    (["sm_86"], "8.0", False),
    (["sm_90", "compute_90"], "12.0", True),  # PTX JIT to a newer SM
    (["sm_90a"], "9.0", True),
    (["compute_90a"], "10.0", False),  # arch-specific PTX does not carry forward
    (["sm_90"], "12.0", False),
    (["gfx942"], "9.0", None),
    ([], "9.0", None),
])
def test_torch_covers_sm(archs, sm, covered):
    assert parse.torch_covers_sm(archs, sm) is covered


# --------------------------------------------------------------------------- never a traceback

_TOKENS = ["[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]", "ERR!", "", "N/A", ",",
           "9,0", "-1", "99999999999999999999", "<", "&", "{", "null", "[]", "GPU-", "MIG-", "\x00", "Enabled"]
_JSONS = ["null", "[1,2]", '{"errors": [1]}', '{"errors": {"a": 1}, "process_units": [3]}', '[{"path": 1}]', '"x"',
          "3", '{"version": 1, "cuda": [2], "arch_list": "sm_90"}', '{"version": "2.5", "arch_list": [1, "sm_x"]}']


def _mutate(rng, raw):
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(sorted(raw))
        text = raw[key]
        op = rng.randint(0, 4)
        if op == 0 and text:
            raw[key] = text[:rng.randrange(len(text))]
        elif op == 1:
            sep = "," if "," in text else " "
            toks = text.split(sep)
            toks[rng.randrange(len(toks))] = rng.choice(_TOKENS)
            raw[key] = sep.join(toks)
        elif op == 2:
            lines = text.splitlines()
            if lines:
                lines.pop(rng.randrange(len(lines)))
            raw[key] = "\n".join(lines)
        elif op == 3:
            raw[key] = rng.choice(_TOKENS)
        else:
            raw[key] = rng.choice(_JSONS)
    return raw


def test_mutated_captures_never_raise():
    """Truncated files, dropped lines, placeholders in any cell, JSON of the wrong shape: the parsers
    themselves (not the last-resort guard in fingerprint_from_raw) must cope, and so must the gate and
    the fleet report."""
    folders = sorted(p for p in list(FIXTURES.iterdir()) + [LAB / "ct129", LAB / "ct200"] if p.is_dir())
    captures = [collect.read_capture(p) for p in folders]
    rng = random.Random(20261130)
    for _ in range(400):
        raw = _mutate(rng, dict(rng.choice(captures)))
        fp = merge._fingerprint_from_raw(raw)  # not the guarded entry: it would hide a parser bug
        gate.gate(fp, LAYER_128, [{"instance": "a", "gpus": [0, 1]}])
        report.fleet_markdown({"h": fp})
        report.fleet_text({"h": fp})
        json.dumps(fp)


def test_the_guard_turns_a_parser_bug_into_a_problem(monkeypatch):
    def boom(_text):
        raise ValueError("synthetic")
    monkeypatch.setattr(merge, "parse_smi_table", boom)
    fp = merge.fingerprint_from_raw({"nvidia-smi.txt": "x"})
    assert fp["gpu_count"] == 0 and "fingerprint parser error (ValueError: synthetic)" in fp["problems"][0]
    assert gate.gate(fp, LAYER_128, [])[0].startswith("host: no usable NVIDIA GPU (fingerprint parser error")
