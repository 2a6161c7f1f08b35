"""check_requested_gpus and the driver/CUDA gate, over the lab captures."""

from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import collect, gate, merge, report

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ct200():
    return merge.fingerprint_from_raw(collect.read_capture(ROOT / "lab/captures/ct200"))


@pytest.fixture(scope="module")
def ct129():
    return merge.fingerprint_from_raw(collect.read_capture(ROOT / "lab/captures/ct129"))


def test_free_gpu_passes(ct200):
    assert gate.check_requested_gpus(ct200, [{"instance": "dflash", "gpus": [1], "allow_busy": False}]) == []


def test_busy_gpu_names_instance_gpu_memory_and_process(ct200):
    errs = gate.check_requested_gpus(ct200, [{"instance": "ddtree", "gpus": [0, 1], "allow_busy": False}])
    assert len(errs) == 1
    e = errs[0]
    assert e.startswith("instance ddtree: GPU 0 ")
    assert "60627 of 97887 MiB used" in e
    assert "pid 2381466 /root/venv/bin/python3 (60616 MiB)" in e


def test_busy_gpu_allowed_when_asked(ct200):
    assert gate.check_requested_gpus(ct200, [{"instance": "x", "gpus": [0], "allow_busy": True}]) == []


def test_own_unit_process_is_not_foreign(ct200):
    import copy

    fp = copy.deepcopy(ct200)
    fp["gpus"][0]["processes"][0]["unit"] = "dflash-main.service"
    assert gate.check_requested_gpus(fp, [{"instance": "main", "gpus": [0], "allow_busy": False}]) == []
    errs = gate.check_requested_gpus(fp, [{"instance": "other", "gpus": [0], "allow_busy": False}])
    assert "[dflash-main.service]" in errs[0]


def test_missing_gpu(ct129):
    errs = gate.check_requested_gpus(ct129, [{"instance": "big", "gpus": [1, 2, 5], "allow_busy": False}])
    assert errs == ["instance big: GPU 2 is missing (host has GPUs 0-1)",
                    "instance big: GPU 5 is missing (host has GPUs 0-1)"]


def test_unhealthy_gpu(ct129):
    import copy

    fp = copy.deepcopy(ct129)
    fp["gpus"][1].update(healthy=False, problem="nvidia-smi reports ERR!")
    errs = gate.check_requested_gpus(fp, [{"instance": "a", "gpus": [1], "allow_busy": True}])
    assert errs == ["instance a: GPU 1 (NVIDIA RTX A6000) is unhealthy: nvidia-smi reports ERR!"]


def test_no_gpus_reason_is_carried():
    fp = merge.fingerprint_from_raw({})
    errs = gate.check_requested_gpus(fp, [{"instance": "a", "gpus": [0], "allow_busy": False}])
    assert errs[0].startswith("instance a: GPU 0 is missing (host has no usable GPUs (no nvidia-smi output")


# --------------------------------------------------------------------------- driver CUDA vs the layers' CUDA


def test_layer_cuda_declared_or_inferred():
    assert gate.layer_cuda({"name": "a", "cuda": "12.8"}) == "12.8"
    assert gate.layer_cuda({"name": "a", "requirements": ["torch==2.11.0+cu130", "numpy==2.2.6"]}) == "13.0"
    assert gate.layer_cuda({"name": "a", "index_url": "https://download.pytorch.org/whl/cu126",
                           "requirements": ["torch==2.9.1"]}) == "12.6"
    assert gate.layer_cuda({"name": "a", "requirements": ["sglang==0.5.11"]}) is None
    assert gate.layer_cuda({"name": "cu128", "existing_path": "/root/venv_cu128"}) is None


def test_min_driver_table():
    assert gate.min_driver_for("13.0") == "580.65.06"
    assert gate.min_driver_for("12.8") == "570.26"
    assert gate.min_driver_for("12.7") == "570.26"  # no 12.7 release: the next one up


def test_ct200_passes_with_cu128_and_cu130_layers(ct200):
    layers = [{"name": "base", "requirements": ["torch==2.11.0+cu128"]}, {"name": "serve", "cuda": "13.0"}]
    assert gate.check_driver_compat(ct200, layers, host="ct200") == []


def test_old_driver_refused_naming_host_gpu_and_both_versions(ct200):
    import copy

    fp = copy.deepcopy(ct200)
    fp["driver_version"], fp["driver_cuda_version"] = "570.124.06", "12.8"
    errs = gate.check_driver_compat(fp, [{"name": "serve", "cuda": "13.0"}], host="ct200")
    assert len(errs) == 1
    e = errs[0]
    assert e.startswith("ct200: GPU 0-7 NVIDIA RTX PRO 6000 Blackwell Server Edition (SM 12.0): ")
    assert "driver 570.124.06 supports CUDA up to 12.8" in e
    assert "layer 'serve' installs CUDA 13.0 wheels (need driver >= 580.65.06)" in e


def test_driver_below_published_minimum_without_smi_cuda(ct129):
    import copy

    fp = copy.deepcopy(ct129)
    fp["driver_version"], fp["driver_cuda_version"] = "565.57.01", None
    errs = gate.check_driver_compat(fp, [{"name": "t", "requirements": ["torch==2.8.0+cu128"]}], host="ct129")
    assert len(errs) == 1 and "need driver >= 570.26" in errs[0] and "565.57.01" in errs[0]


