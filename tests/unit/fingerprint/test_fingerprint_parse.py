"""Parsers and merge of module_utils/dflash_fingerprint/ over every output form."""

import json
from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import collect, merge, parse, smi_errors, values

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "lab" / "captures"


def lab(host):
    return collect.read_capture(LAB / host)


# --------------------------------------------------------------------------- lab captures, every source


def test_ct200_full_capture():
    fp = merge.fingerprint_from_raw(lab("ct200"))
    assert fp["gpu_count"] == 8
    assert {g["name"] for g in fp["gpus"]} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {(g["sm"], g["arch"], g["memory_total_mib"]) for g in fp["gpus"]} == {("12.0", "blackwell", 97887)}
    assert [g["index"] for g in fp["gpus"]] == list(range(8))
    assert fp["gpus"][0]["processes"] == [{"pid": 2381466, "name": "/root/venv/bin/python3", "used_mib": 60616,
                                           "type": "C", "unit": None}]
    assert all(g["processes"] == [] for g in fp["gpus"][1:])
    assert fp["driver_version"] == "580.95.05" and fp["driver_cuda_version"] == "13.0"
    assert fp["nvcc_version"] == "12.8"
    assert fp["cuda_toolkits"] == [{"path": "/usr/local/cuda-12.8", "version": "12.8"}]
    assert fp["torch"]["version"] == "2.11.0+cu128" and fp["torch"]["cuda"] == "12.8" and fp["torch"]["available"]
    assert fp["os"] == "Ubuntu 24.04.3 LTS" and fp["glibc"] == "2.39"
    assert fp["problems"] == []
    assert fp["sources"][0] == "nvidia-smi-query.csv"


def test_ct129_full_capture():
    fp = merge.fingerprint_from_raw(lab("ct129"))
    assert fp["gpu_count"] == 2
    assert [(g["name"], g["sm"], g["arch"], g["memory_total_mib"], g["healthy"]) for g in fp["gpus"]] == \
        [("NVIDIA RTX A6000", "8.6", "ampere", 49140, True)] * 2
    assert fp["torch"]["version"] == "2.11.0+cu130"


@pytest.mark.parametrize("only", ["nvidia-smi.txt", "nvidia-smi-q.xml", "nvidia-smi-query.csv"])
@pytest.mark.parametrize("host", ["ct129", "ct200"])
def test_each_gpu_source_alone_gives_the_same_gpus(host, only):
    full = merge.fingerprint_from_raw(lab(host))
    alone = merge.fingerprint_from_raw({only: lab(host)[only]})
    key = [(g["index"], g["pci_bus_id"], g["sm"], g["arch"], g["memory_total_mib"], g["memory_used_mib"])
           for g in full["gpus"]]
    assert [(g["index"], g["pci_bus_id"], g["sm"], g["arch"], g["memory_total_mib"], g["memory_used_mib"])
            for g in alone["gpus"]] == key
    assert alone["driver_version"] == full["driver_version"]
    if only != "nvidia-smi-query.csv":  # the CSV has no CUDA version: inferred from the 580 branch
        assert alone["driver_cuda_version"] == "13.0"
    # processes from the table / XML when there is no apps CSV
    if only != "nvidia-smi-query.csv":
        assert [len(g["processes"]) for g in alone["gpus"]] == [len(g["processes"]) for g in full["gpus"]]


def test_sm_source_is_reported():
    assert merge.fingerprint_from_raw(lab("ct200"))["gpus"][0]["sm_source"] == "compute_cap"
    table_only = merge.fingerprint_from_raw({"nvidia-smi.txt": lab("ct200")["nvidia-smi.txt"]})
    assert table_only["gpus"][0]["name"] == "NVIDIA RTX PRO 6000 Blac..."
    assert table_only["gpus"][0]["sm_source"] == "name"


# --------------------------------------------------------------------------- public fixtures


