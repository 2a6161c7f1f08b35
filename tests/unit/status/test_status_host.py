"""The host now against the fingerprint its release was made for; processes of others on the release's GPUs."""

from __future__ import annotations

import copy
import os

from ansible.module_utils.dflash_release.manifest import EXTRA_KEYS
from ansible.module_utils.dflash_release.store import read_json
from ansible.module_utils.dflash_status.host import busy_processes, compare, release_gpus
from status_host import FP


def manifest_of(h):
    return read_json(os.path.join(h["release_dir"], "manifest.json"))


def test_the_same_host_with_its_own_servers_busy_is_the_same(host):
    now = copy.deepcopy(FP)
    now["gpus"][1]["memory_used_mib"] = 80000
    now["gpus"][1]["processes"] = [{"pid": 812, "name": "python3", "used_mib": 80000, "unit": "dflash-main.service"}]
    out = compare(manifest_of(host), now)
    assert out["same"] is True and out["changes"] == [] and out["busy"] == [] and out["gpus"] == [1]


def test_a_new_driver_and_a_missing_gpu_are_named(host):
    now = copy.deepcopy(FP)
    now["driver_version"] = "590.44.01"
    now["driver_cuda_version"] = "13.1"
    now["gpus"] = now["gpus"][:1]
    now["gpu_count"] = 1
    out = compare(manifest_of(host), now)
    assert out["same"] is False
    assert out["changes"] == ["driver_cuda_version: 13.0 -> 13.1", "driver_version: 580.95.05 -> 590.44.01",
                              "gpu_count: 2 -> 1", "gpus: 2 items -> 1 items"]


def test_processes_of_others_on_the_release_gpus(host):
    now = copy.deepcopy(FP)
    now["gpus"][0]["processes"] = [{"pid": 7, "name": "train.py", "used_mib": 9000, "unit": None}]
    now["gpus"][1]["processes"] = [{"pid": 9, "name": "python3", "used_mib": 4000, "unit": "ddtree-wrapper.service"},
                                   {"pid": 812, "name": "python3", "used_mib": 80000, "unit": "dflash-main.service"}]
    out = compare(manifest_of(host), now)
    # GPU 0 is not the release's (CUDA_VISIBLE_DEVICES=1): its trainer is none of status's business
    assert out["busy"] == [{"gpu": 1, "pid": 9, "name": "python3", "used_mib": 4000, "unit": "ddtree-wrapper.service"}]
    assert busy_processes(now) == [{"gpu": 0, "pid": 7, "name": "train.py", "used_mib": 9000, "unit": None},
                                   out["busy"][0]]
    assert release_gpus({"instances": {"a": {"env": {"CUDA_VISIBLE_DEVICES": "GPU-1"}}}}) is None


def test_a_release_with_only_the_digest(host):
    m = {k: v for k, v in manifest_of(host).items() if k not in EXTRA_KEYS}
    assert compare(m, FP)["same"] is True
    now = dict(FP, driver_version="590.44.01")
    out = compare(m, now)
    assert out["same"] is False and out["changes"] == [] and "recorded only the digest" in out["note"]
    assert compare(m, None) == {"checked": False, "same": None, "changes": [], "busy": [], "recorded": False,
                                "note": "no fingerprint was taken now"}