def test_minor_version_compat_opt_in(ct129):
    import copy

    fp = copy.deepcopy(ct129)
    fp["driver_version"], fp["driver_cuda_version"] = "550.54.15", "12.4"
    layers = [{"name": "t", "cuda": "12.8"}]
    assert gate.check_driver_compat(fp, layers, host="h")
    assert gate.check_driver_compat(fp, layers, host="h", allow_minor_version_compat=True) == []
    assert gate.check_driver_compat(fp, [{"name": "t", "cuda": "13.0"}], host="h", allow_minor_version_compat=True)


def test_sm_too_new_for_the_wheels(ct200):
    errs = gate.check_driver_compat(ct200, [{"name": "old", "requirements": ["torch==2.5.1+cu124"]}], host="ct200")
    assert errs == [("ct200: GPU 0 NVIDIA RTX PRO 6000 Blackwell Server Edition is SM 12.0, which needs CUDA >= 12.8, "
                    "but layer 'old' installs CUDA 12.4 wheels (driver 580.95.05, CUDA 13.0)")]


def test_sm_dropped_by_cuda13():
    p100 = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/p100-440-premig"))
    errs = gate.check_driver_compat(p100, [{"name": "serve", "cuda": "13.0"}], host="rosenberg")
    assert any("SM 6.0, dropped after CUDA 12.x" in e for e in errs)
    assert any("driver 440.33.01 supports CUDA up to 10.2" in e for e in errs)


def test_no_gpus_refused_when_layers_need_cuda():
    fp = merge.fingerprint_from_raw({"nvidia-smi.txt": "No devices were found\n"})
    errs = gate.gate(fp, [{"name": "serve", "cuda": "12.8"}], [], host="h")
    assert errs[0].startswith("h: no usable NVIDIA GPU (no NVIDIA devices were found)")


def test_gate_collects_everything_with_host_prefix(ct200):
    reqs = gate.requests_from_instances([{"name": "main", "gpus": [0], "port": 30001},
                                        {"name": "bad", "gpus": "0"}, "junk"])
    assert reqs == [{"instance": "main", "gpus": [0], "allow_busy": False}]
    errs = gate.gate(ct200, [{"name": "old", "cuda": "12.4"}], reqs, host="ct200")
    assert len(errs) == 2 and all(e.startswith("ct200: ") for e in errs)


def test_container_busy_gpu_without_process_is_busy():
    fp = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/h100-580-container-busy"))
    errs = gate.check_requested_gpus(fp, [{"instance": "x", "gpus": [0], "allow_busy": False}])
    assert errs and "74199 of 81559 MiB used with no listed process" in errs[0]


def test_unreachable_gpu_is_unhealthy_not_missing():
    fp = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/rtxpro6000-610-unreachable"))
    errs = gate.check_requested_gpus(fp, [{"instance": "x", "gpus": [1, 3], "allow_busy": False}])
    assert errs == [("instance x: GPU 1 (unknown model) is unhealthy: "
                    "Unable to determine the device handle: Unknown Error")]


# --------------------------------------------------------------------------- fleet report


def test_fleet_rows_and_renderings(ct129, ct200):
    fleet = {"ct129": ct129, "ct200": ct200, "gone": None}
    refusals = {"ct200": ["ct200: instance main: GPU 0 is busy"]}
    rows = {r["host"]: r for r in report.fleet_rows(fleet, refusals)}
    assert rows["ct129"]["gpus"] == "2x NVIDIA RTX A6000 (SM 8.6, ampere)"
    assert rows["ct129"]["verdict"] == "ok"
    assert rows["ct200"]["busy"] == "GPU 0: 60627 MiB, pid 2381466 /root/venv/bin/python3"
    assert rows["ct200"]["verdict"].startswith("REFUSED: ")
    assert rows["gone"]["verdict"].startswith("no fingerprint")
    md = report.fleet_markdown(fleet, refusals)
    assert "| ct200 | 8x NVIDIA RTX PRO 6000 Blackwell Server Edition (SM 12.0, blackwell) | 97887 MiB |" in md
    assert "- refusal: ct200: instance main: GPU 0 is busy" in md
    text = report.fleet_text(fleet, refusals)
    assert text.splitlines()[0].startswith("host ")
    assert "ct200: REFUSED: ct200: instance main: GPU 0 is busy" in text


def test_display_processes_do_not_make_a_gpu_busy():
    gpu = {"index": 0, "name": "NVIDIA GeForce RTX 4090", "memory_used_mib": 1300, "memory_total_mib": 24564,
           "healthy": True, "processes": [{"pid": 3924, "name": "/usr/lib/xorg/Xorg", "used_mib": 1250, "type": "G"}]}
    assert gate.gpu_busy_reason(gpu) is None
    gpu["processes"].append({"pid": 22976, "name": "python", "used_mib": 9170, "type": "C"})
    gpu["memory_used_mib"] = 10470
    assert "pid 22976 python (9170 MiB)" in gate.gpu_busy_reason(gpu)
