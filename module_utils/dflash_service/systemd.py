"""The systemd backend: systemctl and journalctl through an injected ``run(argv) -> (rc, stdout, stderr)``
(AnsibleModule.run_command in modules, ``subprocess_run`` in the boot guard).

Stdlib only and no other import of the toolkit: the boot guard (roles/dflash_instances/tasks/guard.yml) ships this
file to the host beside ``dflash_release/journal.py`` and runs it without Ansible.
"""

from __future__ import annotations

import subprocess

SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ExecMainPID",
    "ExecMainStatus",
    "ExecMainCode",
    # when the unit last became active: the text for people, the monotonic microseconds (since boot) for comparing
    # two reads exactly (a restart in between changes it); playbooks/status.yml shows them
    "ActiveEnterTimestamp",
    "ActiveEnterTimestampMonotonic",
)


def subprocess_run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def parse_show(text: str) -> dict:
    """``systemctl show -p A,B unit`` output -> {A: value}; NRestarts, ExecMainPID, ExecMainStatus and
    ActiveEnterTimestampMonotonic as int."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    for key in ("NRestarts", "ExecMainPID", "ExecMainStatus", "ActiveEnterTimestampMonotonic"):
        if key in out:
            try:
                out[key] = int(out[key])
            except ValueError:
                out[key] = None
    return out


def journal_argv(unit: str, since_epoch: float | None = None, lines: int = 5000, journalctl="journalctl") -> list:
    """The unit's journal (message text only), newest ``lines`` lines, from ``since_epoch`` on when given."""
    return ([journalctl, "-u", unit] + (["--since", f"@{int(since_epoch)}"] if since_epoch is not None else [])
            + ["--no-pager", "-o", "cat", "-n", str(int(lines))])


def last_entry_at(short_unix: str, since: float) -> float:
    """``journalctl -o short-unix -n 1`` output -> epoch seconds of its entry (``since`` when there is none, e.g.
    "-- No entries --")."""
    last = since
    for line in (short_unix or "").splitlines():
        try:
            last = max(last, float(line.split(" ", 1)[0]))
        except ValueError:
            continue
    return last


class Systemd:
    """The service interface (``dflash_service/runner.py``'s Runner has the same): reload, enable, disable,
    start, restart, stop, state, logs; is_active / is_enabled read the state."""

    name = "systemd"
    # journald may write a unit's last lines a few hundred ms after systemd reports the unit failed
    log_lags = True

    def __init__(self, run=subprocess_run, no_block=False, systemctl="systemctl", journalctl="journalctl"):
        self.run, self.no_block = run, no_block
        self.systemctl, self.journalctl = systemctl, journalctl

    def _ctl(self, *argv):
        return self.run([self.systemctl, *argv])

    def reload(self):
        self._ctl("daemon-reload")

    def enable(self, units):
        if units:
            self._ctl("enable", "--", *units)

    def disable(self, units):
        if units:
            self._ctl("disable", "--", *units)

    def stop(self, units):
        if units:
            # at boot (the guard) a stop must not wait for jobs queued behind the guard itself
            self._ctl("stop", *(["--no-block"] if self.no_block else []), "--", *units)

    def reset_failed(self, units):
        if units:
            self._ctl("reset-failed", "--", *units)

    def start(self, units) -> dict:
        rc, _out, err = self._ctl("start", "--", *units) if units else (0, "", "")
        return {"rc": rc, "stderr": err.strip()[-2000:]}

    def restart(self, units) -> dict:
        """A fresh start: a failed state and the start-rate limit cleared first. A unit that cannot start
        (missing EnvironmentFile, bad ExecStart) gives rc != 0; its state and journal say why."""
        if not units:
            return {"rc": 0, "stderr": ""}
        self.reset_failed(units)
        rc, _out, err = self._ctl("restart", "--", *units)
        return {"rc": rc, "stderr": err.strip()[-2000:]}

    def state(self, unit) -> dict:
        """``systemctl show`` of SHOW_PROPERTIES; LoadState ``error`` when systemctl itself failed."""
        rc, out, err = self._ctl("show", "-p", ",".join(SHOW_PROPERTIES), "--", unit)
        return parse_show(out) if rc == 0 else {"LoadState": "error", "error": err.strip()[-500:]}

    def is_active(self, unit) -> bool:
        _rc, out, _ = self._ctl("is-active", "--", unit)
        return out.strip() == "active"

    def is_enabled(self, unit) -> bool:
        _rc, out, _ = self._ctl("is-enabled", "--", unit)
        return out.strip() == "enabled"

    def logs(self, unit, since=None, lines=5000) -> str:
        """The unit's journal (from ``since``, epoch seconds, when given); "" without journalctl."""
        if not self.journalctl:
            return ""
        _rc, out, _err = self.run(journal_argv(unit, since, lines, self.journalctl))
        return out

    def has_logs(self) -> bool:
        return bool(self.journalctl)

    def last_log_at(self, unit, since) -> float:
        """Epoch seconds of the unit's last journal entry from ``since`` on (``since`` when it logged none or there
        is no journalctl): how long a start-up has been silent."""
        if not self.journalctl:
            return since
        _rc, out, _err = self.run([self.journalctl, "-u", unit, "--since", f"@{int(since)}", "--no-pager",
                                   "-o", "short-unix", "-n", "1"])
        return last_entry_at(out, since)

    def log_source(self, unit) -> str:
        return f"journalctl -u {unit}"
