#!/usr/bin/env python3
"""The guard's alert action: firing DflashAcceptLengthLow / DflashSpeculationInactive alerts -> playbooks/guard.yml
for each host and instance (module_utils/dflash_status/alerts.py). No daemon of its own: it reads one payload and
exits.

  scripts/guard_alert.py -i INVENTORY [--run] FILE|-            a payload: Alertmanager's webhook body or
                                                                Prometheus's /api/v1/alerts answer
  scripts/guard_alert.py -i INVENTORY [--run] --prometheus URL  ask Prometheus for its firing alerts (a cron job
                                                                or a systemd timer)
  scripts/guard_alert.py -i INVENTORY [--run] --http            one HTTP request on stdin: Alertmanager's webhook
                                                                through systemd socket activation (Accept=yes);
                                                                answers 200, then runs

Prints each guard command (one JSON object a line: host, instance, alert, value, argv); with --run it runs them,
one at a time, each under a lock per host (a second alert for the same host waits for the first guard), and exits
non-zero when one failed. roles/dflash_status/README.md ("The alert action") has the Alertmanager receiver and the
socket unit.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import socket
import subprocess
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

REPO = pathlib.Path(__file__).resolve().parents[1]
ansible.module_utils.__path__.append(str(REPO / "module_utils"))
from ansible.module_utils.dflash_status.alerts import collapsed, command

MAX_BODY = 4 * 1024 * 1024


class _Hook(BaseHTTPRequestHandler):
    """One request of Alertmanager's webhook, read with the standard library's HTTP parser."""

    body = None

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        type(self).body = self.rfile.read(min(n, MAX_BODY))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, fmt, *args):
        sys.stderr.write("guard_alert: " + (fmt % args) + "\n")


def read_http(sock) -> bytes:
    """The body of the one HTTP request on ``sock`` (answered 200 before anything runs)."""
    _Hook.body = None
    _Hook(sock, ("socket-activated", 0), None)
    return _Hook.body or b"{}"


def read_payload(args) -> bytes:
    if args.prometheus:
        with urllib.request.urlopen(args.prometheus.rstrip("/") + "/api/v1/alerts", timeout=30) as resp:
            return resp.read(MAX_BODY)
    if args.http:
        sock = socket.socket(fileno=os.dup(sys.stdin.fileno()))
        try:
            return read_http(sock)
        finally:
            try:  # answered: the connection ends now, not when the guard has run
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
    if args.payload in (None, "-"):
        return sys.stdin.buffer.read(MAX_BODY)
    return pathlib.Path(args.payload).read_bytes()


def run(argv, host, lock_dir) -> int:
    """Run one guard command under the host's lock (one guard a host at a time)."""
    os.makedirs(lock_dir, exist_ok=True)
    with open(os.path.join(lock_dir, f"dflash-guard-{host}.lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(argv, cwd=REPO, check=False).returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("payload", nargs="?", help="a payload file, or - for stdin")
    p.add_argument("-i", "--inventory", action="append", default=[], help="inventory source (as ansible-playbook)")
    p.add_argument("--prometheus", help="Prometheus's URL: read its firing alerts")
    p.add_argument("--http", action="store_true", help="one HTTP request on stdin (systemd socket activation)")
    p.add_argument("--run", action="store_true", help="run the commands (else print them)")
    p.add_argument("--ansible-playbook", default=str(pathlib.Path(sys.executable).with_name("ansible-playbook")))
    p.add_argument("--lock-dir", default=os.environ.get("RUNTIME_DIRECTORY") or "/tmp")
    args = p.parse_args(argv)
    try:
        alerts = collapsed(read_payload(args))
    except (OSError, ValueError) as exc:
        print(f"guard_alert: cannot read the alerts: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for alert in alerts:
        cmd = command(alert, args.inventory, str(REPO / "playbooks" / "guard.yml"), args.ansible_playbook)
        print(json.dumps({"host": alert["host"], "instance": alert["instance"], "alert": alert["alertname"],
                          "value": alert["value"], "argv": cmd}), flush=True)
        if args.run:
            failed += run(cmd, alert["host"], args.lock_dir) != 0
    if not alerts:
        print("guard_alert: no acceptance alert fires", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
