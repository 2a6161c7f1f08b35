"""One answer for "which unit is this process in": the fingerprint stage (GPU processes,
dflash_fingerprint.process_unit) and the instances stage (port owners, dflash_instances.read_listeners)
both ask module_utils/dflash_service/process.py, for cgroup v1 and v2 files and for runner-started processes."""

import os
import socket
import sys
import time

import pytest
from ansible.module_utils.dflash_fingerprint import collect
from ansible.module_utils.dflash_instances import host as di_host
from ansible.module_utils.dflash_instances import validate as di_validate
from ansible.module_utils.dflash_service import process as dflash_process
from ansible.module_utils.dflash_service import runner as dflash_runner

V1_HEAD = "12:pids:{p}\n11:memory:{p}\n4:cpuset:/\n1:name=systemd:{p}\n"
# name: (cgroup text or None for no file, the runner unit whose process group the process is in
# (or None), the unit the cgroup text alone names, the unit both stages must name)
CASES = {
    "v2 foreign service": ("0::/system.slice/ddtree-wrapper.service\n", None,
                           "ddtree-wrapper.service", "ddtree-wrapper.service"),
    "v2 ours": ("0::/system.slice/dflash-gpu1.service\n", None, "dflash-gpu1.service", "dflash-gpu1.service"),
    "v2 login scope": ("0::/user.slice/user-0.slice/session-3.scope\n", None, "session-3.scope", "session-3.scope"),
    "v2 root": ("0::/\n", None, None, None),
    "v1 ours": (V1_HEAD.format(p="/system.slice/dflash-a.service"), None, "dflash-a.service", "dflash-a.service"),
    "hybrid ours": (V1_HEAD.format(p="/system.slice/dflash-a.service") + "0::/system.slice/dflash-a.service\n",
                    None, "dflash-a.service", "dflash-a.service"),
    "v1 foreign": (V1_HEAD.format(p="/system.slice/ddtree-wrapper.service"), None,
                   "ddtree-wrapper.service", "ddtree-wrapper.service"),
    "v1 root": (V1_HEAD.format(p="/"), None, None, None),
    # hosts without systemd: the runner's process group names the unit
    "runner, container root cgroup": ("0::/\n", "dflash-r1.service", None, "dflash-r1.service"),
    "runner, v1 root cgroups": (V1_HEAD.format(p="/"), "dflash-r2.service", None, "dflash-r2.service"),
    "runner inside a docker scope": ("0::/system.slice/docker-0123abcd.scope\n", "dflash-r3.service",
                                     "docker-0123abcd.scope", "dflash-r3.service"),
    # a dflash-* unit from the cgroup wins over a pidfile
    "cgroup ours beats runner": ("0::/system.slice/dflash-a.service\n", "dflash-r4.service",
                                 "dflash-a.service", "dflash-a.service"),
    "no cgroup file, runner": (None, "dflash-r5.service", None, "dflash-r5.service"),
    "no cgroup file": (None, None, None, None),
}


def _fake_proc(tmp_path):
    """A /proc with one listening socket per case (port 40000 + i, pid 100 + i) and a run dir whose
    pidfiles name the process groups of the runner cases."""
    proc, run = tmp_path / "proc", tmp_path / "run"
    (proc / "net").mkdir(parents=True)
    run.mkdir()
    rows, pids = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"], {}
    for i, (name, (cgroup, runner_unit, _, _)) in enumerate(CASES.items()):
        pid, port, inode = 100 + i, 40000 + i, 70000 + i
        pgid = 5000 + i if runner_unit else pid
        rows.append(f"{i:4d}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
                    f"     0        0 {inode} 1 0 0 100 0 0 10 0")
        d = proc / str(pid)
        (d / "fd").mkdir(parents=True)
        os.symlink(f"socket:[{inode}]", d / "fd" / "5")
        (d / "comm").write_text("python3\n")
        (d / "stat").write_text(f"{pid} (python3) S 1 {pgid} {pgid} 0 -1 4194560 0 0 0 0\n")
        if cgroup is not None:
            (d / "cgroup").write_text(cgroup)
        if runner_unit:
            (run / f"{runner_unit}.pid").write_text(str(pgid))
        pids[name] = (pid, port)
    (proc / "net" / "tcp").write_text("\n".join(rows) + "\n")
    return proc, run, pids


def test_both_stages_name_the_same_unit(tmp_path):
    proc, run, pids = _fake_proc(tmp_path)
    by_port = {x["port"]: x for x in di_host.read_listeners(str(proc), run_dir=str(run))}
    for name, (pid, port) in pids.items():
        assert by_port[port]["pid"] == pid, name
        fingerprint = collect.process_unit(pid, proc=str(proc), run_dir=str(run))
        assert fingerprint == by_port[port]["unit"] == CASES[name][3], name


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[0] is not None])
def test_cgroup_text_alone(name):
    cgroup, _, want, _ = CASES[name]
    assert dflash_process.unit_from_cgroup(cgroup) == want


def test_one_implementation():
    assert collect.process_unit is dflash_process.process_unit
    assert di_host.process_unit is dflash_process.process_unit


def test_runner_started_listener_is_ours_in_both_stages(tmp_path):
    """A real process started by the runner, listening on a port: both stages attribute it to its unit."""
    unit = tmp_path / "dflash-l.service"
    unit.write_text("[Service]\nExecStart=" + sys.executable + " -c \"import socket, time; s = socket.socket(); "
                    "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)\"\n")
    run, log = tmp_path / "run", tmp_path / "l.log"
    pid = dflash_runner.start(str(unit), str(log), str(run / "dflash-l.service.pid"))
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not log.read_text().strip().splitlines()[1:]:
            time.sleep(0.05)
        port = int(log.read_text().strip().splitlines()[-1])
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        listener = next(x for x in di_host.read_listeners(run_dir=str(run)) if x["port"] == port)
        assert listener["pid"] == pid
        assert listener["unit"] == collect.process_unit(pid, run_dir=str(run)) == "dflash-l.service"
        assert di_validate.is_ours(listener, service_user=listener["user"])
    finally:
        dflash_runner.stop(str(run / "dflash-l.service.pid"), timeout=5)
