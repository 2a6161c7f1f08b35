"""collect(): one host read end to end, with a real unit run by the runner backend (the lab stand-in serving
/health and /metrics), the release made by the release stage's own code, nothing written."""

from __future__ import annotations

import hashlib
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ansible.module_utils.dflash_service.runner import Runner
from ansible.module_utils.dflash_status.collect import collect
from status_host import ACTIVE, FakeUnits, deploy
from test_standin import STANDIN, free_port


def snapshot(*roots):
    """Every path under the roots with its content digest and mtime: what 'nothing written' compares."""
    out = {}
    for root in roots:
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                data = b""
                if os.path.isfile(p) and not os.path.islink(p):
                    data = Path(p).read_bytes()
                out[p] = (st.st_mode, st.st_mtime_ns, hashlib.sha256(data).hexdigest(),
                          os.readlink(p) if os.path.islink(p) else None)
    return out


@pytest.fixture
def served(tmp_path):
    """The release's instance served by the runner: its unit file runs the stand-in with the release's flags."""
    port = free_port()
    unit = (f"[Service]\nType=exec\nExecStart={sys.executable} {STANDIN} --model-path /dev/shm/Qwen3.6-27B "
            f"--host 127.0.0.1 --port {port} --speculative-algorithm DFLASH --speculative-draft-model-path "
            "/dev/shm/Qwen3.6-27B-DFlash --enable-metrics\nRestart=on-failure\n")
    h = deploy(tmp_path, port=port, unit_text=unit)
    runner = Runner(h["unit_dir"], str(tmp_path / "log"), str(tmp_path / "run"))
    runner.start(["dflash-main.service"])
    h["runner"] = runner
    yield h
    runner.stop(["dflash-main.service"])


def wait_healthy(base, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("not healthy")


def test_a_served_release_read_end_to_end_and_nothing_written(served):
    wait_healthy(f"http://127.0.0.1:{served['port']}")
    before = snapshot(served["prefix"], served["unit_dir"])
    out = collect(served["prefix"], served["runner"], served["unit_dir"], fingerprint=None)
    assert snapshot(served["prefix"], served["unit_dir"]) == before
    assert out["current"] == served["id"] and out["activation"] is None and out["problems"] == []
    rel = out["release"]
    assert rel["status"] == "healthy" and rel["sglang_version"] == "0.5.11" and rel["series"] == ["0001-x.patch"]
    assert rel["recorded"] == ["files", "fingerprint"]
    inst = out["instances"]["main"]
    assert inst["unit_state"]["ActiveState"] == "active" and inst["unit_state"]["ActiveEnterTimestampMonotonic"] > 0
    assert inst["health"] == 200 and inst["algorithm"] == "DFLASH" and inst["rules"] == ["sm120-attention-triton"]
    assert "sglang:spec_accept_length" in inst["metrics_text"] and inst["metrics_error"] is None
    assert inst["release_figures"] == {"accept_length": 4.571, "tokens_per_s": 500.0, "passed": True,
                                       "timing": "server"}
    assert {(d["kind"], d["state"]) for d in out["drift"]} == {("unit", "same"), ("env", "same"), ("tree", "same")}
    assert out["releases"] == [{"id": served["id"], "status": "healthy", "algorithms": {"main": "DFLASH"}}]
    disk = out["disk"]
    assert [r["name"] for r in disk["trees"]] == [os.path.basename(served["tree"]["path"])]
    assert disk["trees"][0]["used"] is True and disk["layers"][0]["used"] is True and disk["totals"]["trees"] > 0
    assert disk["free"] and disk["free"][0]["total_bytes"] > 0


def test_a_stopped_instance_and_no_release(tmp_path):
    h = deploy(tmp_path)
    out = collect(h["prefix"], FakeUnits(), h["unit_dir"], disk=False, health=lambda url: None,
                  metrics=lambda url: (None, "/metrics: [Errno 111] Connection refused"))
    inst = out["instances"]["main"]
    assert inst["unit_state"] == {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}
    assert inst["health"] is None and inst["metrics_error"].endswith("Connection refused") and "disk" not in out
    os.unlink(os.path.join(h["prefix"], "current"))
    none = collect(h["prefix"], FakeUnits({"dflash-main.service": ACTIVE}), h["unit_dir"], disk=False)
    assert none["current"] is None and none["release"] is None and none["instances"] == {}
