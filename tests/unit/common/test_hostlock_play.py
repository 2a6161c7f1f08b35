"""The host lock through real ansible-playbook runs on localhost (action_plugins/dflash_lock.py + library/dflash_lock.py):
who the run is, the bounded wait naming the holder, a gone run of this controller taken over, and two runs
started together of which exactly one gets the host."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import time

from ansible.module_utils.dflash_common import hostlock as hl
from ansible_play import ROOT, run_play


def lock_task(prefix, **kw):
    return {"dflash_lock": dict({"action": "acquire", "prefix": str(prefix), "purpose": "deploy"}, **kw),
            "register": "l"}


def show(path):
    return {"copy": {"content": "{{ l | to_json }}", "dest": str(path)}}


def test_take_keep_and_release(tmp_path):
    prefix = tmp_path / "opt"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        lock_task(prefix), show(tmp_path / "first.json"),
        {"copy": {"content": "{{ lookup('file', '" + str(prefix / "lock") + "') }}", "dest": str(tmp_path / "rec.json")}},
        lock_task(prefix), show(tmp_path / "again.json"),
        {"dflash_lock": {"action": "release", "prefix": str(prefix)}, "register": "l"}, show(tmp_path / "rel.json"),
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    first, again = (json.loads((tmp_path / f).read_text()) for f in ("first.json", "again.json"))
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert first["acquired"] and not first["reentered"] and again["reentered"]
    # one run, one id (every task, every play of it): derived from the controller and its ansible-playbook process
    assert first["run_id"] == again["run_id"] == rec["run_id"] and len(rec["run_id"]) == 12
    assert rec["playbook"] == "pb.yml" and rec["purpose"] == "deploy" and rec["host"] == "localhost"
    assert rec["pid"] != 0 and rec["pid_start"] and rec["controller_id"]
    assert json.loads((tmp_path / "rel.json").read_text())["released"]
    assert not (prefix / "lock").exists()


def test_a_held_host_is_waited_for_then_refused_naming_the_holder(tmp_path):
    other = {"run_id": "0123456789ab", "controller": "laptop-b", "controller_id": "another-machine", "user": "bob",
             "pid": 4242, "playbook": "deploy.yml", "play": "Roll out", "purpose": "deploy", "host": "localhost"}
    hl.acquire(str(tmp_path), other, 1800)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [lock_task(tmp_path, wait=2, poll=0.5)]}]
    t0 = time.monotonic()
    r = run_play(play, tmp_path)
    assert r.returncode != 0
    assert time.monotonic() - t0 >= 2
    assert "localhost: waiting for the host lock held by run 0123456789ab of bob@laptop-b (pid 4242" in r.stdout
    assert "the host is locked by run 0123456789ab of bob@laptop-b (pid 4242, deploy.yml play 'Roll out'" in r.stdout
    assert "-e dflash_lock_takeover=0123456789ab" in r.stdout
    assert json.loads((tmp_path / "lock").read_text())["run_id"] == "0123456789ab"  # left as it was


def test_a_gone_run_of_this_controller_is_taken_over_at_once_and_named(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    machine = (pathlib.Path("/etc/machine-id").read_text().strip() if pathlib.Path("/etc/machine-id").exists()
               else None)
    boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    dead = {"run_id": "deadbeef0001", "controller": socket.gethostname(), "controller_id": machine or socket.gethostname(),
            "controller_boot": boot, "user": "carol", "pid": gone.pid, "pid_start": "1", "playbook": "deploy.yml",
            "purpose": "deploy"}
    hl.acquire(str(tmp_path), dead, 1800)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [lock_task(tmp_path), show(tmp_path / "o.json")]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["took_over"]["holder"]["run_id"] == "deadbeef0001"
    assert out["took_over"]["why"] == f"stale: its ansible-playbook process {gone.pid} on {socket.gethostname()} is gone"
    assert "took over the host lock of run deadbeef0001 of carol@" in " ".join(r.stdout.split() + r.stderr.split())


def test_two_runs_started_together_one_gets_the_host(tmp_path):
    prefix = tmp_path / "opt"
    procs = []
    for i in (1, 2):
        d = tmp_path / f"run{i}"
        d.mkdir()
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            lock_task(prefix), show(d / "o.json"),
            {"ansible.builtin.pause": {"seconds": 4}},
            {"dflash_lock": {"action": "release", "prefix": str(prefix)}}]}]
        (d / "pb.yml").write_text(json.dumps(play))
        procs.append(subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable}", str(d / "pb.yml")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outs
    won = codes.index(0)
    winner = json.loads((tmp_path / f"run{won + 1}" / "o.json").read_text())
    loser = outs[1 - won]
    assert f"the host is locked by run {winner['run_id']} of " in loser
    assert f"(pid {winner['holder']['pid']}, pb.yml" in loser
    assert not (prefix / "lock").exists()  # the winner let go of it


def test_read_names_the_holder_and_a_stale_lock_without_taking_it(tmp_path):
    # a read-only play (status) reads the lock: the holder in a waiting run's words, its staleness, nothing written
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_lock": {"action": "read", "prefix": str(tmp_path / "never")}, "register": "l"},
        show(tmp_path / "free.json"),
        {"dflash_lock": {"action": "read", "prefix": str(tmp_path)}, "register": "l"}, show(tmp_path / "held.json"),
        {"dflash_lock": {"action": "read", "prefix": str(tmp_path), "stale_after": 60}, "register": "l"},
        show(tmp_path / "stale.json")]}]
    other = {"run_id": "0123456789ab", "controller": "laptop-b", "controller_id": "another-machine", "user": "bob",
             "pid": 4242, "playbook": "deploy.yml", "purpose": "deploy", "host": "localhost"}
    hl.acquire(str(tmp_path), other, 1800, now=time.time() - 600)
    before = (tmp_path / "lock").read_text()
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    free, held, stale = (json.loads((tmp_path / f).read_text()) for f in ("free.json", "held.json", "stale.json"))
    assert free["holder"] is None and free["msg"] == "localhost: host lock: free"
    assert not (tmp_path / "never").exists()
    assert held["msg"].startswith("localhost: host lock held by run 0123456789ab of bob@laptop-b (pid 4242, deploy.yml")
    assert held["stale"] is None  # 600 s without a heartbeat is within the default 1800 s
    assert stale["stale"].startswith("no heartbeat for 6") and "; stale: no heartbeat for" in stale["msg"]
    assert (tmp_path / "lock").read_text() == before  # read, never taken nor refreshed