FIXTURES = ROOT / "tests" / "fixtures" / "captures"

# folder -> (gpu_count, driver, driver_cuda, {index: (sm, arch, used, total, healthy)}, problem substrings)
EXPECTED = {
    "a40-err-old-layout": (8, "525.60.13", "12.0",
                           {0: ("8.6", "ampere", 0, 46068, True), 2: ("8.6", "ampere", 821, 46068, True),
                            4: (None, None, 0, 46068, False)}, ["GPU 4: nvidia-smi reports ERR!"]),
    "a30-err-old-layout": (8, "525.85.12", "12.0",
                           {1: ("8.0", "ampere", 16096, 24576, True), 3: (None, None, 23025, 24576, False)},
                           ["GPU 3"]),
    "p100-440-premig": (8, "440.33.01", "10.2",
                        {0: ("6.0", "pascal", 10, 16280, True), 7: ("6.0", "pascal", 13684, 16280, True)}, []),
    "rtxpro6000-610-unreachable": (4, "610.57.04", "13.3",
                                   {0: ("12.0", "blackwell", 88450, 97887, True),
                                    1: (None, None, None, None, False),
                                    3: ("12.0", "blackwell", 10, 97887, True)},
                                   ["GPU 1: Unable to determine the device handle: Unknown Error"]),
    "h100-580-ddp": (2, "580.95.05", "13.0", {0: ("9.0", "hopper", 18903, 81559, True),
                                               1: ("9.0", "hopper", 18905, 81559, True)}, []),
    "h100-545-layout": (1, "545.23.08", "12.3", {0: ("9.0", "hopper", 2, 81559, True)}, []),
    "h100-580-container-busy": (1, "580.105.08", "13.0", {0: ("9.0", "hopper", 74199, 81559, True)}, []),
    "a10-510-cuda-na": (1, "510.47.03", "11.6", {0: ("8.6", "ampere", 0, 23028, True)},
                        ["CUDA Version: N/A"]),
    "geforce-525-cuda-na": (1, "525.85.05", "12.0", {0: (None, None, 6, 4096, True)},
                            ["CUDA Version: N/A", "unknown SM"]),
    "rtx4090-575-busy": (1, "575.57.08", "12.9", {0: ("8.9", "ada", 18520, 24564, True)}, []),
    "b200-580-vm": (1, "580.126.09", "13.0", {0: ("10.0", "blackwell", 0, 183359, True)}, []),
    "gb10-580-unified": (1, "580.142", "13.0", {0: ("12.1", "blackwell", None, None, True)}, []),
    "mixed-quadro3000-rtx3090": (3, "550.67", "12.4", {0: ("7.5", "turing", 1, 6144, True),
                                                         1: ("8.6", "ampere", 2, 24576, True),
                                                         2: ("8.6", "ampere", 2, 24576, True)}, []),
    "mismatch-580": (0, None, None, {}, ["driver/library version mismatch", "NVML library 580.126"]),
    "no-driver": (0, None, None, {}, ["cannot communicate with the NVIDIA driver"]),
}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_public_fixture(folder):
    count, driver, cuda, gpus, problems = EXPECTED[folder]
    fp = merge.fingerprint_from_raw(collect.read_capture(FIXTURES / folder))
    assert fp["gpu_count"] == count
    assert fp["driver_version"] == driver
    assert fp["driver_cuda_version"] == cuda
    by_index = {g["index"]: g for g in fp["gpus"]}
    for idx, (sm, arch, used, total, healthy) in gpus.items():
        g = by_index[idx]
        assert (g["sm"], g["arch"], g["memory_used_mib"], g["memory_total_mib"], g["healthy"]) == \
            (sm, arch, used, total, healthy), (folder, idx, g)
    text = " | ".join(fp["problems"] + [g["problem"] or "" for g in fp["gpus"]])
    for p in problems:
        assert p in text, (folder, p, text)
    if not problems:
        assert fp["problems"] == []


