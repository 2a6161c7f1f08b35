"""The real H200 capture (gpu-harness/capture_h200.sh, committed to tests/fixtures/captures/h200/).

Skipped only while that folder is absent."""

from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import collect, gate, merge

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "h200"

pytestmark = pytest.mark.skipif(not (H200 / "nvidia-smi-query.csv").is_file() and not (H200 / "nvidia-smi.txt").is_file(),
                                reason="H200 capture not committed yet (run gpu-harness/capture_h200.sh on the GPU machine)")


@pytest.fixture(scope="module")
def fp():
    return merge.fingerprint_from_raw(collect.read_capture(H200))


def test_h200_gpu(fp):
    assert fp["gpu_count"] == 1
    g = fp["gpus"][0]
    assert "H200" in g["name"]
    assert g["sm"] == "9.0"
    assert g["arch"] == "hopper"
    assert g["memory_total_mib"] == 143771
    assert g["healthy"] is True


def test_h200_driver_and_torch(fp):
    assert fp["driver_version"] == "580.159.04"
    assert fp["driver_cuda_version"] == "13.0"
    assert fp["torch"]["version"] == "2.11.0+cu130"
    assert fp["torch"]["cuda"] == "13.0"
    assert fp["torch"]["available"] is True


def test_h200_every_source_agrees(fp):
    raw = collect.read_capture(H200)
    # The plain table alone and the XML alone give the same GPU facts as the CSV.
    for only in ("nvidia-smi.txt", "nvidia-smi-q.xml"):
        if only in raw:
            sub = merge.fingerprint_from_raw({only: raw[only]})
            assert sub["gpus"][0]["sm"] == "9.0"
            assert sub["gpus"][0]["memory_total_mib"] == 143771
            assert sub["driver_version"] == "580.159.04"


def test_h200_gate_cu130_layer_passes(fp):
    assert gate.check_driver_compat(fp, [{"name": "serve", "cuda": "13.0"}], host="h200") == []


# A live capture of the same H200 while a foreign process (plain torch, no unit) held 4.6 GiB.
BUSY = Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "h200-busy-foreign"


def test_h200_busy_capture_lists_the_foreign_process():
    fp = merge.fingerprint_from_raw(collect.read_capture(BUSY))
    g = fp["gpus"][0]
    assert g["healthy"] is True and g["mig_mode"] == "disabled"
    assert g["memory_used_mib"] == 4623
    [p] = g["processes"]
    assert (p["pid"], p["used_mib"], p["type"], p["unit"]) == (475, 4614, "C", None)


def test_h200_busy_capture_refuses_the_gpu_unless_allowed():
    fp = merge.fingerprint_from_raw(collect.read_capture(BUSY))
    [err] = gate.check_requested_gpus(fp, [{"instance": "h200-dflash", "gpus": [0]}])
    assert err.startswith("instance h200-dflash: GPU 0 (NVIDIA H200)") and "475" in err, err
    assert gate.check_requested_gpus(fp, [{"instance": "h200-dflash", "gpus": [0], "allow_busy": True}]) == []
