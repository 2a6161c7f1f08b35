"""The lab's connection (lab/plugins/connection/dflash_podman.py) is found through ansible.cfg, documents
its options, pipelines, and sends a pipelined module on `podman exec --interactive` (podman exec drops
stdin otherwise); a plain command goes as containers.podman sends it. Runs against a fake podman that
records its arguments and stdin (the real one is exercised by every Molecule scenario)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def test_ansible_doc_finds_the_lab_connection():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    out = subprocess.run([str(BIN / "ansible-doc"), "-t", "connection", "--json", "dflash_podman"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["dflash_podman"]["doc"]
    assert doc["options"]["pipelining"]["default"] is True
    assert {"remote_addr", "remote_user", "podman_executable", "podman_extra_args"} <= set(doc["options"])


def test_a_module_runs_in_one_interactive_exec(tmp_path):
    log = tmp_path / "calls.jsonl"
    fake = tmp_path / "podman"
    fake.write_text(f"""#!{sys.executable}
import json, sys
data = sys.stdin.read() if "--interactive" in sys.argv else ""
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "stdin": data}}) + "\\n")
if sys.argv[1] == "mount":
    print({str(tmp_path)!r})
else:
    print(json.dumps({{"changed": False, "ping": "pong"}}))
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_PODMAN_EXECUTABLE=str(fake))
    out = subprocess.run([str(BIN / "ansible"), "all", "-i", "box,", "-c", "dflash_podman", "-m", "ansible.builtin.ping",
                          "-e", "ansible_python_interpreter=/usr/bin/python3"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False, timeout=120)
    assert "SUCCESS" in out.stdout, out.stdout + out.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # one call: no mount, no temporary directory, the module on stdin
    assert len(calls) == 1, calls
    assert calls[0]["argv"][:3] == ["exec", "--interactive", "box"]
    assert "_ansiballz_main" in calls[0]["stdin"], calls[0]["stdin"][:300]