def test_fixture_processes_and_unreachable_bus():
    a40 = merge.fingerprint_from_raw(collect.read_capture(FIXTURES / "a40-err-old-layout"))
    assert a40["gpus"][2]["processes"] == [{"pid": 2111354, "name": "...eratornet/venv/bin/python",
                                            "used_mib": 818, "type": "C", "unit": None}]
    p100 = merge.fingerprint_from_raw(collect.read_capture(FIXTURES / "p100-440-premig"))
    assert [(p["pid"], p["used_mib"]) for p in p100["gpus"][7]["processes"]] == [(33063, 10235), (35147, 3439)]
    rtx = merge.fingerprint_from_raw(collect.read_capture(FIXTURES / "rtxpro6000-610-unreachable"))
    assert rtx["gpus"][1]["pci_bus_id"] == "00000000:34:00.0"
    ddp = merge.fingerprint_from_raw(collect.read_capture(FIXTURES / "h100-580-ddp"))
    assert [p["pid"] for p in ddp["gpus"][1]["processes"]] == [4935, 4936]


def test_mismatch_with_kernel_module_version():
    raw = collect.read_capture(FIXTURES / "mismatch-580")
    raw["proc-driver-nvidia-version.txt"] = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.119.02  Release Build  "
        "(dvs-builder@U22-I3-AF03-09-1)  Tue Dec  9 10:55:49 UTC 2025\nGCC version:  gcc version 14.2.1\n")
    fp = merge.fingerprint_from_raw(raw)
    assert fp["gpu_count"] == 0
    assert fp["driver_version"] == "580.119.02"
    assert "kernel module 580.119.02" in fp["problems"][0] and "NVML library 580.126" in fp["problems"][0]


# --------------------------------------------------------------------------- CSV forms


def test_query_csv_with_header_units_and_na():
    text = ("index, name, uuid, pci.bus_id, compute_cap, driver_version, memory.total [MiB], memory.used [MiB]\n"
            "0, NVIDIA A100-SXM4-80GB, GPU-a, 00000000:07:00.0, 8.0, 550.54.15, 81920 MiB, 4 MiB\n"
            "1, NVIDIA GeForce RTX 4090, GPU-b, 00000000:81:00.0, 8.9, 550.54.15, 24564 MiB, [N/A]\n")
    gpus = parse.parse_query_csv(text)
    assert [(g["index"], g["name"], g["sm"], g["memory_total_mib"], g["memory_used_mib"]) for g in gpus] == \
        [(0, "NVIDIA A100-SXM4-80GB", "8.0", 81920, 4), (1, "NVIDIA GeForce RTX 4090", "8.9", 24564, None)]
    fp = merge.fingerprint_from_raw({"nvidia-smi-query.csv": text})
    assert [g["arch"] for g in fp["gpus"]] == ["ampere", "ada"]  # mixed models in one host


def test_query_csv_old_driver_without_compute_cap_uses_the_name_table():
    text = ("0, Tesla V100-SXM2-32GB, GPU-1, 00000000:00:1E.0, 470.57.02, 32510, 0\n"
            "1, Tesla T4, GPU-2, 00000000:00:1F.0, 470.57.02, 15109, 3\n")
    fp = merge.fingerprint_from_raw({"nvidia-smi-query.csv": text})
    assert [(g["sm"], g["arch"], g["sm_source"]) for g in fp["gpus"]] == \
        [("7.0", "volta", "name"), ("7.5", "turing", "name")]
    assert fp["driver_cuda_version"] == "11.4"


def test_query_csv_err_and_name_with_comma():
    text = ("0, ERR!, GPU-x, 00000000:3B:00.0, ERR!, 535.104.05, 81920, ERR!\n"
            "1, NVIDIA Foo, Bar, GPU-y, 00000000:3C:00.0, 9.0, 535.104.05, 81559, 1\n")
    gpus = merge.fingerprint_from_raw({"nvidia-smi-query.csv": text})["gpus"]
    assert gpus[0]["healthy"] is False and "ERR!" in gpus[0]["problem"]
    assert gpus[1]["name"] == "NVIDIA Foo, Bar" and gpus[1]["sm"] == "9.0" and gpus[1]["healthy"]


