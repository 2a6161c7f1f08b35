"""Hosts without systemd (dflash_service_manager=runner): dflash_wait starts the rendered unit's command
through module_utils/dflash_service/runner.py, judges it like a unit and diagnoses its log file."""
import json
import pathlib
import socket
import sys

from ansible_play import run_play

ROOT = pathlib.Path(__file__).resolve().parents[3]
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_healthy_then_crash_diagnosed(tmp_path):
    ok_port, bad_port = free_port(), free_port()
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-ok.service").write_text(
        "[Service]\n"
        f'Environment="DFLASH_ARGS=--model-path /m --port {ok_port} --speculative-algorithm DFLASH '
        '--speculative-draft-model-path /d"\n'
        f"ExecStart={sys.executable} {STANDIN} $DFLASH_ARGS\n")
    (units / "dflash-bad.service").write_text(
        "[Service]\nEnvironment=DFLASH_STANDIN_FAULT=crash DFLASH_STANDIN_FAULT_LOG=port_in_use\n"
        f"ExecStart={sys.executable} {STANDIN} --model-path /m --port {bad_port}\n")
    common = {"service_manager": "runner", "unit_dir": str(units), "log_dir": str(tmp_path / "log"),
              "run_dir": str(tmp_path / "run"), "timeout": 60}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_wait": dict(common, instances=[{"name": "ok", "port": ok_port}], smoke=True), "register": "ok"},
        {"dflash_wait": dict(common, instances=[{"name": "bad", "port": bad_port}]), "register": "bad",
         "ignore_errors": True},
        {"dflash_service": {"name": ["dflash-ok.service"], "state": "stopped", "service_manager": "runner", "unit_dir": str(units),
                           "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"),
                                  "content": "{{ {'ok': ok, 'bad': bad} | to_json }}", "mode": "0644"}},
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["ok"]["verdict"] == "healthy"
    assert out["ok"]["smoke"]["ok"]["stand_in"].startswith("dflash-deploy lab stand-in")
    assert out["bad"]["failed"] and out["bad"]["verdict"] == "failed"
    diag = out["bad"]["instances"]["bad"]["diagnosis"]
    assert diag["cause"] == "port_in_use", diag
    assert not (tmp_path / "run" / "dflash-ok.service.pid").exists()
