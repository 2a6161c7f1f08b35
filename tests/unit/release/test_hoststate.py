"""Recovery from the host's state (module_utils/dflash_release/hoststate.py): current's verdict, the release each
instance's process runs (current's history and the process's start time, its command line), a manifest that
cannot be read. Real files in tmp_path: the prefix, and a /proc of the processes (stat, cmdline, uptime)."""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_release import hoststate as hs
from ansible.module_utils.dflash_release import journal

R1, R2 = "20260101T000000-aaaaaaaa", "20260102T000000-bbbbbbbb"
TICK = os.sysconf("SC_CLK_TCK")


class Units:
    """A service backend that answers ``state`` (the only call inspect makes)."""

    def __init__(self, pids):
        self.pids = pids

    def state(self, unit):
        pid = self.pids.get(unit)
        return {"ActiveState": "active", "ExecMainPID": pid} if pid else {"ActiveState": "inactive", "ExecMainPID": 0}


def release(prefix, rid, digests, status=None, args=None):
    d = prefix / "releases" / rid
    d.mkdir(parents=True)
    inst = {n: {"unit": f"dflash-{n}.service", "digest": dg, "args": (args or {}).get(n, ["--port", str(30000 + i)])}
            for i, (n, dg) in enumerate(sorted(digests.items()))}
    (d / "manifest.json").write_text(json.dumps({"id": rid, "instances": inst}))
    if status:
        (d / "status.json").write_text(json.dumps({"status": status, "at": "2026-01-02T00:00:00Z"}))


