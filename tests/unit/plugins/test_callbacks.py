"""The two always-on callback plugins: controller workers die with ansible-playbook, and a host lost in the
middle of a run is said in words (real Ansible result shapes from the lab)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "callback_plugins" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


unreachable = load("dflash_unreachable")

# as Ansible 2.19 reported them on the lab (podman connection): a stopped container; a container killed
# while a module ran (`podman kill` during `command: sleep 60`); podman's words when they are in stderr;
# a module that crashed on a reachable host
STOPPED = {"unreachable": True, "changed": False, "msg": (
    "Task failed: Failed to create temporary directory. In some cases, you may have been able to authenticate "
    "and did not have permissions on the target directory. ... exited with result 255")}
KILLED = {"changed": False, "failed": True, "module_stderr": "", "module_stdout": "", "rc": 137,
          "msg": "Module result deserialization failed: No start of json char found"}
DESERIALIZE = {"failed": True, "msg": "Module result deserialization failed: No start of json char found",
               "module_stdout": "", "module_stderr": "Error: can only create exec sessions on running containers: "
               "container state improper\n"}
CRASHED_MODULE = {"failed": True, "msg": "MODULE FAILURE: No start of json char found",
                  "module_stderr": "Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n"}
ORDINARY = {"failed": True, "msg": "ct200: release step 'x' failed: ..."}


def test_lost_host_reasons():
    assert unreachable.lost_reason(STOPPED) == "exited with result 255"
    assert unreachable.lost_reason(KILLED) == ("Module result deserialization failed: No start of json char found; "
                                               "the connection ended with rc 137 (killed)")
    assert unreachable.lost_reason(DESERIALIZE).startswith("can only create exec sessions on running containers")
    assert unreachable.lost_reason(CRASHED_MODULE) is None  # a module bug on a reachable host speaks for itself
    assert unreachable.lost_reason(ORDINARY) is None


def test_lost_host_message_says_what_to_do():
    msg = unreachable.message("ct200", "Restart, wait until healthy", "container state improper")
    assert msg.startswith("ct200: lost the host during 'Restart, wait until healthy' (container state improper).")
    assert "run deploy.yml (or rollback.yml) again" in msg and "a reboot reverts it" in msg


def test_workers_die_with_their_parent(tmp_path):
    """A process that loaded the plugin forks a worker (own process group, one child of its own) and dies:
    the worker and its child are gone within a few seconds."""
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import importlib.util, os, subprocess, sys, time
        spec = importlib.util.spec_from_file_location("o", {str(ROOT / "callback_plugins/dflash_orphans.py")!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.POLL_SECONDS = 0.2
        mod.register()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            child = subprocess.Popen(["sleep", "60"])
            open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
            time.sleep(60)
            os._exit(0)
        while not os.path.exists({str(pids)!r}):
            time.sleep(0.05)
        os._exit(0)
    """)
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=30)
    worker, child = (int(x) for x in pids.read_text().split())
    end = time.monotonic() + 10
    while time.monotonic() < end and (alive(worker) or alive(child)):
        time.sleep(0.1)
    assert not alive(worker) and not alive(child)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_unresolvable_ssh_host_fails_in_words_with_a_failing_recap(tmp_path):
    """deploy.yml against an ssh host whose name does not resolve, on the locked ansible-core: the worded
    message, a recap that counts the host as failed, rc 2, and no 'lost the host' line (the host was never
    reached, nothing was changed)."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    dflash_hosts:\n      hosts:\n        gpu-nowhere.invalid:\n"
                   "          ansible_connection: ssh\n          ansible_user: deploy\n"
                   "          dflash_instances: []\n")
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "deploy.yml",
                           "--tags", "preflight"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "gpu-nowhere.invalid: the host does not answer (ssh to gpu-nowhere.invalid)" in out
    assert "Could not resolve hostname gpu-nowhere.invalid" in out
    recap = out.split("PLAY RECAP", 1)[1]
    assert "failed=1" in recap and "unreachable=0" in recap, recap
    assert "lost the host" not in out