def test_apps_csv_forms():
    assert parse.parse_apps_csv("") == []
    assert parse.parse_apps_csv("No running processes found\n") == []
    procs = parse.parse_apps_csv("GPU-a, 123, python3, 1000\nGPU-a, 456, /usr/bin/python, [N/A]\n")
    assert [(p["pid"], p["name"], p["used_mib"]) for p in procs] == [(123, "python3", 1000),
                                                                     (456, "/usr/bin/python", None)]


def test_apps_csv_is_authoritative_for_processes():
    raw = lab("ct200")
    raw["nvidia-smi-apps.csv"] = ""
    fp = merge.fingerprint_from_raw(raw)
    assert all(g["processes"] == [] for g in fp["gpus"])  # the process exited after the table was taken


# --------------------------------------------------------------------------- XML forms


def test_xml_problems_and_cuda_not_found():
    xml = lab("ct129")["nvidia-smi-q.xml"]
    xml = xml.replace("<cuda_version>13.0</cuda_version>", "<cuda_version>Not Found</cuda_version>", 1)
    xml = xml.replace("<gpu_recovery_action>None<", "<gpu_recovery_action>Reset<", 1)
    fp = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})
    assert fp["driver_cuda_version"] == "13.0"  # from the 580 branch
    assert any("CUDA Version: N/A" in p for p in fp["problems"])
    assert fp["gpus"][0]["healthy"] is False and fp["gpus"][0]["problem"] == "GPU recovery action: Reset"
    assert fp["gpus"][1]["healthy"] is True
    assert fp["gpus"][0]["arch"] == "ampere" and fp["gpus"][0]["sm"] == "8.6"


def test_xml_unparsable_is_a_problem_not_a_crash():
    fp = merge.fingerprint_from_raw({"nvidia-smi-q.xml": "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu"})
    assert fp["gpu_count"] == 0
    assert any("unparsable" in p for p in fp["problems"])


def test_xml_arch_hint_when_the_name_is_unknown():
    xml = lab("ct129")["nvidia-smi-q.xml"].replace("NVIDIA RTX A6000", "NVIDIA Future Card")
    fp = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})
    assert fp["gpus"][0]["sm"] is None and fp["gpus"][0]["arch"] == "ampere"
    assert "unknown SM" in fp["gpus"][0]["problem"] and fp["gpus"][0]["healthy"]


# --------------------------------------------------------------------------- host-level errors


@pytest.mark.parametrize(("text", "expect"), [
    ("No devices were found\n", "no NVIDIA devices were found"),
    ("Failed to initialize NVML: Unknown Error\n", "failed to initialize NVML: Unknown Error"),
    (("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
      "NVIDIA driver is installed and running.\n"), "cannot communicate"),
])
def test_error_texts(text, expect):
    fp = merge.fingerprint_from_raw({"nvidia-smi.txt": text, "nvidia-smi-query.csv": text})
    assert fp["gpu_count"] == 0
    assert len(fp["problems"]) == 1 and expect in fp["problems"][0]


def test_no_nvidia_smi_at_all():
    fp = merge.fingerprint_from_raw({})
    assert fp["gpu_count"] == 0 and fp["gpus"] == []
    assert fp["problems"] == ["no nvidia-smi output (nvidia-smi not found or not captured)"]
    meta = json.dumps({"errors": {"nvidia-smi.txt": "nvidia-smi not found"}})
    fp = merge.fingerprint_from_raw({"capture-meta.json": meta, "os-release": 'PRETTY_NAME="Debian GNU/Linux 12"\n'})
    assert fp["problems"] == ["nvidia-smi not found"] and fp["os"] == "Debian GNU/Linux 12"