def proc(tmp_path, now, processes, uptime=1000.0):
    """A /proc where the kernel booted at now - uptime; processes: {pid: (started epoch, argv)}."""
    root = tmp_path / "proc"
    root.mkdir(parents=True, exist_ok=True)
    (root / "uptime").write_text(f"{uptime:.2f} 1.00\n")
    boot = now - uptime
    for pid, (started, argv) in processes.items():
        (root / str(pid)).mkdir()
        ticks = round((started - boot) * TICK)
        fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 10
        (root / str(pid) / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return str(root)


def argv(*flags):
    return ["/opt/dflash/current/venv/bin/python", "/opt/dflash/libexec/dflash-launch", "-m", "sglang.launch_server",
            *flags]


def host(tmp_path):
    prefix = tmp_path / "opt"
    release(prefix, R1, {"keep": "k1", "new": "n1"}, "healthy")
    return prefix


def test_history_records_every_move_of_current(tmp_path):
    prefix = host(tmp_path)
    release(prefix, R2, {"keep": "k1", "new": "n2"})
    journal.point_current(str(prefix), R1)
    journal.point_current(str(prefix), R2, by="switch")
    journal.point_current(str(prefix), R1, by="boot-guard")
    hist = hs.read_history(str(prefix))
    assert [(r["from"], r["to"], r["by"]) for r in hist] == [(None, R1, "switch"), (R1, R2, "switch"),
                                                            (R2, R1, "boot-guard")]
    t1, t2 = hist[0]["at"], hist[1]["at"]
    assert hs.release_at(hist, t1 - 5) == (None, False)  # before this host recorded anything
    assert hs.release_at(hist, (t1 + t2) / 2) == (R1, True)
    assert hs.release_at(hist, hist[-1]["at"] + 1) == (R1, True)


def test_a_current_without_verdict_is_restarted_and_tested_whatever_serves(tmp_path):
    prefix = host(tmp_path)
    release(prefix, R2, {"keep": "k1", "new": "n2"})  # no status.json: never smoke-tested
    journal.record_switch(str(prefix), None, R1, "switch", now=100.0)
    journal.record_switch(str(prefix), R1, R2, "switch", now=500.0)
    os.symlink(f"releases/{R2}", prefix / "current")
    # keep's process predates the switch (R1's content for it is R2's); new is not running
    p = proc(tmp_path, 900.0, {11: (200.0, argv("--port", "30000"))})
    out = hs.inspect(str(prefix), Units({"dflash-keep.service": 11}), proc=p, now=900.0)
    assert out["untested"] and out["decision"] == "smoke" and out["smoke"] == ["keep", "new"]
    assert out["instances"]["keep"]["runs"] == "current" and out["instances"]["new"]["runs"] == "stopped"
    assert out["lines"][0].startswith(f"current release {R2} was never smoke-tested (no verdict in its status.json")


def test_a_process_started_before_current_moved_runs_the_old_release(tmp_path):
    prefix = host(tmp_path)
    release(prefix, R2, {"keep": "k1", "new": "n2"}, "healthy")
    journal.record_switch(str(prefix), None, R1, "switch", now=100.0)
    journal.record_switch(str(prefix), R1, R2, "switch", now=500.0)
    os.symlink(f"releases/{R2}", prefix / "current")
    p = proc(tmp_path, 900.0, {11: (200.0, argv("--port", "30000")), 12: (200.0, argv("--port", "30001"))})
    out = hs.inspect(str(prefix), Units({"dflash-keep.service": 11, "dflash-new.service": 12}), proc=p, now=900.0)
    assert out["verdict"] == "healthy" and not out["untested"]
    assert out["instances"]["keep"]["runs"] == "current"  # same digest in both: not restarted on purpose
    new = out["instances"]["new"]
    assert new["runs"] == "other" and new["release"] == R1 and out["other"] == ["new"]
    assert new["why"] == (f"new: its process (pid 12, started 1970-01-01T00:03:20Z) runs release {R1}, not current "
                          f"{R2} (current moved to it at 1970-01-01T00:08:20Z, by switch): venv, tree or env file differ")
    assert out["decision"] == "smoke" and out["smoke"] == ["new"]
    # restarted after the switch: it runs current
    p2 = proc(tmp_path / "later", 900.0, {12: (600.0, argv("--port", "30001"))})
    out2 = hs.inspect(str(prefix), Units({"dflash-new.service": 12}), proc=p2, now=900.0)
    assert out2["instances"]["new"]["runs"] == "current" and out2["decision"] == "none"


def test_a_process_with_other_flags_and_one_of_unknown_origin(tmp_path):
    prefix = host(tmp_path)
    os.symlink(f"releases/{R1}", prefix / "current")
    # no history at all (a host deployed before it was kept): unknown, left alone and said
    p = proc(tmp_path, 900.0, {11: (200.0, argv("--port", "30000")), 12: (200.0, argv("--port", "39999"))})
    out = hs.inspect(str(prefix), Units({"dflash-keep.service": 11, "dflash-new.service": 12}), proc=p, now=900.0)
    assert out["instances"]["keep"]["runs"] == "unknown"
    assert out["instances"]["new"]["runs"] == "other"
    assert "runs other flags than release" in out["instances"]["new"]["why"] and "--port 39999" in out["instances"]["new"]["why"]
    assert out["smoke"] == ["new"]
    assert any(line.endswith("before this host recorded which release was current (left as it is)") for line in out["lines"])


def test_a_truncated_manifest_of_current_is_said(tmp_path):
    prefix = host(tmp_path)
    os.symlink(f"releases/{R1}", prefix / "current")
    path = prefix / "releases" / R1 / "manifest.json"
    path.write_text(path.read_text()[:40])
    out = hs.inspect(str(prefix), Units({}), proc=proc(tmp_path, 900.0, {}), now=900.0)
    assert out["decision"] == "none"
    assert out["manifest_problem"].startswith(f"{path} is corrupt or truncated (40 bytes, not JSON")
    assert out["lines"][0].endswith("the deploy makes a new release from the inventory and replaces it")


def test_nothing_to_say_on_a_host_in_order_or_never_deployed(tmp_path):
    assert hs.inspect(str(tmp_path / "none"), Units({}))["decision"] == "none"
    prefix = host(tmp_path)
    journal.point_current(str(prefix), R1)
    started = hs.read_history(str(prefix))[0]["at"] + 1
    p = proc(tmp_path, started + 10, {11: (started, argv("--port", "30000")), 12: (started, argv("--port", "30001"))})
    out = hs.inspect(str(prefix), Units({"dflash-keep.service": 11, "dflash-new.service": 12}), proc=p, now=started + 10)
    assert out["decision"] == "none" and out["lines"] == [] and out["verdict"] == "healthy"
