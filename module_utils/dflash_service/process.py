"""Which unit a process runs in: a dflash-* unit named by its cgroup (systemd), else on hosts without systemd the
runner's unit whose process group it is in. The one answer for the fingerprint stage (GPU processes) and the
instances stage (port owners). Pure functions over /proc; no Ansible import.
"""

from __future__ import annotations

import os

from ansible.module_utils.dflash_service.runner import read_pid


def unit_of_pid(pid, run_dir="/run/dflash", proc="/proc"):
    """The runner-managed unit a process belongs to (its process group is the unit's), or None.
    Hosts without systemd have no cgroup naming the unit: this is how our own servers are told
    apart from foreign processes there."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8") as fh:
            pgid = int(fh.read().rsplit(")", 1)[-1].split()[2])
        names = os.listdir(run_dir)
    except (OSError, ValueError, IndexError):
        return None
    for name in names:
        if name.endswith(".pid") and read_pid(os.path.join(run_dir, name)) == pgid:
            return name[:-4]
    return None


def unit_from_cgroup(text):
    """The systemd unit (service or scope) named by /proc/<pid>/cgroup text (v1 or v2), or None.
    The last line that names one wins (systemd's own hierarchy, name=systemd or 0::, comes last);
    within it the deepest .service/.scope path segment."""
    for line in reversed(text.splitlines()):
        path = line.split(":", 2)[-1]
        for seg in reversed(path.split("/")):
            if seg.endswith((".service", ".scope")):
                return seg
    return None


def process_unit(pid, proc="/proc", run_dir="/run/dflash"):
    """The unit a process runs in: a dflash-* unit from its cgroup; else, on hosts without
    systemd, the runner-managed unit whose process group it is in; else the cgroup's unit or None.
    The one answer for the fingerprint stage (GPU processes) and the instances stage (port owners)."""
    try:
        with open(os.path.join(proc, str(pid), "cgroup"), encoding="utf-8", errors="replace") as fh:
            unit = unit_from_cgroup(fh.read())
    except OSError:
        unit = None
    if unit and unit.startswith("dflash-"):
        return unit
    return unit_of_pid(pid, run_dir=run_dir, proc=proc) or unit
