"""Blind round h14 (benchmarks/fingerprint_heldout.md, "Blind round h14"): 17 real captures of machines the code had
not seen (sources: tests/fixtures/captures/SOURCE.md). For each: the facts, the gate's verdict for the shipped
stack (a layer of CUDA 13.0 wheels, instance on the first GPU) and the fallback rules for a DFLASH instance on it.
"""

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_fingerprint import collect, gate, merge, parse, values
from ansible.module_utils.dflash_instances import flags as di_flags

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "captures"
RULES = yaml.safe_load((ROOT / "roles/dflash_instances/vars/main.yml").read_text())["__dflash_instances_rules"]
LAYER_130 = [{"name": "base", "cuda": "13.0"}]
# the shipped stack, as the probe reports it
PROBE = {"torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"},
         "flashinfer": {"ok": True, "version": "0.6.8.post1"},
         "xgrammar": {"ok": True, "version": "0.1.32", "structural_tag": True}}
SM12_FALLBACK = ["sm12x-flashinfer-needs-cuda-12.9", "sm12x-draft-attention-triton"]

# folder: (driver, driver CUDA, [(index, name, sm, used, total, bus)], refusal fragments for instance on GPU 0
#          (empty: not refused), host problem fragments, rules applied)
CASES = {
    "l4-570-cloud": ("570.133.20", "12.8", [(0, "NVIDIA L4", "8.9", 0, 23034, "00000000:31:00.0")],
                     ["supports CUDA up to 12.8", "need driver >= 580.65.06"], [], []),
    "a10g-535-busy-cut": ("535.247.01", "12.2", [(0, "NVIDIA A10G", "8.6", 8722, 23028, "00000000:00:1E.0")],
                          ["supports CUDA up to 12.2", "busy: 8722 of 23028 MiB"], [], []),
    "t4-smi450-driver418": ("418.67", "10.1", [(0, "Tesla T4", "7.5", 163, 15079, "00000000:00:04.0")],
                            ["supports CUDA up to 10.1", "unhealthy: nvidia-smi reports ERR!"], ["ERR!"], []),
    "v100fhhl-535-busy": ("535.183.01", "12.2",
                          [(0, "Tesla V100-FHHL-16GB", "7.0", 1332, 16384, "00000000:01:00.0")],
                          ["supports CUDA up to 12.2", "SM 7.0, dropped after CUDA 12.x", "busy: 1332"], [], []),
    "v100sxm2-470-trunc": ("470.182.03", "11.4", [(0, "Tesla V100-SXM2...", "7.0", 0, 16160, "00000000:00:04.0")],
                           ["supports CUDA up to 11.4", "SM 7.0, dropped after CUDA 12.x"], [], []),
    "rtx5070-575-cuda-na": ("575.64.03", "12.9",
                            [(0, "NVIDIA GeForce RTX 5070", "12.0", 1731, 12227, "00000000:02:00.0")],
                            ["supports CUDA up to 12.9", "busy: 1731"], ["CUDA Version: N/A"], SM12_FALLBACK),
    "a400-550-domain4": ("550.120", "12.4", [(0, "NVIDIA RTX A400", "8.6", 2271, 4094, "00000004:01:00.0")],
                         ["supports CUDA up to 12.4", "busy: 2271"], [], []),
    "a100x2-580-eprocess": ("580.126.09", "13.0",
                            [(0, "NVIDIA A100-SXM4-40GB", "8.0", 598, 40960, "00000000:10:1C.0"),
                             (1, "NVIDIA A100-SXM4-40GB", "8.0", 602, 40960, "00000000:10:1D.0")],
                            ["compute mode Exclusive_Process and already busy: 598 of 40960",
                             "nvidia-smi -i 0 -c DEFAULT"], ["GPU 0: compute mode Exclusive_Process"], []),
    "h100x8-550-cut": ("550.54.15", "12.4",
                       [(0, "NVIDIA H100 80GB HBM3", "9.0", 0, 81559, "00000000:18:00.0"),
                        (1, "NVIDIA H100 80GB HBM3", "9.0", None, None, "00000000:2A:00.0")],
                       ["supports CUDA up to 12.4"], ["GPU 1: memory use unknown (not in the output"], []),
    "b200-610-umd133": ("610.43.02", "13.3", [(0, "NVIDIA B200", "10.0", 0, 183359, "00000000:63:00.0"),
                                              (1, "NVIDIA B200", "10.0", 0, 183359, "00000000:68:00.0")], [], [], []),
    "rtx5090x2-610-busy": ("610.57.04", "13.3",
                           [(0, "NVIDIA GeForce RTX 5090", "12.0", 28812, 32607, "00000000:01:00.0"),
                            (1, "NVIDIA GeForce RTX 5090", "12.0", 28860, 32607, "00000000:02:00.0")],
                           ["busy: 28812 of 32607 MiB"], [], SM12_FALLBACK),
    "rtx3090-595-2part": ("595.84", "13.2",
                          [(0, "NVIDIA GeForce RTX 3090", "8.6", 22598, 24576, "00000000:01:00.0"),
                           (1, "NVIDIA GeForce RTX 3090", "8.6", 24006, 24576, "00000000:21:00.0")],
                          ["busy: 22598 of 24576 MiB"], [], []),
    "v100-545-hami-slice": ("545.29.06", "12.3",
                            [(0, "Tesla V100-PCIE-16GB", "7.0", 2716, 3000, "00000000:00:06.0")],
                            ["supports CUDA up to 12.3", "SM 7.0, dropped", "busy: 2716 of 3000"],
                            ["memory.total 3000 MiB is far below the 16 GB"], []),
    "rtx4090-535-container-nopids": ("535.183.01", "12.2",
                                     [(0, "NVIDIA GeForce RTX 4090", "8.9", 7325, 24564, "00000000:41:00.0")],
                                     ["supports CUDA up to 12.2", "busy: 7325"], [], []),
    "gtx1050-418-xorg": ("418.56", "10.1", [(0, "GeForce GTX 105...", "6.1", 327, 4040, "00000000:01:00.0")],
                         ["supports CUDA up to 10.1", "SM 6.1, dropped after CUDA 12.x"], [], []),
    "a100-450-torch-no-sm80": ("450.119.03", "11.0", [(0, "A100-SXM4-40GB", "8.0", 1404, 40537, "00000000:04:00.0")],
                               ["supports CUDA up to 11.0", "busy: 1404"],
                               ["torch (version unknown) (CUDA 10.2) has no kernels for SM 8.0"], []),
    "v100-535-torch211-cu128": ("535.183.01", "12.2",
                                [(0, "Tesla V100-FHHL-16GB", "7.0", 1332, 16384, "00000000:01:00.0")],
                                ["SM 7.0, dropped after CUDA 12.x", "busy: 1332"],
                                ["torch 2.11.0+cu128 (CUDA 12.8) has no kernels for SM 7.0",
                                 "newer than the driver's CUDA 12.2"], []),
    # second batch (same round): drivers before 410 print no CUDA column; an ambiguous truncated name
    "m40x2-390-container": ("390.59", "9.1", [(0, "Tesla M40 24GB", "5.2", 814, 22945, "00000000:02:00.0"),
                                              (1, "Tesla M40 24GB", "5.2", 558, 22945, "00000000:82:00.0")],
                            ["supports CUDA up to 9.1", "SM 5.2, dropped after CUDA 12.x"], [], []),
    "titan-384-trunc-container": ("384.111", "9.0",
                                  [(0, "GeForce GTX TIT...", None, 11637, 12207, "00000000:83:00.0")],
                                  ["supports CUDA up to 9.0", "busy: 11637"],
                                  ["unknown SM for GPU name 'GeForce GTX TIT...'"], []),
    "quadro-rtx4000-535-cut": ("535.129.03", "12.2",
                               [(0, "Quadro RTX 4000", "7.5", 1, 8192, "00000000:06:00.0"),
                                (1, "Quadro RTX 4000", "7.5", None, None, "00000000:07:00.0")],
                               ["supports CUDA up to 12.2"], ["GPU 1: memory use unknown (not in the output"], []),
    # third batch: other outputs than the table
    "mixed-titanv-5880ada-query": ("570.86.15", "12.8", [(0, "NVIDIA TITAN V", "7.0", None, None, None),
                                                         (1, "NVIDIA RTX 5880 Ada Generation", "8.9", None, None,
                                                          None)],
                                   ["supports CUDA up to 12.8", "GPU 0 NVIDIA TITAN V is SM 7.0, dropped"],
                                   ["GPU 0: memory use unknown (not among the fields"], []),
}


