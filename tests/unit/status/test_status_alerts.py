"""The alert action: Alertmanager's webhook body and Prometheus's /api/v1/alerts answer -> guard commands
(module_utils/dflash_status/alerts.py, scripts/guard_alert.py: a file, stdin, and one HTTP request on a socket
as systemd's socket activation hands it over)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

from ansible.module_utils.dflash_status import alerts
from status_host import ROOT_DIR

SCRIPT = ROOT_DIR / "scripts" / "guard_alert.py"


def am_alert(name, host, inst, status="firing", value=None):
    notes = {"summary": f"{host}/{inst}: speculative accept length 2.03 is below its release's floor"}
    if value is not None:
        notes["value"] = value
    return {"status": status, "labels": {"alertname": name, "dflash_host": host, "dflash_instance": inst,
                                         "severity": "warning", "dflash_release": "r2"},
            "annotations": notes, "startsAt": "2026-12-06T17:20:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": "1a30ba71cca2921f"}


# Alertmanager's webhook body (version 4): a group of three alerts, one resolved, one of another kind
WEBHOOK = {"receiver": "dflash-guard", "status": "firing", "version": "4", "truncatedAlerts": 0,
           "groupKey": '{}:{alertname="DflashAcceptLengthLow"}', "externalURL": "http://alertmanager:9093",
           "groupLabels": {"alertname": "DflashAcceptLengthLow"}, "commonLabels": {}, "commonAnnotations": {},
           "alerts": [am_alert("DflashAcceptLengthLow", "gpu-a", "w", value="2.031"),
                      am_alert("DflashAcceptLengthLow", "gpu-b", "w", status="resolved", value="3.9"),
                      am_alert("DflashKVCacheNearFull", "gpu-a", "w"),
                      am_alert("DflashSpeculationInactive", "gpu-c", "tp2", value="0")]}

# Prometheus's GET /api/v1/alerts answer (the lab Prometheus's shape: the value in exponent form, state)
PROMETHEUS = {"status": "success", "data": {"alerts": [
    {"labels": {"alertname": "DflashAcceptLengthLow", "dflash_host": "fl-b", "dflash_instance": "w",
                "severity": "warning"},
     "annotations": {"summary": "fl-b/w: speculative accept length 2.07 is below its release's floor"},
     "state": "firing", "activeAt": "2026-12-06T17:20:01.5Z", "value": "2.0689655172413794e+00"},
    {"labels": {"alertname": "DflashAcceptLengthLow", "dflash_host": "fl-c", "dflash_instance": "tp2"},
     "annotations": {}, "state": "pending", "activeAt": "2026-12-06T17:20:30Z", "value": "2e+00"},
]}}


def test_the_webhook_and_the_api_read_alike():
    got = alerts.collapsed(WEBHOOK)
    assert [(a["alertname"], a["host"], a["instance"], a["value"]) for a in got] == [
        ("DflashAcceptLengthLow", "gpu-a", "w", "2.031"), ("DflashSpeculationInactive", "gpu-c", "tp2", "0")]
    prom = alerts.collapsed(json.dumps(PROMETHEUS))
    assert [(a["host"], a["instance"], a["value"], a["since"]) for a in prom] == [
        ("fl-b", "w", "2.069", "2026-12-06T17:20:01.5Z")]  # the pending one is not firing yet
    assert alerts.command(prom[0], ["inventory/production"], "playbooks/guard.yml") == [
        "ansible-playbook", "-i", "inventory/production", "playbooks/guard.yml", "-l", "fl-b", "-e", "instance=w",
        "-e", "guard_alert=DflashAcceptLengthLow", "-e", "guard_alert_value=2.069"]


def script(*args, stdin=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_script_prints_the_commands(tmp_path):
    (tmp_path / "alerts.json").write_text(json.dumps(WEBHOOK))
    out = script("-i", "inventory/production", str(tmp_path / "alerts.json"))
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["host"], r["instance"], r["alert"]) for r in rows] == [
        ("gpu-a", "w", "DflashAcceptLengthLow"), ("gpu-c", "tp2", "DflashSpeculationInactive")]
    assert rows[0]["argv"][1:] == ["-i", "inventory/production", str(ROOT_DIR / "playbooks" / "guard.yml"),
                                   "-l", "gpu-a", "-e", "instance=w", "-e", "guard_alert=DflashAcceptLengthLow",
                                   "-e", "guard_alert_value=2.031"]
    nothing = script("-", stdin=json.dumps({"alerts": []}))
    assert nothing.returncode == 0 and nothing.stdout == "" and "no acceptance alert fires" in nothing.stderr
    bad = script("-", stdin="not json")
    assert bad.returncode == 2 and bad.stderr.startswith("guard_alert: cannot read the alerts")


def test_one_webhook_request_on_the_socket_systemd_hands_over():
    """--http with the connection as its stdin (Accept=yes): Alertmanager gets 200, the guard commands follow."""
    ours, theirs = socket.socketpair()
    body = json.dumps(WEBHOOK).encode()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--http", "-i", "inv"], stdin=theirs,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    theirs.close()
    answer = []

    def read_all():  # the answer, until the script closes the connection
        while chunk := ours.recv(4096):
            answer.append(chunk)

    reader = threading.Thread(target=read_all)
    reader.start()
    ours.sendall(b"POST /guard HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    reader.join(timeout=30)
    out, err = proc.communicate(timeout=60)
    ours.close()
    reply = b"".join(answer)
    assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(b"\r\n\r\nok\n")
    assert proc.returncode == 0, err
    assert [json.loads(line)["host"] for line in out.splitlines()] == ["gpu-a", "gpu-c"]
