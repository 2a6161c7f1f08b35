"""playbooks/status.yml for real (ansible-playbook on this machine as the host, the runner as its service manager,
the fingerprint replayed from the ct200 capture): the table, the JSON, the exit code, check mode, nothing
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible.module_utils.dflash_fingerprint.collect import read_capture
from ansible.module_utils.dflash_fingerprint.merge import fingerprint_from_raw
from ansible.module_utils.dflash_release.manifest import fingerprint_digest, recorded_fingerprint
from status_host import ROOT_DIR, deploy
from test_status_collect import snapshot

CAPTURE = ROOT_DIR / "lab" / "captures" / "ct200"


def run(tmp_path, h, *extra, playbook="status.yml"):
    inv = {"all": {"children": {"dflash_hosts": {"hosts": {"ct200": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "dflash_prefix": h["prefix"], "dflash_service_manager": "runner", "dflash_instances_unit_dir": h["unit_dir"],
        "dflash_fingerprint_replay_dir": str(CAPTURE),
        "dflash_instances": [{"name": "main", "algorithm": "DFLASH", "fallback": "NONE"}]}}}}}}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(ROOT_DIR / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "inv.json"),
                           str(ROOT_DIR / "playbooks" / playbook), *extra], cwd=ROOT_DIR, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_status_play_reports_a_stopped_instance_writes_json_and_changes_nothing(tmp_path):
    h = deploy(tmp_path)
    # the release as made for this (replayed) host
    fp = fingerprint_from_raw(read_capture(str(CAPTURE)))
    mpath = os.path.join(h["release_dir"], "manifest.json")
    with open(mpath, encoding="utf-8") as fh:
        m = json.load(fh)
    m.update(fingerprint=recorded_fingerprint(fp), fingerprint_digest=fingerprint_digest(fp))
    with open(mpath, "w", encoding="utf-8") as fh:
        json.dump(m, fh)
    before = snapshot(h["prefix"], h["unit_dir"])
    out = run(tmp_path, h, "-e", f"status_json={tmp_path / 'status.json'}")
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-2000:]
    assert snapshot(h["prefix"], h["unit_dir"]) == before
    assert "DFLASH STATUS: 1 host(s), 1 instance(s); unhealthy 1" in out.stdout
    assert "UNHEALTHY: main: unit dflash-main.service is inactive/dead" in out.stdout
    assert "status: unhealthy: ct200; the table above says what and where" in out.stdout
    doc = json.loads((tmp_path / "status.json").read_text())
    r = doc["hosts"]["ct200"]
    assert not doc["ok"] and r["verdict"] == "unhealthy" and r["fingerprint"]["same"] is True
    assert r["instances"]["main"]["fallback"] == "NONE"
    assert {(d["kind"], d["state"]) for d in r["drift"]} == {("unit", "same"), ("env", "same"), ("tree", "same")}
    # check mode: the same reads, the same verdict, still nothing written
    check = run(tmp_path, h, "--check")
    assert check.returncode == 2 and "unit dflash-main.service is inactive/dead" in check.stdout
    assert snapshot(h["prefix"], h["unit_dir"]) == before


def test_the_guard_asks_for_one_instance_of_one_host_and_moves_nothing_that_holds(tmp_path):
    h = deploy(tmp_path)
    before = snapshot(h["prefix"], h["unit_dir"])
    out = run(tmp_path, h, playbook="guard.yml")
    assert out.returncode == 2 and "guard.yml moves one instance of one host" in out.stdout
    out = run(tmp_path, h, "-l", "ct200", "-e", "instance=other", playbook="guard.yml")
    assert out.returncode == 2 and "instance 'other'; ct200 has main" in out.stdout
    # the instance is stopped here: its live accept length is unknown, so the guard has no evidence and deploys
    # nothing (deploy.yml's plays run with every task skipped)
    out = run(tmp_path, h, "-l", "ct200", "-e", "instance=main", playbook="guard.yml")
    assert out.returncode == 0, out.stdout[-3000:]
    said = " ".join(out.stdout.split())
    assert "guard: ct200/main: no live accept length or no release figure to compare it with" in said
    assert "nothing deployed" in said and "moved from" not in said
    assert snapshot(h["prefix"], h["unit_dir"]) == before


def test_status_says_which_run_holds_the_host_lock_and_takes_nothing(tmp_path):
    from ansible.module_utils.dflash_common import hostlock

    h = deploy(tmp_path)
    free = run(tmp_path, h, "-e", f"status_json={tmp_path / 'free.json'}")
    assert json.loads((tmp_path / "free.json").read_text())["hosts"]["ct200"]["lock"]["holder"] is None, free.stdout
    # another controller's deploy holds the host (a fresh heartbeat: not stale)
    other = {"run_id": "r-other", "controller": "ctl-b", "controller_id": "m-b", "controller_boot": "b-2",
             "user": "bob", "pid": 4242, "pid_start": "1", "playbook": "deploy.yml", "play": "Roll out",
             "purpose": "deploy"}
    assert hostlock.acquire(h["prefix"], other, stale_after=1800)["acquired"]
    record = (hostlock.lock_path(h["prefix"]))
    with open(record, encoding="utf-8") as fh:
        before = fh.read()
    out = run(tmp_path, h, "-e", f"status_json={tmp_path / 'held.json'}")
    assert "run r-other of bob@ctl-b" in out.stdout, out.stdout[-3000:]
    lock = json.loads((tmp_path / "held.json").read_text())["hosts"]["ct200"]["lock"]
    assert lock["holder"]["run_id"] == "r-other" and "bob@ctl-b" in lock["msg"] and lock["stale"] is None
    with open(record, encoding="utf-8") as fh:
        assert fh.read() == before  # read, not taken nor refreshed