def fp_of(folder):
    return merge.fingerprint_from_raw(collect.read_capture(FIXTURES / folder))


@pytest.mark.parametrize("folder", sorted(CASES))
def test_blind_capture_facts_verdict_and_rules(folder):
    driver, dcuda, gpus, refuse, problems, rules = CASES[folder]
    fp = fp_of(folder)
    assert (fp["driver_version"], fp["driver_cuda_version"]) == (driver, dcuda)
    got = [(g["index"], g["name"], g["sm"], g["memory_used_mib"], g["memory_total_mib"], g["pci_bus_id"])
           for g in fp["gpus"]]
    assert got == gpus
    for g in fp["gpus"]:  # never a silent null
        for field in ("sm", "memory_used_mib", "memory_total_mib", "name", "pci_bus_id"):
            assert g[field] is not None or g["null_reasons"].get(field), (folder, g["index"], field)
    refusals = gate.gate(fp, LAYER_130, [{"instance": "main", "gpus": [0]}], host=folder)
    text = " | ".join(refusals)
    for frag in refuse:
        assert frag in text, (frag, text)
    if not refuse:
        assert refusals == []
    for frag in problems:
        assert any(frag in p for p in fp["problems"]), (frag, fp["problems"])
    inst = {"name": "main", "gpus": [0], "port": 30001, "algorithm": "DFLASH", "model_path": "/srv/m",
            "draft_model_path": "/srv/d"}
    plan = di_flags.plan_instance(inst, RULES, fp, PROBE, {}, {"path": "/opt/t"})
    assert [a["rule"] for a in plan["applied"]] == rules
    if rules == SM12_FALLBACK:
        assert plan["args"][plan["args"].index("--attention-backend") + 1] == "triton"


