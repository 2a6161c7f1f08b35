#!/usr/bin/env python3
"""Stop every server the harness or the toolkit's runner started on the GPU machine, then check the GPU.

    python3 gpu-harness/stop_servers.py [--skip GLOB] [--grace 30] [--no-gpu-check]
    bash gpu-harness/stop_all.sh          (the same, on its own; sourced, it gives stop_all/stop_servers)

What it stops, by process group (a server starts in its own session, so its group is its id: sglang's
scheduler and detokenizer children go with it, and their GPU memory is free only once they are all gone):
  - the units the toolkit's runner backend runs (dflash_service_manager: runner): one pidfile per unit in
    the run directory (/run/dflash, $DFLASH_RUN_DIR): deployed instances of every prefix, benchmark
    servers, routers. --skip GLOB leaves the units whose name matches (fleet.sh keeps its own);
  - the servers the harness starts itself (ddtree_servers.py, e2e_common.py, smoke_real.py, ...): each
    registers here at start (register(): <registry>/<name>.pid with its group id and its start time, so
    that a recycled id is never signalled), in /run/gpu-harness ($GPU_HARNESS_RUN).
TERM to every group at once, KILL to what is left after --grace seconds; its pidfile goes with it.
Nothing else is touched: a process on the GPU that neither started is reported, not killed.

Then `nvidia-smi --query-compute-apps` ($NVIDIA_SMI): exit 1, naming each process, when something still
runs on the GPU; exit 2 when a server outlived its KILL; 0 when all is stopped and the GPU runs nothing.
Standard library only: it needs no Ansible and no path that another script sets.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

RUN_DIR = "/run/dflash"
REGISTRY = "/run/gpu-harness"


def run_dir() -> str:
    return os.environ.get("DFLASH_RUN_DIR") or RUN_DIR


def registry_dir() -> str:
    return os.environ.get("GPU_HARNESS_RUN") or REGISTRY


@dataclass
class Server:
    name: str
    pgid: int
    pidfile: str
    start_time: str | None = None  # /proc/<pid>/stat field 22; None: not recorded (runner pidfiles)


def proc_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None


def register(pid: int, name: str, directory: str | None = None) -> str | None:
    """Record a server the harness started (its own session: pid = process group). Returns the file, or None
    when the registry cannot be written (said on stderr: a run goes on, stop_servers will not know it)."""
    directory = directory or registry_dir()
    path = os.path.join(directory, f"{name}.pid")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(f"{pid} {proc_start_time(pid) or '-'}\n")
        os.replace(path + ".tmp", path)
        return path
    except OSError as exc:
        print(f"[stop_servers] cannot register {name} (pid {pid}) in {directory}: {exc}", file=sys.stderr)
        return None


def unregister(name: str, directory: str | None = None) -> None:
    try:
        os.unlink(os.path.join(directory or registry_dir(), f"{name}.pid"))
    except OSError:
        pass


def _pidfiles(directory: str):
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for f in names:
        if f.endswith(".pid"):
            yield f[:-4], os.path.join(directory, f)


def find_servers(run: str, registry: str, skip: str = "") -> tuple[list[Server], list[str]]:
    """(servers to stop, problems) from the runner's pidfiles and the harness's registry."""
    servers, problems = [], []
    for source, directory in (("runner", run), ("harness", registry)):
        for name, path in _pidfiles(directory):
            if skip and fnmatch.fnmatch(name, skip):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    fields = fh.read().split()
                pgid = int(fields[0])
            except (OSError, ValueError, IndexError):
                problems.append(f"{path}: not a pid ({source}); left as it is")
                continue
            start = fields[1] if source == "harness" and len(fields) > 1 and fields[1] != "-" else None
            servers.append(Server(name, pgid, path, start))
    return servers, problems


def group_alive(pgid: int) -> bool:
    """Any live, non-zombie process in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def same_process(s: Server) -> bool:
    """A registered server is signalled only while its leader is the process that registered (not a recycled id)."""
    return s.start_time is None or proc_start_time(s.pgid) in (None, s.start_time)


def stop(servers: list[Server], grace: float = 30.0, say=print) -> list[Server]:
    """TERM every live group, KILL the rest after grace; pidfiles removed. Returns the groups still alive."""
    live = []
    for s in servers:
        if not group_alive(s.pgid):
            say(f"{s.name}: not running (pid {s.pgid}); pidfile removed")
        elif not same_process(s):
            say(f"{s.name}: pid {s.pgid} is another process now (started later); not signalled, pidfile removed")
        else:
            live.append(s)
            continue
        _remove(s.pidfile)
    for s in live:
        try:
            os.killpg(s.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace
    while time.monotonic() < end and any(group_alive(s.pgid) for s in live):
        time.sleep(0.2)
    for s in live:
        if group_alive(s.pgid):
            say(f"{s.name}: still running {grace:g} s after TERM: KILL")
            try:
                os.killpg(s.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    end = time.monotonic() + 10
    while time.monotonic() < end and any(group_alive(s.pgid) for s in live):
        time.sleep(0.1)
    left = [s for s in live if group_alive(s.pgid)]
    for s in live:
        if s not in left:
            say(f"{s.name}: stopped (process group {s.pgid})")
            _remove(s.pidfile)
    return left


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def parse_compute_apps(text: str) -> list[dict]:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits` rows."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not line.strip() or not parts[0]:
            continue
        if len(parts) < 3 or not parts[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        used = parts[-1]
        apps.append({"pid": int(parts[0]), "name": ",".join(parts[1:-1]),
                     "used_mib": int(used) if used.isdigit() else None})
    return apps


def gpu_apps(nvidia_smi: str | None = None) -> list[dict]:
    cmd = [nvidia_smi or os.environ.get("NVIDIA_SMI") or "nvidia-smi",
           "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    return parse_compute_apps(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="leave the units whose name matches this glob")
    ap.add_argument("--grace", type=float, default=30.0, help="seconds between TERM and KILL")
    ap.add_argument("--no-gpu-check", action="store_true", help="stop only; do not look at the GPU")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds the GPU may take to show nothing")
    a = ap.parse_args(argv)

    def say(msg):
        print(f"[stop_servers] {msg}", flush=True)

    servers, problems = find_servers(run_dir(), registry_dir(), a.skip)
    for p in problems:
        say(p)
    if not servers:
        say(f"no server pidfile in {run_dir()} or {registry_dir()}")
    left = stop(servers, a.grace, say)
    for s in left:
        say(f"LEFT: {s.name} (process group {s.pgid}) outlived KILL")
    if a.no_gpu_check:
        return 2 if left else 0
    end = time.monotonic() + a.settle  # the driver lets go of a stopped process a moment after it is gone
    while True:
        try:
            apps = gpu_apps()
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            say(f"cannot ask the GPU what runs on it: {exc}")
            return 1
        if not apps or time.monotonic() >= end:
            break
        time.sleep(1)
    for app in apps:
        say(f"LEFT ON THE GPU: pid {app['pid']} {app['name']} ({app['used_mib']} MiB): not a server of the runner's "
            "pidfiles or of the harness's registry; stop it by its id")
    if left:
        return 2
    if apps:
        return 1
    say("the GPU runs no process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
