"""check_requested_gpus and the driver/CUDA gate, over the lab captures."""

from pathlib import Path

import dflash_fingerprint as fpm
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ct200():
    return fpm.fingerprint_from_raw(fpm.read_capture(ROOT / "lab/captures/ct200"))


@pytest.fixture(scope="module")
def ct129():
    return fpm.fingerprint_from_raw(fpm.read_capture(ROOT / "lab/captures/ct129"))


def test_free_gpu_passes(ct200):
    assert fpm.check_requested_gpus(ct200, [{"instance": "dflash", "gpus": [1], "allow_busy": False}]) == []


def test_busy_gpu_names_instance_gpu_memory_and_process(ct200):
    errs = fpm.check_requested_gpus(ct200, [{"instance": "ddtree", "gpus": [0, 1], "allow_busy": False}])
    assert len(errs) == 1
    e = errs[0]
    assert e.startswith("instance ddtree: GPU 0 ")
    assert "60627 of 97887 MiB used" in e
    assert "pid 2381466 /root/venv/bin/python3 (60616 MiB)" in e


def test_busy_gpu_allowed_when_asked(ct200):
    assert fpm.check_requested_gpus(ct200, [{"instance": "x", "gpus": [0], "allow_busy": True}]) == []


def test_own_unit_process_is_not_foreign(ct200):
    import copy

    fp = copy.deepcopy(ct200)
    fp["gpus"][0]["processes"][0]["unit"] = "dflash-main.service"
    assert fpm.check_requested_gpus(fp, [{"instance": "main", "gpus": [0], "allow_busy": False}]) == []
    errs = fpm.check_requested_gpus(fp, [{"instance": "other", "gpus": [0], "allow_busy": False}])
    assert "[dflash-main.service]" in errs[0]


def test_missing_gpu(ct129):
    errs = fpm.check_requested_gpus(ct129, [{"instance": "big", "gpus": [1, 2, 5], "allow_busy": False}])
    assert errs == ["instance big: GPU 2 is missing (host has GPUs 0-1)",
                    "instance big: GPU 5 is missing (host has GPUs 0-1)"]


def test_unhealthy_gpu(ct129):
    import copy

    fp = copy.deepcopy(ct129)
    fp["gpus"][1].update(healthy=False, problem="nvidia-smi reports ERR!")
    errs = fpm.check_requested_gpus(fp, [{"instance": "a", "gpus": [1], "allow_busy": True}])
    assert errs == ["instance a: GPU 1 (NVIDIA RTX A6000) is unhealthy: nvidia-smi reports ERR!"]


def test_no_gpus_reason_is_carried():
    fp = fpm.fingerprint_from_raw({})
    errs = fpm.check_requested_gpus(fp, [{"instance": "a", "gpus": [0], "allow_busy": False}])
    assert errs[0].startswith("instance a: GPU 0 is missing (host has no usable GPUs (no nvidia-smi output")