def test_compute_mode_gate():
    """Exclusive-process GPUs: free -> accepted (a warning says the mode); holding another context -> refused
    even with allow_busy (a context cannot be shared); Prohibited -> refused."""
    fp = fp_of("a100x2-580-eprocess")
    assert [g["compute_mode"] for g in fp["gpus"]] == ["Exclusive_Process"] * 2
    req = [{"instance": "main", "gpus": [0], "allow_busy": True}]
    assert "compute mode Exclusive_Process" in gate.check_requested_gpus(fp, req)[0]
    fp["gpus"][0]["memory_used_mib"] = 4  # an idle exclusive GPU
    assert gate.check_requested_gpus(fp, req) == []
    fp["gpus"][0]["compute_mode"] = "Prohibited"
    assert "compute mode Prohibited" in gate.check_requested_gpus(fp, req)[0]
    # the default mode is read too, and changes nothing
    (g,) = fp_of("l4-570-cloud")["gpus"]
    assert g["compute_mode"] == "Default" and "compute mode" not in (g["problem"] or "")


def test_compute_mode_from_xml_and_query_csv():
    xml = ("<?xml version=\"1.0\" ?><nvidia_smi_log><driver_version>580.95.05</driver_version>"
           "<cuda_version>13.0</cuda_version><gpu id=\"00000000:01:00.0\"><product_name>NVIDIA H100 80GB HBM3"
           "</product_name><uuid>GPU-1</uuid><compute_mode>Exclusive_Process</compute_mode></gpu></nvidia_smi_log>")
    assert parse.parse_smi_xml(xml)["gpus"][0]["compute_mode"] == "Exclusive_Process"
    csv = "index, name, compute_mode\n0, NVIDIA L4, Prohibited\n"
    assert parse.parse_query_csv(csv)[0]["compute_mode"] == "Prohibited"


@pytest.mark.parametrize(("name", "sm"), [
    ("GeForce GTX 105...", "6.1"), ("GeForce GTX 108...", "6.1"), ("NVIDIA GeForce RTX 409...", "8.9"),
    ("NVIDIA GeForce RTX 30...", "8.6"),
    ("NVIDIA RTX 5...", None),  # one digit: RTX 5000 Ada (8.9) or an RTX 50x0 (12.0)
    ("NVIDIA Foo 12...", None),
])
def test_truncated_model_numbers(name, sm):
    assert values.sm_from_name(name) == sm


def test_slice_note_leaves_full_cards_and_grace_alone():
    assert values._memory_slice_note("NVIDIA H100 80GB HBM3", 81559) is None
    assert values._memory_slice_note("NVIDIA GH200 480GB", 97871) is None  # Grace: the name counts CPU memory
    assert values._memory_slice_note("NVIDIA L4", 100) is None  # no size in the name
    assert "far below the 80 GB" in values._memory_slice_note("NVIDIA A100 80GB PCIe", 20096)


def test_driver_older_than_every_known_cuda_is_refused_without_question_marks():
    fp = fp_of("m40x2-390-container")
    fp["driver_version"], fp["driver_cuda_version"], fp["driver_cuda_source"] = "352.99", None, None
    fp["null_reasons"] = {"driver_cuda_version": "driver 352.99 is older than every CUDA release this tool knows"}
    (err, _sm) = gate.check_driver_compat(fp, LAYER_130, host="h")
    assert "?" not in err and "the CUDA version it supports is unknown: driver 352.99 is older" in err
    assert "need driver >= 580.65.06" in err


def test_query_csv_in_another_field_order_reads_compute_mode():
    fp = fp_of("mixed-titanv-5880ada-query")
    assert [g["compute_mode"] for g in fp["gpus"]] == ["Default", "Default"]
    assert fp["driver_cuda_source"] == "driver branch"


def test_proc_version_only():
    """A host where only /proc/driver/nvidia/version could be read."""
    fp = fp_of("rtx3080-555-proc-locale")  # open module, non-ASCII build date
    assert (fp["driver_version"], fp["driver_cuda_version"], fp["gpus"]) == ("555.58", "12.5", [])
    jetson = fp_of("jetson-orinnx-l4t35-proc")  # an L4T release where a driver version would be
    assert jetson["driver_version"] == "35.3.1" and jetson["driver_cuda_version"] is None
    assert "Jetson L4T release" in jetson["null_reasons"]["driver_cuda_version"]
    errs = gate.check_driver_compat(jetson, LAYER_130, host="orin")
    assert any("JetPack" in e and "need driver >=" not in e and "upgrade the driver" not in e for e in errs)
