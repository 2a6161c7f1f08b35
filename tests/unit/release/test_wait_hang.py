"""A start-up that hangs past the wait's timeout: the wait measures how long the log has been silent and
hands that, with the host's fingerprint, to the diagnosis (startup_hang in the stage the log stopped in)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from ansible.module_utils.dflash_release.wait import diagnose_unit
from ansible.module_utils.dflash_service.systemd import last_entry_at
from ansible_play import run_play

ROOT = Path(__file__).resolve().parents[3]
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"


def test_the_journals_last_entry_since_the_restart():
    out = "1764579302.123456 ct200 python3[4242]: NCCL INFO NET/Plugin: Using internal net plugin.\n"
    assert last_entry_at(out, 1764579300.0) == 1764579302.123456
    # no entry since the restart (or "-- No entries --"): silent since the restart
    assert last_entry_at("-- No entries --\n", 1764579300.0) == 1764579300.0


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_hang_past_the_timeout_is_diagnosed_with_its_stage_silence_and_host(tmp_path):
    port = _free_port()
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-main.service").write_text(
        f"[Service]\nEnvironment=DFLASH_STANDIN_FAULT=hang\nExecStart={sys.executable} {STANDIN} --model-path /m "
        f"--port {port}\n")
    fp = {"gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm": "12.0"},
                   {"index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm": "12.0"}],
          "topology": {"links": {"0-1": "SYS"}, "p2p": {"0-1": "NS"}, "nics": 0}}
    common = {"service_manager": "runner", "unit_dir": str(units), "log_dir": str(tmp_path / "log"),
              "run_dir": str(tmp_path / "run"), "timeout": 4, "progress_interval": 0, "host": "ct200",
              "fingerprint": fp}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_wait": dict(common, instances=[{"name": "main", "port": port}]), "register": "w",
         "ignore_errors": True},
        {"dflash_service": {"name": ["dflash-main.service"], "state": "stopped", "service_manager": "runner",
                            "unit_dir": str(units), "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ w | to_json }}", "mode": "0644"}},
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    diag = out["instances"]["main"]["diagnosis"]
    assert out["verdict"] == "timeout" and diag["cause"] == "startup_hang" and diag["stage"] == "nccl"
    assert 2 <= diag["silent_seconds"] < 30
    assert "the log has been silent for" in out["msg"] and "NCCL bootstraps over eth0" in out["msg"]
    assert "2 x NVIDIA RTX PRO 6000 Blackwell Server Edition (SM 12.0)" in diag["summary"]
    assert "no peer-to-peer between GPUs 0-1 (NS): NCCL_P2P_DISABLE=1" in diag["remedy"]


class _Journal:
    """A systemd-like backend whose journal lags (log_lags) and last logged at 1000.0."""

    log_lags = True

    def __init__(self):
        self.reads = 0

    def has_logs(self):
        return True

    def logs(self, unit, since=None, lines=5000):
        self.reads += 1
        return "Init torch distributed begin.\n"

    def log_source(self, unit):
        return f"journalctl -u {unit}"

    def last_log_at(self, unit, since):
        return 1000.0


def test_the_wait_hands_the_silence_and_the_fingerprint_to_the_diagnosis():
    seen = []

    def diagnose(text, source, fingerprint=None, silent_seconds=None):
        seen.append((source, fingerprint, silent_seconds))
        return {"cause": "unknown"}

    fp = {"gpus": [{"index": 0, "sm": "9.0"}]}
    j = _Journal()
    diag = diagnose_unit(j, "dflash-main.service", 900.0, diagnose, sleep=lambda s: None, fingerprint=fp, hung=True,
                         clock=lambda: 1100.0)
    # a hang is read once (its silence is the point), not again while journald catches up
    assert j.reads == 1 and seen == [("journalctl -u dflash-main.service", fp, 100.0)]
    assert diag["journal_tail"] == ["Init torch distributed begin."]
    seen.clear()
    diagnose_unit(j, "dflash-main.service", 900.0, diagnose, sleep=lambda s: None)
    assert j.reads == 6 and seen == [("journalctl -u dflash-main.service", None, None)] * 5
