"""gpu-harness/stop_all.sh and stop_servers.py: on its own, the script stops every server the runner or the
harness started (real process groups here, a stand-in nvidia-smi) and its exit status says whether the GPU
is free; sourced, stop_servers/stop_all behave as e2e.sh, bench_matrix.sh and fleet.sh use them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "gpu-harness"
sys.path.insert(0, str(HARNESS))
import stop_servers as S


def test_compute_apps_rows():
    text = "1234, /opt/torch/.venv/bin/python3, 72110\n\n5678, python, [N/A]\n"
    assert S.parse_compute_apps(text) == [{"pid": 1234, "name": "/opt/torch/.venv/bin/python3", "used_mib": 72110},
                                          {"pid": 5678, "name": "python", "used_mib": None}]
    assert S.parse_compute_apps("") == []
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        S.parse_compute_apps("No running processes found, x\n")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Run and registry folders, a stand-in nvidia-smi printing $FAKE_APPS, and every group started here ended
    after the test (by its id)."""
    run, reg = tmp_path / "run", tmp_path / "registry"
    run.mkdir()
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\nprintf "%s" "$FAKE_APPS"\n')
    smi.chmod(0o755)
    env = dict(os.environ, DFLASH_RUN_DIR=str(run), GPU_HARNESS_RUN=str(reg), NVIDIA_SMI=str(smi), FAKE_APPS="")
    for k in ("DFLASH_RUN_DIR", "GPU_HARNESS_RUN", "NVIDIA_SMI"):
        monkeypatch.setenv(k, env[k])
    started = []

    def start(cmd="sleep 300"):
        p = subprocess.Popen(["bash", "-c", cmd], start_new_session=True)
        started.append(p)
        time.sleep(0.1)  # the trap is set before any signal comes
        return p

    yield run, reg, env, start
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def sh(args, env, timeout=60):
    return subprocess.run(args, check=False, env=env, capture_output=True, text=True, timeout=timeout)


def gone(p, within=5.0):
    end = time.time() + within
    while time.time() < end:
        if p.poll() is not None:
            return True
        time.sleep(0.05)
    return False


def test_on_its_own_it_stops_runner_units_and_harness_servers(machine):
    run, reg, env, start = machine
    unit = start()
    (run / "dflash-main.service.pid").write_text(str(unit.pid))  # as the runner backend writes it
    server = start()
    stubborn = start("trap '' TERM; while :; do sleep 0.1; done")
    assert S.register(server.pid, "ddtree-hybrid-t31", str(reg)) and S.register(stubborn.pid, "e2e-x", str(reg))
    dead = start("true")
    dead.wait()
    S.register(dead.pid, "smoke-old", str(reg))
    r = sh(["bash", str(HARNESS / "stop_all.sh"), "--grace", "1", "--settle", "0"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert gone(unit) and gone(server) and gone(stubborn)
    assert "dflash-main.service: stopped" in r.stdout and "ddtree-hybrid-t31: stopped" in r.stdout
    assert "e2e-x: still running 1 s after TERM: KILL" in r.stdout
    assert "smoke-old: not running" in r.stdout and "the GPU runs no process" in r.stdout
    assert list(run.iterdir()) == [] and list(reg.iterdir()) == []


def test_something_left_on_the_gpu_is_named_and_the_status_says_so(machine):
    _run, _reg, env, start = machine
    foreign = start()  # on the GPU, but neither the runner's nor the harness's: reported, not killed
    env["FAKE_APPS"] = f"{foreign.pid}, python3, 4700\n"
    r = sh(["bash", str(HARNESS / "stop_all.sh"), "--settle", "0"], env)
    assert r.returncode == 1
    assert f"LEFT ON THE GPU: pid {foreign.pid} python3 (4700 MiB)" in r.stdout
    assert foreign.poll() is None


def test_a_recycled_id_is_not_signalled(machine):
    _run, reg, _env, start = machine
    other = start()
    path = S.register(other.pid, "ddtree-dense-t15", str(reg))
    Path(path).write_text(f"{other.pid} 1\n")  # registered by a process that started at tick 1, long gone
    assert S.main(["--grace", "1", "--no-gpu-check"]) == 0
    assert other.poll() is None and not Path(path).exists()


def test_sourced_stop_servers_skips_a_glob_and_keep_leaves_all(machine):
    run, _reg, env, start = machine
    fleet, main = start(), start()
    (run / "dflash-fleet-a.service.pid").write_text(str(fleet.pid))
    (run / "dflash-main.service.pid").write_text(str(main.pid))
    script = f'say() {{ echo "said: $*"; }}; . {HARNESS}/stop_all.sh; '
    r = sh(["bash", "-c", script + "KEEP=1 stop_all; echo rc=$?"], env)
    assert "said: KEEP=1: 2 server(s) left running" in r.stdout and "rc=0" in r.stdout
    assert fleet.poll() is None and main.poll() is None
    r = sh(["bash", "-c", script + "stop_servers 'dflash-fleet-*'"], env)
    assert "said: [stop_servers] dflash-main.service: stopped" in r.stdout
    assert gone(main) and fleet.poll() is None
    env["FAKE_APPS"] = "999999, python3, 10\n"
    r = sh(["bash", "-c", script + "stop_all --settle 0; echo rc=$?"], {**env, "PY": ""})
    assert gone(fleet) and "rc=1" in r.stdout
    assert "said: WARNING: the GPU is not free at the end of this call (stop_servers rc=1)" in r.stdout
