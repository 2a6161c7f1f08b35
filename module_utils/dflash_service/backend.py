"""The service backend of a host, by name (dflash_service_manager): ``systemd`` or ``runner``. No Ansible import."""

from __future__ import annotations

from ansible.module_utils.dflash_service.runner import Runner
from ansible.module_utils.dflash_service.systemd import Systemd, subprocess_run

NAMES = ("systemd", "runner")

NOT_EMULATED = "dflash runner: User=, sandboxing and Restart= of the unit are not applied (no systemd on this host)"


def backend(name, run=subprocess_run, unit_dir="/etc/systemd/system", log_dir="/var/log/dflash",
            run_dir="/run/dflash", systemctl="systemctl", journalctl="journalctl", no_block=False):
    """The backend called ``name``; ``run(argv) -> (rc, stdout, stderr)`` runs systemd's commands."""
    if name == "runner":
        return Runner(unit_dir, log_dir, run_dir)
    if name == "systemd":
        return Systemd(run, no_block=no_block, systemctl=systemctl, journalctl=journalctl)
    raise ValueError(f"service manager {name!r}: must be one of {', '.join(NAMES)}")


def default_service_manager(facts):
    """dflash_service_manager's default from the host's facts: systemd where the host runs it
    (ansible_facts.service_mgr; facts not gathered count as systemd), else this runner."""
    return "systemd" if (facts or {}).get("service_mgr", "systemd") == "systemd" else "runner"