@pytest.mark.parametrize(("line", "index", "bus"), [
    ("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error", 1, "00000000:34:00.0"),
    ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error", None, "00000000:CB:00.0"),
    ("Unable to determine the device handle for GPU 0: Unknown Error", 0, None),
    ("Unable to determine the device handle for GPU 000:BA:80.0: Unknown Error", None, "00000000:BA:80.0"),
    ("UNABLE TO DETERMINE THE DEVICE HANDLE FOR GPU0000:CB:00.0: Unknown Error", None, "00000000:CB:00.0"),
])
def test_unreachable_line_forms(line, index, bus):
    (u,) = smi_errors.unreachable_gpus(line)
    assert (u["index"], u["pci_bus_id"]) == (index, bus)
    assert u["problem"] == "Unable to determine the device handle: Unknown Error"


def test_unreachable_line_cut_after_the_index():
    (u,) = smi_errors.unreachable_gpus("Unable to determine the device handle for GPU0\nThu Aug 27 18:05:38 2026\n")
    assert (u["index"], u["pci_bus_id"], u["problem"]) == (0, None, "Unable to determine the device handle")


# --------------------------------------------------------------------------- tables


@pytest.mark.parametrize(("name", "sm"), [
    ("NVIDIA H200", "9.0"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H100 PCIe", "9.0"), ("NVIDIA H20", "9.0"),
    ("NVIDIA GH200 480GB", "9.0"), ("NVIDIA B200", "10.0"), ("NVIDIA GB200", "10.0"), ("NVIDIA B300 SXM6 AC", "10.3"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"), ("NVIDIA RTX PRO 6000 Blac...", "12.0"),
    ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA GeForce RTX 5090 ...", "12.0"), ("NVIDIA GB10", "12.1"),
    ("NVIDIA L40S", "8.9"), ("NVIDIA L4", "8.9"), ("NVIDIA RTX 6000 Ada Generation", "8.9"),
    ("NVIDIA GeForce RTX 4090", "8.9"), ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA A100 80GB PCIe", "8.0"),
    ("NVIDIA A30", "8.0"), ("NVIDIA A10G", "8.6"), ("NVIDIA A40", "8.6"), ("NVIDIA RTX A6000", "8.6"),
    ("NVIDIA GeForce RTX 3090", "8.6"), ("Tesla T4", "7.5"), ("Quadro RTX 6000", "7.5"),
    ("NVIDIA GeForce RTX 2080 Ti", "7.5"), ("Tesla V100-SXM2-16GB", "7.0"), ("Tesla V100-SXM2...", "7.0"),
    ("Quadro RTX 3000", "7.5"), ("Quadro RTX 5000", "7.5"), ("Quadro RTX 4000", "7.5"),
    ("NVIDIA RTX 5000 Ada Generation", "8.9"), ("NVIDIA RTX 4000 SFF Ada Generation", "8.9"),
    ("NVIDIA RTX 5000 Ada Gene...", "8.9"), ("NVIDIA RTX A4000", "8.6"), ("NVIDIA GeForce RTX 5060 Ti", "12.0"),
    ("NVIDIA RTX PRO 5000 Blackwell", "12.0"), ("NVIDIA GeForce RTX 3080 Ti", "8.6"),
    ("Tesla P100-PCIE-16GB", "6.0"), ("Tesla P40", "6.1"), ("NVIDIA GeForce ...", None), ("Some Future Card", None),
])
def test_name_table(name, sm):
    assert values.sm_from_name(name) == sm


@pytest.mark.parametrize(("sm", "arch"), [("7.0", "volta"), ("7.5", "turing"), ("8.0", "ampere"), ("8.6", "ampere"),
                                          ("8.9", "ada"), ("9.0", "hopper"), ("10.0", "blackwell"),
                                          ("12.0", "blackwell"), ("12.1", "blackwell"), ("6.1", "pascal")])
def test_arch_of(sm, arch):
    assert values.arch_of(sm) == arch


def test_small_parsers():
    assert parse.parse_proc_version(lab("ct200")["proc-driver-nvidia-version.txt"]) == "580.95.05"
    assert parse.parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.57.02  Tue Jul 13 16:14:05 "
                                  "UTC 2021\n") == "470.57.02"
    assert parse.parse_nvcc(lab("ct200")["nvcc-version.txt"]) == "12.8"
    assert parse.parse_nvcc("") is None
    assert parse.parse_glibc("glibc 2.39\n") == "2.39"
    assert values.norm_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert values.cuda_of_driver("535.104.05") == "12.2" and values.cuda_of_driver("390.1") == "9.1" and values.cuda_of_driver("352.1") is None
    assert parse.parse_torch('{"version": "2.11.0+cu130", "cuda": "13.0", "available": true}')["cuda"] == "13.0"
    assert parse.parse_torch("Traceback ...")["error"]


def test_process_unit_from_cgroup(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/system.slice/dflash-main.service\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("12:pids:/user.slice/user-0.slice/session-3.scope\n")
    assert collect.process_unit(42, proc=str(tmp_path)) == "dflash-main.service"
    assert collect.process_unit(43, proc=str(tmp_path)) == "session-3.scope"
    assert collect.process_unit(44, proc=str(tmp_path)) is None
    raw = lab("ct200")
    raw["capture-meta.json"] = json.dumps({"process_units": {"2381466": "ddtree-wrapper.service"}})
    fp = merge.fingerprint_from_raw(raw)
    assert fp["gpus"][0]["processes"][0]["unit"] == "ddtree-wrapper.service"


def test_query_csv_any_field_order_with_header():
    text = ("name, memory.total [MiB], compute_cap, index, pci.bus_id, memory.used [MiB]\n"
            "NVIDIA H200, 143771 MiB, 9.0, 0, 00000000:19:00.0, 0 MiB\n")
    (g,) = parse.parse_query_csv(text)
    assert (g["index"], g["name"], g["sm"], g["memory_total_mib"], g["memory_used_mib"], g["pci_bus_id"]) == \
        (0, "NVIDIA H200", "9.0", 143771, 0, "00000000:19:00.0")


def test_torch_probe_runs_in_a_real_python():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", collect.TORCH_PROBE], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(data) >= {"version", "cuda", "available"}


def test_xml_compute_cap_element_when_present():
    xml = lab("ct129")["nvidia-smi-q.xml"].replace("<product_name>NVIDIA RTX A6000</product_name>",
                                                   "<product_name>NVIDIA Future Card</product_name>\n"
                                                   "\t\t<compute_cap>8.6</compute_cap>")
    g = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})["gpus"][0]
    assert (g["sm"], g["sm_source"], g["arch"]) == ("8.6", "compute_cap", "ampere")


def test_xml_row_remapping_pending_and_the_real_h200_layout():
    xml = lab("ct200")["nvidia-smi-q.xml"].replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<", 1)
    gpus = merge.fingerprint_from_raw({"nvidia-smi-q.xml": xml})["gpus"]
    assert gpus[0]["problem"] == "row remapping pending (reset needed)" and not gpus[0]["healthy"]
    assert all(g["healthy"] for g in gpus[1:])
    h200 = ROOT / "tests" / "fixtures" / "captures" / "h200" / "nvidia-smi-q.xml"
    if h200.is_file():  # the real 580.159.04 XML (DTD v13) parses alone
        (g,) = merge.fingerprint_from_raw({"nvidia-smi-q.xml": h200.read_text()})["gpus"]
        assert (g["name"], g["sm"], g["arch"], g["memory_total_mib"], g["healthy"]) == \
            ("NVIDIA H200", "9.0", "hopper", 143771, True)
