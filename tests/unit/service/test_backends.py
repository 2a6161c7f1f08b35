"""The service interface (module_utils/dflash_service/): systemd's commands as they are run, and the runner's
units run for real (a process in its own session, its pidfile and log)."""

import os
import sys
import time

import pytest
from ansible.module_utils.dflash_service.backend import backend
from ansible.module_utils.dflash_service.runner import Runner
from ansible.module_utils.dflash_service.systemd import Systemd, journal_argv


def test_systemd_backend_commands():
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[1] == "show":
            return 0, "LoadState=loaded\nActiveState=failed\nNRestarts=3\nExecMainStatus=1\n", ""
        return 0, "active\n" if argv[1] == "is-active" else "disabled\n", ""

    s = Systemd(run, no_block=True)
    assert s.is_active("u") and not s.is_enabled("u")
    s.stop(["u"])
    s.stop([])
    assert calls[-1] == ["systemctl", "stop", "--no-block", "--", "u"]
    assert s.restart(["u", "v"]) == {"rc": 0, "stderr": ""}
    # a fresh start: the failed state and the start-rate limit cleared first
    assert calls[-2:] == [["systemctl", "reset-failed", "--", "u", "v"], ["systemctl", "restart", "--", "u", "v"]]
    assert s.state("u") == {"LoadState": "loaded", "ActiveState": "failed", "NRestarts": 3, "ExecMainStatus": 1}
    s.logs("u", since=1700000000.9, lines=200)
    assert calls[-1] == journal_argv("u", 1700000000.9, 200) == [
        "journalctl", "-u", "u", "--since", "@1700000000", "--no-pager", "-o", "cat", "-n", "200"]
    s.logs("u")
    assert "--since" not in calls[-1]


# `systemctl show -p ...,ActiveEnterTimestamp,ActiveEnterTimestampMonotonic` on systemd 252 (Debian 12): an active
# unit, and one never started (both timestamps empty / 0)
SHOW_ACTIVE = """LoadState=loaded
ActiveState=active
SubState=running
Result=success
NRestarts=0
ExecMainPID=812
ExecMainStatus=0
ExecMainCode=0
ActiveEnterTimestamp=Sun 2026-12-06 17:02:11 UTC
ActiveEnterTimestampMonotonic=86403521977
"""


def test_systemd_state_says_when_the_unit_became_active():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, SHOW_ACTIVE, ""

    st = Systemd(run).state("u")
    assert calls[0][:3] == ["systemctl", "show", "-p"]
    assert "ActiveEnterTimestamp" in calls[0][3].split(",") and "ActiveEnterTimestampMonotonic" in calls[0][3].split(",")
    assert st["ActiveEnterTimestamp"] == "Sun 2026-12-06 17:02:11 UTC"
    assert st["ActiveEnterTimestampMonotonic"] == 86403521977 and st["NRestarts"] == 0
    never = Systemd(lambda argv: (0, "ActiveState=inactive\nActiveEnterTimestamp=\nActiveEnterTimestampMonotonic=0\n",
                                  "")).state("u")
    assert never == {"ActiveState": "inactive", "ActiveEnterTimestamp": "", "ActiveEnterTimestampMonotonic": 0}


def test_systemd_state_when_systemctl_fails_and_no_journalctl():
    s = Systemd(lambda argv: (1, "", "Failed to connect to bus"), journalctl=None)
    assert s.state("u") == {"LoadState": "error", "error": "Failed to connect to bus"}
    assert s.logs("u") == "" and not s.has_logs()


def test_runner_backend_runs_a_unit(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-a.service").write_text(
        "[Service]\nExecStart=" + sys.executable + " -c \"import time; print('fired' + ' up', flush=True); time.sleep(60)\"\n")
    r = backend("runner", unit_dir=str(units), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"))
    assert isinstance(r, Runner) and r.name == "runner" and r.has_logs() and not r.log_lags
    assert r.state("dflash-b.service") == {"LoadState": "not-found"}
    try:
        assert r.start(["dflash-a.service"]) == {"rc": 0, "stderr": "", "backend": "runner"}
        pid = r.state("dflash-a.service")["ExecMainPID"]
        assert r.start(["dflash-a.service"])["rc"] == 0  # running: started once
        assert r.state("dflash-a.service")["ExecMainPID"] == pid
        assert r.is_active("dflash-a.service") and not r.is_active("dflash-b.service")
        r.reload()
        r.enable(["dflash-a.service"])
        assert not r.is_enabled("dflash-a.service")
        deadline = time.time() + 10
        while "fired up" not in r.logs("dflash-a.service") and time.time() < deadline:
            time.sleep(0.05)
        log = r.logs("dflash-a.service", since=0)
        assert log.startswith("-- dflash-runner: starting dflash-a.service") and log.rstrip().endswith("\nfired up")
        assert r.log_source("dflash-a.service") == str(tmp_path / "logs" / "dflash-a.service.log")
        # when it became active: two reads agree exactly, a restart changes it (playbooks/status.yml compares them)
        first = r.state("dflash-a.service")
        assert first["ActiveEnterTimestampMonotonic"] > 0 and first["ActiveEnterTimestamp"][:3].isalpha()
        assert r.state("dflash-a.service")["ActiveEnterTimestampMonotonic"] == first["ActiveEnterTimestampMonotonic"]
        time.sleep(0.05)
        out = r.restart(["dflash-a.service"])
        assert out["rc"] == 0 and r.state("dflash-a.service")["ExecMainPID"] != pid
        assert r.state("dflash-a.service")["ActiveEnterTimestampMonotonic"] > first["ActiveEnterTimestampMonotonic"]
    finally:
        r.stop(["dflash-a.service"])
    assert not r.is_active("dflash-a.service")
    assert r.state("dflash-a.service")["ActiveState"] == "inactive"


def test_a_unit_that_cannot_start_is_said():
    r = Runner("/nonexistent-units", "/tmp", "/tmp")
    out = r.restart(["dflash-x.service"])
    assert out["rc"] == 1 and out["stderr"].startswith("dflash-x.service: ")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="must be one of systemd, runner"):
        backend("upstart")


def test_when_a_unit_last_logged():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "1764579302.123456 ct200 python3[4242]: NCCL INFO NET/Plugin: Using internal net plugin.\n", ""

    assert Systemd(run).last_log_at("u", 1764579300.7) == 1764579302.123456
    assert calls == [["journalctl", "-u", "u", "--since", "@1764579300", "--no-pager", "-o", "short-unix", "-n", "1"]]
    # nothing logged since (journalctl's "-- No entries --"), or no journalctl: silent since `since`
    assert Systemd(lambda argv: (0, "-- No entries --\n", "")).last_log_at("u", 5.0) == 5.0
    assert Systemd(run, journalctl=None).last_log_at("u", 5.0) == 5.0


def test_when_a_runner_unit_last_logged(tmp_path):
    r = Runner(str(tmp_path), str(tmp_path), str(tmp_path))
    assert r.last_log_at("dflash-a.service", 100.0) == 100.0  # no log yet
    log = tmp_path / "dflash-a.service.log"
    log.write_text("Load weight begin\n")
    os.utime(log, (1000.0, 1000.0))
    assert r.last_log_at("dflash-a.service", 100.0) == 1000.0
    assert r.last_log_at("dflash-a.service", 2000.0) == 2000.0  # written before `since`: silent since `since`
